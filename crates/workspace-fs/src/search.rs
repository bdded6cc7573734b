//! `search_text` on the grep crates: literal or regex, context lines from the
//! same pass, binary files skipped, previews cut at UTF-8 boundaries, and a
//! walk that stops as soon as the result cap is known to be exceeded.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;

use crate::error::FsError;
use crate::list::{Globs, WalkWarning, lock};
use crate::path::{Kind, Workspace, WorkspacePath};

/// A search request; [`SearchRequest::new`] makes one with the defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SearchRequest {
    /// The text or regex.
    pub query: String,
    /// Treat `query` as a regex.
    pub regex: bool,
    /// Match case exactly.
    pub case_sensitive: bool,
    /// Include and exclude globs.
    pub globs: Globs,
    /// Lines of context before and after each match.
    pub context_lines: usize,
    /// Most matches returned.
    pub max_results: usize,
    /// Longest preview of a line.
    pub max_preview_bytes: usize,
}

impl SearchRequest {
    /// A literal, case-insensitive search for `query` in every file, without
    /// context, at most 1,000 matches with previews of at most 512 bytes.
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            regex: false,
            case_sensitive: false,
            globs: Globs::default(),
            context_lines: 0,
            max_results: 1_000,
            max_preview_bytes: 512,
        }
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TextMatch {
    /// Workspace-relative path.
    pub path: String,
    /// Line number (1-based).
    pub line: u64,
    /// Byte column of the first match on the line (1-based).
    pub column: u64,
    /// The line, cut at `max_preview_bytes`.
    pub preview: String,
    /// The preview was cut.
    pub preview_truncated: bool,
    /// Up to `context_lines` lines before.
    pub before: Vec<String>,
    /// Up to `context_lines` lines after.
    pub after: Vec<String>,
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SearchOutcome {
    /// Matches sorted by path and line, at most `max_results`.
    pub matches: Vec<TextMatch>,
    /// More matches exist than were returned (the search stopped early).
    pub truncated: bool,
    /// Matching lines counted: all of them when `total_exact`, otherwise
    /// those of the shortest run of files (in path order) that already holds
    /// more than `max_results`, a lower bound that is the same on every run.
    pub total_matches: usize,
    /// `total_matches` counts every match (the search was not cut short).
    pub total_exact: bool,
    /// Files opened and searched.
    pub files_searched: usize,
    /// Binary files skipped.
    pub binary_files_skipped: usize,
    /// Unreadable entries and similar.
    pub warnings: Vec<WalkWarning>,
}

struct Shared<'a> {
    ws: &'a Workspace,
    matcher: RegexMatcher,
    req: &'a SearchRequest,
    stop: AtomicBool,
    searched: AtomicUsize,
    binary: AtomicUsize,
    warnings: Mutex<Vec<WalkWarning>>,
}

/// Per-file results in path order, and how far the finished prefix reaches.
struct Progress {
    /// Each file's matches, and whether its search stopped before its end.
    slots: Vec<Option<(Vec<TextMatch>, bool)>>,
    /// Files `0..prefix` are all searched.
    prefix: usize,
    /// Matches in files `0..prefix`.
    prefix_matches: usize,
}

/// Searches the file or directory at `path`.
///
/// Files are listed first (parallel walk, sorted by path), then searched by a
/// pool of threads in that order. Once the files searched so far, taken in
/// order, hold more than `max_results` matches, nothing after them can
/// change the answer and the search stops: the result is the first
/// `max_results` matches by path and line, every time.
pub fn search_text(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &SearchRequest,
) -> Result<SearchOutcome, FsError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(!req.case_sensitive)
        .fixed_strings(!req.regex)
        .line_terminator(Some(b'\n'))
        .build(&req.query)
        .map_err(|e| FsError::InvalidPattern {
            kind: "regex",
            pattern: req.query.clone(),
            error: e.to_string(),
        })?;
    let shared = Shared {
        ws,
        matcher,
        req,
        stop: AtomicBool::new(false),
        searched: AtomicUsize::new(0),
        binary: AtomicUsize::new(0),
        warnings: Mutex::new(Vec::new()),
    };
    let (_, kind) = ws.open_beneath(path)?;
    let files = if kind == Kind::File {
        vec![path.clone()]
    } else {
        crate::confine::confined(ws, || candidate_files(&shared, path))?
    };
    let proto = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .before_context(req.context_lines)
        .after_context(req.context_lines)
        .build();
    let progress = Mutex::new(Progress {
        slots: vec![None; files.len()],
        prefix: 0,
        prefix_matches: 0,
    });
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(2, usize::from)
        .min(files.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let mut searcher = proto.clone();
            let (shared, files, next, progress) = (&shared, &files, &next, &progress);
            scope.spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(file) = files.get(i) else { break };
                    let found = search_one(shared, &mut searcher, file);
                    let mut p = lock(progress);
                    p.slots[i] = Some(found);
                    while let Some(Some((done, _))) = p.slots.get(p.prefix) {
                        let n = done.len();
                        p.prefix_matches += n;
                        p.prefix += 1;
                    }
                    if p.prefix_matches > req.max_results {
                        shared.stop.store(true, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let p = progress.into_inner().unwrap_or_else(|e| e.into_inner());
    let searched_all = p.prefix == files.len();
    let mut matches: Vec<TextMatch> = Vec::new();
    let mut files_counted = 0;
    let mut any_cut = false;
    for (found, cut) in p.slots.into_iter().take(p.prefix).flatten() {
        // Past the cap, later files only change the count, and how many of
        // them were searched before the stop depends on timing: stop at the
        // first file that crosses the cap so the count does not. That file
        // itself is never stopped by another thread (the stop needs it), only
        // by its own cap, which is the same on every run.
        if matches.len() > req.max_results {
            break;
        }
        matches.extend(found);
        any_cut |= cut;
        files_counted += 1;
    }
    let total_matches = matches.len();
    let total_exact = searched_all && files_counted == p.prefix && !any_cut;
    let truncated = matches.len() > req.max_results;
    matches.truncate(req.max_results);
    Ok(SearchOutcome {
        matches,
        truncated,
        total_matches,
        total_exact,
        files_searched: shared.searched.load(Ordering::SeqCst),
        binary_files_skipped: shared.binary.load(Ordering::SeqCst),
        warnings: shared
            .warnings
            .into_inner()
            .unwrap_or_else(|p| p.into_inner()),
    })
}

/// The files below `dir` that the filters let through, sorted by path.
fn candidate_files(
    shared: &Shared<'_>,
    dir: &WorkspacePath,
) -> Result<Vec<WorkspacePath>, FsError> {
    let ws = shared.ws;
    let root = ws.open_dir(dir)?;
    let mut b = ignore::WalkBuilder::new(&root);
    let globs = shared.req.globs.clone();
    let root_for_filter = root.clone();
    b.hidden(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            let dir = e.depth() > 0 && e.file_type().is_some_and(|t| t.is_dir());
            e.file_name() != ".git"
                && !(dir
                    && (crate::list::unreadable_ignore_files(e.path())
                        || e.path()
                            .strip_prefix(&root_for_filter)
                            .is_ok_and(|r| globs.excluded(r))))
        });
    crate::list::guard_ignore_files(&mut b, ws.root(), &root);
    let found: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());
    b.build_parallel().run(|| {
        let mut batch = crate::list::Batch::new(&found);
        let root = &root;
        Box::new(move |item| {
            match item {
                Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => {
                    let wanted = e
                        .path()
                        .strip_prefix(root)
                        .is_ok_and(|r| shared.req.globs.wants(r));
                    if wanted && let Some(rel) = ws.relative_of(e.path()) {
                        batch.push(rel);
                    }
                }
                Ok(_) => {}
                Err(err) => lock(&shared.warnings).push(WalkWarning::Walk(err.to_string())),
            }
            WalkState::Continue
        })
    });
    let mut rels = found.into_inner().unwrap_or_else(|p| p.into_inner());
    rels.sort_unstable();
    Ok(rels.into_iter().map(|r| ws.path_from_relative(r)).collect())
}

fn search_one(
    shared: &Shared<'_>,
    searcher: &mut Searcher,
    path: &WorkspacePath,
) -> (Vec<TextMatch>, bool) {
    // Opened beneath the root: a file swapped for an outside symlink is refused.
    let file = match shared.ws.open_beneath(path) {
        Ok((f, Kind::File)) => f,
        Ok(_) => return (Vec::new(), false),
        Err(e) => {
            lock(&shared.warnings).push(WalkWarning::Refused(e));
            return (Vec::new(), false);
        }
    };
    shared.searched.fetch_add(1, Ordering::Relaxed);
    let mut sink = Collect {
        shared,
        path: path.display(),
        out: Vec::new(),
        ring: VecDeque::new(),
        pending: Vec::new(),
        last_line: 0,
        binary: false,
        cut: false,
    };
    if let Err(e) = searcher.search_file(&shared.matcher, &file, &mut sink) {
        lock(&shared.warnings).push(WalkWarning::Search {
            path: path.display(),
            error: e.into(),
        });
    }
    if sink.binary {
        shared.binary.fetch_add(1, Ordering::Relaxed);
        // Matches found before the NUL byte came from a binary file: drop them.
        return (Vec::new(), false);
    }
    (sink.out, sink.cut)
}

struct Collect<'a, 's> {
    shared: &'a Shared<'s>,
    path: String,
    out: Vec<TextMatch>,
    /// The last `context_lines` lines seen (match or context).
    ring: VecDeque<String>,
    /// Matches still owed after-context: (index in out, lines still wanted).
    pending: Vec<(usize, usize)>,
    last_line: u64,
    binary: bool,
    /// The search of this file stopped before its end (cap or stop).
    cut: bool,
}

impl Collect<'_, '_> {
    fn preview(&self, bytes: &[u8]) -> (String, bool) {
        let line = trim_eol(bytes);
        let cap = self.shared.req.max_preview_bytes;
        let text = String::from_utf8_lossy(line);
        if text.len() <= cap {
            return (text.into_owned(), false);
        }
        (text[..text.floor_char_boundary(cap)].to_owned(), true)
    }

    fn line(&mut self, number: u64, bytes: &[u8], is_match: bool) {
        let n = self.shared.req.context_lines;
        if self.last_line != 0 && number != self.last_line + 1 {
            self.ring.clear();
            self.pending.clear();
        }
        self.last_line = number;
        let (text, cut) = self.preview(bytes);
        for (idx, left) in &mut self.pending {
            self.out[*idx].after.push(text.clone());
            *left -= 1;
        }
        self.pending.retain(|(_, left)| *left > 0);
        if is_match {
            let column = self
                .shared
                .matcher
                .find(bytes)
                .ok()
                .flatten()
                .map_or(1, |m| m.start() as u64 + 1);
            self.out.push(TextMatch {
                path: self.path.clone(),
                line: number,
                column,
                preview: text.clone(),
                preview_truncated: cut,
                before: self.ring.iter().cloned().collect(),
                after: Vec::new(),
            });
            if n > 0 {
                self.pending.push((self.out.len() - 1, n));
            }
        }
        if n > 0 {
            self.ring.push_back(text);
            if self.ring.len() > n {
                self.ring.pop_front();
            }
        }
    }
}

fn trim_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

impl Sink for Collect<'_, '_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let first = m.line_number().unwrap_or(0);
        for (i, line) in m.lines().enumerate() {
            self.line(first + i as u64, line, true);
        }
        // One file never needs more than the cap plus the one that proves it exceeded.
        let enough = self.out.len() > self.shared.req.max_results;
        self.cut = enough || self.shared.stop.load(Ordering::Relaxed);
        Ok(!self.cut)
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if let Some(n) = c.line_number() {
            self.line(n, c.bytes(), false);
        }
        self.cut = self.shared.stop.load(Ordering::Relaxed);
        Ok(!self.cut)
    }

    fn binary_data(&mut self, _s: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

impl Workspace {
    /// A [`WorkspacePath`] for a relative path produced by a walk below the
    /// root (not caller input; opening it still resolves beneath the root).
    pub(crate) fn path_from_relative(&self, rel: std::path::PathBuf) -> WorkspacePath {
        WorkspacePath::from_walk(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let f = t.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, c).unwrap();
        }
        let w = Workspace::open(t.path()).unwrap();
        (t, w)
    }

    fn req(q: &str) -> SearchRequest {
        SearchRequest {
            query: q.into(),
            regex: false,
            case_sensitive: false,
            globs: Globs::new(&[], &[]).unwrap(),
            context_lines: 0,
            max_results: 100,
            max_preview_bytes: 512,
        }
    }

    fn run(w: &Workspace, r: &SearchRequest) -> SearchOutcome {
        search_text(w, &w.resolve_lexically(".").unwrap(), r).unwrap()
    }

    #[test]
    fn literal_regex_case_and_columns() {
        let (_t, w) = ws(&[
            ("a.txt", b"Alpha beta\nneedle (1)\n"),
            ("b/c.rs", b"fn x() { needle }\n"),
        ]);
        let o = run(&w, &req("NEEDLE"));
        let got: Vec<_> = o
            .matches
            .iter()
            .map(|m| (m.path.as_str(), m.line, m.column))
            .collect();
        assert_eq!(got, [("a.txt", 2, 1), ("b/c.rs", 1, 10)]);
        let mut cs = req("NEEDLE");
        cs.case_sensitive = true;
        assert!(run(&w, &cs).matches.is_empty());
        // A literal with regex metacharacters is literal.
        assert_eq!(run(&w, &req("(1)")).matches.len(), 1);
        let mut rx = req(r"needle \(\d\)");
        rx.regex = true;
        assert_eq!(run(&w, &rx).matches.len(), 1);
        let mut bad = req("a(");
        bad.regex = true;
        assert!(matches!(
            search_text(&w, &w.resolve_lexically(".").unwrap(), &bad),
            Err(FsError::InvalidPattern { kind: "regex", .. })
        ));
    }

    #[test]
    fn context_lines_and_cap() {
        let body: String = (1..=30).map(|i| format!("line {i} needle\n")).collect();
        let (_t, w) = ws(&[("f.txt", body.as_bytes())]);
        let mut r = req("needle");
        r.context_lines = 1;
        r.max_results = 2;
        let o = run(&w, &r);
        assert!(o.truncated);
        assert_eq!(o.matches.len(), 2);
        assert_eq!(o.matches[0].before, Vec::<String>::new());
        assert_eq!(o.matches[0].after, ["line 2 needle"]);
        assert_eq!(o.matches[1].before, ["line 1 needle"]);
        let body2 = "a\nb\nhit\nc\nd\n\n\n\nhit\n";
        let (_t2, w2) = ws(&[("g.txt", body2.as_bytes())]);
        let mut r2 = req("hit");
        r2.context_lines = 2;
        let o = run(&w2, &r2);
        assert_eq!(o.matches[0].before, ["a", "b"]);
        assert_eq!(o.matches[0].after, ["c", "d"]);
        assert_eq!(o.matches[1].before, ["", ""]);
        assert!(!o.truncated);
    }

    #[test]
    fn binary_ignored_hidden_and_previews() {
        let long = format!("{}needle\n", "é".repeat(100));
        let (_t, w) = ws(&[
            ("bin.dat", b"needle\0\x01\x02"),
            ("build/x.txt", b"needle"),
            (".gitignore", b"build/\n"),
            (".hid/y.txt", b"needle"),
            ("long.txt", long.as_bytes()),
        ]);
        let mut r = req("needle");
        r.max_preview_bytes = 81;
        let o = run(&w, &r);
        assert_eq!(o.matches.len(), 1, "{:?}", o.matches);
        assert_eq!(o.binary_files_skipped, 1);
        assert!(o.matches[0].preview_truncated);
        assert_eq!(o.matches[0].preview.len(), 80);
        let mut g = req("needle");
        g.globs = Globs::new(&["*.dat".into()], &[]).unwrap();
        assert!(run(&w, &g).matches.is_empty());
        // A single file path searches that file.
        let o = search_text(
            &w,
            &w.resolve_lexically("long.txt").unwrap(),
            &req("needle"),
        )
        .unwrap();
        assert_eq!(o.files_searched, 1);
    }

    #[test]
    fn truncated_results_are_the_first_by_path_every_time() {
        let files: Vec<(String, Vec<u8>)> = (0..60)
            .map(|i| {
                (
                    format!("d{}/f{i:02}.txt", i % 7),
                    b"hit\nmiss\nhit\nhit\n".to_vec(),
                )
            })
            .collect();
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_slice()))
            .collect();
        let (_t, w) = ws(&refs);
        let mut r = req("hit");
        r.max_results = 7;
        let first = run(&w, &r);
        assert!(first.truncated);
        let mut expected: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        expected.sort_unstable();
        let got: Vec<(String, u64)> = first
            .matches
            .iter()
            .map(|m| (m.path.clone(), m.line))
            .collect();
        assert_eq!(got[0], (expected[0].to_owned(), 1));
        assert_eq!(got[3], (expected[1].to_owned(), 1));
        assert_eq!(got[6], (expected[2].to_owned(), 1));
        // 7 cut in the third file: the count covers the first three files.
        assert_eq!((first.total_matches, first.total_exact), (9, false));
        for _ in 0..20 {
            let again = run(&w, &r);
            assert_eq!(again.matches, first.matches);
            assert_eq!(again.total_matches, 9);
        }
        // Without a cut, or when the cut is in the last file, the count is exact.
        r.max_results = 1000;
        assert_eq!(
            (run(&w, &r).total_matches, run(&w, &r).total_exact),
            (180, true)
        );
        let one = search_text(&w, &w.resolve_lexically(expected[0]).unwrap(), &{
            let mut r = req("hit");
            r.max_results = 1;
            r
        })
        .unwrap();
        // One file cut by its own cap: the count stops with it.
        assert_eq!(
            (one.truncated, one.total_matches, one.total_exact),
            (true, 2, false)
        );
    }
}
