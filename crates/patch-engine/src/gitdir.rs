//! Where a write would land in a git directory, decided on the real,
//! resolved location: a symlink to `.git` (`gl -> .git`, then
//! `gl/config`), a `.git` file's `gitdir:` target, a bare repository in the
//! workspace. Git runs programs named in a repository's config and hooks,
//! so safe mode writes none of it.

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
fn looks_like_git_dir(d: &Path) -> bool {
    (d.join("objects").is_dir() && d.join("refs").is_dir())
        || (d.join("HEAD").is_file() && d.join("commondir").is_file())
}

/// The real path of an open directory (from `/proc/self/fd`).
fn real_path(dir: impl AsFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd())).ok()
}

/// Whether creating or changing `rest` (workspace-relative components
/// below the directory `dir`, itself opened beneath the root) writes into a
/// git directory.
pub(crate) fn writes_git_dir(ws: &Workspace, dir: impl AsFd, rest: &Path) -> bool {
    if rest
        .components()
        .any(|c| matches!(c, Component::Normal(n) if is_git_name(n)))
    {
        return true;
    }
    let root = ws.root();
    let Some(real) = real_path(dir) else {
        // No /proc: the lexical verdict is all there is.
        return false;
    };
    let Ok(rel) = real.strip_prefix(root) else {
        // Not beneath the root: refuse rather than guess.
        return true;
    };
    if rel
        .components()
        .any(|c| matches!(c, Component::Normal(n) if is_git_name(n)))
    {
        return true;
    }
    real.ancestors()
        .take_while(|a| a.starts_with(root))
        .any(looks_like_git_dir)
}

/// [`writes_git_dir`] for a path that may not exist yet: decided at its
/// nearest existing ancestor directory.
pub(crate) fn path_writes_git_dir(ws: &Workspace, relative: &Path) -> bool {
    let mut ancestor = relative.to_path_buf();
    loop {
        let popped = ancestor.pop();
        let shown = if ancestor.as_os_str().is_empty() {
            ".".to_owned()
        } else {
            ancestor.to_string_lossy().into_owned()
        };
        if let Ok(p) = ws.resolve_lexically(&shown)
            && let Ok(fd) = ws.open_dir_handle(&p)
        {
            let rest = relative.strip_prefix(&ancestor).unwrap_or(relative);
            return writes_git_dir(ws, fd, rest);
        }
        if !popped {
            return relative
                .components()
                .any(|c| matches!(c, Component::Normal(n) if is_git_name(n)));
        }
    }
}
