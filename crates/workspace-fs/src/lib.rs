//! The workspace boundary of coding-tools-mcp, with no MCP types.
//!
//! A [`Workspace`] owns one canonical root. [`Workspace::resolve`] is the only
//! way to turn a caller's string into a [`WorkspacePath`]: it refuses absolute
//! paths, NUL bytes, `..` that leaves the root, and symlinks whose target lies
//! outside. Containment compares path components, never string prefixes, so a
//! sibling `ws_evil` of `ws` is outside.
//!
//! [`project_context`] loads the workspace's root instruction files
//! (`AGENTS.md`, `CLAUDE.md`) within fixed budgets, with receipts for what it
//! cut or left out.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("AGENTS.md"), "Run the tests.\n").unwrap();
//! let ws = ctm_workspace_fs::Workspace::open(dir.path()).unwrap();
//! assert!(ws.resolve("../etc/passwd").is_err());
//! let ctx = ctm_workspace_fs::project_context(&ws, &Default::default());
//! assert!(ctx.text.contains("Run the tests."));
//! ```

mod context;
mod path;

pub use context::{ContextLimits, InstructionFile, ProjectContext, project_context};
pub use path::{PathError, Workspace, WorkspacePath};
