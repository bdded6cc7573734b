//! `apply_changes`: whole-file and line-addressed changes, each checked
//! against the revision its caller read, staged and committed on the patch
//! commit path (all files or none).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{
    ApplyOptions, Baseline, Budget, Current, Looked, NEW_FILE_MODE, PatchEngine, Staged,
    stop_requested,
};
use crate::error::{PatchError, StopReason};
use crate::lines::{
    ChangedRange, EditOp, LineEdit, MAX_CHANGES, MAX_EDITS, PlaceError, Requested,
    apply_line_edits, diff_ranges, revision, total_lines, whole_file_range,
};

/// One entry of an `apply_changes` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The file, relative to the workspace root.
    pub path: String,
    /// What to do with it.
    pub action: Action,
}

/// What a [`Change`] does. `revision` is the [`revision`] of the bytes its
/// caller read: required wherever the path exists, so nothing is written
/// over bytes the caller has not seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Creates a file that must not exist (parents are created).
    Create {
        /// Its bytes.
        content: String,
    },
    /// Creates or replaces a file.
    Write {
        /// The new bytes.
        content: String,
        /// Required when the file exists; refused when it does not.
        revision: Option<String>,
    },
    /// Line-addressed edits, all in the numbers of the file as read.
    Edit {
        /// Required.
        revision: Option<String>,
        /// At least one, at most [`MAX_EDITS`].
        edits: Vec<LineEdit>,
    },
    /// Removes a file.
    Delete {
        /// Required.
        revision: Option<String>,
    },
    /// Renames a file to a path that must not exist.
    Move {
        /// The new path.
        destination: String,
        /// Of the source; required.
        revision: Option<String>,
    },
    /// Copies a file to a path that must not exist.
    Copy {
        /// The new path.
        destination: String,
        /// Of the source; required.
        revision: Option<String>,
    },
}

impl Action {
    /// The wire name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Write { .. } => "write",
            Self::Edit { .. } => "edit",
            Self::Delete { .. } => "delete",
            Self::Move { .. } => "move",
            Self::Copy { .. } => "copy",
        }
    }

    fn destination(&self) -> Option<&str> {
        match self {
            Self::Move { destination, .. } | Self::Copy { destination, .. } => Some(destination),
            _ => None,
        }
    }

    fn revision(&self) -> Option<&str> {
        match self {
            Self::Create { .. } => None,
            Self::Write { revision, .. }
            | Self::Edit { revision, .. }
            | Self::Delete { revision }
            | Self::Move { revision, .. }
            | Self::Copy { revision, .. } => revision.as_deref(),
        }
    }
}

/// What a change did to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOperation {
    /// Created (also a `write` to a missing path).
    Create,
    /// Replaced whole.
    Write,
    /// Edited by lines.
    Edit,
    /// Removed.
    Delete,
    /// Renamed.
    Move,
    /// Copied.
    Copy,
    /// Left as it was: the change asked for the bytes already there.
    Unchanged,
}

impl ChangeOperation {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Write => "write",
            Self::Edit => "edit",
            Self::Delete => "delete",
            Self::Move => "move",
            Self::Copy => "copy",
            Self::Unchanged => "unchanged",
        }
    }
}

/// One file's evidence after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChangedFile {
    /// The file (the destination of a move or copy), workspace-relative.
    pub path: String,
    /// The source of a move or copy.
    pub old_path: Option<String>,
    /// What happened.
    pub operation: ChangeOperation,
    /// The revision of the new bytes (none for a delete).
    pub revision: Option<String>,
    /// The new file's lines, as `read_file` counts them (0 for a delete).
    pub total_lines: usize,
    /// What differs, in the new file's numbers.
    pub changed_ranges: Vec<ChangedRange>,
    /// Lines the change wrote.
    pub additions: usize,
    /// Lines the change removed.
    pub removals: usize,
}

/// The outcome of [`PatchEngine::apply_changes`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChangesReport {
    /// One entry per change, in order.
    pub files: Vec<ChangedFile>,
    /// Nothing was written: the report says what would have been.
    pub dry_run: bool,
    /// The changes are on disk.
    pub applied: bool,
}

impl ChangesReport {
    /// Every change asked for what was already there.
    pub fn already_applied(&self) -> bool {
        self.files
            .iter()
            .all(|f| f.operation == ChangeOperation::Unchanged)
    }

    /// Whether the call changed the workspace (applied, and not all
    /// unchanged).
    pub fn changed_workspace(&self) -> bool {
        self.applied && !self.already_applied()
    }
}

/// Why [`PatchEngine::apply_changes`] wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangesError {
    /// No change was given.
    #[error("no changes were given: nothing was modified")]
    Empty,
    /// More than [`MAX_CHANGES`] changes.
    #[error("changes holds {given} entries, more than {MAX_CHANGES}")]
    TooManyChanges {
        /// How many were given.
        given: usize,
    },
    /// An edit change with no edits, or more than [`MAX_EDITS`].
    #[error("changes[{index}].edits holds {given} entries; 1 to {MAX_EDITS} are accepted")]
    EditCount {
        /// The change.
        index: usize,
        /// How many edits it has.
        given: usize,
    },
    /// Two changes name one file (as resolved).
    #[error(
        "changes[{}] names {path}, which changes[{}] already names; combine them into one change",
        change_indexes[1],
        change_indexes[0]
    )]
    DuplicatePath {
        /// The resolved path.
        path: String,
        /// The earlier and the later change.
        change_indexes: [usize; 2],
    },
    /// A change to an existing file carries no revision.
    #[error(
        "changes[{index}] must carry the revision of {path}; read the file first (its revision is {current_revision})"
    )]
    RevisionRequired {
        /// The change.
        index: usize,
        /// The file.
        path: String,
        /// Its revision now.
        current_revision: String,
    },
    /// The file is not at the revision the change was made against.
    #[error("{}", match current_revision {
        Some(current) => format!("{path} changed since revision {expected_revision}; it is now {current}"),
        None => format!("{path} does not exist, so it has no revision to match"),
    })]
    RevisionMismatch {
        /// The file.
        path: String,
        /// The revision the change carried.
        expected_revision: String,
        /// Its revision now; `None` when it does not exist.
        current_revision: Option<String>,
        /// Its lines now.
        total_lines: usize,
    },
    /// An edit names a line past the end of the file.
    #[error("{path} has {total_lines} lines; edit {edit_index} ({}) addresses past the end: re-read the file and use the line numbers it reports", operation.as_str())]
    PastEnd {
        /// The file.
        path: String,
        /// Its lines.
        total_lines: usize,
        /// The edit.
        edit_index: usize,
        /// Its operation.
        operation: EditOp,
        /// Its numbers as given.
        requested: Requested,
    },
    /// Two edits of one change address the same lines or insertion point.
    #[error("edits {} and {} address the same lines of {path}", edit_indexes[0], edit_indexes[1])]
    EditsOverlap {
        /// The file.
        path: String,
        /// The two edits.
        edit_indexes: [usize; 2],
    },
    /// `create`, or a move or copy destination, names an existing file.
    #[error("cannot {action} {}{path}: it already exists{}", if *action == "create" { "" } else { "onto " }, if *action == "create" { "; use action \"write\" to replace it" } else { "" })]
    Exists {
        /// `create`, `move` or `copy`.
        action: &'static str,
        /// The file.
        path: String,
    },
    /// Everything apply_patch can refuse as well: a path outside the
    /// workspace, a missing file, a directory, a symlink, a file too large
    /// or not UTF-8, a `.git` target, a stop, a failed commit.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

/// A path of one change, resolved.
struct Target {
    index: usize,
    path: ctm_workspace_fs::WorkspacePath,
    shown: String,
}

impl PatchEngine {
    /// Applies `changes` (all or none) unless `opts` asks for a dry run.
    ///
    /// Every path is resolved before anything is read, two changes naming
    /// one file are refused, and each change to an existing file must
    /// carry its current [`revision`]. Edits name lines of the file as
    /// read; lines they do not address keep their bytes.
    pub fn apply_changes(
        &self,
        changes: &[Change],
        opts: &ApplyOptions,
    ) -> Result<ChangesReport, ChangesError> {
        if changes.is_empty() {
            return Err(ChangesError::Empty);
        }
        if changes.len() > MAX_CHANGES {
            return Err(ChangesError::TooManyChanges {
                given: changes.len(),
            });
        }
        for (index, c) in changes.iter().enumerate() {
            if let Action::Edit { edits, .. } = &c.action
                && (edits.is_empty() || edits.len() > MAX_EDITS)
            {
                return Err(ChangesError::EditCount {
                    index,
                    given: edits.len(),
                });
            }
        }
        let Some(mut recent) = self.lock_until_stopped(opts) else {
            let reason = match stop_requested(opts) {
                Some(StopReason::Cancelled) => StopReason::Cancelled,
                _ => StopReason::Busy,
            };
            return Err(PatchError::Stopped { reason }.into());
        };
        let mut looked = Looked::new(&self.ws);
        // Every path first, so a refused last path leaves nothing half done
        // and duplicates are judged on the names staging uses.
        let mut targets: Vec<(Target, Option<Target>)> = Vec::with_capacity(changes.len());
        let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
        for (index, c) in changes.iter().enumerate() {
            let mut resolve = |raw: &str| -> Result<Target, ChangesError> {
                let path = self.resolve(raw, &mut looked)?;
                let shown = path.relative().to_string_lossy().into_owned();
                if let Some(&first) = seen.get(path.relative()) {
                    return Err(ChangesError::DuplicatePath {
                        path: shown,
                        change_indexes: [first, index],
                    });
                }
                seen.insert(path.relative().to_path_buf(), index);
                Ok(Target { index, path, shown })
            };
            let source = resolve(&c.path)?;
            let dest = c.action.destination().map(&mut resolve).transpose()?;
            targets.push((source, dest));
        }
        let mut staged: BTreeMap<PathBuf, Staged> = BTreeMap::new();
        let mut budget = Budget::new(self.max_patch_bytes);
        let mut files = Vec::with_capacity(changes.len());
        for (c, (source, dest)) in changes.iter().zip(targets) {
            if let Some(reason) = stop_requested(opts) {
                return Err(PatchError::Stopped { reason }.into());
            }
            let cur = self.current(&source.path, &staged, &mut budget, &mut looked)?;
            let file = match &c.action {
                Action::Create { content } => {
                    if cur.content.is_some() {
                        return Err(ChangesError::Exists {
                            action: "create",
                            path: source.shown,
                        });
                    }
                    self.stage_whole(source, cur, content, &mut staged)
                }
                Action::Write { content, revision } => {
                    if cur.content.is_none()
                        && let Some(expected) = revision
                    {
                        return Err(ChangesError::RevisionMismatch {
                            path: source.shown,
                            expected_revision: expected.clone(),
                            current_revision: None,
                            total_lines: 0,
                        });
                    }
                    if let Some(old) = &cur.content {
                        check_revision(&source, c.action.revision(), old)?;
                    }
                    self.stage_whole(source, cur, content, &mut staged)
                }
                Action::Edit { edits, .. } => {
                    let old = existing(&source, &cur, "edit")?;
                    // A file that is not text cannot be edited by lines,
                    // whatever revision was read.
                    let text = std::str::from_utf8(old).map_err(|e| PatchError::Encoding {
                        path: source.shown.clone(),
                        offset: e.valid_up_to(),
                    })?;
                    check_revision(&source, c.action.revision(), old)?;
                    let edited = apply_line_edits(text, edits).map_err(|e| match e {
                        PlaceError::PastEnd {
                            edit_index,
                            total_lines,
                        } => ChangesError::PastEnd {
                            path: source.shown.clone(),
                            total_lines,
                            edit_index,
                            operation: edits[edit_index].op(),
                            requested: edits[edit_index].requested(),
                        },
                        PlaceError::Overlap { edit_indexes } => ChangesError::EditsOverlap {
                            path: source.shown.clone(),
                            edit_indexes,
                        },
                    })?;
                    let unchanged = edited.content == *old;
                    let file = ChangedFile {
                        path: source.shown.clone(),
                        old_path: None,
                        operation: if unchanged {
                            ChangeOperation::Unchanged
                        } else {
                            ChangeOperation::Edit
                        },
                        revision: Some(revision(&edited.content)),
                        total_lines: total_lines(&edited.content),
                        changed_ranges: edited.changed_ranges,
                        additions: edits.iter().map(LineEdit::new_lines).sum(),
                        removals: edits.iter().map(LineEdit::removed_lines).sum(),
                    };
                    stage(&mut staged, source.path, cur, Some(edited.content), None);
                    file
                }
                Action::Delete { .. } => {
                    let old = existing(&source, &cur, "delete")?;
                    check_revision(&source, c.action.revision(), old)?;
                    let removals = total_lines(old);
                    let file = ChangedFile {
                        path: source.shown.clone(),
                        old_path: None,
                        operation: ChangeOperation::Delete,
                        revision: None,
                        total_lines: 0,
                        changed_ranges: Vec::new(),
                        additions: 0,
                        removals,
                    };
                    stage(&mut staged, source.path, cur, None, None);
                    file
                }
                Action::Move { .. } | Action::Copy { .. } => {
                    let moving = matches!(c.action, Action::Move { .. });
                    let verb = if moving { "move" } else { "copy" };
                    let old = existing(&source, &cur, verb)?.clone();
                    let Some(dest) = dest else {
                        unreachable!("a move or copy resolves its destination");
                    };
                    let dest_cur = self.current(&dest.path, &staged, &mut budget, &mut looked)?;
                    if dest_cur.content.is_some() {
                        return Err(ChangesError::Exists {
                            action: verb,
                            path: dest.shown,
                        });
                    }
                    check_revision(&source, c.action.revision(), &old)?;
                    let file = ChangedFile {
                        path: dest.shown.clone(),
                        old_path: Some(source.shown.clone()),
                        operation: if moving {
                            ChangeOperation::Move
                        } else {
                            ChangeOperation::Copy
                        },
                        revision: Some(revision(&old)),
                        total_lines: total_lines(&old),
                        changed_ranges: whole_file_range(&old),
                        additions: total_lines(&old),
                        removals: 0,
                    };
                    let mode = cur.mode;
                    if moving {
                        stage(&mut staged, source.path, cur, None, None);
                    }
                    stage(&mut staged, dest.path, dest_cur, Some(old), Some(mode));
                    file
                }
            };
            files.push(file);
        }
        if let Some(reason) = stop_requested(opts) {
            return Err(PatchError::Stopped { reason }.into());
        }
        if opts.dry_run {
            return Ok(ChangesReport {
                files,
                dry_run: true,
                applied: false,
            });
        }
        self.commit_staged(staged, &mut recent, opts)?;
        Ok(ChangesReport {
            files,
            dry_run: false,
            applied: true,
        })
    }

    /// Stages a create or write of `content` over `cur`.
    fn stage_whole(
        &self,
        target: Target,
        cur: Current,
        content: &str,
        staged: &mut BTreeMap<PathBuf, Staged>,
    ) -> ChangedFile {
        let new = content.as_bytes();
        let (operation, ranges, removals) = match &cur.content {
            Some(old) if old.as_slice() == new => (ChangeOperation::Unchanged, Vec::new(), 0),
            Some(old) => (
                ChangeOperation::Write,
                diff_ranges(&String::from_utf8_lossy(old), content),
                total_lines(old),
            ),
            None => (ChangeOperation::Create, diff_ranges("", content), 0),
        };
        let unchanged = operation == ChangeOperation::Unchanged;
        let file = ChangedFile {
            path: target.shown,
            old_path: None,
            operation,
            revision: Some(revision(new)),
            total_lines: total_lines(new),
            changed_ranges: ranges,
            additions: if unchanged { 0 } else { total_lines(new) },
            removals,
        };
        stage(staged, target.path, cur, Some(new.to_vec()), None);
        file
    }
}

/// Records `content` (`None`: delete) for `path` over `cur`, with `mode`
/// or the file's own.
fn stage(
    staged: &mut BTreeMap<PathBuf, Staged>,
    path: ctm_workspace_fs::WorkspacePath,
    cur: Current,
    content: Option<Vec<u8>>,
    mode: Option<u32>,
) {
    let mode = mode.unwrap_or(match cur.baseline {
        Baseline::Present { mode, .. } => mode,
        Baseline::Absent => NEW_FILE_MODE,
    });
    let sha256 = content.as_deref().map(super::sha);
    staged.insert(
        path.relative().to_path_buf(),
        Staged {
            path,
            baseline: cur.baseline,
            original: cur.original,
            content,
            sha256,
            mode,
        },
    );
}

/// The bytes of a file the change needs to exist.
fn existing<'c>(
    target: &Target,
    cur: &'c Current,
    operation: &'static str,
) -> Result<&'c Vec<u8>, ChangesError> {
    cur.content.as_ref().ok_or_else(|| {
        PatchError::NotFound {
            path: target.shown.clone(),
            operation,
        }
        .into()
    })
}

fn check_revision(target: &Target, given: Option<&str>, bytes: &[u8]) -> Result<(), ChangesError> {
    let current = revision(bytes);
    match given {
        None => Err(ChangesError::RevisionRequired {
            index: target.index,
            path: target.shown.clone(),
            current_revision: current,
        }),
        Some(expected) if expected != current => Err(ChangesError::RevisionMismatch {
            path: target.shown.clone(),
            expected_revision: expected.to_owned(),
            current_revision: Some(current),
            total_lines: total_lines(bytes),
        }),
        Some(_) => Ok(()),
    }
}
