//! `git_blame`: per-line attribution of a committed file.

use gix::bstr::ByteSlice;

use crate::error::GitError;
use crate::repo::GitRepo;

/// Objects a blame keeps decoded while it walks the history: each tree
/// and blob is read for the commit that has it and again for its child.
const BLAME_OBJECT_CACHE_BYTES: usize = 16 * 1024 * 1024;
/// Decoded delta bases kept while one blame runs (git keeps up to 96 MiB).
const BLAME_PACK_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// Which lines [`GitRepo::blame`] attributes; [`Default`]: from line 1 to
/// the end, at most 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlameOptions {
    /// First line (1-based).
    pub start_line: u32,
    /// Last line (inclusive); the end of the file when `None`.
    pub end_line: Option<u32>,
    /// Most lines returned.
    pub max_lines: u32,
}

impl Default for BlameOptions {
    fn default() -> Self {
        Self {
            start_line: 1,
            end_line: None,
            max_lines: 200,
        }
    }
}

impl BlameOptions {
    /// Lines `start..=end` (1-based); to the end of the file without `end`.
    pub fn lines(mut self, start: u32, end: Option<u32>) -> Self {
        self.start_line = start;
        self.end_line = end;
        self
    }

    /// Most lines returned.
    pub fn max_lines(mut self, max: u32) -> Self {
        self.max_lines = max;
        self
    }
}

/// One attributed line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlameLine {
    /// Line number in the file at the blamed revision (1-based).
    pub line: u32,
    /// Line number in the commit that introduced it.
    pub original_line: u32,
    /// The commit.
    pub commit: String,
    /// Author name.
    pub author: String,
    /// Author email.
    pub author_email: String,
    /// Author time (seconds since the epoch).
    pub author_time: i64,
    /// Subject of the commit.
    pub summary: String,
    /// The line's text.
    pub content: String,
}

/// A blame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlameOutcome {
    /// The lines, in order.
    pub lines: Vec<BlameLine>,
    /// Lines in the file.
    pub total_lines: u32,
    /// Lines of the range asked for (to `end`, or to the end of the file)
    /// follow the returned ones.
    pub has_more: bool,
}

impl GitRepo {
    /// Blames `path` at `rev` for the lines of `opts`.
    pub fn blame(
        &self,
        rev: &str,
        path: &str,
        opts: &BlameOptions,
    ) -> Result<BlameOutcome, GitError> {
        let BlameOptions {
            start_line: start,
            end_line: end,
            max_lines,
        } = *opts;
        // file_at judges the path before anything about history.
        let content = self.file_at(rev, path)?;
        let mut repo = self.local();
        repo.object_cache_size_if_unset(BLAME_OBJECT_CACHE_BYTES);
        // Delta bases decoded once per blame, not once per object read: a
        // packed object otherwise unpacks its whole delta chain every time.
        // (gix's own `max-performance` would set a cache too, but through a
        // crate under MPL-2.0, which our licence policy does not take.)
        repo.objects.set_pack_cache(|| {
            Box::new(gix::odb::pack::cache::lru::MemoryCappedHashmap::new(
                BLAME_PACK_CACHE_BYTES,
            ))
        });
        let id = self.commit_id(&repo, rev)?;
        if crate::diff::is_binary(&content) {
            return Err(GitError::Binary(path.to_owned()));
        }
        let total = u32::try_from(content.lines_with_terminator().count()).unwrap_or(u32::MAX);
        if total == 0 {
            return Ok(BlameOutcome {
                lines: Vec::new(),
                total_lines: 0,
                has_more: false,
            });
        }
        let start = start.max(1);
        // Past the end, or an `end_line` before `start_line`: no lines (gix
        // refuses an empty range).
        if start > total || end.is_some_and(|e| e < start) {
            return Ok(BlameOutcome {
                lines: Vec::new(),
                total_lines: total,
                has_more: false,
            });
        }
        let last = end
            .unwrap_or(total)
            .min(total)
            .min(start.saturating_add(max_lines.max(1) - 1));
        let rp = self.repo_path(path)?;
        let ranges = gix::blame::BlameRanges::from_one_based_inclusive_range(start..=last)
            .map_err(GitError::git)?;
        let outcome = repo
            .blame_file(
                rp.as_bytes().as_bstr(),
                id,
                gix::repository::blame_file::Options {
                    ranges,
                    rewrites: Some(Default::default()),
                    ..Default::default()
                },
            )
            .map_err(GitError::git)?;
        let mut lines = Vec::new();
        let mut cache: std::collections::HashMap<gix::ObjectId, (String, String, i64, String)> =
            Default::default();
        for (entry, entry_lines) in outcome.entries_with_lines() {
            let meta = match cache.get(&entry.commit_id) {
                Some(m) => m.clone(),
                None => {
                    let c = repo.find_commit(entry.commit_id).map_err(GitError::git)?;
                    let a = c.author().map_err(GitError::git)?;
                    let summary = c
                        .message_raw_sloppy()
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_str_lossy()
                        .into_owned();
                    let m = (
                        a.name.to_str_lossy().into_owned(),
                        a.email.to_str_lossy().into_owned(),
                        a.time().map(|t| t.seconds).unwrap_or(0),
                        summary,
                    );
                    cache.insert(entry.commit_id, m.clone());
                    m
                }
            };
            for (k, text) in entry_lines.iter().enumerate() {
                let k = u32::try_from(k).unwrap_or(u32::MAX);
                lines.push(BlameLine {
                    line: entry.start_in_blamed_file + k + 1,
                    original_line: entry.start_in_source_file + k + 1,
                    commit: entry.commit_id.to_string(),
                    author: meta.0.clone(),
                    author_email: meta.1.clone(),
                    author_time: meta.2,
                    summary: meta.3.clone(),
                    content: text
                        .to_str_lossy()
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                });
            }
        }
        lines.sort_by_key(|l| l.line);
        // More only within the range asked for: an explicit `end_line`
        // served whole has none, though the file goes on.
        Ok(BlameOutcome {
            has_more: last < end.unwrap_or(total).min(total),
            lines,
            total_lines: total,
        })
    }
}
