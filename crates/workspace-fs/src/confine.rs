//! Walks by path, confined by the kernel to the workspace.
//!
//! The `ignore` walker opens directories by path. A directory swapped for a
//! symlink to the outside between our check and its `opendir` would let a
//! listing show names from outside (seen in the swap-race test). So every
//! walk runs on a thread of its own that Landlock allows to read files and
//! list directories only beneath the workspace root handle, plus the few
//! ignore files above the root that walks honour. The walker's own threads
//! inherit the restriction; the thread ends with the walk.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};

use crate::path::Workspace;

/// Whether walks are confined here: decided by the first walk.
static ENFORCED: OnceLock<bool> = OnceLock::new();

/// Whether walks on this kernel are confined by Landlock (known after the
/// first walk; `None` before it).
pub fn walks_confined() -> Option<bool> {
    ENFORCED.get().copied()
}

/// Runs `walk` on a new thread that may read only beneath the workspace.
/// Where the kernel has no Landlock the walk runs unconfined, as before.
pub(crate) fn confined<T: Send>(ws: &Workspace, walk: impl FnOnce() -> T + Send) -> T {
    confined_with(ws, &[], walk)
}

/// Runs `work` on a new thread that may read only beneath the workspace,
/// the ignore files above it, and the files in `also` (e.g. the user's git
/// configuration); what the workspace's contents point to elsewhere — a
/// symlink planted in `.git`, an `alternates` file — cannot be read there.
/// Unconfined where the kernel has no Landlock ([`walks_confined`]).
pub fn confined_with<T: Send>(
    ws: &Workspace,
    also: &[PathBuf],
    work: impl FnOnce() -> T + Send,
) -> T {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            let enforced = restrict(ws, also);
            let _ = ENFORCED.set(enforced);
            work()
        });
        match thread.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Restricts the calling thread; true when the kernel enforces it.
fn restrict(ws: &Workspace, also: &[PathBuf]) -> bool {
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let ruleset = Ruleset::default()
        .handle_access(read)
        .and_then(Ruleset::create)
        .and_then(|r| r.add_rule(PathBeneath::new(ws.root_fd().as_fd(), read)));
    let Ok(mut ruleset) = ruleset else {
        return false;
    };
    let also = also.iter().filter(|p| p.is_file()).cloned();
    for file in ignore_files_above(ws.root()).into_iter().chain(also) {
        if let Ok(fd) = PathFd::new(&file) {
            match ruleset.add_rule(PathBeneath::new(fd, AccessFs::ReadFile)) {
                Ok(r) => ruleset = r,
                Err(_) => return false,
            }
        }
    }
    match ruleset.restrict_self() {
        Ok(status) => status.ruleset != RulesetStatus::NotEnforced,
        Err(_) => false,
    }
}

/// The files outside the root that the walker reads: ignore files of every
/// ancestor, and the git excludes of a repository whose `.git` is a file
/// pointing elsewhere (a linked worktree).
fn ignore_files_above(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut git_dirs = Vec::new();
    for dir in root.ancestors() {
        if dir != root {
            out.extend([dir.join(".gitignore"), dir.join(".ignore")]);
            let dot_git = dir.join(".git");
            out.extend([dot_git.clone(), dot_git.join("info/exclude")]);
        }
        if let Some(target) = gitdir_link(&dir.join(".git")) {
            git_dirs.push(target);
        }
    }
    for git_dir in git_dirs {
        out.extend([git_dir.join("info/exclude"), git_dir.join("commondir")]);
        // A linked worktree's excludes live in the common directory.
        if let Some(common) = read_small(&git_dir.join("commondir")) {
            let common = git_dir.join(common.trim());
            out.push(common.join("info/exclude"));
        }
    }
    // Only files outside the root, reached without any symlink: a path
    // inside the root is readable anyway, and one that a link (planted by a
    // command) turns into an outside file must not become readable.
    let lexical = |p: &Path| {
        let mut n = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::ParentDir => {
                    n.pop();
                }
                std::path::Component::CurDir => {}
                other => n.push(other),
            }
        }
        n
    };
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in out {
        let n = lexical(&p);
        if !n.starts_with(root)
            && n.canonicalize().is_ok_and(|c| c == n)
            && std::fs::symlink_metadata(&n).is_ok_and(|m| m.file_type().is_file())
            && !kept.contains(&n)
        {
            kept.push(n);
        }
    }
    kept
}

/// Where a `.git` *file* points (its `gitdir:` line, relative to the file's
/// directory unless absolute); `None` for a directory, a missing file or a
/// file without that line.
pub fn gitdir_link(dot_git: &Path) -> Option<PathBuf> {
    let text = read_small(dot_git)?;
    let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    Some(dot_git.parent()?.join(target))
}

/// Reads a small regular file (a `.git` pointer, `commondir`): never a
/// symlink, FIFO or device, never more than 64 KiB, never blocking. A
/// command can put anything at `.git`.
pub fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: u64 = 64 * 1024;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() || meta.len() > MAX {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_free_flags())
        .open(path)
        .ok()?;
    let mut text = String::new();
    file.take(MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`.
fn libc_free_flags() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY)
        .bits() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "reads that the confinement must allow or refuse"
    )]
    fn a_confined_thread_reads_beneath_the_root_only() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/in.txt"), "in").unwrap();
        std::fs::write(t.path().join("out.txt"), "out").unwrap();
        std::fs::write(t.path().join(".gitignore"), "*.log\n").unwrap();
        let ws = Workspace::open(&root).unwrap();
        let (inside, outside, listed_out, parent_ignore) = confined(&ws, || {
            (
                std::fs::read_to_string(root.join("sub/in.txt")).is_ok(),
                std::fs::read_to_string(t.path().join("out.txt")).is_ok(),
                std::fs::read_dir(t.path()).is_ok(),
                std::fs::read_to_string(t.path().join(".gitignore")).is_ok(),
            )
        });
        assert!(inside);
        eprintln!("walks confined: {:?}", walks_confined());
        if walks_confined() == Some(true) {
            assert!(!outside && !listed_out, "read outside while confined");
            assert!(parent_ignore, "an ignore file above the root was refused");
        }
        // The caller's own thread is not confined.
        assert!(std::fs::read_to_string(t.path().join("out.txt")).is_ok());
    }
}
