//! Git work confined to the workspace.
//!
//! The repository is the workspace's, and commands can write it: a symlink
//! planted in `.git` (`packed-refs -> /etc/shadow`) or an `alternates` file
//! naming another repository must not make the host read outside the
//! workspace. [`confined`] runs git work (opening a [`crate::GitRepo`] and
//! every operation on it) on a thread Landlock lets read only beneath the
//! workspace and the user's and system's git configuration files.

use std::path::PathBuf;

use ctm_workspace_fs::Workspace;

/// The user's and the system's git configuration, ignore and attributes
/// files, which git operations may read besides the repository.
fn user_git_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["/etc/gitconfig", "/etc/gitattributes"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let Some(h) = &home {
        v.push(h.join(".gitconfig"));
    }
    if let Some(x) = xdg {
        for f in ["config", "ignore", "attributes"] {
            v.push(x.join("git").join(f));
        }
    }
    v
}

/// Runs `work` where only the workspace and the git configuration files
/// can be read (unconfined where the kernel has no Landlock).
pub fn confined<T: Send>(ws: &Workspace, work: impl FnOnce() -> T + Send) -> T {
    ctm_workspace_fs::confined_with(ws, &user_git_files(), work)
}
