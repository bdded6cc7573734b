//! Where a write would land in a git directory, decided on the real,
//! resolved location: a symlink to `.git` (`gl -> .git`, then
//! `gl/config`), a `.git` file's `gitdir:` target, a bare repository in the
//! workspace. Git runs programs named in a repository's config and hooks,
//! so safe mode writes none of it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Component, Path, PathBuf};

use ctm_workspace_fs::Workspace;

fn is_git_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().eq_ignore_ascii_case(b".git")
}

/// A git directory, whatever its name: `objects/` and `refs/` (a
/// repository, or the common directory of linked worktrees, which has no
/// `HEAD`), or `HEAD` with a `commondir` file (a linked worktree's own).
///
/// Git asks only that `objects` and `refs` be searchable (`access(X_OK)`),
/// which an executable file is too: any kind of entry counts.
fn looks_like_git_dir(d: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(d.join(n)).is_ok();
    (has("objects") && has("refs")) || (has("HEAD") && has("commondir"))
}

/// The entries that make a directory a git directory.
const MARKERS: [&str; 4] = ["HEAD", "objects", "refs", "commondir"];

/// Whether writing `relative` would complete a git directory: in any
/// directory on its way (a component named `objects` is made as a parent
/// directory when it is missing), with what is there and what this same
/// call names there: `objects` and `refs`, or `HEAD` and `commondir`. Git
/// would then run the programs of the `config` beside them.
pub(crate) fn completes_git_dir(ws: &Workspace, relative: &Path, seen: &mut GitVerdicts) -> bool {
    let mut dir = PathBuf::new();
    for c in relative.components() {
        let Component::Normal(name) = c else {
            return false;
        };
        if let Some(name) = name.to_str().filter(|n| MARKERS.contains(n)) {
            // Keyed on the real directory: `al -> src` and `src/self -> .`
            // name one directory three ways.
            let on_disk = real_dir(&ws.root().join(&dir));
            let named = seen.markers.entry(on_disk.clone()).or_default();
            if !named.iter().any(|n| n == name) {
                named.push(name.to_owned());
            }
            let has = |n: &str| {
                named.iter().any(|m| m == n) || std::fs::symlink_metadata(on_disk.join(n)).is_ok()
            };
            if (has("objects") && has("refs")) || (has("HEAD") && has("commondir")) {
                return true;
            }
        }
        dir.push(name);
    }
    false
}

/// `path` with its longest existing prefix resolved (symlinks followed),
/// the rest as written.
fn real_dir(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (
            existing.file_name().map(OsStr::to_os_string),
            existing.pop(),
        ) {
            (Some(name), true) => rest.push(name),
            _ => return path.to_path_buf(),
        }
    }
}

/// The real path of an open directory (from `/proc/self/fd`).
fn real_path(dir: impl AsFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd())).ok()
}

/// Whether `rest` (relative components) names a `.git` anywhere.
fn names_git_dir(rest: &Path) -> bool {
    rest.components()
        .any(|c| matches!(c, Component::Normal(n) if is_git_name(n)))
}

/// Whether the directory `dir`, opened beneath the root, is (in) a git
/// directory: decided on its real path, so on the directory actually
/// opened whatever was renamed or swapped before it was opened.
pub(crate) fn dir_in_git_dir(ws: &Workspace, dir: impl AsFd) -> bool {
    let root = ws.root();
    let Some(real) = real_path(dir) else {
        // No /proc: the lexical verdict is all there is.
        return false;
    };
    let Ok(rel) = real.strip_prefix(root) else {
        // Not beneath the root: refuse rather than guess.
        return true;
    };
    if names_git_dir(rel) {
        return true;
    }
    real.ancestors()
        .take_while(|a| a.starts_with(root))
        .any(looks_like_git_dir)
}

/// Whether creating or changing the file `name` in the directory `dir`
/// (opened beneath the root) writes into a git directory, given `dir`'s
/// own verdict from [`dir_in_git_dir`].
pub(crate) fn writes_git_dir_in(dir_verdict: bool, name: &OsStr) -> bool {
    dir_verdict || is_git_name(name)
}

/// The verdicts of [`dir_in_git_dir`] on the directories one patch looked
/// at while planning, by workspace-relative path. Made afresh for each
/// patch and dropped with it: a directory that becomes a git directory
/// later is judged again by the next patch (and at commit time every
/// directory is judged again on the handle written through).
#[derive(Default)]
pub(crate) struct GitVerdicts {
    by_dir: HashMap<PathBuf, bool>,
    /// The git-directory markers this call names, by real directory.
    markers: HashMap<PathBuf, Vec<String>>,
}

/// Whether creating or changing `relative` (a workspace-relative path that
/// may not exist yet) writes into a git directory: decided at its nearest
/// existing ancestor directory, whose verdict `seen` remembers for the
/// rest of the patch.
pub(crate) fn path_writes_git_dir(ws: &Workspace, relative: &Path, seen: &mut GitVerdicts) -> bool {
    let mut ancestor = relative.to_path_buf();
    loop {
        let popped = ancestor.pop();
        let rest = || relative.strip_prefix(&ancestor).unwrap_or(relative);
        if let Some(verdict) = seen.by_dir.get(&ancestor) {
            return *verdict || names_git_dir(rest());
        }
        let shown = if ancestor.as_os_str().is_empty() {
            ".".to_owned()
        } else {
            ancestor.to_string_lossy().into_owned()
        };
        if let Ok(p) = ws.resolve_lexically(&shown)
            && let Ok(fd) = ws.open_dir_handle(&p)
        {
            let verdict = dir_in_git_dir(ws, fd);
            seen.by_dir.insert(ancestor.clone(), verdict);
            return verdict || names_git_dir(rest());
        }
        if !popped {
            return names_git_dir(relative);
        }
    }
}
