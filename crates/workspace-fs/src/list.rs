//! `list_dir` and `list_files` on the `ignore` crate.

use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::{WalkBuilder, WalkState};

use crate::error::{FsError, IoCause};
use crate::path::{Workspace, WorkspacePath};

/// Entries a sorted-by-metadata listing may collect before it stops.
pub const MAX_SCAN_FOR_SORT: usize = 200_000;

/// The type of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryType {
    /// A directory.
    Directory,
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else.
    Other,
}

impl EntryType {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Directory => "directory",
            Self::File => "file",
            Self::Symlink => "symlink",
            Self::Other => "other",
        }
    }

    fn of(ft: Option<std::fs::FileType>) -> Self {
        match ft {
            Some(t) if t.is_symlink() => Self::Symlink,
            Some(t) if t.is_dir() => Self::Directory,
            Some(t) if t.is_file() => Self::File,
            _ => Self::Other,
        }
    }
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Entry {
    /// File name.
    pub name: String,
    /// Workspace-relative path.
    pub path: String,
    /// Its type.
    pub kind: EntryType,
    /// Size in bytes (of the link itself for symlinks); `None` when the entry could not be examined (gone, or
    /// its directory no longer beneath the root).
    pub size_bytes: Option<u64>,
    /// Modification time.
    pub modified: Option<SystemTime>,
    /// Starts with a dot.
    pub is_hidden: bool,
    /// Would be left out by `.gitignore`/`.ignore` (only computed when
    /// ignored entries are included).
    pub is_ignored: bool,
    /// Depth below the listed directory (1 = direct child).
    pub depth: usize,
}

/// How to order entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// By path (directory walk order for `list_dir`).
    #[default]
    Name,
    /// Directories first, then by name.
    Type,
    /// Newest first, then by path.
    Modified,
}

/// A listing request; [`Default`] lists the direct children, at most
/// 1,000, without hidden or ignored entries.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ListRequest {
    /// Descend below direct children.
    pub recursive: bool,
    /// Deepest level when recursive.
    pub max_depth: usize,
    /// Most entries returned.
    pub max_entries: usize,
    /// Include dot-entries.
    pub include_hidden: bool,
    /// Include `.gitignore`d entries.
    pub include_ignored: bool,
    /// Order.
    pub sort: SortKey,
}

impl Default for ListRequest {
    fn default() -> Self {
        Self {
            recursive: false,
            max_depth: 1,
            max_entries: 1_000,
            include_hidden: false,
            include_ignored: false,
            sort: SortKey::Name,
        }
    }
}

/// A listing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// The entries, in order, at most the cap.
    pub entries: Vec<Entry>,
    /// More entries exist than were returned.
    pub truncated: bool,
    /// Entries that could not be read, and similar.
    pub warnings: Vec<WalkWarning>,
}

/// Something a walk could not do, reported beside what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkWarning {
    /// The walker could not read an entry (permissions, a directory that
    /// vanished, an ignore file it could not parse); its message.
    Walk(String),
    /// A file the walk found could not be opened beneath the root.
    Refused(FsError),
    /// Searching a file failed part-way.
    Search {
        /// Workspace-relative path.
        path: String,
        /// The operating system's error.
        error: IoCause,
    },
    /// Sorting by metadata needs every entry; collecting stopped after
    /// [`MAX_SCAN_FOR_SORT`], so the order is that of the entries seen.
    SortStopped {
        /// The sort asked for.
        by: SortKey,
        /// Entries collected.
        scanned: usize,
    },
}

/// Whether `dir` holds an ignore file a walk must not read: a `.git` that
/// is a file over 64 KiB (a worktree pointer is one line; the walker reads
/// its first line, however long) or neither a file, directory nor symlink;
/// a `.gitignore` or `.ignore` whose target is not a regular file (a FIFO
/// blocks its reader) or is over 4 MiB. A command can make any of these.
///
/// The directory is opened once and its three names are looked up from it:
/// three lookups of the whole path cost a walk of 49,000 files a fifth of
/// its time.
pub(crate) fn unreadable_ignore_files(dir: &Path) -> bool {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // Not a directory (any more): the walker finds nothing to read there.
    let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return false;
    };
    let kind = |st: &rustix::fs::Stat| FileType::from_raw_mode(st.st_mode);
    let git_bad = rustix::fs::statat(&fd, ".git", AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
        let t = kind(&st);
        (t == FileType::RegularFile && st.st_size > 64 * 1024)
            || !matches!(
                t,
                FileType::RegularFile | FileType::Directory | FileType::Symlink
            )
    });
    git_bad
        || [".gitignore", ".ignore"].iter().any(|name| {
            rustix::fs::statat(&fd, *name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
                && !rustix::fs::statat(&fd, *name, AtFlags::empty())
                    .is_ok_and(|st| kind(&st) == FileType::RegularFile && st.st_size <= 4 << 20)
        })
}

/// Whether the walk of `dir` (inside the workspace `root`) would read an
/// unreadable ignore file in `dir` or in one of its ancestors up to `root`.
pub(crate) fn ancestors_unreadable(root: &Path, dir: &Path) -> bool {
    dir.ancestors()
        .take_while(|a| a.starts_with(root))
        .any(unreadable_ignore_files)
}

fn walker(ws_root: &Path, root: &Path, include_hidden: bool, include_ignored: bool) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.hidden(!include_hidden)
        .ignore(!include_ignored)
        .git_ignore(!include_ignored)
        .git_exclude(!include_ignored)
        .git_global(false)
        .parents(!include_ignored)
        .require_git(false)
        .follow_links(false)
        // `.git` is never listed, even with include_hidden.
        .filter_entry(|e| {
            e.file_name() != ".git"
                && !(e.depth() > 0
                    && e.file_type().is_some_and(|t| t.is_dir())
                    && unreadable_ignore_files(e.path()))
        });
    guard_ignore_files(&mut b, ws_root, root);
    b
}

/// Turns off ignore files for a walk whose start would read an unreadable
/// one (see [`unreadable_ignore_files`]); deeper directories holding one are
/// not entered (the walks' `filter_entry`).
pub(crate) fn guard_ignore_files(b: &mut WalkBuilder, ws_root: &Path, dir: &Path) {
    if ancestors_unreadable(ws_root, dir) {
        b.ignore(false)
            .git_ignore(false)
            .git_exclude(false)
            .parents(false);
    }
}

/// Size and modification time of listed entries, read through a handle on
/// their directory opened beneath the root (never by path: a directory
/// swapped for an outside link cannot lend its files' sizes). The last
/// directory's handle is kept, as walks list a directory's entries together.
#[derive(Default)]
pub(crate) struct Stats {
    dir: Option<(std::path::PathBuf, Option<std::os::fd::OwnedFd>)>,
}

impl Stats {
    /// `(size, mtime)` of the entry at `rel` (a symlink's own, not its target's).
    pub(crate) fn of(&mut self, ws: &Workspace, rel: &Path) -> (Option<u64>, Option<SystemTime>) {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return (None, None);
        };
        if self.dir.as_ref().is_none_or(|(p, _)| p != parent) {
            self.dir = Some((parent.to_path_buf(), ws.dir_handle(parent)));
        }
        let Some((_, Some(fd))) = &self.dir else {
            return (None, None);
        };
        match rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let size = u64::try_from(st.st_size).ok();
                let modified = u64::try_from(st.st_mtime).ok().map(|secs| {
                    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
                    SystemTime::UNIX_EPOCH + std::time::Duration::new(secs, nanos)
                });
                (size, modified)
            }
            Err(_) => (None, None),
        }
    }
}

fn entry_of(ws: &Workspace, stats: &mut Stats, e: &ignore::DirEntry) -> Option<Entry> {
    let rel = ws.relative_of(e.path())?;
    let (size_bytes, modified) = stats.of(ws, &rel);
    let name = e.file_name().to_string_lossy().into_owned();
    Some(Entry {
        is_hidden: name.starts_with('.'),
        name,
        path: rel.to_string_lossy().into_owned(),
        kind: EntryType::of(e.file_type()),
        size_bytes,
        modified,
        is_ignored: false,
        depth: e.depth(),
    })
}

/// Lists a directory (optionally recursively), in walk order by name.
pub fn list_dir(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &ListRequest,
) -> Result<Listing, FsError> {
    crate::confine::confined(ws, || list_dir_walk(ws, path, req))
}

fn list_dir_walk(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &ListRequest,
) -> Result<Listing, FsError> {
    let root = ws.open_dir(path)?;
    let depth = if req.recursive {
        req.max_depth.max(1)
    } else {
        1
    };
    let mut b = walker(ws.root(), &root, req.include_hidden, req.include_ignored);
    b.max_depth(Some(depth))
        .sort_by_file_name(std::cmp::Ord::cmp);
    let cap = if req.sort == SortKey::Name {
        req.max_entries + 1
    } else {
        MAX_SCAN_FOR_SORT
    };
    let mut warnings = Vec::new();
    let mut entries = Vec::new();
    let mut stats = Stats::default();
    for item in b.build() {
        match item {
            Ok(e) if e.depth() == 0 => {}
            Ok(e) => {
                if let Some(entry) = entry_of(ws, &mut stats, &e) {
                    entries.push(entry);
                }
                if entries.len() >= cap {
                    break;
                }
            }
            Err(err) => warnings.push(WalkWarning::Walk(err.to_string())),
        }
    }
    if entries.len() >= MAX_SCAN_FOR_SORT {
        warnings.push(WalkWarning::SortStopped {
            by: req.sort,
            scanned: MAX_SCAN_FOR_SORT,
        });
    }
    sort_entries(&mut entries, req.sort);
    let truncated = entries.len() > req.max_entries;
    entries.truncate(req.max_entries);
    if req.include_ignored {
        mark_ignored(ws, &root, depth, req.include_hidden, &mut entries);
    }
    Ok(Listing {
        entries,
        truncated,
        warnings,
    })
}

fn sort_entries(entries: &mut [Entry], key: SortKey) {
    match key {
        SortKey::Name => {}
        SortKey::Type => {
            entries.sort_by(|a, b| a.kind.cmp(&b.kind).then_with(|| a.path.cmp(&b.path)))
        }
        // Oldest first, as the reference sorts.
        SortKey::Modified => entries.sort_by(|a, b| {
            a.modified
                .cmp(&b.modified)
                .then_with(|| a.path.cmp(&b.path))
        }),
    }
}

/// Marks the entries a listing that honours ignore files would have left out.
fn mark_ignored(ws: &Workspace, root: &Path, depth: usize, hidden: bool, entries: &mut [Entry]) {
    let mut b = walker(ws.root(), root, hidden, false);
    b.max_depth(Some(depth));
    let kept: std::collections::HashSet<String> = b
        .build()
        .filter_map(Result::ok)
        .filter_map(|e| ws.relative_of(e.path()))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    for e in entries {
        e.is_ignored = !kept.contains(&e.path);
    }
}

/// Glob filters: a pattern with a `/` matches the path below the listed
/// directory (`*` stays within one directory, `**` crosses them); one
/// without matches the file name. [`Default`] lets everything through.
#[derive(Debug, Clone)]
pub struct Globs {
    include_path: GlobSet,
    include_name: GlobSet,
    exclude_path: GlobSet,
    exclude_name: GlobSet,
    has_include: bool,
}

impl Default for Globs {
    fn default() -> Self {
        Self {
            include_path: GlobSet::empty(),
            include_name: GlobSet::empty(),
            exclude_path: GlobSet::empty(),
            exclude_name: GlobSet::empty(),
            has_include: false,
        }
    }
}

impl Globs {
    /// Compiles the include and exclude patterns.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, FsError> {
        let (include_path, include_name) = split(include)?;
        let (exclude_path, exclude_name) = split(exclude)?;
        Ok(Self {
            include_path,
            include_name,
            exclude_path,
            exclude_name,
            has_include: !include.is_empty(),
        })
    }

    /// Whether a file at `rel` (relative to the listed directory) is wanted.
    pub fn wants(&self, rel: &Path) -> bool {
        let name = rel.file_name().map(Path::new).unwrap_or(rel);
        if self.excluded(rel) {
            return false;
        }
        !self.has_include || self.include_path.is_match(rel) || self.include_name.is_match(name)
    }

    /// Whether a file or directory at `rel` is excluded.
    pub fn excluded(&self, rel: &Path) -> bool {
        let name = rel.file_name().map(Path::new).unwrap_or(rel);
        self.exclude_path.is_match(rel) || self.exclude_name.is_match(name)
    }
}

fn split(patterns: &[String]) -> Result<(GlobSet, GlobSet), FsError> {
    let mut by_path = GlobSetBuilder::new();
    let mut by_name = GlobSetBuilder::new();
    for p in patterns {
        let bad = |e: globset::Error| FsError::InvalidPattern {
            kind: "glob",
            pattern: p.clone(),
            error: e.kind().to_string(),
        };
        let trimmed = p.trim_start_matches("./");
        if trimmed.contains('/') {
            let g = GlobBuilder::new(trimmed.trim_start_matches('/'))
                .literal_separator(true)
                .build()
                .map_err(bad)?;
            by_path.add(g);
        } else {
            by_name.add(Glob::new(trimmed).map_err(bad)?);
        }
    }
    let build = |b: GlobSetBuilder| {
        b.build().map_err(|e| FsError::InvalidPattern {
            kind: "glob",
            pattern: patterns.join(", "),
            error: e.to_string(),
        })
    };
    Ok((build(by_path)?, build(by_name)?))
}

/// A `list_files` request; [`Default`] lists every file by path, at most
/// 5,000, without hidden or ignored ones.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FilesRequest {
    /// Include and exclude globs.
    pub globs: Globs,
    /// Include dot-files.
    pub include_hidden: bool,
    /// Include ignored files.
    pub include_ignored: bool,
    /// Most files returned.
    pub max_results: usize,
    /// `Name` (path) or `Modified`.
    pub sort: SortKey,
}

impl Default for FilesRequest {
    fn default() -> Self {
        Self {
            globs: Globs::default(),
            include_hidden: false,
            include_ignored: false,
            max_results: 5_000,
            sort: SortKey::Name,
        }
    }
}

/// Lists the regular files below a directory (symlinks are not followed nor
/// listed, like `rg --files`) with the parallel walker; the full set is
/// sorted before the cap, so the answer is deterministic. Sizes and times are
/// read during the walk for `SortKey::Modified`, and otherwise only for the
/// files returned.
pub fn list_files(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &FilesRequest,
) -> Result<Listing, FsError> {
    crate::confine::confined(ws, || list_files_walk(ws, path, req))
}

fn list_files_walk(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &FilesRequest,
) -> Result<Listing, FsError> {
    let root = ws.open_dir(path)?;
    let want_meta = req.sort == SortKey::Modified;
    let found: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    let warnings: Mutex<Vec<WalkWarning>> = Mutex::new(Vec::new());
    let mut b = walker(ws.root(), &root, req.include_hidden, req.include_ignored);
    let globs = req.globs.clone();
    let root_for_filter = root.clone();
    b.filter_entry(move |e| {
        let dir = e.depth() > 0 && e.file_type().is_some_and(|t| t.is_dir());
        e.file_name() != ".git"
            && !(dir
                && (unreadable_ignore_files(e.path())
                    || e.path()
                        .strip_prefix(&root_for_filter)
                        .is_ok_and(|r| globs.excluded(r))))
    });
    b.build_parallel().run(|| {
        let mut batch = Batch {
            local: Vec::new(),
            sink: &found,
        };
        let mut stats = Stats::default();
        let warnings = &warnings;
        let root = &root;
        let globs = &req.globs;
        Box::new(move |item| {
            match item {
                Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => {
                    let wanted = e.path().strip_prefix(root).is_ok_and(|r| globs.wants(r));
                    if wanted && let Some(rel) = ws.relative_of(e.path()) {
                        // Sorting by time needs every file's stat, here in the
                        // walker's threads; otherwise only the files returned
                        // are stat'ed, after the cap (`stat_returned`).
                        let (size_bytes, modified) = if want_meta {
                            stats.of(ws, &rel)
                        } else {
                            (None, None)
                        };
                        batch.local.push(Entry {
                            name: e.file_name().to_string_lossy().into_owned(),
                            path: rel
                                .into_os_string()
                                .into_string()
                                .unwrap_or_else(|raw| raw.to_string_lossy().into_owned()),
                            kind: EntryType::of(e.file_type()),
                            size_bytes,
                            modified,
                            is_hidden: false,
                            is_ignored: false,
                            depth: e.depth(),
                        });
                    }
                }
                Ok(_) => {}
                Err(err) => lock(warnings).push(WalkWarning::Walk(err.to_string())),
            }
            WalkState::Continue
        })
    });
    let mut entries = found.into_inner().unwrap_or_else(|p| p.into_inner());
    match req.sort {
        SortKey::Modified => sort_entries(&mut entries, SortKey::Modified),
        _ => entries.sort_unstable_by(|a, b| a.path.cmp(&b.path)),
    }
    let truncated = entries.len() > req.max_results;
    entries.truncate(req.max_results);
    for e in &mut entries {
        e.is_hidden = e.path.split('/').any(|c| c.starts_with('.'));
    }
    if !want_meta {
        stat_returned(ws, &mut entries);
    }
    Ok(Listing {
        entries,
        truncated,
        warnings: warnings.into_inner().unwrap_or_else(|p| p.into_inner()),
    })
}

/// Fills in the sizes and times of the files returned only, after the
/// walk (sorted by path, so one directory handle serves a directory's
/// files), split over the machine's cores for a long list: one stat per
/// file on one thread was a third of a 49,000-file listing.
fn stat_returned(ws: &Workspace, entries: &mut [Entry]) {
    const PER_THREAD_AT_LEAST: usize = 2_048;
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(8)
        .min(entries.len() / PER_THREAD_AT_LEAST)
        .max(1);
    let fill = |part: &mut [Entry]| {
        let mut stats = Stats::default();
        for e in part {
            (e.size_bytes, e.modified) = stats.of(ws, Path::new(&e.path));
        }
    };
    if threads == 1 {
        fill(entries);
        return;
    }
    // Threads started here inherit the caller's confinement.
    let chunk = entries.len().div_ceil(threads);
    let fill = &fill;
    std::thread::scope(|scope| {
        for part in entries.chunks_mut(chunk) {
            scope.spawn(move || fill(part));
        }
    });
}

/// A walker thread's findings, handed over when the walker drops the thread's visitor.
pub(crate) struct Batch<'a, T> {
    local: Vec<T>,
    sink: &'a Mutex<Vec<T>>,
}

impl<'a, T> Batch<'a, T> {
    pub(crate) fn new(sink: &'a Mutex<Vec<T>>) -> Self {
        Self {
            local: Vec::new(),
            sink,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        self.local.push(item);
    }
}

impl<T> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        lock(self.sink).append(&mut self.local);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        for (p, c) in [
            ("src/main.rs", "fn main() {}"),
            ("src/lib.rs", "pub fn f() {}"),
            ("src/deep/x.rs", "x"),
            ("README.md", "readme"),
            ("build/out.o", "obj"),
            (".hidden/h.txt", "h"),
            (".gitignore", "build/\n"),
            ("node_modules/m/index.js", "m"),
        ] {
            std::fs::create_dir_all(r.join(p).parent().unwrap()).unwrap();
            std::fs::write(r.join(p), c).unwrap();
        }
        std::fs::create_dir(r.join(".git")).unwrap();
        std::fs::write(r.join(".git/HEAD"), "ref").unwrap();
        let w = Workspace::open(r).unwrap();
        (t, w)
    }

    fn dir_req(recursive: bool) -> ListRequest {
        ListRequest {
            recursive,
            max_depth: 20,
            max_entries: 1000,
            include_hidden: false,
            include_ignored: false,
            sort: SortKey::Name,
        }
    }

    fn paths(l: &Listing) -> Vec<&str> {
        l.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn list_dir_honours_ignore_and_hidden() {
        let (_t, w) = tree();
        let root = w.resolve_lexically(".").unwrap();
        let l = list_dir(&w, &root, &dir_req(false)).unwrap();
        assert_eq!(paths(&l), ["README.md", "node_modules", "src"]);
        let l = list_dir(&w, &root, &dir_req(true)).unwrap();
        assert_eq!(
            paths(&l),
            [
                "README.md",
                "node_modules",
                "node_modules/m",
                "node_modules/m/index.js",
                "src",
                "src/deep",
                "src/deep/x.rs",
                "src/lib.rs",
                "src/main.rs"
            ]
        );
        let all = ListRequest {
            include_hidden: true,
            include_ignored: true,
            ..dir_req(false)
        };
        let l = list_dir(&w, &root, &all).unwrap();
        assert_eq!(
            paths(&l),
            [
                ".gitignore",
                ".hidden",
                "README.md",
                "build",
                "node_modules",
                "src"
            ]
        );
        assert!(
            l.entries
                .iter()
                .find(|e| e.path == "build")
                .unwrap()
                .is_ignored
        );
        assert!(
            !l.entries
                .iter()
                .find(|e| e.path == "src")
                .unwrap()
                .is_ignored
        );
        let capped = ListRequest {
            max_entries: 2,
            ..dir_req(true)
        };
        let l = list_dir(&w, &root, &capped).unwrap();
        assert!(l.truncated);
        assert_eq!(paths(&l), ["README.md", "node_modules"]);
        let typed = ListRequest {
            sort: SortKey::Type,
            ..dir_req(false)
        };
        assert_eq!(
            paths(&list_dir(&w, &root, &typed).unwrap()),
            ["node_modules", "src", "README.md"]
        );
        let f = w.resolve_lexically("README.md").unwrap();
        assert!(matches!(
            list_dir(&w, &f, &dir_req(false)),
            Err(FsError::NotADirectory(_))
        ));
    }

    fn files_req(include: &[&str], exclude: &[&str]) -> FilesRequest {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        FilesRequest {
            globs: Globs::new(&s(include), &s(exclude)).unwrap(),
            include_hidden: false,
            include_ignored: false,
            max_results: 100,
            sort: SortKey::Name,
        }
    }

    #[test]
    fn list_files_globs() {
        let (_t, w) = tree();
        let root = w.resolve_lexically(".").unwrap();
        let l = list_files(&w, &root, &files_req(&[], &[])).unwrap();
        assert_eq!(
            paths(&l),
            [
                "README.md",
                "node_modules/m/index.js",
                "src/deep/x.rs",
                "src/lib.rs",
                "src/main.rs"
            ]
        );
        let l = list_files(&w, &root, &files_req(&["*.rs"], &[])).unwrap();
        assert_eq!(paths(&l), ["src/deep/x.rs", "src/lib.rs", "src/main.rs"]);
        let l = list_files(&w, &root, &files_req(&["src/*.rs"], &[])).unwrap();
        assert_eq!(paths(&l), ["src/lib.rs", "src/main.rs"]);
        let l = list_files(&w, &root, &files_req(&["**/*.rs"], &["deep"])).unwrap();
        assert_eq!(paths(&l), ["src/lib.rs", "src/main.rs"]);
        let l = list_files(&w, &root, &files_req(&[], &["node_modules", "*.md"])).unwrap();
        assert_eq!(paths(&l), ["src/deep/x.rs", "src/lib.rs", "src/main.rs"]);
        let src = w.resolve_lexically("src").unwrap();
        let l = list_files(&w, &src, &files_req(&["deep/*.rs"], &[])).unwrap();
        assert_eq!(paths(&l), ["src/deep/x.rs"]);
        let mut capped = files_req(&[], &[]);
        capped.max_results = 2;
        let l = list_files(&w, &root, &capped).unwrap();
        assert!(l.truncated);
        assert_eq!(paths(&l), ["README.md", "node_modules/m/index.js"]);
        assert!(Globs::new(&["a[".into()], &[]).is_err());
    }

    /// A workspace inside a repository: the repository's `.gitignore` and
    /// `info/exclude` above the root still apply, through the Landlock
    /// confinement of walks (which allows reading exactly those files).
    #[test]
    fn ignore_files_above_the_root_apply_to_confined_walks() {
        let t = tempfile::tempdir().unwrap();
        let repo = t.path();
        std::fs::create_dir_all(repo.join(".git/info")).unwrap();
        std::fs::write(repo.join(".git/info/exclude"), "excluded.txt\n").unwrap();
        std::fs::write(repo.join(".gitignore"), "*.log\n").unwrap();
        std::fs::create_dir_all(repo.join("ws/src")).unwrap();
        for f in ["ws/src/a.rs", "ws/x.log", "ws/excluded.txt", "ws/kept.txt"] {
            std::fs::write(repo.join(f), "x").unwrap();
        }
        let w = Workspace::open(&repo.join("ws")).unwrap();
        let root = w.resolve_lexically(".").unwrap();
        let l = list_files(&w, &root, &files_req(&[], &[])).unwrap();
        assert_eq!(paths(&l), ["kept.txt", "src/a.rs"], "{:?}", l.warnings);
        let l = list_dir(&w, &root, &dir_req(true)).unwrap();
        assert!(!paths(&l).contains(&"x.log"), "{:?}", paths(&l));
    }

    #[test]
    fn sizes_and_times_are_the_entries_own() {
        let (_t, w) = tree();
        let root = w.resolve_lexically(".").unwrap();
        let l = list_dir(&w, &root, &dir_req(true)).unwrap();
        let meta = |p: &str| std::fs::symlink_metadata(w.root().join(p)).unwrap();
        for (path, size) in [("README.md", 6), ("src/lib.rs", 13), ("src/deep/x.rs", 1)] {
            let e = l.entries.iter().find(|e| e.path == path).unwrap();
            assert_eq!(e.size_bytes, Some(size), "{path}");
            assert_eq!(e.modified, meta(path).modified().ok(), "{path}");
        }
        let mut by_time = files_req(&[], &[]);
        by_time.sort = SortKey::Modified;
        let l = list_files(&w, &root, &by_time).unwrap();
        let readme = l.entries.iter().find(|e| e.path == "README.md").unwrap();
        assert_eq!(
            (readme.size_bytes, readme.modified),
            (Some(6), meta("README.md").modified().ok())
        );
    }

    #[test]
    fn symlinks_are_listed_not_followed() {
        let (t, w) = tree();
        std::os::unix::fs::symlink(t.path(), w.root().join("src/loop")).unwrap();
        std::os::unix::fs::symlink("/etc", w.root().join("src/etc")).unwrap();
        let root = w.resolve_lexically("src").unwrap();
        let l = list_dir(&w, &root, &dir_req(true)).unwrap();
        let etc = l.entries.iter().find(|e| e.path == "src/etc").unwrap();
        assert_eq!(etc.kind, EntryType::Symlink);
        // A link's own size (its target's length), not the target's.
        assert_eq!(etc.size_bytes, Some(4));
        assert!(
            !l.entries
                .iter()
                .any(|e| e.path.starts_with("src/etc/") || e.path.starts_with("src/loop/"))
        );
    }
}
