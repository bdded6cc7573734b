//! `git_log`: commits from a revision, optionally only those that touch a path.

use gix::bstr::ByteSlice;

use crate::error::GitError;
use crate::repo::GitRepo;

/// Which commits [`GitRepo::log`] returns; [`Default`]: every commit, the
/// first 20.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOptions {
    /// Only commits that change this workspace-relative path.
    pub path: Option<String>,
    /// Commits passed over first.
    pub skip: usize,
    /// Most commits returned.
    pub max_count: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            path: None,
            skip: 0,
            max_count: 20,
        }
    }
}

impl LogOptions {
    /// Only commits that change `path` (workspace-relative).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// Commits passed over first.
    pub fn skip(mut self, skip: usize) -> Self {
        self.skip = skip;
        self
    }

    /// Most commits returned.
    pub fn max_count(mut self, max: usize) -> Self {
        self.max_count = max;
        self
    }
}

/// One commit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitInfo {
    /// Full id.
    pub id: String,
    /// Abbreviated id.
    pub short_id: String,
    /// Author name.
    pub author_name: String,
    /// Author email.
    pub author_email: String,
    /// Author time (seconds since the epoch).
    pub author_time: i64,
    /// The author's UTC offset, in seconds east.
    pub author_offset: i32,
    /// Committer name.
    pub committer_name: String,
    /// Committer time (seconds since the epoch).
    pub committer_time: i64,
    /// The committer's UTC offset, in seconds east.
    pub committer_offset: i32,
    /// First line of the message.
    pub subject: String,
    /// The rest of the message.
    pub body: String,
    /// Parent ids.
    pub parents: Vec<String>,
}

/// A page of history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogOutcome {
    /// Commits, newest first.
    pub commits: Vec<CommitInfo>,
    /// More commits follow.
    pub has_more: bool,
}

pub(crate) fn commit_info(c: &gix::Commit<'_>) -> Result<CommitInfo, GitError> {
    let author = c.author().map_err(GitError::git)?;
    let committer = c.committer().map_err(GitError::git)?;
    let raw = c.message_raw_sloppy().to_str_lossy().into_owned();
    let (subject, body) = match raw.split_once("\n\n") {
        Some((s, b)) => (s.replace('\n', " "), b.trim_end().to_owned()),
        None => (raw.trim_end().replace('\n', " "), String::new()),
    };
    Ok(CommitInfo {
        id: c.id.to_string(),
        short_id: c.id().shorten_or_id().to_string(),
        author_name: author.name.to_str_lossy().into_owned(),
        author_email: author.email.to_str_lossy().into_owned(),
        author_time: author.time().map(|t| t.seconds).unwrap_or(0),
        author_offset: author.time().map(|t| t.offset).unwrap_or(0),
        committer_name: committer.name.to_str_lossy().into_owned(),
        committer_time: committer.time().map(|t| t.seconds).unwrap_or(0),
        committer_offset: committer.time().map(|t| t.offset).unwrap_or(0),
        subject,
        body,
        parents: c.parent_ids().map(|p| p.to_string()).collect(),
    })
}

impl GitRepo {
    /// Commits reachable from `rev`, newest first by commit time; with a path,
    /// only commits whose tree differs at that path from every parent (git's
    /// TREESAME rule, without history simplification of side branches).
    pub fn log(&self, rev: &str, opts: &LogOptions) -> Result<LogOutcome, GitError> {
        let LogOptions {
            path,
            skip,
            max_count,
        } = opts;
        let (skip, max_count) = (*skip, *max_count);
        // The path's boundary verdict comes before anything about history.
        let repo_path = match path {
            Some(p) => Some(self.repo_path(p)?).filter(|p| !p.is_empty()),
            None => (!self.prefix.is_empty()).then(|| self.prefix.clone()),
        };
        let repo = self.local();
        let tip = self.commit_id(&repo, rev)?;
        let walk = repo
            .rev_walk([tip])
            .sorting(gix::revision::walk::Sorting::ByCommitTime(
                Default::default(),
            ))
            .all()
            .map_err(GitError::git)?;
        let entry_id = |commit: &gix::Commit<'_>, p: &str| -> Option<gix::ObjectId> {
            let tree = commit.tree().ok()?;
            tree.lookup_entry_by_path(p)
                .ok()
                .flatten()
                .map(|e| e.object_id())
        };
        let mut commits = Vec::new();
        let mut skipped = 0;
        let mut has_more = false;
        for info in walk {
            let info = info.map_err(GitError::git)?;
            let commit = info.object().map_err(GitError::git)?;
            if let Some(p) = &repo_path {
                let mine = entry_id(&commit, p);
                let parents: Vec<_> = commit.parent_ids().collect();
                let touches = if parents.is_empty() {
                    mine.is_some()
                } else {
                    parents.iter().all(|pid| {
                        let parent = pid.object().ok().and_then(|o| o.try_into_commit().ok());
                        parent.is_none_or(|pc| entry_id(&pc, p) != mine)
                    })
                };
                if !touches {
                    continue;
                }
            }
            if skipped < skip {
                skipped += 1;
                continue;
            }
            if commits.len() == max_count {
                has_more = true;
                break;
            }
            commits.push(commit_info(&commit)?);
        }
        Ok(LogOutcome { commits, has_more })
    }
}
