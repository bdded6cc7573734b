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

    pub(crate) fn local(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    /// Repository-relative path of a workspace-relative one (checked by the boundary).
    pub(crate) fn repo_path(&self, ws_path: &str) -> Result<String, GitError> {
        let p = self.ws.check(ws_path)?;
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
        let unknown = |m: String| GitError::UnknownRevision {
            rev: rev.to_owned(),
            message: m,
        };
        let id = repo
            .rev_parse_single(rev)
            .map_err(|e| unknown(e.to_string()))?;
        let obj = id.object().map_err(|e| unknown(e.to_string()))?;
        let commit = obj.peel_to_commit().map_err(|e| unknown(e.to_string()))?;
        Ok(commit.id)
    }
}
