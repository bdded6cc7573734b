//! Read-only git tools of coding-tools-mcp on gix, with no MCP types.
//!
//! It will own status, diff, log, show and blame, reading the repository
//! in-process so that no hook, fsmonitor, external diff or pager ever runs.
//!
//! Status: this crate is the place reserved by the house plan; its behaviour
//! arrives with the git-tools issue, and until then the server answers the git
//! tools with `INTERNAL_ERROR` naming that issue.
