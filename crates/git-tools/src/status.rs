//! `git_status`: staged (X), unstaged (Y) and untracked entries, like
//! `git status --porcelain`: changes by path, then untracked paths, an
//! untracked directory collapsed to `dir/` as git does by default; plus
//! branch and upstream.

use std::collections::BTreeMap;

use gix::bstr::ByteSlice;
use gix::status::index_worktree::Item as WorktreeItem;
use gix_status_compat::*;

use crate::error::GitError;
use crate::repo::GitRepo;

mod gix_status_compat {
    pub use gix::status::Item;
    pub use gix::status::UntrackedFiles;
}

/// What [`GitRepo::status`] lists; [`Default`]: the whole workspace,
/// untracked files included, at most 1,000 entries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusOptions {
    /// Only entries at or below this workspace-relative path.
    pub path: Option<String>,
    /// List untracked files (an untracked directory as `dir/`).
    pub include_untracked: bool,
    /// Most entries returned.
    pub max_entries: usize,
}

impl Default for StatusOptions {
    fn default() -> Self {
        Self {
            path: None,
            include_untracked: true,
            max_entries: 1_000,
        }
    }
}

impl StatusOptions {
    /// Only entries at or below `path` (workspace-relative).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// Whether untracked files are listed.
    pub fn include_untracked(mut self, include: bool) -> Self {
        self.include_untracked = include;
        self
    }

    /// Most entries returned.
    pub fn max_entries(mut self, max: usize) -> Self {
        self.max_entries = max;
        self
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusEntry {
    /// Workspace-relative path (the destination of a rename).
    pub path: String,
    /// The source of a staged rename.
    pub orig_path: Option<String>,
    /// Index vs HEAD: `.`, `A`, `M`, `D`, `R`, `T`, or `?` for untracked.
    pub staged: char,
    /// Worktree vs index: `.`, `M`, `D`, `T`, `U` (conflict), or `?`.
    pub unstaged: char,
}

impl StatusEntry {
    /// The porcelain `XY` pair.
    pub fn xy(&self) -> String {
        format!("{}{}", self.staged, self.unstaged)
    }
}

/// A status listing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusOutcome {
    /// Current branch (`None` when detached).
    pub branch: Option<String>,
    /// HEAD commit, unless unborn.
    pub head: Option<String>,
    /// The configured upstream, when there is one.
    pub upstream: Option<String>,
    /// Commits ahead of / behind the upstream.
    pub ahead_behind: Option<(usize, usize)>,
    /// Changed entries by path, then untracked ones by path (git's order),
    /// at most the cap.
    pub entries: Vec<StatusEntry>,
    /// More entries exist.
    pub truncated: bool,
}

impl GitRepo {
    /// The status of the workspace, or of [`StatusOptions::path`].
    pub fn status(&self, opts: &StatusOptions) -> Result<StatusOutcome, GitError> {
        let repo = self.local();
        let specs = self.pathspecs(opts.path.as_slice())?;
        let mut by_path: BTreeMap<String, StatusEntry> = BTreeMap::new();
        let untracked = if opts.include_untracked {
            UntrackedFiles::Collapsed
        } else {
            UntrackedFiles::None
        };
        let iter = repo
            .status(gix::progress::Discard)
            .map_err(GitError::git)?
            .untracked_files(untracked)
            .index_worktree_rewrites(None)
            .into_iter(specs)
            .map_err(GitError::git)?;
        let entry =
            |by_path: &mut BTreeMap<String, StatusEntry>, repo_path: &[u8]| -> Option<String> {
                let p = self.ws_path(repo_path)?;
                by_path.entry(p.clone()).or_insert_with(|| StatusEntry {
                    path: p.clone(),
                    orig_path: None,
                    staged: '.',
                    unstaged: '.',
                });
                Some(p)
            };
        for item in iter {
            let item = item.map_err(GitError::git)?;
            match item {
                Item::TreeIndex(change) => {
                    use gix::diff::index::Change;
                    let (loc, code, orig) = match &change {
                        Change::Addition { location, .. } => (location.to_vec(), 'A', None),
                        Change::Deletion { location, .. } => (location.to_vec(), 'D', None),
                        Change::Modification {
                            location,
                            previous_entry_mode,
                            entry_mode,
                            ..
                        } => (
                            location.to_vec(),
                            if (previous_entry_mode.bits() & 0o170000)
                                != (entry_mode.bits() & 0o170000)
                            {
                                'T'
                            } else {
                                'M'
                            },
                            None,
                        ),
                        Change::Rewrite {
                            location,
                            source_location,
                            copy,
                            ..
                        } => (
                            location.to_vec(),
                            if *copy { 'C' } else { 'R' },
                            Some(source_location.to_vec()),
                        ),
                    };
                    if let Some(e) = entry(&mut by_path, &loc).and_then(|p| by_path.get_mut(&p)) {
                        e.staged = code;
                        e.orig_path = orig.and_then(|o| self.ws_path(&o));
                    }
                }
                Item::IndexWorktree(wt) => {
                    use gix::status::index_worktree::iter::Summary;
                    let Some(summary) = wt.summary() else {
                        continue;
                    };
                    let code = match summary {
                        Summary::Removed => 'D',
                        Summary::Added => '?',
                        Summary::Modified => 'M',
                        Summary::TypeChange => 'T',
                        Summary::Renamed | Summary::Copied => 'M',
                        Summary::IntentToAdd => 'A',
                        Summary::Conflict => 'U',
                    };
                    let path = match &wt {
                        WorktreeItem::Modification { rela_path, .. } => rela_path.to_vec(),
                        WorktreeItem::DirectoryContents { entry: e, .. } => {
                            let mut p = e.rela_path.to_vec();
                            // A collapsed untracked directory, named as git names it.
                            if e.disk_kind == Some(gix::dir::entry::Kind::Directory) {
                                p.push(b'/');
                            }
                            p
                        }
                        WorktreeItem::Rewrite { dirwalk_entry, .. } => {
                            dirwalk_entry.rela_path.to_vec()
                        }
                    };
                    if let Some(e) = entry(&mut by_path, &path).and_then(|p| by_path.get_mut(&p)) {
                        if code == '?' {
                            e.staged = '?';
                        }
                        e.unstaged = code;
                    }
                }
            }
        }
        let (mut entries, untracked): (Vec<StatusEntry>, Vec<StatusEntry>) =
            by_path.into_values().partition(|e| e.staged != '?');
        entries.extend(untracked);
        let truncated = entries.len() > opts.max_entries;
        entries.truncate(opts.max_entries);
        let (branch, head) = match repo.head() {
            Ok(mut h) => (
                h.referent_name()
                    .map(|n| n.shorten().to_str_lossy().into_owned()),
                h.try_peel_to_id().ok().flatten().map(|id| id.to_string()),
            ),
            Err(_) => (None, None),
        };
        let (upstream, ahead_behind) = self.upstream(&repo, branch.as_deref());
        Ok(StatusOutcome {
            branch,
            head,
            upstream,
            ahead_behind,
            entries,
            truncated,
        })
    }

    fn upstream(
        &self,
        repo: &gix::Repository,
        branch: Option<&str>,
    ) -> (Option<String>, Option<(usize, usize)>) {
        let Some(branch) = branch else {
            return (None, None);
        };
        let cfg = repo.config_snapshot();
        let remote = cfg.string(format!("branch.{branch}.remote").as_str());
        let merge = cfg.string(format!("branch.{branch}.merge").as_str());
        let (Some(remote), Some(merge)) = (remote, merge) else {
            return (None, None);
        };
        let merge = merge.to_str_lossy().into_owned();
        let short = merge
            .strip_prefix("refs/heads/")
            .unwrap_or(&merge)
            .to_owned();
        let remote = remote.to_str_lossy().into_owned();
        let upstream_ref = if remote == "." {
            merge.clone()
        } else {
            format!("refs/remotes/{remote}/{short}")
        };
        let name = if remote == "." {
            short
        } else {
            format!("{remote}/{short}")
        };
        let ids = (|| {
            let local = repo
                .rev_parse_single(format!("refs/heads/{branch}").as_str())
                .ok()?
                .detach();
            let up = repo.rev_parse_single(upstream_ref.as_str()).ok()?.detach();
            let count = |tip: gix::ObjectId, hide: gix::ObjectId| -> Option<usize> {
                Some(
                    repo.rev_walk([tip])
                        .with_hidden([hide])
                        .all()
                        .ok()?
                        .filter_map(Result::ok)
                        .count(),
                )
            };
            Some((count(local, up)?, count(up, local)?))
        })();
        (Some(name), ids)
    }
}
