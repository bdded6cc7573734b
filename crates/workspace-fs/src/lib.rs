//! The workspace boundary of coding-tools-mcp and its file tools, with no MCP types.
//!
//! A [`Workspace`] owns one canonical root, held open as a directory handle.
//! A caller's string becomes a [`WorkspacePath`] in one of two ways.
//! [`Workspace::resolve_lexically`] checks the text alone: it refuses absolute
//! paths (and `~`, drive letters, UNC paths), NUL bytes and `..` that leaves
//! the root, comparing components, never string prefixes — a sibling
//! `ws_evil` of `ws` is outside. [`Workspace::resolve_beneath`] adds the
//! symlink verdict on the part of the path that exists, for a path the caller
//! will not open itself (a history filter, a file to create).
//! [`Workspace::open_beneath`] resolves beneath the root handle (`openat2` with
//! `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk where the kernel lacks it), so a
//! symlink that leads outside is refused even if the tree changes between a
//! check and the open. Every read in this crate goes through it.
//!
//! Nothing here words a tool call: results carry facts (a [`WalkWarning`],
//! a [`ContextNote`]) and the host words them.
//!
//! On top of it: [`read_file`] (a streamed line range), [`list_dir`] and
//! [`list_files`] (the `ignore` crate: `.gitignore`, `.ignore`, git excludes),
//! [`search_text`] (the grep crates), `view_image` (the `image` crate) and
//! [`project_context`] (bounded `AGENTS.md`/`CLAUDE.md` instructions).
//!
//! Cargo features: `image` (default) brings `view_image` and its types; a host
//! that shows no images leaves it out, and the `image` crate with it.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("AGENTS.md"), "Run the tests.\n").unwrap();
//! let ws = ctm_workspace_fs::Workspace::open(dir.path()).unwrap();
//! assert!(ws.resolve_lexically("../etc/passwd").is_err());
//! let path = ws.resolve_lexically("AGENTS.md").unwrap();
//! let mut req = ctm_workspace_fs::ReadRequest::default();
//! req.max_bytes = 1024;
//! let read = ctm_workspace_fs::read_file(&ws, &path, &req).unwrap();
//! assert_eq!((read.content.as_str(), read.total_lines), ("Run the tests.\n", 1));
//! let ctx = ctm_workspace_fs::project_context(&ws, &Default::default());
//! assert!(ctx.text.contains("Run the tests."));
//! ```

#![deny(missing_docs)]

mod confine;
mod context;
mod error;
#[cfg(feature = "image")]
mod image;
mod list;
mod path;
mod read;
mod search;

pub use confine::{confined_with, gitdir_link, read_small, walks_confined};
pub use context::{
    ContextLimits, ContextNote, ContextWarning, InstructionFile, ProjectContext, project_context,
    project_context_with,
};
pub use error::{FsError, IoCause};
#[cfg(feature = "image")]
pub use image::{
    ImageOutcome, ImageRequest, ImageWarning, MAX_DECODE_PIXELS, MAX_SOURCE_BYTES, view_image,
};
pub use list::{
    Entry, EntryType, FilesRequest, Globs, ListRequest, Listing, MAX_SCAN_FOR_SORT, SortKey,
    WalkWarning, list_dir, list_files,
};
pub use path::{Kind, Workspace, WorkspacePath};
pub use read::{MAX_REVISION_BYTES, ReadOutcome, ReadRequest, TruncatedBy, read_file};
pub use search::{SearchOutcome, SearchRequest, TextMatch, search_text};
