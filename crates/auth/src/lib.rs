//! HTTP authentication of coding-tools-mcp: bearer tokens and the OAuth 2.1
//! authorization server, with no MCP types.
//!
//! Status: this crate is the place reserved by the house plan; its behaviour
//! arrives with the authentication issue. Until then the server refuses every
//! configuration that would need it (`--auth-token`, `--oauth-mode`, a
//! non-loopback bind) at start-up with exit status 2, rather than serving
//! without the protection that was asked for.
