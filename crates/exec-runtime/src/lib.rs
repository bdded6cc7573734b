//! The exec runtime of coding-tools-mcp: a workspace-owned pool of commands,
//! with no MCP types.
//!
//! It will own spawning (pipes or a PTY, own process group, explicit
//! environment), yielding, head+tail output retention, kill escalation, the
//! permission gates and Landlock confinement.
//!
//! Status: this crate is the place reserved by the house plan; its behaviour
//! arrives with the exec-runtime issue, and until then the server answers the
//! process tools with `INTERNAL_ERROR` naming that issue.
