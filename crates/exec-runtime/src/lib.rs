//! The exec runtime of coding-tools-mcp: a workspace-owned pool of commands,
//! with no MCP types.
//!
//! What is here today: [`RuntimeDirs`], the private per-process directory that
//! gives every command its own `HOME`, `TMPDIR` and cache outside the
//! workspace, removed when the server stops; and [`RetentionBudget`], the
//! static output-retention budget `server_info` reports; and [`Gates`], the
//! permission gates of each [`PermissionMode`].
//!
//! Spawning, yielding, head+tail output retention, kill escalation, the
//! permission gates and Landlock confinement arrive with the exec-runtime
//! issue; until then the server answers the process tools with
//! `INTERNAL_ERROR` naming that issue.
//!
//! ```
//! let ws = tempfile::tempdir().unwrap();
//! let base = tempfile::tempdir().unwrap();
//! let dirs = ctm_exec_runtime::RuntimeDirs::create_in(base.path(), ws.path()).unwrap();
//! assert!(dirs.home().is_dir());
//! let root = dirs.root().to_path_buf();
//! drop(dirs);
//! assert!(!root.exists());
//! ```

mod policy;
mod runtime_dirs;

pub use policy::{GateState, Gates, PermissionMode};
pub use runtime_dirs::{RetentionBudget, RuntimeDirError, RuntimeDirs};
