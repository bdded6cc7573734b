//! Unified diffs in git's format: headers, hunk ranges, function context,
//! "\ No newline at end of file", binary detection, path quoting. gix gives
//! hunks; the patch text is ours, in this module.

use gix::bstr::ByteSlice;
use gix::diff::blob::unified_diff::{ConsumeHunk, ContextSize, DiffLineKind, HunkHeader};
use gix::diff::blob::{
    Algorithm, InternedInput, UnifiedDiff, diff_with_slider_heuristics, sources::byte_lines,
};

use crate::error::GitError;
use crate::log::commit_info;
use crate::repo::GitRepo;

/// Bytes git inspects for NUL to call content binary.
const BINARY_PROBE: usize = 8000;

/// Diff options; [`Default`]: 3 context lines, at most 256 KiB of patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiffOptions {
    /// Context lines per hunk.
    pub context_lines: u32,
    /// Most bytes of patch text.
    pub max_bytes: usize,
    /// The unstaged diff shows untracked files (not ignored ones) as added,
    /// after the tracked changes.
    pub include_untracked: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        Self {
            context_lines: 3,
            max_bytes: 256 * 1024,
            include_untracked: false,
        }
    }
}

impl DiffOptions {
    /// Context lines per hunk.
    pub fn context_lines(mut self, lines: u32) -> Self {
        self.context_lines = lines;
        self
    }

    /// Untracked files in the unstaged diff, as added.
    pub fn include_untracked(mut self, include: bool) -> Self {
        self.include_untracked = include;
        self
    }

    /// Most bytes of patch text.
    pub fn max_bytes(mut self, max: usize) -> Self {
        self.max_bytes = max;
        self
    }
}

/// Which changes of the working state [`GitRepo::diff_working`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkingChanges {
    /// `git diff`: the work tree against the index.
    Unstaged,
    /// `git diff --cached`: the index against `HEAD`.
    Staged,
    /// Both, unstaged first.
    Both,
}

/// The diffs of [`GitRepo::diff_working`], each present when asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WorkingDiff {
    /// The work tree against the index.
    pub unstaged: Option<DiffOutcome>,
    /// The index against `HEAD`.
    pub staged: Option<DiffOutcome>,
}

/// A file's content at a revision, as text ([`GitRepo::show_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileAtRevision {
    /// The start of the content, invalid UTF-8 replaced by U+FFFD, at most
    /// the byte budget and ending on a whole character.
    pub content: String,
    /// Bytes of the blob.
    pub total_bytes: usize,
    /// `content` stops before the end.
    pub truncated: bool,
}

/// One file of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileDiff {
    /// Workspace-relative path (destination of a rename).
    pub path: String,
    /// Source of a rename.
    pub old_path: Option<String>,
    /// `A`, `M`, `D`, `R`, `T`.
    pub status: char,
    /// Binary content.
    pub binary: bool,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Whether its patch text is in `DiffOutcome::text`.
    pub included: bool,
}

/// A diff.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiffOutcome {
    /// The patch text (whole files only, unless one file alone is too large).
    pub text: String,
    /// Every changed file, included or not.
    pub files: Vec<FileDiff>,
    /// `max_bytes` left files (or the end of one) out.
    pub truncated: bool,
}

impl DiffOutcome {
    /// Paths of the files whose patch `max_bytes` left out, in order.
    pub fn omitted_paths(&self) -> Vec<String> {
        self.files
            .iter()
            .filter(|f| !f.included)
            .map(|f| f.path.clone())
            .collect()
    }
}

/// An untracked file, as the unstaged diff takes it.
enum Untracked {
    /// Read whole.
    File(Side),
    /// Larger than the diff's whole answer: listed, not read.
    TooLarge,
    /// Not a regular file (or gone).
    Skipped,
}

/// One side of a file change.
#[derive(Clone)]
pub(crate) struct Side {
    pub(crate) path: String,
    pub(crate) data: Vec<u8>,
    pub(crate) mode: u32,
    pub(crate) id: gix::ObjectId,
}

fn quote(prefix: &str, path: &str) -> String {
    let full = format!("{prefix}{path}");
    if full
        .bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return full;
    }
    let mut out = String::from("\"");
    for b in full.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(b as char),
            other => out.push_str(&format!("\\{other:03o}")),
        }
    }
    out.push('"');
    out
}

pub(crate) fn is_binary(data: &[u8]) -> bool {
    data[..data.len().min(BINARY_PROBE)].contains(&0)
}

/// git's default funcname rule: the nearest earlier line that starts with a
/// letter, `_` or `$`, trailing whitespace removed, at most 80 bytes.
fn funcname(lines: &[&[u8]], before: usize) -> Option<String> {
    lines[..before.min(lines.len())].iter().rev().find_map(|l| {
        let first = *l.first()?;
        if first.is_ascii_alphabetic() || first == b'_' || first == b'$' {
            let trimmed = l.trim_end();
            let cut = &trimmed[..trimmed.len().min(80)];
            Some(String::from_utf8_lossy(cut).into_owned())
        } else {
            None
        }
    })
}

struct Hunks<'a> {
    out: String,
    old_lines: Vec<&'a [u8]>,
    added: usize,
    removed: usize,
}

impl ConsumeHunk for Hunks<'_> {
    type Out = (String, usize, usize);

    fn consume_hunk(
        &mut self,
        h: HunkHeader,
        lines: &[(DiffLineKind, &[u8])],
    ) -> std::io::Result<()> {
        // git names an empty side by the line before it (0 at the top).
        let range = |start: u32, len: u32| match len {
            1 => format!("{start}"),
            0 => format!("{},0", start.saturating_sub(1)),
            n => format!("{start},{n}"),
        };
        let (old_start, new_start) = (h.before_hunk_start, h.after_hunk_start);
        let func = funcname(
            &self.old_lines,
            h.before_hunk_start.saturating_sub(1) as usize,
        )
        .map(|f| format!(" {f}"))
        .unwrap_or_default();
        self.out.push_str(&format!(
            "@@ -{} +{} @@{func}\n",
            range(old_start, h.before_hunk_len),
            range(new_start, h.after_hunk_len)
        ));
        for (kind, text) in lines {
            let (prefix, count) = match kind {
                DiffLineKind::Context => (' ', None),
                DiffLineKind::Add => ('+', Some(true)),
                DiffLineKind::Remove => ('-', Some(false)),
            };
            match count {
                Some(true) => self.added += 1,
                Some(false) => self.removed += 1,
                None => {}
            }
            self.out.push(prefix);
            self.out.push_str(&String::from_utf8_lossy(text));
            if !text.ends_with(b"\n") {
                self.out.push_str("\n\\ No newline at end of file\n");
            }
        }
        Ok(())
    }

    fn finish(self) -> Self::Out {
        (self.out, self.added, self.removed)
    }
}

fn abbrev(repo: &gix::Repository, id: &gix::ObjectId) -> String {
    if id.is_null() {
        return "0".repeat(7);
    }
    repo.find_object(*id)
        .ok()
        .map(|o| o.id().shorten_or_id().to_string())
        .unwrap_or_else(|| id.to_hex_with_len(7).to_string())
}

/// Renders one file in git's patch format.
pub(crate) fn render_file(
    repo: &gix::Repository,
    old: Option<&Side>,
    new: Option<&Side>,
    ctx: u32,
    similarity: Option<u8>,
) -> (String, FileDiff) {
    let old_path = old.or(new).map(|s| s.path.clone()).unwrap_or_default();
    let new_path = new.or(old).map(|s| s.path.clone()).unwrap_or_default();
    let mut out = format!(
        "diff --git {} {}\n",
        quote("a/", &old_path),
        quote("b/", &new_path)
    );
    let null = gix::ObjectId::null(gix::hash::Kind::Sha1);
    let (old_id, new_id) = (old.map_or(null, |s| s.id), new.map_or(null, |s| s.id));
    let renamed = old_path != new_path;
    let status;
    match (old, new) {
        (None, Some(n)) => {
            status = 'A';
            out.push_str(&format!("new file mode {:o}\n", n.mode));
            out.push_str(&format!(
                "index {}..{}\n",
                abbrev(repo, &old_id),
                abbrev(repo, &new_id)
            ));
        }
        (Some(o), None) => {
            status = 'D';
            out.push_str(&format!("deleted file mode {:o}\n", o.mode));
            out.push_str(&format!(
                "index {}..{}\n",
                abbrev(repo, &old_id),
                abbrev(repo, &new_id)
            ));
        }
        (Some(o), Some(n)) => {
            status = if renamed {
                'R'
            } else if (o.mode & 0o170000) != (n.mode & 0o170000) {
                'T'
            } else {
                'M'
            };
            if o.mode != n.mode {
                out.push_str(&format!("old mode {:o}\nnew mode {:o}\n", o.mode, n.mode));
            }
            if renamed {
                out.push_str(&format!(
                    "similarity index {}%\nrename from {}\nrename to {}\n",
                    similarity.unwrap_or(100),
                    quote("", &old_path),
                    quote("", &new_path)
                ));
            }
            if o.data != n.data || o.id != n.id {
                if o.mode == n.mode {
                    out.push_str(&format!(
                        "index {}..{} {:o}\n",
                        abbrev(repo, &old_id),
                        abbrev(repo, &new_id),
                        o.mode
                    ));
                } else {
                    out.push_str(&format!(
                        "index {}..{}\n",
                        abbrev(repo, &old_id),
                        abbrev(repo, &new_id)
                    ));
                }
            }
        }
        (None, None) => status = 'M',
    }
    let old_data = old.map_or(&[][..], |s| &s.data[..]);
    let new_data = new.map_or(&[][..], |s| &s.data[..]);
    let mut file = FileDiff {
        path: new_path.clone(),
        old_path: renamed.then(|| old_path.clone()),
        status,
        binary: false,
        added: 0,
        removed: 0,
        included: true,
    };
    if old.is_some() && new.is_some() && old_data == new_data {
        return (out, file);
    }
    let a = if old.is_some() {
        quote("a/", &old_path)
    } else {
        "/dev/null".into()
    };
    let b = if new.is_some() {
        quote("b/", &new_path)
    } else {
        "/dev/null".into()
    };
    if is_binary(old_data) || is_binary(new_data) {
        file.binary = true;
        out.push_str(&format!("Binary files {a} and {b} differ\n"));
        return (out, file);
    }
    out.push_str(&format!("--- {a}\n+++ {b}\n"));
    let input = InternedInput::new(byte_lines(old_data), byte_lines(new_data));
    let diff = diff_with_slider_heuristics(Algorithm::Myers, &input);
    let sink = Hunks {
        out: String::new(),
        old_lines: byte_lines(old_data).collect(),
        added: 0,
        removed: 0,
    };
    if let Ok((text, added, removed)) =
        UnifiedDiff::new(&diff, &input, sink, ContextSize::symmetrical(ctx)).consume()
    {
        out.push_str(&text);
        file.added = added;
        file.removed = removed;
    }
    (out, file)
}

/// Joins per-file patches within `max_bytes`, at file boundaries.
/// A working-tree file larger than this is listed in a diff, not read.
pub const MAX_WORKTREE_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// An added file left out of a diff unread: it would pass `max_bytes`.
fn unread_addition(path: String) -> (String, FileDiff) {
    let f = FileDiff {
        path,
        old_path: None,
        status: 'A',
        binary: false,
        added: 0,
        removed: 0,
        included: false,
    };
    (String::new(), f)
}

fn assemble(parts: Vec<(String, FileDiff)>, max_bytes: usize) -> DiffOutcome {
    let mut text = String::new();
    let mut files = Vec::new();
    // `max_bytes` cut the text here; a file left out unread before
    // assembling cuts nothing after it.
    let mut truncated = false;
    let mut unread = false;
    for (patch, mut f) in parts {
        if !f.included {
            unread = true;
        } else if truncated {
            f.included = false;
        } else if text.len() + patch.len() <= max_bytes {
            text.push_str(&patch);
        } else {
            truncated = true;
            if text.is_empty() {
                // One file alone is too large: its first lines, cut at a line boundary.
                let cut = patch.floor_char_boundary(max_bytes);
                let end = patch[..cut].rfind('\n').map_or(0, |i| i + 1);
                text.push_str(&patch[..end]);
            } else {
                f.included = false;
            }
        }
        files.push(f);
    }
    DiffOutcome {
        text,
        files,
        truncated: truncated || unread,
    }
}

fn blob(repo: &gix::Repository, id: gix::ObjectId) -> Vec<u8> {
    repo.find_blob(id)
        .map(|b| b.data.clone())
        .unwrap_or_default()
}

impl GitRepo {
    fn in_scope(&self, repo_path: &[u8], filters: &[String]) -> Option<String> {
        let ws = self.ws_path(repo_path)?;
        if filters.is_empty()
            || filters
                .iter()
                .any(|f| f.is_empty() || ws == *f || ws.starts_with(&format!("{f}/")))
        {
            Some(ws)
        } else {
            None
        }
    }

    fn filters(&self, paths: &[String]) -> Result<Vec<String>, GitError> {
        paths
            .iter()
            .map(|p| {
                let wp = self.ws.resolve_beneath(p)?;
                Ok(if wp.is_root() {
                    String::new()
                } else {
                    wp.display()
                })
            })
            .collect()
    }

    /// `git diff --cached` (index vs HEAD).
    pub fn diff_staged(
        &self,
        paths: &[String],
        opts: DiffOptions,
    ) -> Result<DiffOutcome, GitError> {
        let repo = self.local();
        let filters = self.filters(paths)?;
        let tree = repo
            .head_tree_id_or_empty()
            .map_err(GitError::git)?
            .detach();
        let index = repo.index_or_empty().map_err(GitError::git)?;
        let mut parts = Vec::new();
        let mode = |m: gix::index::entry::Mode| m.bits();
        repo.tree_index_status(
            &tree,
            &index,
            None,
            gix::status::tree_index::TrackRenames::AsConfigured,
            |change, _, _| {
                use gix::diff::index::ChangeRef;
                let side = |loc: &[u8], id: &gix::oid, m: u32| -> Option<Side> {
                    Some(Side {
                        path: self.in_scope(loc, &filters)?,
                        data: blob(&repo, id.to_owned()),
                        mode: m,
                        id: id.to_owned(),
                    })
                };
                let rendered = match change {
                    ChangeRef::Addition {
                        location,
                        entry_mode,
                        id,
                        ..
                    } => side(&location, &id, mode(entry_mode))
                        .map(|n| render_file(&repo, None, Some(&n), opts.context_lines, None)),
                    ChangeRef::Deletion {
                        location,
                        entry_mode,
                        id,
                        ..
                    } => side(&location, &id, mode(entry_mode))
                        .map(|o| render_file(&repo, Some(&o), None, opts.context_lines, None)),
                    ChangeRef::Modification {
                        location,
                        previous_entry_mode,
                        previous_id,
                        entry_mode,
                        id,
                        ..
                    } => {
                        match (
                            side(&location, &previous_id, mode(previous_entry_mode)),
                            side(&location, &id, mode(entry_mode)),
                        ) {
                            (Some(o), Some(n)) => Some(render_file(
                                &repo,
                                Some(&o),
                                Some(&n),
                                opts.context_lines,
                                None,
                            )),
                            _ => None,
                        }
                    }
                    ChangeRef::Rewrite {
                        source_location,
                        source_entry_mode,
                        source_id,
                        location,
                        entry_mode,
                        id,
                        ..
                    } => {
                        match (
                            side(&source_location, &source_id, mode(source_entry_mode)),
                            side(&location, &id, mode(entry_mode)),
                        ) {
                            (Some(o), Some(n)) => {
                                Some(render_rename(&repo, &o, &n, opts.context_lines))
                            }
                            _ => None,
                        }
                    }
                };
                if let Some(r) = rendered {
                    parts.push(r);
                }
                Ok(std::ops::ControlFlow::Continue(()))
            },
        )
        .map_err(GitError::git)?;
        parts.sort_by(|a, b| a.1.path.cmp(&b.1.path));
        Ok(assemble(parts, opts.max_bytes))
    }

    /// `git diff` (worktree vs index).
    pub fn diff_unstaged(
        &self,
        paths: &[String],
        opts: DiffOptions,
    ) -> Result<DiffOutcome, GitError> {
        let repo = self.local();
        let filters = self.filters(paths)?;
        let specs = self.pathspecs(
            &filters
                .iter()
                .filter(|f| !f.is_empty())
                .cloned()
                .collect::<Vec<_>>(),
        )?;
        let untracked = if opts.include_untracked {
            gix::status::UntrackedFiles::Files
        } else {
            gix::status::UntrackedFiles::None
        };
        let iter = repo
            .status(gix::progress::Discard)
            .map_err(GitError::git)?
            .untracked_files(untracked)
            .index_worktree_rewrites(None)
            .into_index_worktree_iter(specs)
            .map_err(GitError::git)?;
        let mut parts = Vec::new();
        let mut rendered = 0usize;
        let mut added = Vec::new();
        for item in iter {
            let item = item.map_err(GitError::git)?;
            let (entry, rela_path, status) = match item {
                gix::status::index_worktree::Item::Modification {
                    entry,
                    rela_path,
                    status,
                    ..
                } => (entry, rela_path, status),
                gix::status::index_worktree::Item::DirectoryContents { entry, .. }
                    if entry.status == gix::dir::entry::Status::Untracked =>
                {
                    if let Some(path) = self.in_scope(&entry.rela_path, &filters) {
                        added.push((path, entry.disk_kind));
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(path) = self.in_scope(&rela_path, &filters) else {
                continue;
            };
            use gix::status::plumbing::index_as_worktree::{Change, EntryStatus};
            let EntryStatus::Change(change) = status else {
                continue;
            };
            let old = Side {
                path: path.clone(),
                data: blob(&repo, entry.id),
                mode: entry.mode.bits(),
                id: entry.id,
            };
            let r = match change {
                Change::Removed => render_file(&repo, Some(&old), None, opts.context_lines, None),
                _ => {
                    // Past the answer's bytes, the rest are listed unread.
                    if rendered > opts.max_bytes {
                        let (text, mut entry) = unread_addition(path);
                        entry.status = 'M';
                        parts.push((text, entry));
                        continue;
                    }
                    let wp = self.ws.resolve_lexically(&path)?;
                    // A link or a special file swapped in for a tracked file
                    // is not opened (and does not fail the whole diff).
                    let Ok((f, ctm_workspace_fs::Kind::File)) = self.ws.open_beneath(&wp) else {
                        continue;
                    };
                    let mut data = Vec::new();
                    let cap = MAX_WORKTREE_FILE_BYTES + 1;
                    std::io::Read::read_to_end(&mut std::io::Read::take(&f, cap), &mut data)
                        .map_err(GitError::git)?;
                    if data.len() as u64 > MAX_WORKTREE_FILE_BYTES {
                        // Listed, left out: not diffed in memory.
                        let (text, mut entry) = unread_addition(path);
                        entry.status = 'M';
                        parts.push((text, entry));
                        continue;
                    }
                    let meta = f.metadata().map_err(GitError::git)?;
                    use std::os::unix::fs::PermissionsExt;
                    let new_mode = if old.mode == 0o120000 {
                        old.mode
                    } else if meta.permissions().mode() & 0o111 != 0 {
                        0o100755
                    } else {
                        0o100644
                    };
                    let id = gix::objs::compute_hash(
                        gix::hash::Kind::Sha1,
                        gix::object::Kind::Blob,
                        &data,
                    )
                    .map_err(GitError::git)?;
                    let new = Side {
                        path: path.clone(),
                        data,
                        mode: new_mode,
                        id,
                    };
                    render_file(&repo, Some(&old), Some(&new), opts.context_lines, None)
                }
            };
            rendered += r.0.len();
            parts.push(r);
        }
        parts.sort_by(|a, b| a.1.path.cmp(&b.1.path));
        added.sort();
        // Untracked files after the tracked changes, read through the
        // workspace boundary; once the patch text passes `max_bytes` the
        // rest are listed unread.
        let mut size: usize = parts.iter().map(|p| p.0.len()).sum();
        for (path, kind) in added {
            if size > opts.max_bytes {
                parts.push(unread_addition(path));
                continue;
            }
            let new = match self.untracked_side(&path, kind, opts.max_bytes)? {
                Untracked::File(new) => new,
                Untracked::Skipped => continue,
                Untracked::TooLarge => {
                    // Larger than the whole answer: listed, left out, unread.
                    size = usize::MAX;
                    parts.push(unread_addition(path));
                    continue;
                }
            };
            let r = render_file(&repo, None, Some(&new), opts.context_lines, None);
            size += r.0.len();
            parts.push(r);
        }
        Ok(assemble(parts, opts.max_bytes))
    }

    /// An untracked regular file as the new side of an addition, read
    /// through the workspace boundary and at most `max_bytes` of it.
    /// Anything else is skipped (links are not read), as is a file gone
    /// since the walk.
    fn untracked_side(
        &self,
        path: &str,
        kind: Option<gix::dir::entry::Kind>,
        max_bytes: usize,
    ) -> Result<Untracked, GitError> {
        use gix::dir::entry::Kind;
        let wp = self.ws.resolve_lexically(path)?;
        let (data, mode) = match kind {
            Some(Kind::File) => {
                // A FIFO or device swapped in since the walk is not read.
                let Ok((f, ctm_workspace_fs::Kind::File)) = self.ws.open_beneath(&wp) else {
                    return Ok(Untracked::Skipped);
                };
                let mut data = Vec::new();
                let limit = u64::try_from(max_bytes)
                    .unwrap_or(u64::MAX)
                    .saturating_add(1);
                std::io::Read::read_to_end(&mut std::io::Read::take(&f, limit), &mut data)
                    .map_err(GitError::git)?;
                if data.len() > max_bytes {
                    return Ok(Untracked::TooLarge);
                }
                let meta = f.metadata().map_err(GitError::git)?;
                use std::os::unix::fs::PermissionsExt;
                let mode = if meta.permissions().mode() & 0o111 != 0 {
                    0o100755
                } else {
                    0o100644
                };
                (data, mode)
            }
            _ => return Ok(Untracked::Skipped),
        };
        let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, &data)
            .map_err(GitError::git)?;
        Ok(Untracked::File(Side {
            path: path.to_owned(),
            data,
            mode,
            id,
        }))
    }

    /// A commit's diff against its first parent (`git show --format=`).
    pub fn diff_commit(
        &self,
        rev: &str,
        paths: &[String],
        opts: DiffOptions,
    ) -> Result<(crate::log::CommitInfo, DiffOutcome), GitError> {
        let filters = self.filters(paths)?;
        let repo = self.local();
        let id = self.commit_id(&repo, rev)?;
        let commit = repo.find_commit(id).map_err(GitError::git)?;
        let info = commit_info(&commit)?;
        let tree = commit.tree().map_err(GitError::git)?;
        let parent_tree = match commit.parent_ids().next() {
            Some(p) => Some(
                p.object()
                    .map_err(GitError::git)?
                    .peel_to_commit()
                    .map_err(GitError::git)?
                    .tree()
                    .map_err(GitError::git)?,
            ),
            None => None,
        };
        let changes = repo
            .diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)
            .map_err(GitError::git)?;
        let mut parts = Vec::new();
        for c in changes {
            use gix::object::tree::diff::ChangeDetached as C;
            let side =
                |loc: &[u8], id: gix::ObjectId, m: gix::object::tree::EntryMode| -> Option<Side> {
                    if m.is_tree() {
                        return None;
                    }
                    Some(Side {
                        path: self.in_scope(loc, &filters)?,
                        data: blob(&repo, id),
                        mode: u32::from(m.value()),
                        id,
                    })
                };
            let r = match c {
                C::Addition {
                    location,
                    entry_mode,
                    id,
                    ..
                } => side(&location, id, entry_mode)
                    .map(|n| render_file(&repo, None, Some(&n), opts.context_lines, None)),
                C::Deletion {
                    location,
                    entry_mode,
                    id,
                    ..
                } => side(&location, id, entry_mode)
                    .map(|o| render_file(&repo, Some(&o), None, opts.context_lines, None)),
                C::Modification {
                    location,
                    previous_entry_mode,
                    previous_id,
                    entry_mode,
                    id,
                    ..
                } => {
                    match (
                        side(&location, previous_id, previous_entry_mode),
                        side(&location, id, entry_mode),
                    ) {
                        (Some(o), Some(n)) => Some(render_file(
                            &repo,
                            Some(&o),
                            Some(&n),
                            opts.context_lines,
                            None,
                        )),
                        _ => None,
                    }
                }
                C::Rewrite {
                    source_location,
                    source_entry_mode,
                    source_id,
                    location,
                    entry_mode,
                    id,
                    ..
                } => {
                    match (
                        side(&source_location, source_id, source_entry_mode),
                        side(&location, id, entry_mode),
                    ) {
                        (Some(o), Some(n)) => {
                            Some(render_rename(&repo, &o, &n, opts.context_lines))
                        }
                        _ => None,
                    }
                }
            };
            if let Some(r) = r {
                parts.push(r);
            }
        }
        parts.sort_by(|a, b| a.1.path.cmp(&b.1.path));
        Ok((info, assemble(parts, opts.max_bytes)))
    }

    /// `git diff` and/or `git diff --cached` within one byte budget: the
    /// unstaged diff comes first, and the staged one gets what it leaves.
    pub fn diff_working(
        &self,
        changes: WorkingChanges,
        paths: &[String],
        opts: DiffOptions,
    ) -> Result<WorkingDiff, GitError> {
        let unstaged = match changes {
            WorkingChanges::Unstaged | WorkingChanges::Both => {
                Some(self.diff_unstaged(paths, opts)?)
            }
            WorkingChanges::Staged => None,
        };
        let staged = match changes {
            WorkingChanges::Staged | WorkingChanges::Both => {
                let used = unstaged.as_ref().map_or(0, |d| d.text.len());
                let budget = opts.max_bytes.saturating_sub(used);
                Some(self.diff_staged(paths, opts.max_bytes(budget))?)
            }
            WorkingChanges::Unstaged => None,
        };
        Ok(WorkingDiff { unstaged, staged })
    }

    /// A text file's content at a revision (`git show rev:path`), at most
    /// `max_bytes` of it; a blob with a NUL in its first 8000 bytes (git's
    /// test) is [`GitError::Binary`].
    pub fn show_file(
        &self,
        rev: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<FileAtRevision, GitError> {
        let bytes = self.file_at(rev, path)?;
        if is_binary(&bytes) {
            return Err(GitError::Binary(path.to_owned()));
        }
        let total_bytes = bytes.len();
        let text = String::from_utf8_lossy(&bytes);
        let cut = text.floor_char_boundary(total_bytes.min(max_bytes));
        Ok(FileAtRevision {
            truncated: cut < text.len(),
            content: text[..cut].to_owned(),
            total_bytes,
        })
    }

    /// A file's content at a revision (`git show rev:path`).
    pub fn file_at(&self, rev: &str, path: &str) -> Result<Vec<u8>, GitError> {
        let rp = self.repo_path(path)?;
        let repo = self.local();
        let id = self.commit_id(&repo, rev)?;
        let commit = repo.find_commit(id).map_err(GitError::git)?;
        let tree = commit.tree().map_err(GitError::git)?;
        let entry = tree
            .lookup_entry_by_path(&rp)
            .map_err(GitError::git)?
            .ok_or_else(|| GitError::PathNotInRevision {
                path: path.to_owned(),
                rev: rev.to_owned(),
            })?;
        if entry.mode().is_tree() {
            return Err(GitError::PathNotInRevision {
                path: format!("{path} (a directory)"),
                rev: rev.to_owned(),
            });
        }
        Ok(blob(&repo, entry.object_id()))
    }
}

/// A rename (or copy) from `old` to `new`, with git's similarity index.
fn render_rename(repo: &gix::Repository, old: &Side, new: &Side, ctx: u32) -> (String, FileDiff) {
    let sim = if old.data == new.data {
        100
    } else {
        similarity(&old.data, &new.data)
    };
    render_file(repo, Some(old), Some(new), ctx, Some(sim))
}

/// Percentage of lines kept, for renames that also changed.
fn similarity(a: &[u8], b: &[u8]) -> u8 {
    let input = InternedInput::new(byte_lines(a), byte_lines(b));
    let diff = diff_with_slider_heuristics(Algorithm::Myers, &input);
    let total = input.before.len().max(input.after.len()).max(1);
    let kept = input
        .before
        .len()
        .saturating_sub(diff.count_removals() as usize);
    u8::try_from(kept * 100 / total).unwrap_or(100)
}
