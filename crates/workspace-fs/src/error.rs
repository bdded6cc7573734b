//! The one error type of the crate.

use std::sync::Arc;

/// Why a workspace operation was refused or failed.
///
/// `Clone` and `Eq` stay because the errors of `ctm-patch-engine` and
/// `ctm-exec-runtime` wrap this one and derive both; an operating-system
/// cause is kept all the same, as an [`IoCause`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The caller gave an absolute path (or `~`, a drive letter, a UNC path).
    #[error("absolute paths are not accepted: {0}")]
    Absolute(String),
    /// `..` leaves the workspace root.
    #[error("path leaves the workspace: {0}")]
    Outside(String),
    /// A symlink on the way points outside the workspace.
    #[error("path resolves through a symlink to outside the workspace: {0}")]
    SymlinkEscape(String),
    /// Symlinks on the way form a loop (or nest too deeply).
    #[error("too many levels of symbolic links: {0}")]
    SymlinkLoop(String),
    /// The path contains a NUL byte or is otherwise unusable.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The path does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A file was expected.
    #[error("is a directory: {0}")]
    IsDirectory(String),
    /// A directory was expected.
    #[error("not a directory: {0}")]
    NotADirectory(String),
    /// Neither a regular file nor a directory (FIFO, socket, device).
    #[error("not a regular file: {0}")]
    NotRegular(String),
    /// The file holds binary content.
    #[error("binary file: {0}")]
    Binary(String),
    /// The file is not valid UTF-8.
    #[error("{path} is not valid UTF-8 (first invalid byte at offset {offset}, line {line})")]
    UnsupportedEncoding {
        /// The file.
        path: String,
        /// Absolute byte offset of the first invalid byte.
        offset: u64,
        /// Its line (1-based).
        line: u64,
    },
    /// A caller-supplied pattern or regex does not parse.
    #[error("invalid {kind} {pattern:?}: {error}")]
    InvalidPattern {
        /// `glob` or `regex`.
        kind: &'static str,
        /// The pattern as given.
        pattern: String,
        /// The parser's message.
        error: String,
    },
    /// A caller argument is inconsistent (e.g. `end_line` before `start_line`).
    #[error("{0}")]
    InvalidArgument(String),
    /// The file is not an image this build decodes.
    #[error("{path} is not a supported image ({reason})")]
    NotAnImage {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The image does not fit the limits and may not be resized.
    #[error("{path}: {reason}")]
    ImageTooLarge {
        /// The file.
        path: String,
        /// Which limit.
        reason: String,
    },
    /// The image has more pixels than `view_image` decodes to resize, or
    /// needs more memory to decode than that many 8-bit RGBA pixels (a
    /// 16-bit image, a GIF frame larger than its screen).
    #[error(
        "{path}: {width}x{height} is more than view_image decodes (at most {max} pixels of 8-bit RGBA)"
    )]
    ImageTooManyPixels {
        /// The file.
        path: String,
        /// Its width, from its header.
        width: u32,
        /// Its height.
        height: u32,
        /// The bound.
        max: u64,
    },
    /// The root itself is unusable.
    #[error("workspace root {path}: {source}")]
    Root {
        /// The root as given.
        path: String,
        /// Why it cannot be opened.
        #[source]
        source: IoCause,
    },
    /// The operating system refused.
    #[error("{path}: {source}")]
    Io {
        /// The path concerned.
        path: String,
        /// The operating system's error.
        #[source]
        source: IoCause,
        /// Whether trying again may help (EINTR, EAGAIN, a race).
        transient: bool,
    },
}

impl FsError {
    /// An I/O failure on `path`: `NotFound` for a missing file, otherwise
    /// [`FsError::Io`] keeping `e` as its cause.
    pub fn io(path: &str, e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => Self::NotFound(path.to_owned()),
            kind => Self::Io {
                path: path.to_owned(),
                transient: matches!(kind, K::Interrupted | K::WouldBlock | K::TimedOut),
                source: IoCause::from(e),
            },
        }
    }
}

/// An operating-system error kept as the cause of an [`FsError`]: shared,
/// so the error stays `Clone`, and compared by kind, OS code and message,
/// so it stays `Eq`.
#[derive(Debug, Clone)]
pub struct IoCause(Arc<std::io::Error>);

impl IoCause {
    /// The error itself.
    pub fn get(&self) -> &std::io::Error {
        &self.0
    }
}

impl From<std::io::Error> for IoCause {
    fn from(e: std::io::Error) -> Self {
        Self(Arc::new(e))
    }
}

impl From<rustix::io::Errno> for IoCause {
    fn from(e: rustix::io::Errno) -> Self {
        Self::from(std::io::Error::from(e))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        self.0.kind() == other.0.kind()
            && self.0.raw_os_error() == other.0.raw_os_error()
            && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoCause {}

impl std::fmt::Display for IoCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}
