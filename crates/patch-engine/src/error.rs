//! The one error type of the crate.

use ctm_workspace_fs::FsError;

use crate::parse::ParseError;
use crate::plan::PlanError;

/// Why planning stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The caller withdrew the request.
    Cancelled,
    /// Planning ran past the caller's deadline.
    DeadlineExceeded,
    /// Another patch of the engine held it past the caller's deadline;
    /// this one was never planned.
    Busy,
}

impl StopReason {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Busy => "busy",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::Cancelled => "the request was cancelled while it was planned",
            Self::DeadlineExceeded => "planning it took longer than the call may wait",
            Self::Busy => {
                "another patch held the workspace for as long as the call may wait; this one was not planned"
            }
        }
    }
}

/// Why a patch was refused or not applied. Nothing is written when any of
/// these is returned, except `RollbackFailed`, which says what is left.
///
/// Not `Clone` or `PartialEq`: a failed write keeps its `io::Error` as the
/// [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch text does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A path was refused by the workspace boundary.
    #[error("{0}")]
    Path(#[from] FsError),
    /// A hunk could not be placed.
    #[error("{path}: {error}")]
    Plan {
        /// The file.
        path: String,
        /// Why.
        error: Box<PlanError>,
    },
    /// The file to update, delete or move does not exist.
    #[error("{path}: no such file to {operation}")]
    NotFound {
        /// The file.
        path: String,
        /// `update`, `delete` or `move`.
        operation: &'static str,
    },
    /// An Add, or a Move destination, names a file that exists.
    #[error("{path} already exists; {hint}")]
    AlreadyExists {
        /// The file.
        path: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// The target is a directory.
    #[error("{0} is a directory")]
    IsDirectory(String),
    /// The target is a symlink, or not a regular file.
    #[error("{path} is {what}; patch a regular file")]
    NotRegular {
        /// The file.
        path: String,
        /// `a symbolic link`, `a special file`.
        what: &'static str,
    },
    /// The file is larger than the engine's cap; it was not read.
    #[error(
        "{path} is {size} bytes, more than the {max_bytes}-byte limit of apply_patch; it was not read"
    )]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// The cap.
        max_bytes: u64,
    },
    /// Reading `path` would take the patch past its total: the sizes of the
    /// files it reads (each time an operation names one, hard links and
    /// repeated sections included) add up to more than the engine's cap.
    /// Checked from the files' metadata before they are read.
    #[error(
        "{path}: the patch reads at least {needed_bytes} bytes of files in all (each file counted every time the patch names it), more than the {max_bytes}-byte limit of one apply_patch call; nothing was written"
    )]
    PatchTooLarge {
        /// The file that would take the patch past the cap.
        path: String,
        /// Bytes the patch reads, up to and including `path` (at least).
        needed_bytes: u64,
        /// The cap.
        max_bytes: u64,
    },
    /// Planning stopped between two operations, before anything was written.
    #[error("the patch was not applied: {}", reason.message())]
    Stopped {
        /// Why.
        reason: StopReason,
    },
    /// The file is not UTF-8.
    #[error("{path} is not valid UTF-8 (first invalid byte at offset {offset})")]
    Encoding {
        /// The file.
        path: String,
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// An operation names a path an earlier operation of the patch deleted.
    #[error("{0} was deleted earlier in this patch")]
    AfterDelete(String),
    /// Writes into `.git/` are refused by the policy.
    #[error(
        "{0} is inside .git, or would make its directory a git directory; this mode does not write there"
    )]
    GitDirProtected(String),
    /// The patch changes nothing.
    #[error("no files were modified: the patch has no operations")]
    NoChanges,
    /// A file changed between planning and committing, or a new file
    /// appeared; or another patch changed the file after the text this
    /// patch was written against.
    #[error("{path}: {reason}; nothing was written")]
    Conflict {
        /// The file.
        path: String,
        /// What changed.
        reason: &'static str,
    },
    /// Writing failed; every file was restored.
    #[error("{path}: {source}; every file was restored")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
        /// The same write may succeed later unchanged (not a permission,
        /// read-only or full file system).
        transient: bool,
    },
    /// Writing failed and restoring failed too.
    #[error("the patch failed ({cause}) and restoring failed too: {}", errors.join("; "))]
    RollbackFailed {
        /// The original failure.
        #[source]
        cause: Box<PatchError>,
        /// What could not be restored (each file, and its OS error).
        errors: Vec<String>,
        /// Backups kept for manual recovery: (workspace path, backup file in
        /// the same directory).
        backups: Vec<(String, String)>,
    },
}
