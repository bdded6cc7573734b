//! Opening the repository of the workspace.

use std::path::Path;

use ctm_workspace_fs::Workspace;
use gix::bstr::{BString, ByteSlice};

use crate::error::GitError;

/// The repository of one workspace.
#[derive(Clone)]
pub struct GitRepo {
    pub(crate) repo: gix::ThreadSafeRepository,
    /// The workspace below the work tree (`""` when they coincide), `/`-separated.
    pub(crate) prefix: String,
    pub(crate) ws: Workspace,
}

impl std::fmt::Debug for GitRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitRepo")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl GitRepo {
    /// Opens the repository whose work tree is the workspace or contains it.
    pub fn open(ws: &Workspace) -> Result<Self, GitError> {
        let root = ws.root();
        let dot_git = root.join(".git");
        if let Ok(meta) = std::fs::symlink_metadata(&dot_git) {
            let escapes = |p: &Path| p.canonicalize().map_or(true, |c| !c.starts_with(root));
            if meta.file_type().is_symlink() {
                if escapes(&dot_git) {
                    return Err(GitError::LinkOutside(".git is a symlink".into()));
                }
            } else if !meta.is_file() && !meta.is_dir() {
                // A FIFO or a device at .git: never opened.
                return Err(GitError::NotARepository);
            } else if meta.is_file() {
                match ctm_workspace_fs::gitdir_link(&dot_git) {
                    Some(target) if !escapes(&target) => {}
                    Some(target) => {
                        return Err(GitError::LinkOutside(target.display().to_string()));
                    }
                    None => {
                        return Err(GitError::LinkOutside(
                            ".git is a file without a gitdir line".into(),
                        ));
                    }
                }
            }
        }
        let git_dir = if dot_git.is_dir() {
            Some(dot_git.clone())
        } else {
            ctm_workspace_fs::gitdir_link(&dot_git)
        };
        if let Some(dir) = git_dir {
            let common =
                ctm_workspace_fs::read_small(&dir.join("commondir")).map(|c| dir.join(c.trim()));
            let mut dirs = vec![dir.as_path()];
            dirs.extend(common.as_deref());
            special_file(&dirs)?;
        }
        let mut opts = gix::open::Options::isolated();
        opts = opts.lossy_config(true);
        let repo = gix::ThreadSafeRepository::discover_opts(
            root,
            gix::discover::upwards::Options::default(),
            gix::sec::trust::Mapping {
                full: opts.clone(),
                reduced: opts,
            },
        )
        .map_err(|_| GitError::NotARepository)?;
        let workdir = repo
            .work_dir()
            .ok_or(GitError::NotARepository)?
            .canonicalize()
            .map_err(GitError::git)?;
        let prefix = root
            .strip_prefix(&workdir)
            .map_err(|_| GitError::NotARepository)?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            repo,
            prefix,
            ws: ws.clone(),
        })
    }

    /// Refuses, before any read, a git directory whose files read by every
    /// operation include a FIFO, socket or device (see [`special_file`]).
    /// Checked at every call: the repository handle is reused.
    pub fn check_special_files(&self) -> Result<(), GitError> {
        let local = self.repo.to_thread_local();
        special_file(&[local.git_dir(), local.common_dir()])
    }

    /// The repository for one call. The object database looks at its pack
    /// directory once, here (packs written since the last call are found),
    /// and not again during the call: by default gix re-reads the pack
    /// directory whenever a lookup misses every pack, which an abbreviated
    /// id of a loose object always does (`git_log` of 50 loose commits read
    /// it 50 times, a quarter of the call).
    pub(crate) fn local(&self) -> gix::Repository {
        let mut repo = self.repo.to_thread_local();
        let _ = repo.has_object(gix::ObjectId::null(repo.object_hash()));
        repo.objects.refresh_never();
        repo
    }

    /// Repository-relative path of a workspace-relative one (checked by the boundary).
    pub(crate) fn repo_path(&self, ws_path: &str) -> Result<String, GitError> {
        let p = self.ws.resolve_beneath(ws_path)?;
        let rel = if p.is_root() {
            String::new()
        } else {
            p.display()
        };
        Ok(match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel,
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        })
    }

    /// Workspace-relative form of a repository path (`None` outside the workspace).
    pub(crate) fn ws_path(&self, repo_path: &[u8]) -> Option<String> {
        let s = repo_path.to_str_lossy();
        if self.prefix.is_empty() {
            return Some(s.into_owned());
        }
        s.strip_prefix(&format!("{}/", self.prefix))
            .map(str::to_owned)
    }

    /// Pathspec patterns limiting to the workspace (and optional paths).
    pub(crate) fn pathspecs(&self, paths: &[String]) -> Result<Vec<BString>, GitError> {
        let mut out = Vec::new();
        for p in paths {
            let rp = self.repo_path(p)?;
            if !rp.is_empty() {
                out.push(BString::from(format!(":(literal){rp}")));
            }
        }
        if out.is_empty() && !self.prefix.is_empty() {
            out.push(BString::from(format!(":(literal){}", self.prefix)));
        }
        Ok(out)
    }

    /// Resolves a revision expression to a commit id.
    pub(crate) fn commit_id(
        &self,
        repo: &gix::Repository,
        rev: &str,
    ) -> Result<gix::ObjectId, GitError> {
        let unknown = |source: crate::error::Cause| GitError::UnknownRevision {
            rev: rev.to_owned(),
            source,
        };
        let id = repo.rev_parse_single(rev).map_err(|e| unknown(e.into()))?;
        let obj = id.object().map_err(|e| unknown(e.into()))?;
        let commit = obj.peel_to_commit().map_err(|e| unknown(e.into()))?;
        Ok(commit.id)
    }
}

/// Whether a file git reads on every operation (`HEAD`, the ref it names,
/// `config`, `index`, `packed-refs`, `commondir`, `shallow`,
/// `info/exclude`) is a FIFO,
/// socket or device in one of `dirs`. Commands cannot make one, but in
/// dangerous mode or from outside the server one can appear, and gix would
/// block on it for ever.
fn special_file(dirs: &[&Path]) -> Result<(), GitError> {
    // `metadata` never blocks on a FIFO; an absent file is fine.
    let special = |path: &Path| std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir());
    for dir in dirs {
        for name in [
            "HEAD",
            "config",
            "index",
            "packed-refs",
            "commondir",
            "shallow",
            "info/exclude",
        ] {
            if special(&dir.join(name)) {
                return Err(GitError::SpecialFile(name.into()));
            }
        }
    }
    // The branch HEAD names, as a loose ref.
    let head = dirs
        .first()
        .and_then(|d| ctm_workspace_fs::read_small(&d.join("HEAD")));
    if let Some(target) = head
        .as_deref()
        .and_then(|h| h.trim().strip_prefix("ref: "))
        .filter(|r| r.starts_with("refs/") && !r.split('/').any(|c| c == ".."))
    {
        for dir in dirs {
            if special(&dir.join(target)) {
                return Err(GitError::SpecialFile(target.into()));
            }
        }
    }
    Ok(())
}
