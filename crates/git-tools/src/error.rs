//! The one error type of the crate.

use ctm_workspace_fs::FsError;

/// The cause of a failure inside gix (or of an I/O error reading the work
/// tree), kept whole for [`std::error::Error::source`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a git tool failed.
///
/// Neither `Clone` nor `Eq`: the gix error a failure came from is kept as
/// its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// No repository contains the workspace.
    #[error("the workspace is not inside a git repository")]
    NotARepository,
    /// A `.git` file or worktree link leads outside the workspace.
    #[error("the workspace's .git link points outside the workspace ({0}); refusing to read it")]
    LinkOutside(String),
    /// A revision gix cannot resolve.
    #[error("unknown revision {rev:?}: {source}")]
    UnknownRevision {
        /// As given.
        rev: String,
        /// gix's reason.
        #[source]
        source: Cause,
    },
    /// The path does not exist in that revision.
    #[error("{path} does not exist in {rev}")]
    PathNotInRevision {
        /// The path.
        path: String,
        /// The revision.
        rev: String,
    },
    /// A binary file where text was needed.
    #[error("{0} is a binary file")]
    Binary(String),
    /// A path refused by the workspace boundary.
    #[error("{0}")]
    Path(#[from] FsError),
    /// A file git reads on every operation is a FIFO, socket or device:
    /// opening it would block the reader forever (or feed it without end).
    #[error(
        "{0} in the git directory is not a regular file (a FIFO, socket or device); git cannot read it"
    )]
    SpecialFile(String),
    /// The repository could not be read.
    #[error("git: {0}")]
    Git(#[source] Cause),
}

impl GitError {
    pub(crate) fn git(e: impl Into<Cause>) -> Self {
        Self::Git(e.into())
    }
}
