//! One opened repository per workspace, reused across calls.

use std::sync::{Arc, Mutex, MutexGuard};

use ctm_workspace_fs::Workspace;

use crate::confine::confined;
use crate::error::GitError;
use crate::repo::GitRepo;

/// The repository of one workspace, opened on first use and reused after
/// (gix re-reads refs and the index on every call). Clones share it.
#[derive(Debug, Clone)]
pub struct RepoCache {
    ws: Workspace,
    repo: Arc<Mutex<Option<GitRepo>>>,
}

impl RepoCache {
    /// A cache for the repository of `ws`; nothing is opened yet.
    pub fn new(ws: Workspace) -> Self {
        Self {
            ws,
            repo: Arc::default(),
        }
    }

    /// The workspace.
    pub fn workspace(&self) -> &Workspace {
        &self.ws
    }

    /// Runs `work` on the repository, opening it first if no call has yet,
    /// and refusing a git directory with special files
    /// ([`GitRepo::check_special_files`]) on every call. Opening and `work`
    /// run [`confined`] to the workspace. A repository that fails to open is
    /// not kept: the next call tries again. Blocks; a file in `.git` that
    /// never finishes reading blocks it for ever, so an async host runs it
    /// on a blocking thread it can abandon.
    pub fn with_repo<T: Send>(
        &self,
        work: impl FnOnce(&GitRepo) -> Result<T, GitError> + Send,
    ) -> Result<T, GitError> {
        let cached = self.lock().clone();
        let (result, opened) = confined(&self.ws, || {
            let repo = match cached {
                Some(r) => r,
                None => match GitRepo::open(&self.ws) {
                    Ok(r) => r,
                    Err(e) => return (Err(e), None),
                },
            };
            if let Err(e) = repo.check_special_files() {
                return (Err(e), Some(repo));
            }
            (work(&repo), Some(repo))
        });
        if let Some(r) = opened {
            *self.lock() = Some(r);
        }
        result
    }

    fn lock(&self) -> MutexGuard<'_, Option<GitRepo>> {
        self.repo.lock().unwrap_or_else(|p| p.into_inner())
    }
}
