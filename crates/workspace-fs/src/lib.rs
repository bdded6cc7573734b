//! The workspace boundary of coding-tools-mcp and its file tools, with no MCP types.
//!
//! A [`Workspace`] owns one canonical root, held open as a directory handle.
//! [`Workspace::resolve`] is the only way to turn a caller's string into a
//! [`WorkspacePath`]: it refuses absolute paths (and `~`, drive letters, UNC
//! paths), NUL bytes and `..` that leaves the root, comparing components,
//! never string prefixes — a sibling `ws_evil` of `ws` is outside.
//! [`Workspace::open_beneath`] resolves beneath the root handle (`openat2` with
//! `RESOLVE_BENEATH`, or an `O_NOFOLLOW` walk where the kernel lacks it), so a
//! symlink that leads outside is refused even if the tree changes between a
//! check and the open. Every read in this crate goes through it.
//!
//! On top of it: [`read_file`] (a streamed line range), [`list_dir`] and
//! [`list_files`] (the `ignore` crate: `.gitignore`, `.ignore`, git excludes),
//! [`search_text`] (the grep crates), [`view_image`] (the `image` crate) and
//! [`project_context`] (bounded `AGENTS.md`/`CLAUDE.md` instructions).
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("AGENTS.md"), "Run the tests.\n").unwrap();
//! let ws = ctm_workspace_fs::Workspace::open(dir.path()).unwrap();
//! assert!(ws.resolve("../etc/passwd").is_err());
//! let path = ws.resolve("AGENTS.md").unwrap();
//! let req = ctm_workspace_fs::ReadRequest { start_line: 1, end_line: None, max_lines: None, max_bytes: 1024 };
//! let read = ctm_workspace_fs::read_file(&ws, &path, &req).unwrap();
//! assert_eq!((read.content.as_str(), read.total_lines), ("Run the tests.\n", 1));
//! let ctx = ctm_workspace_fs::project_context(&ws, &Default::default());
//! assert!(ctx.text.contains("Run the tests."));
//! ```

mod confine;
mod context;
mod error;
mod image;
mod list;
mod path;
mod read;
mod search;

pub use confine::{confined_with, gitdir_link, read_small, walks_confined};
pub use context::{
    ContextLimits, InstructionFile, ProjectContext, project_context, project_context_with,
};
pub use error::FsError;
pub use image::{ImageOutcome, ImageRequest, MAX_DECODE_PIXELS, MAX_SOURCE_BYTES, view_image};
pub use list::{
    Entry, EntryType, FilesRequest, Globs, ListRequest, Listing, MAX_SCAN_FOR_SORT, SortKey,
    list_dir, list_files,
};
pub use path::{Kind, Workspace, WorkspacePath};
pub use read::{ReadOutcome, ReadRequest, TruncatedBy, read_file};
pub use search::{SearchOutcome, SearchRequest, TextMatch, search_text};
