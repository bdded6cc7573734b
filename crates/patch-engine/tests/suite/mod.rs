mod faults;
mod scenarios;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ctm_patch_engine::{PatchError, PlanError};

/// Every file under `root` (but `.keep` markers): bytes and permission bits.
pub fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else if e.file_name() != ".keep" {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(
                    rel,
                    (
                        std::fs::read(&p).unwrap(),
                        meta.permissions().mode() & 0o777,
                    ),
                );
            }
        }
    }
    out
}

/// Copies `from` into `to`, keeping permission bits.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (rel, (bytes, mode)) in tree(from) {
        let dest = to.join(&rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(&dest, bytes).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// A short, stable name of an error's kind (the scenarios' `error.json`).
pub fn kind(e: &PatchError) -> &'static str {
    match e {
        PatchError::Parse(_) => "parse",
        PatchError::Path(_) => "path",
        PatchError::Plan { error, .. } => match **error {
            PlanError::ContextNotFound { .. } | PlanError::AnchorNotFound { .. } => {
                "context_not_found"
            }
            PlanError::Ambiguous { .. } => "ambiguous",
            PlanError::Overlap { .. } => "overlap",
            // Both enums are `#[non_exhaustive]`: a variant added later
            // has no scenario kind until one is named here.
            _ => "unnamed",
        },
        PatchError::NotFound { .. } => "not_found",
        PatchError::AlreadyExists { .. } => "already_exists",
        PatchError::IsDirectory(_) => "is_directory",
        PatchError::NotRegular { .. } => "not_regular",
        PatchError::TooLarge { .. } => "too_large",
        PatchError::PatchTooLarge { .. } => "patch_too_large",
        PatchError::Stopped { .. } => "stopped",
        PatchError::Encoding { .. } => "encoding",
        PatchError::AfterDelete(_) => "after_delete",
        PatchError::GitDirProtected(_) => "git_dir",
        PatchError::NoChanges => "no_changes",
        PatchError::Conflict { .. } => "conflict",
        PatchError::Io { .. } => "io",
        PatchError::RollbackFailed { .. } => "rollback_failed",
        _ => "unnamed",
    }
}
