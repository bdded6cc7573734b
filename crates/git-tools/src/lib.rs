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
//! Functions that take a revision and a path take them in that order
//! (`rev`, `path`), like `git show rev:path`; everything else is an options
//! struct with a [`Default`]. [`RepoCache`] keeps one opened repository per
//! workspace and runs each operation on it confined.
//!
//! ```no_run
//! use ctm_git_tools::{LogOptions, RepoCache, StatusOptions};
//! let ws = ctm_workspace_fs::Workspace::open(std::path::Path::new(".")).unwrap();
//! let repo = RepoCache::new(ws);
//! let status = repo
//!     .with_repo(|r| r.status(&StatusOptions::default().max_entries(100)))
//!     .unwrap();
//! println!("{} entries on {:?}", status.entries.len(), status.branch);
//! let log = repo
//!     .with_repo(|r| r.log("HEAD", &LogOptions::default().path("src")))
//!     .unwrap();
//! for c in &log.commits {
//!     println!("{} {}", c.short_id, c.subject);
//! }
//! ```

#![deny(missing_docs)]

mod blame;
mod cache;
mod confine;
mod diff;
mod error;
mod log;
mod repo;
mod status;

pub use blame::{BlameLine, BlameOptions, BlameOutcome};
pub use cache::RepoCache;
pub use confine::confined;
pub use diff::{DiffOptions, DiffOutcome, FileAtRevision, FileDiff, WorkingChanges, WorkingDiff};
pub use error::{Cause, GitError};
pub use log::{CommitInfo, LogOptions, LogOutcome};
pub use repo::GitRepo;
pub use status::{StatusEntry, StatusOptions, StatusOutcome};
