//! Staging and the all-or-nothing commit beneath the workspace root.
//!
//! Every file is reached through a directory handle opened beneath the root,
//! and every write is `*at` on that handle: new content goes to a temp file
//! in the target's directory, is fsynced and given its mode, then replaces
//! the target with an atomic exchanging rename (new files with a no-replace
//! rename, so a file that appeared meanwhile is never overwritten). The
//! original, moved aside under the temp name by the exchange, is the backup
//! until every file is in place; any failure exchanges the backups back.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use ctm_workspace_fs::{Workspace, WorkspacePath};
use ring::digest::{SHA256, digest};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::error::{PatchError, StopReason};
use crate::parse::{Op, parse};
use crate::plan::{HunkReport, PlanError, apply_chunks, apply_chunks_until};
use crate::recent::{MAX_REMEMBERED_BYTES, Recent, Written};

pub(crate) mod changes;

/// Prefix of temp and backup files (so a restart can recognise leftovers).
pub const TEMP_PREFIX: &str = ".ctm-patch-";
/// Default cap on the size of a file a patch reads (32 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Default cap on the bytes one patch reads in all (128 MiB, four files at
/// the default per-file cap).
pub const DEFAULT_MAX_PATCH_BYTES: u64 = 4 * DEFAULT_MAX_FILE_BYTES;
/// Mode of files the patch creates.
const NEW_FILE_MODE: u32 = 0o644;

/// What a file operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Created.
    Add,
    /// Changed in place.
    Update,
    /// Removed.
    Delete,
    /// Renamed (and possibly changed).
    Move,
}

impl Operation {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::Move => "move",
        }
    }
}

/// One operation's effect.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileChange {
    /// The operation.
    pub operation: Operation,
    /// The path as written in the patch.
    pub path: String,
    /// The destination of a move.
    pub destination: Option<String>,
    /// Lines added.
    pub lines_added: usize,
    /// Lines removed.
    pub lines_removed: usize,
    /// SHA-256 of the content before (absent for adds).
    pub old_sha256: Option<String>,
    /// SHA-256 of the new content (absent for deletes).
    pub new_sha256: Option<String>,
    /// Whether the bytes or the path change.
    pub would_change: bool,
    /// Where each hunk matched.
    pub hunks: Vec<HunkReport>,
    /// With [`ApplyOptions::evidence`]: the new file's lines, as
    /// `read_file` counts them (0 for a delete).
    pub total_lines: Option<usize>,
    /// With [`ApplyOptions::evidence`]: what differs in the new file (a
    /// move: all of it, at the destination).
    pub changed_ranges: Vec<crate::ChangedRange>,
}

/// The outcome of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PatchReport {
    /// One entry per operation, in patch order.
    pub files: Vec<FileChange>,
    /// Nothing was written (dry run).
    pub dry_run: bool,
    /// The changes are on disk.
    pub applied: bool,
}

/// An operation of a patch whose planning did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unplanned {
    /// The operation.
    pub operation: Operation,
    /// The path as written in the patch.
    pub path: String,
    /// The destination of a move.
    pub destination: Option<String>,
}

/// A patch that was not applied, with as much of its plan as was made.
/// Nothing was written (except for `PatchError::RollbackFailed`).
///
/// Not `Clone` or `PartialEq`, as [`PatchError`].
#[derive(Debug)]
#[non_exhaustive]
pub struct PatchFailure {
    /// Why.
    pub error: PatchError,
    /// The operations planned before the failure, in patch order: all of
    /// them when the commit failed.
    pub planned: Vec<FileChange>,
    /// The operation that could not be planned and those after it.
    pub unplanned: Vec<Unplanned>,
}

impl From<PatchError> for PatchFailure {
    fn from(error: PatchError) -> Self {
        Self {
            error,
            planned: Vec::new(),
            unplanned: Vec::new(),
        }
    }
}

impl Unplanned {
    fn of(op: &Op) -> Self {
        match op {
            Op::Add { path, .. } => Self {
                operation: Operation::Add,
                path: path.clone(),
                destination: None,
            },
            Op::Delete { path, .. } => Self {
                operation: Operation::Delete,
                path: path.clone(),
                destination: None,
            },
            Op::Update { path, move_to, .. } => Self {
                operation: if move_to.is_some() {
                    Operation::Move
                } else {
                    Operation::Update
                },
                path: path.clone(),
                destination: move_to.clone(),
            },
        }
    }
}

/// A hook given a workspace-relative path ([`Faults::before_replace`]).
type PathHook = Box<dyn Fn(&Path) + Send + Sync>;

/// Faults for tests of the rollback path (they cannot be caused for real
/// at a chosen moment). Set in [`ApplyOptions`] only with the
/// `fault-injection` feature, which no build of the server enables.
#[derive(Default)]
pub struct Faults {
    /// Fail the Nth rename of the commit (1-based).
    pub fail_rename_at: Option<usize>,
    /// Runs after planning, before committing (an outside writer).
    pub before_commit: Option<Box<dyn Fn() + Send + Sync>>,
    /// Runs with a target's workspace-relative path once its baseline is
    /// checked, just before it is replaced or removed (an outside writer
    /// in that window).
    pub before_replace: Option<PathHook>,
}

/// Options of one application: `ApplyOptions::default()` commits, with no
/// deadline and no cancellation.
#[derive(Default)]
#[non_exhaustive]
pub struct ApplyOptions {
    /// Plan and report, write nothing.
    pub dry_run: bool,
    /// Stop planning (and write nothing) once this instant has passed;
    /// checked between operations and before the commit.
    pub deadline: Option<std::time::Instant>,
    /// Stop planning (and write nothing) once this returns true; checked
    /// like `deadline`.
    pub cancelled: Option<Box<dyn Fn() -> bool + Send + Sync>>,
    /// Skip the hunks of an Update that are already applied
    /// ([`crate::apply_chunks_skipping_applied`]) instead of failing on
    /// them: a patch sent again changes nothing and says so.
    pub skip_applied: bool,
    /// Report each file's lines and changed ranges after the patch
    /// ([`FileChange::total_lines`], [`FileChange::changed_ranges`]).
    pub evidence: bool,
    /// Faults to inject (tests of the rollback path).
    #[cfg(feature = "fault-injection")]
    pub faults: Faults,
}

impl std::fmt::Debug for ApplyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApplyOptions")
            .field("dry_run", &self.dry_run)
            .field("deadline", &self.deadline)
            .field("cancelled", &self.cancelled.is_some())
            .finish_non_exhaustive()
    }
}

impl ApplyOptions {
    /// See [`ApplyOptions::skip_applied`].
    #[must_use]
    pub fn with_skip_applied(mut self, skip: bool) -> Self {
        self.skip_applied = skip;
        self
    }

    /// See [`ApplyOptions::evidence`].
    #[must_use]
    pub fn with_evidence(mut self, evidence: bool) -> Self {
        self.evidence = evidence;
        self
    }

    /// Plans and reports only: nothing is written.
    #[must_use]
    pub fn with_dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Stops planning (writing nothing) once `deadline` has passed.
    #[must_use]
    pub fn with_deadline(mut self, deadline: std::time::Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Stops planning (writing nothing) once `cancelled` returns true.
    #[must_use]
    pub fn with_cancelled(mut self, cancelled: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.cancelled = Some(Box::new(cancelled));
        self
    }

    /// Injects `faults` (tests of the rollback path).
    #[cfg(feature = "fault-injection")]
    #[must_use]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    fn faults(&self) -> &Faults {
        #[cfg(feature = "fault-injection")]
        {
            &self.faults
        }
        #[cfg(not(feature = "fault-injection"))]
        {
            static NONE: Faults = Faults {
                fail_rename_at: None,
                before_commit: None,
                before_replace: None,
            };
            &NONE
        }
    }
}

/// The patch engine of one workspace. Its lock spans every caller, so two
/// patches never interleave; it also guards what the engine wrote lately,
/// which tells a patch that lost a race from one that never fitted.
#[derive(Debug)]
pub struct PatchEngine {
    ws: Workspace,
    protect_git_dir: bool,
    /// Files larger than this are refused before they are read.
    max_file_bytes: u64,
    /// A patch reads at most this many bytes of files in all.
    max_patch_bytes: u64,
    lock: Mutex<Recent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Baseline {
    Absent,
    Present { sha256: [u8; 32], mode: u32 },
}

struct Staged {
    path: WorkspacePath,
    baseline: Baseline,
    /// The content at `baseline`, when small enough to remember.
    original: Option<Vec<u8>>,
    /// `None`: delete.
    content: Option<Vec<u8>>,
    /// SHA-256 of `content`, computed once when it was staged.
    sha256: Option<[u8; 32]>,
    mode: u32,
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

fn hex(b: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for x in b {
        out.push(char::from(DIGITS[usize::from(x >> 4)]));
        out.push(char::from(DIGITS[usize::from(x & 0xf)]));
    }
    out
}

/// An OS error of a write, as an errno.
trait OsError: std::fmt::Display {
    fn errno(&self) -> Errno;
    fn into_io(self) -> std::io::Error;
}

impl OsError for Errno {
    fn errno(&self) -> Errno {
        *self
    }

    fn into_io(self) -> std::io::Error {
        self.into()
    }
}

impl OsError for std::io::Error {
    fn errno(&self) -> Errno {
        Errno::from_io_error(self).unwrap_or(Errno::IO)
    }

    fn into_io(self) -> std::io::Error {
        self
    }
}

fn io_err(path: &str, e: impl OsError) -> PatchError {
    // These stay true until someone changes the file system or its
    // permissions: repeating the same patch cannot succeed before that.
    let permanent = matches!(
        e.errno(),
        Errno::PERM | Errno::ACCESS | Errno::ROFS | Errno::NOSPC | Errno::DQUOT
    );
    PatchError::Io {
        path: path.to_owned(),
        source: e.into_io(),
        transient: !permanent,
    }
}

impl PatchEngine {
    /// An engine for `ws`, with the default caps, that writes anywhere in
    /// it but inside `.git/` (safe by default: hooks and config live there;
    /// [`PatchEngine::with_protected_git_dir`]`(false)` lifts that).
    pub fn new(ws: Workspace) -> Self {
        Self {
            ws,
            protect_git_dir: true,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_patch_bytes: DEFAULT_MAX_PATCH_BYTES,
            lock: Mutex::new(Recent::default()),
        }
    }

    /// Refuse paths inside `.git/` (and inside any git directory a target's
    /// real path reaches) with [`PatchError::GitDirProtected`], when
    /// `protect` (hooks and config live there); on by default.
    #[must_use]
    pub fn with_protected_git_dir(mut self, protect: bool) -> Self {
        self.protect_git_dir = protect;
        self
    }

    /// Whether [`PatchEngine::with_protected_git_dir`] is on.
    pub fn protects_git_dir(&self) -> bool {
        self.protect_git_dir
    }

    /// Refuse to read a file larger than `max_bytes` to update, move or
    /// delete it ([`PatchError::TooLarge`]); the default is
    /// [`DEFAULT_MAX_FILE_BYTES`]. Planning holds about twice the file in
    /// memory (its text and the new text), so this bounds each file's share
    /// of a patch's memory; [`PatchEngine::with_max_patch_bytes`] bounds
    /// their sum.
    #[must_use]
    pub fn with_max_file_bytes(mut self, max_bytes: u64) -> Self {
        self.max_file_bytes = max_bytes;
        self
    }

    /// The size cap of [`PatchEngine::with_max_file_bytes`].
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    /// Refuse a patch whose operations read more than `max_bytes` of files
    /// in all ([`PatchError::PatchTooLarge`]); the default is
    /// [`DEFAULT_MAX_PATCH_BYTES`]. A file counts each time an operation
    /// names it (a hard link or a repeated section is read again), so with
    /// the per-file cap this bounds what a patch holds in memory, however
    /// many files it names. The sizes are added up from the files' metadata
    /// before anything is read, and checked again as each file is read.
    #[must_use]
    pub fn with_max_patch_bytes(mut self, max_bytes: u64) -> Self {
        self.max_patch_bytes = max_bytes;
        self
    }

    /// The cap of [`PatchEngine::with_max_patch_bytes`].
    pub fn max_patch_bytes(&self) -> u64 {
        self.max_patch_bytes
    }

    /// Parses, plans and (unless `dry_run`) commits `patch`.
    pub fn apply(&self, patch: &str, opts: &ApplyOptions) -> Result<PatchReport, PatchError> {
        self.apply_detailed(patch, opts).map_err(|f| f.error)
    }

    /// [`PatchEngine::apply`], and on failure what the patch would have done
    /// as far as it was planned.
    ///
    /// A patch that no longer fits a file because another patch of this
    /// engine changed, created or removed it since the text the patch was
    /// written against (the loser of two concurrent patches, or a patch sent
    /// twice) fails with [`PatchError::Conflict`] rather than a context or
    /// existence error.
    pub fn apply_detailed(
        &self,
        patch: &str,
        opts: &ApplyOptions,
    ) -> Result<PatchReport, PatchFailure> {
        let parsed = parse(patch).map_err(PatchError::from)?;
        if parsed.ops.is_empty() {
            return Err(PatchError::NoChanges.into());
        }
        let all_unplanned = || parsed.ops.iter().map(Unplanned::of).collect();
        if let Err(error) = self.preflight(&parsed.ops) {
            return Err(PatchFailure {
                error,
                planned: Vec::new(),
                unplanned: all_unplanned(),
            });
        }
        let Some(mut recent) = self.lock_until_stopped(opts) else {
            let reason = match stop_requested(opts) {
                Some(StopReason::Cancelled) => StopReason::Cancelled,
                _ => StopReason::Busy,
            };
            return Err(PatchFailure {
                error: PatchError::Stopped { reason },
                planned: Vec::new(),
                unplanned: all_unplanned(),
            });
        };
        let mut staged: BTreeMap<PathBuf, Staged> = BTreeMap::new();
        // Made after the lock is taken: what planning saw of the directories
        // holds for this patch only.
        let mut looked = Looked::new(&self.ws);
        let mut budget = Budget::new(self.max_patch_bytes);
        let mut files = Vec::new();
        for (i, op) in parsed.ops.iter().enumerate() {
            let staged_op = match stop_requested(opts) {
                Some(reason) => Err(PatchError::Stopped { reason }),
                None => self.stage(op, &mut staged, &mut budget, &mut looked, opts),
            };
            match staged_op {
                Ok(f) => files.push(f),
                Err(e) => {
                    return Err(PatchFailure {
                        error: self.explain(&recent, op, &staged, e),
                        planned: files,
                        unplanned: parsed.ops[i..].iter().map(Unplanned::of).collect(),
                    });
                }
            }
        }
        if let Some(reason) = stop_requested(opts) {
            return Err(PatchFailure {
                error: PatchError::Stopped { reason },
                planned: files,
                unplanned: Vec::new(),
            });
        }
        if opts.dry_run {
            return Ok(PatchReport {
                files,
                dry_run: true,
                applied: false,
            });
        }
        if let Err(error) = self.commit_staged(staged, &mut recent, opts) {
            return Err(PatchFailure {
                error,
                planned: files,
                unplanned: Vec::new(),
            });
        }
        Ok(PatchReport {
            files,
            dry_run: false,
            applied: true,
        })
    }

    /// Commits what `staged` changes (all files or none) and remembers each
    /// write in `recent`.
    fn commit_staged(
        &self,
        staged: BTreeMap<PathBuf, Staged>,
        recent: &mut Recent,
        opts: &ApplyOptions,
    ) -> Result<(), PatchError> {
        if let Some(hook) = &opts.faults().before_commit {
            hook();
        }
        let changed: Vec<Staged> = staged
            .into_values()
            .filter(|s| match (&s.baseline, &s.content) {
                (Baseline::Present { sha256, mode }, Some(c)) => {
                    s.sha256.unwrap_or_else(|| sha(c)) != *sha256 || s.mode != *mode
                }
                (Baseline::Absent, None) => false,
                _ => true,
            })
            .collect();
        Commit::new(&self.ws, opts.faults(), self.protect_git_dir).run(&changed)?;
        for s in changed {
            let before = match (&s.baseline, s.original) {
                (Baseline::Absent, _) => Some(None),
                (Baseline::Present { .. }, Some(bytes)) => Some(Some(bytes)),
                (Baseline::Present { .. }, None) => None,
            };
            let after = match &s.content {
                Some(c) => Baseline::Present {
                    sha256: s.sha256.unwrap_or_else(|| sha(c)),
                    mode: s.mode,
                },
                None => Baseline::Absent,
            };
            recent.record(
                s.path.relative().to_path_buf(),
                before.map(|before| Written { before, after }),
            );
        }
        Ok(())
    }

    /// Adds up, from their metadata and in patch order, the sizes of the
    /// files the operations will read, and refuses the patch before
    /// anything is read when they exceed the patch cap. Paths that do not
    /// resolve or stat are skipped (planning reports them); a file over
    /// the per-file cap ends the count, since planning stops there with
    /// that error first.
    fn preflight(&self, ops: &[Op]) -> Result<(), PatchError> {
        let mut budget = Budget::new(self.max_patch_bytes);
        let mut looked = Looked::new(&self.ws);
        let mut over: Option<String> = None;
        for op in ops {
            let (path, dest) = match op {
                Op::Add { path, .. } | Op::Delete { path, .. } => (path, None),
                Op::Update { path, move_to, .. } => (path, move_to.as_ref()),
            };
            for raw in std::iter::once(path).chain(dest) {
                let Some(size) = self.size_on_disk(raw, &mut looked) else {
                    continue;
                };
                if size > self.max_file_bytes {
                    return match over {
                        Some(path) => Err(budget.refusal(path)),
                        None => Ok(()),
                    };
                }
                if !budget.charge(size) && over.is_none() {
                    over = Some(raw.clone());
                }
            }
        }
        match over {
            Some(path) => Err(budget.refusal(path)),
            None => Ok(()),
        }
    }

    /// The size of the regular file at `raw`, without reading or following it.
    fn size_on_disk(&self, raw: &str, looked: &mut Looked<'_>) -> Option<u64> {
        let p = self.resolve(raw, looked).ok()?;
        let (dir, name) = looked.dirs.get(&p, false).ok()?;
        let st = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
            .then(|| u64::try_from(st.st_size).unwrap_or(0))
    }

    /// `e` stopped the planning of `op`. When the file is as this engine's
    /// last patch of it left it, and the patch fits what was there before
    /// that patch, the patch was written against the older text: a conflict
    /// with that patch, not a patch that never fitted.
    fn explain(
        &self,
        recent: &Recent,
        op: &Op,
        staged: &BTreeMap<PathBuf, Staged>,
        e: PatchError,
    ) -> PatchError {
        let raw = match &e {
            PatchError::Plan { path, .. }
            | PatchError::NotFound { path, .. }
            | PatchError::AlreadyExists { path, .. } => path.clone(),
            _ => return e,
        };
        let mut looked = Looked::new(&self.ws);
        let Ok(p) = self.resolve(&raw, &mut looked) else {
            return e;
        };
        // A path an earlier operation of this same patch staged is not a race.
        if staged.contains_key(p.relative()) {
            return e;
        }
        let Some(last) = recent.get(p.relative()) else {
            return e;
        };
        // One more file (within the per-file cap), read to explain a failure.
        let mut unbounded = Budget::new(u64::MAX);
        let Ok(now) = self.current(&p, &BTreeMap::new(), &mut unbounded, &mut looked) else {
            return e;
        };
        if now.baseline != last.after {
            return e;
        }
        let reason = match (&e, op, &last.before) {
            (PatchError::Plan { .. }, Op::Update { chunks, .. }, Some(before)) => {
                let Ok(text) = std::str::from_utf8(before) else {
                    return e;
                };
                match apply_chunks(text, chunks) {
                    Ok(p) if now.content.as_deref() == Some(p.text.as_bytes()) => {
                        "an earlier patch already made this change"
                    }
                    Ok(_) => {
                        "another patch changed it after the text this patch was written against"
                    }
                    Err(_) => return e,
                }
            }
            (PatchError::NotFound { .. }, _, Some(_)) => {
                "another patch deleted or moved it after this patch was written"
            }
            (PatchError::AlreadyExists { .. }, Op::Add { .. } | Op::Update { .. }, None) => {
                "another patch created it after this patch was written"
            }
            _ => return e,
        };
        PatchError::Conflict { path: raw, reason }
    }

    fn resolve(&self, raw: &str, looked: &mut Looked<'_>) -> Result<WorkspacePath, PatchError> {
        let p = self.ws.resolve_beneath(raw)?;
        if p.is_root() {
            return Err(PatchError::IsDirectory(raw.to_owned()));
        }
        if self.protect_git_dir
            && (crate::gitdir::path_writes_git_dir(&self.ws, p.relative(), &mut looked.git)
                || crate::gitdir::completes_git_dir(&self.ws, p.relative(), &mut looked.git))
        {
            return Err(PatchError::GitDirProtected(raw.to_owned()));
        }
        Ok(p)
    }

    /// The state of `path`: staged by an earlier op, or read from disk.
    /// Either way its content is charged to `budget`.
    fn current(
        &self,
        path: &WorkspacePath,
        staged: &BTreeMap<PathBuf, Staged>,
        budget: &mut Budget,
        looked: &mut Looked<'_>,
    ) -> Result<Current, PatchError> {
        if let Some(s) = staged.get(path.relative()) {
            let size = s.content.as_ref().map_or(0, |c| c.len() as u64);
            if !budget.charge(size) {
                return Err(budget.refusal(path.as_given().to_owned()));
            }
            return Ok(Current {
                content: s.content.clone(),
                sha256: s.sha256,
                mode: s.mode,
                baseline: s.baseline.clone(),
                original: s.original.clone(),
            });
        }
        let shown = path.as_given();
        let (dir, name) = match looked.dirs.get(path, false) {
            Ok(d) => d,
            Err(ctm_workspace_fs::FsError::NotFound(_)) => return Ok(Current::absent()),
            Err(e) => return Err(e.into()),
        };
        match read_at(dir, &name, self.max_file_bytes, budget) {
            Ok(Some((bytes, mode))) => {
                let sha256 = sha(&bytes);
                Ok(Current {
                    baseline: Baseline::Present { sha256, mode },
                    sha256: Some(sha256),
                    original: (bytes.len() <= MAX_REMEMBERED_BYTES).then(|| bytes.clone()),
                    content: Some(bytes),
                    mode,
                })
            }
            Ok(None) => Ok(Current::absent()),
            Err(ReadError::Directory) => Err(PatchError::IsDirectory(shown.to_owned())),
            Err(ReadError::Symlink) => Err(PatchError::NotRegular {
                path: shown.to_owned(),
                what: "a symbolic link",
            }),
            Err(ReadError::Special) => Err(PatchError::NotRegular {
                path: shown.to_owned(),
                what: "a special file",
            }),
            Err(ReadError::TooLarge(size)) => Err(PatchError::TooLarge {
                path: shown.to_owned(),
                size,
                max_bytes: self.max_file_bytes,
            }),
            Err(ReadError::OverBudget) => Err(budget.refusal(shown.to_owned())),
            Err(ReadError::Io(e)) => Err(io_err(shown, e)),
        }
    }

    fn stage(
        &self,
        op: &Op,
        staged: &mut BTreeMap<PathBuf, Staged>,
        budget: &mut Budget,
        looked: &mut Looked<'_>,
        opts: &ApplyOptions,
    ) -> Result<FileChange, PatchError> {
        match op {
            Op::Add { path, lines, .. } => {
                let p = self.resolve(path, looked)?;
                let Current {
                    content: cur,
                    baseline,
                    original,
                    ..
                } = self.current(&p, staged, budget, looked)?;
                if cur.is_some() {
                    return Err(PatchError::AlreadyExists {
                        path: path.clone(),
                        hint: "use '*** Update File:' to change it, or '*** Delete File:' first",
                    });
                }
                let mut content = lines.join("\n").into_bytes();
                if !lines.is_empty() {
                    content.push(b'\n');
                }
                let content_sha = sha(&content);
                let (total_lines, changed_ranges) = evidence_of(opts, None, &content, false);
                let change = FileChange {
                    operation: crate::Operation::Add,
                    path: path.clone(),
                    destination: None,
                    lines_added: lines.len(),
                    lines_removed: 0,
                    old_sha256: None,
                    new_sha256: Some(hex(&content_sha)),
                    would_change: true,
                    hunks: Vec::new(),
                    total_lines,
                    changed_ranges,
                };
                staged.insert(
                    p.relative().to_path_buf(),
                    Staged {
                        path: p,
                        baseline,
                        original,
                        content: Some(content),
                        sha256: Some(content_sha),
                        mode: NEW_FILE_MODE,
                    },
                );
                Ok(change)
            }
            Op::Delete { path, .. } => {
                let p = self.resolve(path, looked)?;
                let Current {
                    content: cur,
                    sha256: cur_sha,
                    mode,
                    baseline,
                    original,
                } = self.current(&p, staged, budget, looked)?;
                let Some(old) = cur else {
                    return Err(if staged.contains_key(p.relative()) {
                        PatchError::AfterDelete(path.clone())
                    } else {
                        PatchError::NotFound {
                            path: path.clone(),
                            operation: "delete",
                        }
                    });
                };
                let removed = count_lines(&old);
                let change = FileChange {
                    operation: crate::Operation::Delete,
                    path: path.clone(),
                    destination: None,
                    lines_added: 0,
                    lines_removed: removed,
                    old_sha256: Some(hex(&cur_sha.unwrap_or_else(|| sha(&old)))),
                    new_sha256: None,
                    would_change: true,
                    hunks: Vec::new(),
                    total_lines: opts.evidence.then_some(0),
                    changed_ranges: Vec::new(),
                };
                staged.insert(
                    p.relative().to_path_buf(),
                    Staged {
                        path: p,
                        baseline,
                        original,
                        content: None,
                        sha256: None,
                        mode,
                    },
                );
                Ok(change)
            }
            Op::Update {
                path,
                move_to,
                chunks,
                ..
            } => {
                let p = self.resolve(path, looked)?;
                let Current {
                    content: cur,
                    sha256: cur_sha,
                    mode,
                    baseline,
                    original,
                } = self.current(&p, staged, budget, looked)?;
                let Some(old) = cur else {
                    return Err(if staged.contains_key(p.relative()) {
                        PatchError::AfterDelete(path.clone())
                    } else {
                        PatchError::NotFound {
                            path: path.clone(),
                            operation: if move_to.is_some() { "move" } else { "update" },
                        }
                    });
                };
                let text = std::str::from_utf8(&old).map_err(|e| PatchError::Encoding {
                    path: path.clone(),
                    offset: e.valid_up_to(),
                })?;
                let planned = if chunks.is_empty() {
                    None
                } else {
                    Some(
                        if opts.skip_applied {
                            crate::plan::apply_chunks_skipping_applied
                        } else {
                            apply_chunks_until
                        }(text, chunks, &|| stop_requested(opts).is_some())
                        .map_err(|error| match (error, stop_requested(opts)) {
                            (PlanError::Stopped, reason) => PatchError::Stopped {
                                reason: reason.unwrap_or(StopReason::DeadlineExceeded),
                            },
                            (error, _) => PatchError::Plan {
                                path: path.clone(),
                                error: Box::new(error),
                            },
                        })?,
                    )
                };
                let moving = move_to.as_ref().is_some_and(|d| {
                    self.resolve(d, looked)
                        .is_ok_and(|d| d.relative() != p.relative())
                });
                let (total_lines, changed_ranges) = match &planned {
                    Some(planned) => evidence_of(opts, Some(text), planned.text.as_bytes(), moving),
                    None => evidence_of(opts, Some(text), text.as_bytes(), moving),
                };
                let old_raw = cur_sha.unwrap_or_else(|| sha(&old));
                let old_sha = hex(&old_raw);
                // No hunks: the content stays, and so does its hash.
                let unplanned = planned.is_none();
                // The old text is dropped once the new one exists: one copy each.
                let (new, added, removed, hunks) = match planned {
                    None => (old, 0, 0, Vec::new()),
                    Some(planned) => (
                        planned.text.into_bytes(),
                        planned.added,
                        planned.removed,
                        planned.hunks,
                    ),
                };
                let new_raw = if unplanned { old_raw } else { sha(&new) };
                let new_sha = hex(&new_raw);
                let mut change = FileChange {
                    operation: crate::Operation::Update,
                    path: path.clone(),
                    destination: None,
                    lines_added: added,
                    lines_removed: removed,
                    would_change: old_sha != new_sha,
                    old_sha256: Some(old_sha),
                    new_sha256: Some(new_sha),
                    hunks,
                    total_lines,
                    changed_ranges,
                };
                match move_to {
                    Some(dest) if self.resolve(dest, looked)?.relative() != p.relative() => {
                        let d = self.resolve(dest, looked)?;
                        let Current {
                            content: dest_cur,
                            baseline: dest_base,
                            original: dest_original,
                            ..
                        } = self.current(&d, staged, budget, looked)?;
                        if dest_cur.is_some() {
                            return Err(PatchError::AlreadyExists {
                                path: dest.clone(),
                                hint: "a move never overwrites; delete the destination first or pick another name",
                            });
                        }
                        change.operation = crate::Operation::Move;
                        change.destination = Some(dest.clone());
                        change.would_change = true;
                        staged.insert(
                            p.relative().to_path_buf(),
                            Staged {
                                path: p,
                                baseline,
                                original,
                                content: None,
                                sha256: None,
                                mode,
                            },
                        );
                        staged.insert(
                            d.relative().to_path_buf(),
                            Staged {
                                path: d,
                                baseline: dest_base,
                                original: dest_original,
                                content: Some(new),
                                sha256: Some(new_raw),
                                mode,
                            },
                        );
                    }
                    _ => {
                        staged.insert(
                            p.relative().to_path_buf(),
                            Staged {
                                path: p,
                                baseline,
                                original,
                                content: Some(new),
                                sha256: Some(new_raw),
                                mode,
                            },
                        );
                    }
                }
                Ok(change)
            }
        }
    }
}

impl PatchEngine {
    /// The engine's lock; with a deadline or a cancellation in `opts`,
    /// `None` once either fires while another patch holds it.
    fn lock_until_stopped(&self, opts: &ApplyOptions) -> Option<MutexGuard<'_, Recent>> {
        if opts.deadline.is_none() && opts.cancelled.is_none() {
            return Some(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        }
        loop {
            match self.lock.try_lock() {
                Ok(g) => return Some(g),
                Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => {
                    if stop_requested(opts).is_some() {
                        return None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    }
}

/// What one patch's planning opened and judged: the parent directories of
/// its files (bounded as in a commit) and their git-directory verdicts.
/// Never kept past the phase that made it.
struct Looked<'a> {
    dirs: Dirs<'a>,
    git: crate::gitdir::GitVerdicts,
}

impl<'a> Looked<'a> {
    fn new(ws: &'a Workspace) -> Self {
        Self {
            dirs: Dirs::new(ws),
            git: crate::gitdir::GitVerdicts::default(),
        }
    }
}

/// Why planning should stop now, if it should.
fn stop_requested(opts: &ApplyOptions) -> Option<StopReason> {
    if opts.cancelled.as_ref().is_some_and(|c| c()) {
        return Some(StopReason::Cancelled);
    }
    if opts
        .deadline
        .is_some_and(|d| std::time::Instant::now() >= d)
    {
        return Some(StopReason::DeadlineExceeded);
    }
    None
}

/// The bytes of files one patch has read so far, against its cap.
struct Budget {
    used: u64,
    max: u64,
}

impl Budget {
    fn new(max: u64) -> Self {
        Self { used: 0, max }
    }

    /// Counts `bytes`; false when that takes the patch past its cap.
    fn charge(&mut self, bytes: u64) -> bool {
        self.used = self.used.saturating_add(bytes);
        self.used <= self.max
    }

    fn refusal(&self, path: String) -> PatchError {
        PatchError::PatchTooLarge {
            path,
            needed_bytes: self.used,
            max_bytes: self.max,
        }
    }
}

/// A path's state while a patch is planned.
struct Current {
    /// `None`: absent (or deleted by an earlier operation).
    content: Option<Vec<u8>>,
    /// SHA-256 of `content`.
    sha256: Option<[u8; 32]>,
    mode: u32,
    baseline: Baseline,
    /// The content at `baseline`, when small enough to remember.
    original: Option<Vec<u8>>,
}

impl Current {
    fn absent() -> Self {
        Self {
            content: None,
            sha256: None,
            mode: NEW_FILE_MODE,
            baseline: Baseline::Absent,
            original: None,
        }
    }
}

/// The evidence of a file's new bytes when `opts` asks for it: its lines,
/// and what differs from `old` (all of it for a new file or a move's
/// destination).
fn evidence_of(
    opts: &ApplyOptions,
    old: Option<&str>,
    new: &[u8],
    whole: bool,
) -> (Option<usize>, Vec<crate::ChangedRange>) {
    if !opts.evidence {
        return (None, Vec::new());
    }
    let total = crate::total_lines(new);
    let ranges = match (old, whole) {
        (Some(old), false) => crate::diff_ranges(old, &String::from_utf8_lossy(new)),
        _ if total == 0 => Vec::new(),
        _ => vec![crate::ChangedRange {
            start_line: 1,
            end_line: total,
            added_lines: total,
            removed_lines: 0,
        }],
    };
    (Some(total), ranges)
}

fn count_lines(b: &[u8]) -> usize {
    let n = b.iter().filter(|c| **c == b'\n').count();
    n + usize::from(b.last().is_some_and(|c| *c != b'\n'))
}

enum ReadError {
    Directory,
    Symlink,
    Special,
    /// Larger than the cap: its size, read from the metadata before reading.
    TooLarge(u64),
    /// Reading it would take the patch past its total (charged, unread).
    OverBudget,
    Io(Errno),
}

/// Opens `name` in `dir` without following a final symlink; `Ok(None)`:
/// absent. Refuses anything but a regular file.
fn open_regular(
    dir: &OwnedFd,
    name: &OsStr,
) -> Result<Option<(OwnedFd, rustix::fs::Stat)>, ReadError> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(ReadError::Symlink),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(ReadError::Io)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(Some((fd, st))),
        FileType::Directory => Err(ReadError::Directory),
        _ => Err(ReadError::Special),
    }
}

fn read_error(e: &std::io::Error) -> ReadError {
    ReadError::Io(Errno::from_io_error(e).unwrap_or(Errno::IO))
}

/// Reads `name` in `dir` whole, refusing (before reading) a file larger than
/// `max_bytes` or one that takes the patch past `budget`, and one that grows
/// past either while it is read.
fn read_at(
    dir: &OwnedFd,
    name: &OsStr,
    max_bytes: u64,
    budget: &mut Budget,
) -> Result<Option<(Vec<u8>, u32)>, ReadError> {
    let Some((fd, st)) = open_regular(dir, name)? else {
        return Ok(None);
    };
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > max_bytes {
        return Err(ReadError::TooLarge(size));
    }
    if !budget.charge(size) {
        return Err(ReadError::OverBudget);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    std::fs::File::from(fd)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(&e))?;
    let read = bytes.len() as u64;
    if read > max_bytes {
        return Err(ReadError::TooLarge(read));
    }
    if !budget.charge(read.saturating_sub(size)) {
        return Err(ReadError::OverBudget);
    }
    Ok(Some((bytes, st.st_mode & 0o7777)))
}

/// The baseline of `name` in `dir`, hashed as it is read in constant memory
/// (`buf` is the read buffer, reused from file to file), and the file read,
/// still open, with its metadata: the caller checks, once the name is
/// replaced, that the file moved away is this one.
fn baseline_at(
    dir: &OwnedFd,
    name: &OsStr,
    buf: &mut Vec<u8>,
) -> Result<(Baseline, Option<OpenedFile>), ReadError> {
    let Some((fd, st)) = open_regular(dir, name)? else {
        return Ok((Baseline::Absent, None));
    };
    if buf.is_empty() {
        buf.resize(64 * 1024, 0);
    }
    let mut ctx = ring::digest::Context::new(&SHA256);
    let mut f = std::fs::File::from(fd);
    loop {
        match f.read(buf) {
            Ok(0) => break,
            Ok(n) => ctx.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(read_error(&e)),
        }
    }
    let mut sha256 = [0u8; 32];
    sha256.copy_from_slice(ctx.finish().as_ref());
    let baseline = Baseline::Present {
        sha256,
        mode: st.st_mode & 0o7777,
    };
    Ok((
        baseline,
        Some(OpenedFile {
            fd: OwnedFd::from(f),
            id: (st.st_dev, st.st_ino),
        }),
    ))
}

/// A file a commit hashed before replacing or removing it, held open.
struct OpenedFile {
    fd: OwnedFd,
    id: FileId,
}

/// Whether `name` in `dir` is `file` itself (same device and inode), not
/// something put in its place since it was opened.
fn is_file(dir: &OwnedFd, name: &OsStr, file: &OpenedFile) -> bool {
    id_at(dir, name) == Some(file.id)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn temp_name(pid: u32, kind: &str, name: &OsStr) -> OsString {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut s = OsString::from(format!("{TEMP_PREFIX}{kind}-{pid}-{n}-"));
    // Keep names short enough for NAME_MAX.
    let tail: Vec<u8> = name.as_bytes().iter().copied().take(100).collect();
    s.push(OsStr::from_bytes(&tail));
    s
}

/// Directories open at once during a commit (or one phase of planning). A
/// patch touching more directories reopens an evicted one by its path
/// (beneath the root, and judged again for `.git`), so a patch of any size
/// holds a bounded number of file handles: these, at most [`SYNC_BATCH`]
/// temp files or directory handles waiting for their fsync, and at most
/// [`SYNC_BATCH`] replaced files held open until the commit ends.
const MAX_OPEN_DIRS: usize = 64;

/// One directory opened beneath the root.
struct OpenDir {
    /// Its workspace-relative path.
    key: PathBuf,
    fd: OwnedFd,
    /// Its device and inode: which directory it is, whatever its path
    /// names later.
    id: FileId,
    /// Whether it is (in) a git directory, judged on `fd` when first asked.
    in_git_dir: Option<bool>,
}

/// A file's or directory's device and inode.
type FileId = (u64, u64);

/// The device and inode of an open file or directory.
fn id_of(fd: &OwnedFd) -> Result<FileId, Errno> {
    rustix::fs::fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// The device and inode of `name` in `dir`, not following a link.
fn id_at(dir: &OwnedFd, name: &OsStr) -> Option<FileId> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| (st.st_dev, st.st_ino))
}

/// Whether `name` in `dir` is still the regular file `id` the patch wrote
/// (an inode number freed meanwhile can come back as a directory).
fn is_patch_file(dir: &OwnedFd, name: &OsStr, id: FileId) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && (st.st_dev, st.st_ino) == id
    })
}

/// The parent directories of a commit's (or a planning phase's) files,
/// opened beneath the root.
struct Dirs<'a> {
    ws: &'a Workspace,
    open: std::collections::VecDeque<OpenDir>,
}

impl<'a> Dirs<'a> {
    fn new(ws: &'a Workspace) -> Self {
        Self {
            ws,
            open: std::collections::VecDeque::new(),
        }
    }

    /// The slot of the directory holding `path`, and the file's name in it.
    fn slot(
        &mut self,
        path: &WorkspacePath,
        create: bool,
    ) -> Result<(usize, OsString), ctm_workspace_fs::FsError> {
        let key = path.relative().parent().unwrap_or(Path::new(""));
        let cached = self.open.iter().position(|d| d.key == key);
        match (cached, path.relative().file_name()) {
            (Some(i), Some(name)) => Ok((i, name.to_os_string())),
            _ => {
                let (fd, name) = self.ws.open_parent(path, create)?;
                let id = id_of(&fd).map_err(|e| {
                    ctm_workspace_fs::FsError::io(path.as_given(), std::io::Error::from(e))
                })?;
                if self.open.len() >= MAX_OPEN_DIRS {
                    self.open.pop_front();
                }
                self.open.push_back(OpenDir {
                    key: key.to_path_buf(),
                    fd,
                    id,
                    in_git_dir: None,
                });
                Ok((self.open.len() - 1, name))
            }
        }
    }

    /// The directory holding `path`, and the file's name in it.
    fn get(
        &mut self,
        path: &WorkspacePath,
        create: bool,
    ) -> Result<(&OwnedFd, OsString), ctm_workspace_fs::FsError> {
        let (i, name) = self.slot(path, create)?;
        Ok((&self.open[i].fd, name))
    }

    /// [`Dirs::get`], and which directory it is (device and inode).
    fn get_id(
        &mut self,
        path: &WorkspacePath,
    ) -> Result<(&OwnedFd, OsString, FileId), ctm_workspace_fs::FsError> {
        let (i, name) = self.slot(path, false)?;
        Ok((&self.open[i].fd, name, self.open[i].id))
    }

    /// [`Dirs::get`], and whether that directory is (in) a git directory:
    /// judged on the handle itself, once per handle.
    fn get_judged(
        &mut self,
        path: &WorkspacePath,
        create: bool,
    ) -> Result<(&OwnedFd, OsString, bool), ctm_workspace_fs::FsError> {
        let (i, name) = self.slot(path, create)?;
        let ws = self.ws;
        let d = &mut self.open[i];
        let verdict = match d.in_git_dir {
            Some(v) => v,
            None => {
                let v = crate::gitdir::dir_in_git_dir(ws, &d.fd);
                d.in_git_dir = Some(v);
                v
            }
        };
        Ok((&d.fd, name, verdict))
    }
}

/// Files fsynced together at most (temp files held open, or directories):
/// bounds the handles a commit holds besides [`MAX_OPEN_DIRS`].
const SYNC_BATCH: usize = 32;
/// Threads fsyncing one batch, or removing a commit's backups. The
/// calls wait on the disk, not the CPU: overlapped, a journaling file
/// system commits the fsyncs that wait at the same time together, and the
/// device serves several requests at once.
const IO_THREADS: usize = 4;

/// Runs `work` on every item, from up to [`IO_THREADS`] threads at once;
/// the first failure is the error.
fn in_parallel<T: Sync, E: Send>(
    items: &[T],
    work: impl Fn(&T) -> Result<(), E> + Sync,
) -> Result<(), E> {
    if items.len() <= 1 {
        return items.iter().try_for_each(&work);
    }
    let work = &work;
    let per_thread = items.len().div_ceil(IO_THREADS);
    std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().try_for_each(work)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// fsyncs every file of `batch` (temp files or directories, each with the
/// path shown in an error) at once.
fn sync_together(batch: &[(OwnedFd, String)]) -> Result<(), PatchError> {
    in_parallel(batch, |(fd, shown)| {
        rustix::fs::fsync(fd).map_err(|e| io_err(shown, e))
    })
}

/// Unlinks each backup; a backup that stays is swept at the next start.
fn remove_backups(backups: &[(OwnedFd, OsString)]) {
    let _ = in_parallel(backups, |(dir, name)| {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
        Ok::<(), ()>(())
    });
}

/// Replaced files handed to the closing thread and not closed yet.
static CLOSING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// At most this many replaced files wait for the closing thread; past it
/// they are closed by the caller.
const MAX_CLOSING: usize = 256;

/// Closes the replaced files of a finished commit on a thread of their own.
/// Their names are gone already, so the last close frees their blocks, and
/// that can wait on the device (a `discard` mount without a journal trims
/// them then and there): the caller need not wait for it. Nothing depends
/// on when it happens; a crash before it loses nothing either (the files
/// have no name left).
fn close_later(files: Vec<OwnedFd>) {
    static CLOSER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Vec<OwnedFd>>>> =
        std::sync::OnceLock::new();
    let n = files.len();
    if n == 0 {
        return;
    }
    if CLOSING.load(Ordering::Relaxed).saturating_add(n) > MAX_CLOSING {
        drop(files);
        return;
    }
    let closer = CLOSER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<OwnedFd>>();
        std::thread::Builder::new()
            .name("ctm-patch-close".into())
            .spawn(move || {
                for batch in rx {
                    let n = batch.len();
                    drop(batch);
                    CLOSING.fetch_sub(n, Ordering::Relaxed);
                }
            })
            .ok()
            .map(|_| tx)
    });
    match closer {
        Some(tx) => {
            CLOSING.fetch_add(n, Ordering::Relaxed);
            if let Err(std::sync::mpsc::SendError(files)) = tx.send(files) {
                CLOSING.fetch_sub(n, Ordering::Relaxed);
                drop(files);
            }
        }
        None => drop(files),
    }
}

/// One installed change, for rollback.
enum Done {
    /// Target replaced (or created when `backup` is None).
    Installed {
        path: WorkspacePath,
        backup: Option<OsString>,
        /// The directory it was done in.
        dir: FileId,
        /// The new file put at the target's name.
        new: FileId,
    },
    /// Target removed to `backup`.
    Removed {
        path: WorkspacePath,
        backup: OsString,
        dir: FileId,
    },
}

/// Whether renameat2's `RENAME_EXCHANGE` was refused by a file system here
/// (then replacements fall back to a hard-linked backup and a rename).
static NO_EXCHANGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

struct Commit<'a> {
    ws: &'a Workspace,
    faults: &'a Faults,
    /// Re-check each target's real directory for a git directory at write time.
    protect_git_dir: bool,
    /// This process's id, in temp and backup names.
    pid: u32,
    renames: usize,
    dirs: Dirs<'a>,
    /// Temp files written and not yet installed: each is removed on failure.
    temps: Vec<(WorkspacePath, OsString)>,
    created_dirs: Vec<WorkspacePath>,
    done: Vec<Done>,
    /// The replaced and removed files, held open (at most [`SYNC_BATCH`])
    /// until their backups are unlinked, to be closed by [`close_later`].
    replaced: Vec<OwnedFd>,
}

/// Renames in `dir`, counting renames for [`Faults::fail_rename_at`].
fn rename_at(
    renames: &mut usize,
    faults: &Faults,
    dir: &OwnedFd,
    from: &OsStr,
    to: &OsStr,
    flags: RenameFlags,
) -> Result<(), Errno> {
    *renames += 1;
    if faults.fail_rename_at == Some(*renames) {
        return Err(Errno::IO);
    }
    rustix::fs::renameat_with(dir, from, dir, to, flags)
}

/// Replaces `name` in `dir` by the temp file `temp`, keeping what `name`
/// was as a backup, and returns the backup's name. One exchanging rename
/// where the file system has it (the old file then carries the temp name);
/// else a hard link of the old file and a rename over it. Counts as one
/// rename for [`Faults::fail_rename_at`].
fn replace_keeping(
    renames: &mut usize,
    faults: &Faults,
    pid: u32,
    dir: &OwnedFd,
    temp: &OsStr,
    name: &OsStr,
) -> Result<OsString, Errno> {
    *renames += 1;
    if faults.fail_rename_at == Some(*renames) {
        return Err(Errno::IO);
    }
    if !NO_EXCHANGE.load(Ordering::Relaxed) {
        match rustix::fs::renameat_with(dir, temp, dir, name, RenameFlags::EXCHANGE) {
            Ok(()) => return Ok(temp.to_os_string()),
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                NO_EXCHANGE.store(true, Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    let backup = temp_name(pid, "old", name);
    rustix::fs::linkat(dir, name, dir, &backup, AtFlags::empty())?;
    if let Err(e) = rustix::fs::renameat(dir, temp, dir, name) {
        let _ = rustix::fs::unlinkat(dir, &backup, AtFlags::empty());
        return Err(e);
    }
    Ok(backup)
}

/// The conflict of a target replaced by something else between the check
/// of its baseline and its replacement.
fn swapped(shown: String) -> PatchError {
    PatchError::Conflict {
        path: shown,
        reason: "someone else replaced it while the patch was applied",
    }
}

impl<'a> Commit<'a> {
    fn new(ws: &'a Workspace, faults: &'a Faults, protect_git_dir: bool) -> Self {
        Self {
            ws,
            faults,
            protect_git_dir,
            pid: std::process::id(),
            renames: 0,
            dirs: Dirs::new(ws),
            temps: Vec::new(),
            created_dirs: Vec::new(),
            done: Vec::new(),
            replaced: Vec::new(),
        }
    }

    fn run(mut self, changes: &[Staged]) -> Result<(), PatchError> {
        match self.try_run(changes) {
            Ok(()) => {
                self.finish();
                Ok(())
            }
            Err(cause) => Err(self.rollback(cause)),
        }
    }

    /// The directory of `s`, refused when it is (in) a git directory:
    /// judged on the directory actually opened, whatever was swapped
    /// meanwhile, once per handle of this commit.
    fn dir_of(
        &mut self,
        path: &WorkspacePath,
        create: bool,
    ) -> Result<(&OwnedFd, OsString), PatchError> {
        if !self.protect_git_dir {
            return Ok(self.dirs.get(path, create)?);
        }
        let (dir, name, in_git_dir) = self.dirs.get_judged(path, create)?;
        if crate::gitdir::writes_git_dir_in(in_git_dir, &name) {
            return Err(PatchError::GitDirProtected(path.as_given().to_owned()));
        }
        Ok((dir, name))
    }

    /// Keeps `file` open until the commit ends, within the bound.
    fn hold(&mut self, file: Option<OpenedFile>) {
        if let Some(f) = file
            && self.replaced.len() < SYNC_BATCH
        {
            self.replaced.push(f.fd);
        }
    }

    fn try_run(&mut self, changes: &[Staged]) -> Result<(), PatchError> {
        // 1. Write every new content to a temp file beside its target; the
        //    temp files are fsynced together, a batch at a time.
        let mut prepared = Vec::new();
        let mut unsynced: Vec<(OwnedFd, String)> = Vec::new();
        for s in changes {
            let shown = s.path.as_given().to_owned();
            // A directory this commit has not opened yet: a missing one is
            // noted (to be made, and removed on failure), and any is judged
            // for `.git` at its nearest existing ancestor before anything is
            // made in it. An opened one is judged on its handle below.
            if let Err(e) = self.dirs.get(&s.path, false) {
                if matches!(e, ctm_workspace_fs::FsError::NotFound(_)) {
                    self.note_missing_dirs(&s.path);
                }
                if self.protect_git_dir
                    && crate::gitdir::path_writes_git_dir(
                        self.ws,
                        s.path.relative(),
                        &mut crate::gitdir::GitVerdicts::default(),
                    )
                {
                    return Err(PatchError::GitDirProtected(shown));
                }
            }
            let temp = match &s.content {
                Some(bytes) => {
                    let t = temp_name(
                        self.pid,
                        "new",
                        s.path.relative().file_name().unwrap_or_default(),
                    );
                    self.dir_of(&s.path, true)?;
                    let (dir, _) = self.dirs.get(&s.path, false)?;
                    let fd = rustix::fs::openat(
                        dir,
                        &t,
                        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o600),
                    )
                    .map_err(|e| io_err(&shown, e))?;
                    // Recorded before anything else can fail, so a failure removes it.
                    self.temps.push((s.path.clone(), t.clone()));
                    let new = id_of(&fd).map_err(|e| io_err(&shown, e))?;
                    let mut f = std::fs::File::from(fd);
                    f.write_all(bytes).map_err(|e| io_err(&shown, e))?;
                    rustix::fs::fchmod(&f, Mode::from_raw_mode(s.mode))
                        .map_err(|e| io_err(&shown, e))?;
                    unsynced.push((OwnedFd::from(f), shown.clone()));
                    if unsynced.len() >= SYNC_BATCH {
                        sync_together(&std::mem::take(&mut unsynced))?;
                    }
                    Some((t, new))
                }
                None => {
                    self.dir_of(&s.path, false)?;
                    None
                }
            };
            let (_, _, dir_id) = self.dirs.get_id(&s.path)?;
            prepared.push((s, temp, shown, dir_id));
        }
        sync_together(&unsynced)?;
        drop(unsynced);
        // 2. Install, re-checking each baseline immediately before its
        //    replacement, and after it that the file moved aside is the one
        //    checked. No rename is durable before every temp file is.
        let mut touched: BTreeMap<PathBuf, WorkspacePath> = BTreeMap::new();
        let mut buf = Vec::new();
        for (s, temp, shown, dir_id) in prepared {
            // The directory its temp file was written in (a handle evicted
            // meanwhile is reopened by its path: it must be the same
            // directory), judged for `.git` again right before the change,
            // on the handle written through.
            let (dir, name, id) = self.dirs.get_id(&s.path)?;
            if id != dir_id {
                return Err(PatchError::Conflict {
                    path: shown,
                    reason: "its directory was moved or replaced while the patch was applied",
                });
            }
            if self.protect_git_dir
                && crate::gitdir::writes_git_dir_in(
                    crate::gitdir::dir_in_git_dir(self.ws, dir),
                    &name,
                )
            {
                return Err(PatchError::GitDirProtected(shown));
            }
            let (now, read) = match baseline_at(dir, &name, &mut buf) {
                Ok(b) => b,
                Err(_) => {
                    return Err(PatchError::Conflict {
                        path: shown,
                        reason: "it stopped being a regular file while the patch was applied",
                    });
                }
            };
            if now != s.baseline {
                let reason = if s.baseline == Baseline::Absent {
                    "someone else created it while the patch was applied"
                } else {
                    "its content or mode changed while the patch was applied"
                };
                return Err(PatchError::Conflict {
                    path: shown,
                    reason,
                });
            }
            if let (Some(hook), Baseline::Present { .. }) =
                (&self.faults.before_replace, &s.baseline)
            {
                hook(s.path.relative());
            }
            let (dir, name) = self.dirs.get(&s.path, false)?;
            let renames = &mut self.renames;
            let faults = self.faults;
            match (temp, &s.baseline, read) {
                (Some((t, new)), Baseline::Absent, _) => {
                    match rename_at(renames, faults, dir, &t, &name, RenameFlags::NOREPLACE) {
                        Ok(()) => {}
                        Err(Errno::EXIST) => {
                            return Err(PatchError::Conflict {
                                path: shown,
                                reason: "someone else created it while the patch was applied",
                            });
                        }
                        Err(e) => return Err(io_err(&shown, e)),
                    }
                    self.temps.retain(|(_, n)| *n != t);
                    self.done.push(Done::Installed {
                        path: s.path.clone(),
                        backup: None,
                        dir: dir_id,
                        new,
                    });
                }
                (Some((t, new)), Baseline::Present { .. }, Some(read)) => {
                    let backup = replace_keeping(renames, faults, self.pid, dir, &t, &name)
                        .map_err(|e| io_err(&shown, e))?;
                    let same = is_file(dir, &backup, &read);
                    self.temps.retain(|(_, n)| *n != t);
                    self.done.push(Done::Installed {
                        path: s.path.clone(),
                        backup: Some(backup),
                        dir: dir_id,
                        new,
                    });
                    if !same {
                        return Err(swapped(shown));
                    }
                    self.hold(Some(read));
                }
                (None, Baseline::Present { .. }, Some(read)) => {
                    let backup = temp_name(self.pid, "old", &name);
                    rename_at(renames, faults, dir, &name, &backup, RenameFlags::NOREPLACE)
                        .map_err(|e| io_err(&shown, e))?;
                    let same = is_file(dir, &backup, &read);
                    self.done.push(Done::Removed {
                        path: s.path.clone(),
                        backup,
                        dir: dir_id,
                    });
                    if !same {
                        return Err(swapped(shown));
                    }
                    self.hold(Some(read));
                }
                // A present baseline was just read, with its file.
                (_, Baseline::Present { .. }, None) => return Err(swapped(shown)),
                (None, Baseline::Absent, _) => {}
            }
            let key = s.path.relative().parent().unwrap_or(Path::new(""));
            touched
                .entry(key.to_path_buf())
                .or_insert_with(|| s.path.clone());
        }
        // 3. One fsync per directory the renames changed, and per parent of
        //    a directory the commit made; the patch is durable once they
        //    return. Every file is wholly old or wholly new whichever of
        //    them a crash precedes: each rename is atomic and its temp file
        //    was durable before it.
        let mut dirs = Vec::new();
        for path in touched.values() {
            let (dir, _) = self.dirs.get(path, false)?;
            let dir = dir.try_clone().map_err(|e| io_err(path.as_given(), e))?;
            dirs.push((dir, path.as_given().to_owned()));
            if dirs.len() >= SYNC_BATCH {
                sync_together(&std::mem::take(&mut dirs))?;
            }
        }
        for made in &self.created_dirs {
            let parent_key = made.relative().parent().unwrap_or(Path::new(""));
            if touched.contains_key(parent_key) {
                continue;
            }
            if let Ok((parent, _)) = self.ws.open_parent(made, false) {
                dirs.push((parent, made.as_given().to_owned()));
            }
            if dirs.len() >= SYNC_BATCH {
                sync_together(&std::mem::take(&mut dirs))?;
            }
        }
        sync_together(&dirs)
    }

    fn note_missing_dirs(&mut self, path: &WorkspacePath) {
        let mut missing = Vec::new();
        let mut cur = path.relative().parent().map(std::path::Path::to_path_buf);
        while let Some(p) = cur.filter(|p| !p.as_os_str().is_empty()) {
            match self.ws.resolve_lexically(&p.to_string_lossy()) {
                Ok(wp)
                    if matches!(
                        self.ws.open_beneath(&wp),
                        Err(ctm_workspace_fs::FsError::NotFound(_))
                    ) =>
                {
                    missing.push(wp)
                }
                _ => break,
            }
            cur = p.parent().map(std::path::Path::to_path_buf);
        }
        // Deepest last, so removal in reverse goes deepest first.
        missing.reverse();
        for m in missing {
            if !self.created_dirs.contains(&m) {
                self.created_dirs.push(m);
            }
        }
    }

    /// Success: drop the backups. Not fsynced: a backup is a second name
    /// of the old file, so losing its removal in a crash loses nothing, and
    /// the next start sweeps it as a dead process's leftover.
    /// The replaced files are held open meanwhile, so unlinking a backup
    /// only removes a name; they are closed (and their blocks freed, which
    /// can wait on the device) by [`close_later`]. Backups past the files
    /// held are removed from several threads instead, since each removal
    /// then frees the blocks.
    fn finish(&mut self) {
        let mut backups = Vec::new();
        for d in std::mem::take(&mut self.done) {
            if let Done::Installed {
                path,
                backup: Some(b),
                dir,
                ..
            }
            | Done::Removed {
                path,
                backup: b,
                dir,
            } = d
            {
                backups.push((path, b, dir));
            }
        }
        // Only in the directory the backup was made in: a handle reopened
        // by its path may name another directory by now (then the backup
        // stays, for the sweep of the next start).
        if backups.len() <= self.replaced.len() {
            for (path, b, id) in &backups {
                if let Ok((dir, _, now)) = self.dirs.get_id(path)
                    && now == *id
                {
                    let _ = rustix::fs::unlinkat(dir, b, AtFlags::empty());
                }
            }
        } else {
            let mut batch = Vec::new();
            for (path, b, id) in backups {
                if let Ok((dir, _, now)) = self.dirs.get_id(&path)
                    && now == id
                {
                    match dir.try_clone() {
                        Ok(dir) => batch.push((dir, b)),
                        Err(_) => {
                            let _ = rustix::fs::unlinkat(dir, &b, AtFlags::empty());
                        }
                    }
                }
                if batch.len() >= SYNC_BATCH {
                    remove_backups(&std::mem::take(&mut batch));
                }
            }
            remove_backups(&batch);
        }
        close_later(std::mem::take(&mut self.replaced));
    }

    /// Failure: put every file back, newest first, and remove every temp
    /// file and every directory the commit made.
    fn rollback(&mut self, cause: PatchError) -> PatchError {
        let mut errors = Vec::new();
        let mut kept = Vec::new();
        for d in std::mem::take(&mut self.done).into_iter().rev() {
            let (path, backup, done_in) = match &d {
                Done::Installed {
                    path, backup, dir, ..
                } => (path, backup.as_ref(), *dir),
                Done::Removed { path, backup, dir } => (path, Some(backup), *dir),
            };
            let shown = path.as_given().to_owned();
            let mut leave = |errors: &mut Vec<String>, why: String| {
                errors.push(format!("{shown}: {why}"));
                if let Some(b) = backup {
                    kept.push((shown.clone(), b.to_string_lossy().into_owned()));
                }
            };
            let (dir, name, id) = match self.dirs.get_id(path) {
                Ok(d) => d,
                Err(e) => {
                    leave(&mut errors, e.to_string());
                    continue;
                }
            };
            // Undone only in the very directory it was done in (a handle
            // reopened by its path may name another one by now, even a
            // link into `.git`), and never inside a git directory.
            if id != done_in {
                leave(
                    &mut errors,
                    "its directory was moved or replaced meanwhile; left as it is".to_owned(),
                );
                continue;
            }
            if self.protect_git_dir && crate::gitdir::dir_in_git_dir(self.ws, dir) {
                leave(
                    &mut errors,
                    "its directory is inside a git directory now; left as it is".to_owned(),
                );
                continue;
            }
            match &d {
                Done::Installed {
                    backup: Some(b),
                    new,
                    ..
                } => {
                    // Exchanged back (whatever the backup is, even a
                    // directory swapped in meanwhile); what comes back under
                    // the backup's name is removed only if it is the file
                    // the patch wrote. A plain rename where the file system
                    // cannot exchange.
                    if rustix::fs::renameat_with(dir, b, dir, &name, RenameFlags::EXCHANGE).is_ok()
                    {
                        let removed = is_patch_file(dir, b, *new)
                            && rustix::fs::unlinkat(dir, b, AtFlags::empty()).is_ok();
                        if !removed {
                            errors.push(format!(
                                "{shown}: replaced by someone else after the patch wrote it; that file is kept under the backup's name"
                            ));
                            kept.push((shown, b.to_string_lossy().into_owned()));
                        }
                    } else if let Err(e) = rustix::fs::renameat(dir, b, dir, &name) {
                        errors.push(format!("{shown}: {e}"));
                        kept.push((shown, b.to_string_lossy().into_owned()));
                    }
                }
                Done::Installed {
                    backup: None, new, ..
                } => {
                    if !is_patch_file(dir, &name, *new) {
                        errors.push(format!(
                            "{shown}: replaced by someone else after the patch created it; left as it is"
                        ));
                    } else if let Err(e) = rustix::fs::unlinkat(dir, &name, AtFlags::empty()) {
                        errors.push(format!("{shown}: {e}"));
                    }
                }
                Done::Removed { backup, .. } => {
                    if let Err(e) =
                        rustix::fs::renameat_with(dir, backup, dir, &name, RenameFlags::NOREPLACE)
                    {
                        errors.push(format!("{shown}: {e}"));
                        kept.push((shown, backup.to_string_lossy().into_owned()));
                    }
                }
            }
            let _ = rustix::fs::fsync(dir);
        }
        for (path, t) in std::mem::take(&mut self.temps) {
            if let Ok((dir, _)) = self.dirs.get(&path, false) {
                let _ = rustix::fs::unlinkat(dir, &t, AtFlags::empty());
            }
        }
        self.dirs.open.clear();
        for d in self.created_dirs.drain(..).rev() {
            if let Ok((parent, name)) = self.ws.open_parent(&d, false) {
                let _ = rustix::fs::unlinkat(&parent, &name, AtFlags::REMOVEDIR);
            }
        }
        if errors.is_empty() {
            cause
        } else {
            PatchError::RollbackFailed {
                cause: Box::new(cause),
                errors,
                backups: kept,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = u8::try_from(i * 8 + 7).unwrap_or(0);
        }
        let want: String = b.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(hex(&b), want);
        assert_eq!(
            hex(&sha(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
