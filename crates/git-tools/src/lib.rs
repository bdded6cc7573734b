//! Read-only git tools of coding-tools-mcp on gix, with no MCP types.
//!
//! The repository is read in-process with gix, so no hook, fsmonitor,
//! external diff, textconv, pager or credential helper can ever run, and a
//! revision is never parsed as a command-line option (`--output=x` is just an
//! unknown revision). The repository is the one whose work tree is the
//! workspace or contains it; a `.git` file or `gitdir:` link in the workspace
//! that points outside it is refused. Every call blocks: run it on a blocking
//! thread.
//!
//! ```no_run
//! let ws = ctm_workspace_fs::Workspace::open(std::path::Path::new(".")).unwrap();
//! let repo = ctm_git_tools::GitRepo::open(&ws).unwrap();
//! let status = repo.status(None, true, 100).unwrap();
//! println!("{} entries on {:?}", status.entries.len(), status.branch);
//! ```

mod blame;
mod confine;
mod diff;
mod error;
mod log;
mod repo;
mod status;

pub use blame::{BlameLine, BlameOutcome};
pub use confine::confined;
pub use diff::{DiffOptions, DiffOutcome, FileDiff};
pub use error::GitError;
pub use log::{CommitInfo, LogOutcome};
pub use repo::GitRepo;
pub use status::{StatusEntry, StatusOutcome};
