//! The patch engine of coding-tools-mcp: parse → plan → commit, with no MCP types.
//!
//! It will own the `*** Begin Patch` grammar, hunk location with graded
//! whitespace/punctuation tolerance, and an all-or-nothing commit (temp file,
//! fsync, atomic rename, rollback) beneath a workspace root it receives as a
//! checked path from `ctm-workspace-fs`.
//!
//! Status: this crate is the place reserved by the house plan; its behaviour
//! arrives with the patch-engine issue, and until then the server answers
//! `apply_patch` with `INTERNAL_ERROR` naming that issue.
