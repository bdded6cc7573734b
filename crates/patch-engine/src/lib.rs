//! The patch engine of coding-tools-mcp: `apply_patch` without MCP.
//!
//! [`parse`] reads the `*** Begin Patch` envelope (Add, Delete, Update with an
//! optional Move, `@@` hunks with stacked anchors, `*** End of File`),
//! leniently where models are sloppy and the meaning is unambiguous.
//! [`apply_chunks`] places hunks in a text: exact first, then ignoring
//! trailing whitespace, then surrounding whitespace, then typographic
//! punctuation; at each tier a match must be unique (or pinned by an anchor or
//! the end marker), context lines keep the file's own bytes, and per-line
//! CRLF/LF and a UTF-8 BOM survive. [`PatchEngine`] stages every operation
//! against a [`ctm_workspace_fs::Workspace`] under one lock, checks each
//! file's baseline (hash and mode) again immediately before replacing it, and
//! commits all files or none.
//!
//! Embedding without MCP:
//!
//! ```
//! use ctm_patch_engine::{ApplyOptions, PatchEngine};
//! use ctm_workspace_fs::Workspace;
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("app.py"), "def main():\n    return 1\n").unwrap();
//! let engine = PatchEngine::new(Workspace::open(dir.path()).unwrap()).with_protected_git_dir(true);
//! let patch = "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    return 1\n+    return 2\n*** Add File: notes.txt\n+hello\n*** End Patch\n";
//! let dry = engine.apply(patch, &ApplyOptions::default().with_dry_run(true)).unwrap();
//! assert!(!dry.applied && dry.files[0].would_change);
//! let report = engine.apply(patch, &ApplyOptions::default()).unwrap();
//! assert_eq!(report.files.len(), 2);
//! assert_eq!(std::fs::read_to_string(dir.path().join("app.py")).unwrap(), "def main():\n    return 2\n");
//! assert_eq!(std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(), "hello\n");
//! ```

#![deny(missing_docs)]

mod commit;
mod error;
mod gitdir;
mod idempotency;
mod leftovers;
mod lines;
mod parse;
mod plan;
mod recent;

#[cfg(feature = "fault-injection")]
pub use commit::Faults;
pub use commit::changes::{
    Action, Change, ChangeOperation, ChangedFile, ChangesError, ChangesReport,
};
pub use commit::{
    ApplyOptions, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PATCH_BYTES, FileChange, Operation,
    PatchEngine, PatchFailure, PatchReport, TEMP_PREFIX, Unplanned,
};
pub use error::{PatchError, StopReason};
pub use idempotency::{
    Claim, DEFAULT_IDEMPOTENCY_BYTES, DEFAULT_IDEMPOTENCY_RECORDS, IdempotencyStore,
    MAX_IDEMPOTENCY_KEY_CHARS, Ticket,
};
pub use leftovers::{Leftovers, clean_leftovers};
pub use lines::{
    ChangedRange, EditOp, EditShapeError, LineEdit, MAX_CHANGES, MAX_EDITS, REVISION_ALGORITHM,
    Requested, apply_line_edits, content_lines, diff_ranges, revision, total_lines,
};
pub use parse::{Chunk, HunkLine, Op, ParseError, Patch, parse};
pub use plan::{
    Closest, HunkReport, PlanError, Planned, Tier, apply_chunks, apply_chunks_skipping_applied,
    apply_chunks_until,
};
