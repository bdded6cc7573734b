//! Start-up cleanup of what a killed server left behind mid-commit.
//!
//! Temp files (`.ctm-patch-new-PID-N-NAME`) and backups (the same name once
//! exchanged with the target, or `.ctm-patch-old-PID-N-NAME` for a removal
//! or where the file system cannot exchange) live beside their targets and
//! carry the id of the process that made them. Each file of a commit is replaced by one
//! atomic rename, so after a crash every target is wholly old or wholly new;
//! what remains are these names. A leftover is removed only when its process
//! is gone: a live process (another server on the same workspace, or a
//! recycled id) keeps its files.

use ctm_workspace_fs::{FilesRequest, Globs, SortKey, Workspace, list_files};
use rustix::fs::AtFlags;
use rustix::io::Errno;

use crate::commit::TEMP_PREFIX;

/// What [`clean_leftovers`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leftovers {
    /// Workspace-relative paths removed.
    pub removed: Vec<String>,
    /// Leftovers kept because their process still runs.
    pub kept: usize,
    /// Leftovers that could not be removed, with why.
    pub failed: Vec<(String, String)>,
}

/// The process id in a leftover's name, if the name is one of ours.
fn owner(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let rest = rest
        .strip_prefix("new-")
        .or_else(|| rest.strip_prefix("old-"))?;
    let (pid, rest) = rest.split_once('-')?;
    let (n, _) = rest.split_once('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|p| *p > 0)
}

fn alive(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    // EPERM means it exists under another user: alive.
    !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
}

/// Lists the workspace's leftovers with [`ctm_workspace_fs::list_files`]
/// (hidden and ignored files included, `.git` and symlinks not followed)
/// and removes those of processes that are gone.
pub fn clean_leftovers(ws: &Workspace) -> Leftovers {
    let mut out = Leftovers::default();
    let listing = Globs::new(&[format!("{TEMP_PREFIX}*")], &[]).and_then(|globs| {
        let root = ws.resolve_lexically(".")?;
        let mut req = FilesRequest::default();
        req.globs = globs;
        req.include_hidden = true;
        req.include_ignored = true;
        req.max_results = usize::MAX;
        req.sort = SortKey::Name;
        list_files(ws, &root, &req)
    });
    let entries = match listing {
        Ok(l) => l.entries,
        Err(e) => {
            out.failed.push((".".into(), e.to_string()));
            return out;
        }
    };
    let me = std::process::id();
    for entry in entries {
        let Some(pid) = owner(&entry.name) else {
            continue;
        };
        if u32::try_from(pid).is_ok_and(|p| p == me) || alive(pid) {
            out.kept += 1;
            continue;
        }
        match remove(ws, &entry.path) {
            Ok(()) => out.removed.push(entry.path),
            Err(e) => out.failed.push((entry.path, e)),
        }
    }
    out
}

/// Unlinks `rel` through a directory opened beneath the root.
fn remove(ws: &Workspace, rel: &str) -> Result<(), String> {
    let wp = ws.resolve_lexically(rel).map_err(|e| e.to_string())?;
    let (dir, name) = ws.open_parent(&wp, false).map_err(|e| e.to_string())?;
    match rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(std::io::Error::from(e).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_parsed_from_our_names_only() {
        assert_eq!(owner(".ctm-patch-new-123-4-app.py"), Some(123));
        assert_eq!(owner(".ctm-patch-old-77-0-a-b.txt"), Some(77));
        assert_eq!(owner(".ctm-patch-new-123-x-app.py"), None);
        assert_eq!(owner(".ctm-patch-mid-123-4-app.py"), None);
        assert_eq!(owner(".ctm-patch-new-0-4-app.py"), None);
        assert_eq!(owner("app.py"), None);
    }
}
