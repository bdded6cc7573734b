//! Locating hunks and computing the new content: pure, over bytes.
//!
//! The line model splits on `\n` only. Every segment but the last was
//! followed by `\n` (and remembers a `\r` before it); the last segment is
//! what follows the final `\n` — empty when the file ends with a newline — so
//! the final newline is an ordinary line a hunk can add or remove. A UTF-8 BOM
//! is set aside for matching and restored.

use crate::parse::{Chunk, HunkLine};

/// How strictly a hunk matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Byte-identical lines (line endings aside).
    Exact,
    /// Trailing whitespace ignored.
    TrailingWhitespace,
    /// Leading and trailing whitespace ignored.
    SurroundingWhitespace,
    /// Whitespace ignored and typographic punctuation read as ASCII.
    Punctuation,
}

impl Tier {
    const ALL: [Tier; 4] = [
        Tier::Exact,
        Tier::TrailingWhitespace,
        Tier::SurroundingWhitespace,
        Tier::Punctuation,
    ];

    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::TrailingWhitespace => "trailing_whitespace",
            Self::SurroundingWhitespace => "surrounding_whitespace",
            Self::Punctuation => "unicode_punctuation",
        }
    }

    fn normalize(self, s: &str) -> std::borrow::Cow<'_, str> {
        match self {
            Self::Exact => s.into(),
            Self::TrailingWhitespace => s.trim_end().into(),
            Self::SurroundingWhitespace => s.trim().into(),
            Self::Punctuation => s.trim().chars().map(ascii_punct).collect::<String>().into(),
        }
    }
}

fn ascii_punct(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// One segment: a line without its `\n` (and without a `\r` before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg<'a> {
    text: &'a str,
    /// A `\r` stood before this segment's `\n`.
    cr: bool,
}

/// Segments in order, from a byte offset of the body.
#[derive(Debug, Clone)]
struct Segs<'a> {
    rest: Option<&'a str>,
}

impl<'a> Iterator for Segs<'a> {
    type Item = Seg<'a>;

    fn next(&mut self) -> Option<Seg<'a>> {
        let rest = self.rest?;
        Some(match rest.find('\n') {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                match rest[..i].strip_suffix('\r') {
                    Some(text) => Seg { text, cr: true },
                    None => Seg {
                        text: &rest[..i],
                        cr: false,
                    },
                }
            }
            None => {
                self.rest = None;
                Seg {
                    text: rest,
                    cr: false,
                }
            }
        })
    }
}

/// Every `STRIDE`th segment's offset is kept; others are found by scanning.
const STRIDE: usize = 64;

/// A text file seen as segments, borrowed: no copy of its lines is made.
/// Its index costs one `usize` per `STRIDE` lines.
#[derive(Debug)]
struct FileText<'a> {
    bom: bool,
    body: &'a str,
    /// Number of segments (one more than the number of `\n`).
    len: usize,
    /// Byte offset of segment `k * STRIDE`.
    marks: Vec<usize>,
}

const BOM: &str = "\u{FEFF}";

impl<'a> FileText<'a> {
    fn parse(text: &'a str) -> Self {
        let (bom, body) = match text.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let mut marks = vec![0];
        let mut len = 1;
        let mut at = 0;
        while let Some(i) = body[at..].find('\n') {
            at += i + 1;
            if len % STRIDE == 0 {
                marks.push(at);
            }
            len += 1;
        }
        Self {
            bom,
            body,
            len,
            marks,
        }
    }

    /// Byte offset where segment `i` starts (`i < len`).
    fn offset(&self, i: usize) -> usize {
        let mut at = self.marks[i / STRIDE];
        for _ in 0..i % STRIDE {
            at += self.body[at..].find('\n').map_or(0, |k| k + 1);
        }
        at
    }

    /// The segments from `i` on (none when `i >= len`).
    fn segs(&self, i: usize) -> Segs<'a> {
        Segs {
            rest: (i < self.len).then(|| &self.body[self.offset(i)..]),
        }
    }

    /// CRLF when the first line break is CRLF.
    fn prefers_crlf(&self) -> bool {
        self.len > 1 && self.segs(0).next().is_some_and(|s| s.cr)
    }

    /// The file ends with `\n` (its last segment is the empty one after it).
    fn ends_with_newline(&self) -> bool {
        self.body.ends_with('\n')
    }
}

/// What planning one hunk found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HunkReport {
    /// Index of the hunk in its Update (0-based).
    pub index: usize,
    /// The tier it matched at.
    pub matched_with: Tier,
    /// First file line it covers (1-based; for pure additions, the line it
    /// was inserted before; for a skipped hunk, where its new lines are).
    pub start_line: usize,
    /// Its old lines were not found but its new lines were, once, after
    /// the hunks before it: it was already applied, and was skipped
    /// ([`apply_chunks_skipping_applied`]).
    pub already_applied: bool,
}

/// The nearest place a hunk almost matched, for the error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Closest {
    /// 1-based line where the candidate starts.
    pub line: usize,
    /// How many of the hunk's expected lines agree there (whitespace ignored).
    pub matching_lines: usize,
    /// The first expected line that differs there, and the file's line.
    pub first_difference: Option<(String, String)>,
}

/// Why a hunk could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The caller's stop check fired while the hunks were matched
    /// ([`apply_chunks_until`]).
    #[error("matching the hunks was stopped")]
    Stopped,
    /// No tier found the hunk's lines.
    #[error("hunk {index} (patch line {patch_line}): its context was not found")]
    ContextNotFound {
        /// Hunk index.
        index: usize,
        /// Patch line of the hunk.
        patch_line: usize,
        /// The lines it expected.
        expected: Vec<String>,
        /// The closest candidate.
        closest: Option<Closest>,
    },
    /// An `@@` anchor was not found.
    #[error("hunk {index} (patch line {patch_line}): anchor '{anchor}' was not found")]
    AnchorNotFound {
        /// Hunk index.
        index: usize,
        /// Patch line.
        patch_line: usize,
        /// The anchor text.
        anchor: String,
    },
    /// The first tier that matched matched more than once.
    #[error("hunk {index} (patch line {patch_line}): its context matches {count} places")]
    Ambiguous {
        /// Hunk index.
        index: usize,
        /// Patch line.
        patch_line: usize,
        /// Number of matches.
        count: usize,
        /// 1-based lines where they start.
        lines: Vec<usize>,
        /// The tier.
        tier: Tier,
    },
    /// Two hunks cover overlapping lines.
    #[error("hunks {first} and {second} overlap")]
    Overlap {
        /// One hunk.
        first: usize,
        /// The other.
        second: usize,
    },
}

/// The result of applying the hunks of one Update to a text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Planned {
    /// The new text.
    pub text: String,
    /// Per hunk: where and how it matched.
    pub hunks: Vec<HunkReport>,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

struct Placement<'c> {
    hunk: usize,
    start: usize,
    old_len: usize,
    lines: &'c [HunkLine],
    /// The indentation the file's lines have beyond the hunk's (a
    /// whitespace-blind match): given to the added lines too.
    shift: Shift,
}

/// How the file's indentation differs from a hunk's, the same on every
/// non-blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shift {
    /// The file's lines start with this more.
    Add(String),
    /// The hunk's lines start with this more.
    Remove(String),
}

impl Shift {
    /// `line` with the file's indentation.
    fn apply<'l>(&self, line: &'l str) -> std::borrow::Cow<'l, str> {
        match self {
            _ if line.trim().is_empty() => line.into(),
            Shift::Add(extra) if !extra.is_empty() => format!("{extra}{line}").into(),
            Shift::Remove(extra) => line.strip_prefix(extra.as_str()).unwrap_or(line).into(),
            Shift::Add(_) => line.into(),
        }
    }
}

fn indent(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

/// The one indentation shift from the hunk's `old` lines to the file's
/// lines at `start`; `None` when the lines differ by different shifts
/// (adding the hunk's lines would then indent them wrongly).
fn uniform_shift(file: &FileText<'_>, start: usize, old: &[&str]) -> Option<Shift> {
    let mut shift: Option<Shift> = None;
    for (seg, want) in file.segs(start).zip(old) {
        if seg.text.trim().is_empty() || want.trim().is_empty() {
            continue;
        }
        let (have, wanted) = (indent(seg.text), indent(want));
        let this = if let Some(extra) = have.strip_suffix(wanted) {
            Shift::Add(extra.to_owned())
        } else if let Some(extra) = wanted.strip_suffix(have) {
            Shift::Remove(extra.to_owned())
        } else {
            return None;
        };
        let none = |s: &Shift| matches!(s, Shift::Add(x) | Shift::Remove(x) if x.is_empty());
        match &shift {
            Some(prev) if *prev != this && !(none(prev) && none(&this)) => return None,
            _ => shift = Some(this),
        }
    }
    Some(shift.unwrap_or(Shift::Add(String::new())))
}

/// At most this many match lines are listed in an ambiguity (all are counted).
const MAX_LISTED_MATCHES: usize = 50;

/// The matches of one tier: how many, and where the first ones start.
#[derive(Default)]
struct Hits {
    count: usize,
    first: Vec<usize>,
}

impl Hits {
    fn push(&mut self, start: usize) {
        self.count += 1;
        if self.first.len() < MAX_LISTED_MATCHES {
            self.first.push(start);
        }
    }
}

/// `line` equals `want` (already normalized for `tier`) at `tier`, without
/// allocating.
fn line_eq(tier: Tier, line: &str, want: &str) -> bool {
    match tier {
        Tier::Exact => line == want,
        Tier::TrailingWhitespace => line.trim_end() == want,
        Tier::SurroundingWhitespace => line.trim() == want,
        Tier::Punctuation => line.trim().chars().map(ascii_punct).eq(want.chars()),
    }
}

/// The segments at `at` begin with `want` at `tier`.
fn window_eq(tier: Tier, at: &Segs<'_>, want: &[std::borrow::Cow<'_, str>]) -> bool {
    let mut it = at.clone();
    want.iter()
        .all(|w| it.next().is_some_and(|s| line_eq(tier, s.text, w)))
}

/// Window starts between two looks at the caller's stop check: matching
/// costs file lines × hunk lines, which a big stale hunk makes minutes.
const STOP_CHECK_EVERY: usize = 4096;

/// Adds to `hits` every start in `from..=to` where `want` matches at `tier`.
fn scan(
    file: &FileText<'_>,
    (from, to): (usize, usize),
    tier: Tier,
    want: &[std::borrow::Cow<'_, str>],
    hits: &mut Hits,
    stop: &dyn Fn() -> bool,
) -> Result<(), PlanError> {
    if from > to {
        return Ok(());
    }
    let mut it = file.segs(from);
    for s in from..=to {
        if (s - from) % STOP_CHECK_EVERY == STOP_CHECK_EVERY - 1 && stop() {
            return Err(PlanError::Stopped);
        }
        if window_eq(tier, &it, want) {
            hits.push(s);
        }
        if it.next().is_none() {
            break;
        }
    }
    Ok(())
}

/// Applies `chunks` to `text`.
///
/// The file is never copied line by line: matching walks the text in place,
/// so planning costs the new text plus a small index (a few bytes per 64
/// lines) beyond the input.
pub fn apply_chunks(text: &str, chunks: &[Chunk]) -> Result<Planned, PlanError> {
    apply_chunks_until(text, chunks, &|| false)
}

/// [`apply_chunks`], looking at `stop` every few thousand window starts:
/// when it answers true, matching ends with [`PlanError::Stopped`].
pub fn apply_chunks_until(
    text: &str,
    chunks: &[Chunk],
    stop: &dyn Fn() -> bool,
) -> Result<Planned, PlanError> {
    plan_chunks(text, chunks, stop, false)
}

/// [`apply_chunks_until`], skipping each hunk that is already applied: its
/// old lines are found at no tier, and its new lines (context and added)
/// occur exactly once after the hunks before it, byte for byte or but for
/// trailing whitespace. A hunk whose new lines equal its old ones, are all
/// blank, or are one line without context is never taken for applied, and a
/// pure addition always adds. Every hunk skipped leaves the text as it was.
pub fn apply_chunks_skipping_applied(
    text: &str,
    chunks: &[Chunk],
    stop: &dyn Fn() -> bool,
) -> Result<Planned, PlanError> {
    plan_chunks(text, chunks, stop, true)
}

/// Where an already applied hunk's new lines are, if it is one.
fn applied_at(
    file: &FileText<'_>,
    chunk: &Chunk,
    from: usize,
    stop: &dyn Fn() -> bool,
) -> Result<Option<usize>, PlanError> {
    let new = chunk.new_lines();
    let old = chunk.old_lines();
    let has_context = chunk
        .lines
        .iter()
        .any(|l| matches!(l, HunkLine::Context(_)));
    if new == old
        || new.iter().all(|l| l.trim().is_empty())
        || (!has_context && new.len() == 1)
        || new.len() > file.len
    {
        return Ok(None);
    }
    let last_start = file.len - new.len();
    for tier in [Tier::Exact, Tier::TrailingWhitespace] {
        let want: Vec<_> = new.iter().map(|l| tier.normalize(l)).collect();
        let mut hits = Hits::default();
        scan(file, (from, last_start), tier, &want, &mut hits, stop)?;
        match hits.count {
            0 => continue,
            1 => return Ok(hits.first.first().copied()),
            _ => return Ok(None),
        }
    }
    Ok(None)
}

fn plan_chunks(
    text: &str,
    chunks: &[Chunk],
    stop: &dyn Fn() -> bool,
    skip_applied: bool,
) -> Result<Planned, PlanError> {
    let file = FileText::parse(text);
    let mut cursor = 0usize;
    let mut placements: Vec<Placement<'_>> = Vec::new();
    let mut reports = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let mut window_start = cursor;
        for anchor in &chunk.anchors {
            window_start = find_anchor(&file, anchor, window_start).ok_or_else(|| {
                PlanError::AnchorNotFound {
                    index,
                    patch_line: chunk.line,
                    anchor: anchor.clone(),
                }
            })? + 1;
        }
        let mut lines = &chunk.lines[..];
        let mut old: Vec<&str> = chunk.old_lines();
        let found = if old.is_empty() {
            Some((insertion_point(&file, chunk, window_start), Tier::Exact))
        } else {
            match locate(&file, &old, chunk, (window_start, index), stop)? {
                Some(found) => Some(found),
                None if old.last().is_some_and(|l| l.is_empty())
                    && matches!(lines.last(), Some(HunkLine::Context(t)) if t.is_empty()) =>
                {
                    // A trailing blank context line written for the final newline.
                    old.pop();
                    lines = &lines[..lines.len() - 1];
                    locate(&file, &old, chunk, (window_start, index), stop)?
                }
                None => None,
            }
        };
        let (start, tier) = match found {
            Some(found) => found,
            None => match skip_applied
                .then(|| applied_at(&file, chunk, window_start, stop))
                .transpose()?
                .flatten()
            {
                Some(at) => {
                    cursor = cursor.max(at + chunk.new_lines().len());
                    reports.push(HunkReport {
                        index,
                        matched_with: Tier::Exact,
                        start_line: at + 1,
                        already_applied: true,
                    });
                    continue;
                }
                None => return Err(not_found(&file, &old, chunk, index, stop)),
            },
        };
        cursor = cursor.max(start + old.len());
        reports.push(HunkReport {
            index,
            matched_with: tier,
            start_line: start + 1,
            already_applied: false,
        });
        // A match blind to leading whitespace holds only when the file
        // indents every line of it the same amount more (or less) than the
        // hunk: the added lines then get that indentation.
        let shift = if tier >= Tier::SurroundingWhitespace {
            match uniform_shift(&file, start, &old) {
                Some(shift) => shift,
                None => return Err(not_found(&file, &old, chunk, index, stop)),
            }
        } else {
            Shift::Add(String::new())
        };
        placements.push(Placement {
            hunk: index,
            start,
            old_len: old.len(),
            lines,
            shift,
        });
    }
    // Insertions sort before a replacement starting at the same line.
    placements.sort_by_key(|p| (p.start, p.old_len, p.hunk));
    for pair in placements.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.start + a.old_len > b.start {
            return Err(PlanError::Overlap {
                first: a.hunk.min(b.hunk),
                second: a.hunk.max(b.hunk),
            });
        }
    }
    Ok(build(&file, &placements, reports))
}

/// The new text being written: each segment with its line ending; the
/// ending after the last one is dropped at the end.
struct Out<'f, 'a> {
    file: &'f FileText<'a>,
    text: String,
    /// Length of the ending after the last segment written.
    tail: usize,
    eol: &'static str,
}

impl Out<'_, '_> {
    /// Copies the file's segments `a..b`, with their own endings; the old
    /// last segment (which had none) gains the file's preferred one.
    fn copy(&mut self, a: usize, b: usize) {
        if a >= b {
            return;
        }
        let body = self.file.body;
        let start = self.file.offset(a);
        if b < self.file.len {
            let end = self.file.offset(b);
            self.text.push_str(&body[start..end]);
            self.tail = if body[..end].ends_with("\r\n") { 2 } else { 1 };
        } else {
            self.text.push_str(&body[start..]);
            self.text.push_str(self.eol);
            self.tail = self.eol.len();
        }
    }

    fn add(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push_str(self.eol);
        self.tail = self.eol.len();
    }

    fn finish(mut self) -> String {
        let keep = self.text.len() - self.tail;
        self.text.truncate(keep);
        self.text
    }
}

fn build(file: &FileText<'_>, placements: &[Placement<'_>], hunks: Vec<HunkReport>) -> Planned {
    let eol = if file.prefers_crlf() { "\r\n" } else { "\n" };
    let added_bytes: usize = placements
        .iter()
        .flat_map(|p| p.lines)
        .map(|l| match l {
            HunkLine::Add(t) => t.len() + eol.len(),
            _ => 0,
        })
        .sum();
    let mut text = String::with_capacity(BOM.len() + file.body.len() + added_bytes + eol.len());
    if file.bom {
        text.push_str(BOM);
    }
    let mut out = Out {
        file,
        text,
        tail: 0,
        eol,
    };
    let (mut added, mut removed) = (0, 0);
    let mut pos = 0;
    for p in placements {
        if pos < p.start {
            out.copy(pos, p.start);
            pos = p.start;
        }
        let mut j = p.start;
        for l in p.lines {
            match l {
                HunkLine::Context(_) => {
                    out.copy(j, j + 1);
                    j += 1;
                }
                HunkLine::Remove(_) => {
                    removed += 1;
                    j += 1;
                }
                HunkLine::Add(t) => {
                    added += 1;
                    out.add(&p.shift.apply(t));
                }
            }
        }
        pos = j.max(pos);
    }
    out.copy(pos, file.len);
    Planned {
        text: out.finish(),
        hunks,
        added,
        removed,
    }
}

/// Where a pure addition goes: after the last anchor, else at the end
/// (before the final newline's empty segment).
fn insertion_point(file: &FileText<'_>, chunk: &Chunk, after_anchors: usize) -> usize {
    if !chunk.anchors.is_empty() && !chunk.eof {
        return after_anchors;
    }
    if file.ends_with_newline() || file.body.is_empty() {
        file.len - 1
    } else {
        file.len
    }
}

fn find_anchor(file: &FileText<'_>, anchor: &str, from: usize) -> Option<usize> {
    for tier in Tier::ALL {
        let want = tier.normalize(anchor);
        if let Some(i) = file.segs(from).position(|s| line_eq(tier, s.text, &want)) {
            return Some(from + i);
        }
    }
    None
}

/// Finds the hunk's expected lines; `Ok(None)` when no tier finds them.
fn locate(
    file: &FileText<'_>,
    old: &[&str],
    chunk: &Chunk,
    (window_start, index): (usize, usize),
    stop: &dyn Fn() -> bool,
) -> Result<Option<(usize, Tier)>, PlanError> {
    let n = file.len;
    if old.len() > n {
        return Ok(None);
    }
    let last_start = n - old.len();
    for tier in Tier::ALL {
        let want: Vec<_> = old.iter().map(|l| tier.normalize(l)).collect();
        let mut hits = Hits::default();
        if chunk.eof {
            // At the very end, or just before the final newline's empty segment.
            scan(file, (last_start, last_start), tier, &want, &mut hits, stop)?;
            if file.ends_with_newline() && last_start > 0 {
                let before = last_start - 1;
                scan(file, (before, before), tier, &want, &mut hits, stop)?;
            }
        } else {
            scan(
                file,
                (window_start, last_start),
                tier,
                &want,
                &mut hits,
                stop,
            )?;
        }
        // Anchors and the end marker say where: the nearest wins.
        let pinned = !chunk.anchors.is_empty() || chunk.eof;
        if let Some(found) = verdict(&hits, tier, pinned, chunk, index)? {
            return Ok(Some(found));
        }
    }
    // Models sometimes write hunks out of file order: accept a unique match
    // before the window too (overlaps are caught afterwards).
    if window_start > 0 && !chunk.eof {
        for tier in Tier::ALL {
            let want: Vec<_> = old.iter().map(|l| tier.normalize(l)).collect();
            let mut hits = Hits::default();
            let end = window_start.min(last_start + 1);
            if end > 0 {
                scan(file, (0, end - 1), tier, &want, &mut hits, stop)?;
            }
            if let Some(found) = verdict(&hits, tier, false, chunk, index)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// One tier's matches: none (try the next tier), one (or several when
/// `pinned`: the first) found, or several and ambiguous.
fn verdict(
    hits: &Hits,
    tier: Tier,
    pinned: bool,
    chunk: &Chunk,
    index: usize,
) -> Result<Option<(usize, Tier)>, PlanError> {
    match (hits.count, hits.first.first()) {
        (0, _) | (_, None) => Ok(None),
        (1, Some(only)) => Ok(Some((*only, tier))),
        (_, Some(first)) if pinned => Ok(Some((*first, tier))),
        (count, _) => Err(PlanError::Ambiguous {
            index,
            patch_line: chunk.line,
            count,
            lines: hits.first.iter().map(|s| s + 1).collect(),
            tier,
        }),
    }
}

fn not_found(
    file: &FileText<'_>,
    old: &[&str],
    chunk: &Chunk,
    index: usize,
    stop: &dyn Fn() -> bool,
) -> PlanError {
    let want: Vec<&str> = old.iter().map(|l| l.trim()).collect();
    let mut best: Option<Closest> = None;
    if !want.is_empty() {
        let span = want.len().min(file.len);
        let mut it = file.segs(0);
        for s in 0..=(file.len - span) {
            if s % STOP_CHECK_EVERY == STOP_CHECK_EVERY - 1 && stop() {
                return PlanError::Stopped;
            }
            let window = || it.clone().take(span).map(|l| l.text.trim());
            let agree = window().zip(&want).filter(|(l, w)| l == *w).count();
            if agree > 0 && best.as_ref().is_none_or(|b| agree > b.matching_lines) {
                let diff = window()
                    .zip(&want)
                    .enumerate()
                    .find(|(_, (l, w))| l != *w)
                    .map(|(k, (l, _))| (old[k].to_owned(), l.to_owned()));
                best = Some(Closest {
                    line: s + 1,
                    matching_lines: agree,
                    first_difference: diff,
                });
            }
            it.next();
        }
    }
    PlanError::ContextNotFound {
        index,
        patch_line: chunk.line,
        expected: old.iter().map(|l| (*l).to_owned()).collect(),
        closest: best,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{Op, parse};

    fn chunks(body: &str) -> Vec<Chunk> {
        let p = parse(&format!(
            "*** Begin Patch\n*** Update File: f\n{body}*** End Patch"
        ))
        .unwrap();
        match p.ops.into_iter().next().unwrap() {
            Op::Update { chunks, .. } => chunks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reports_the_tier() {
        let cases = [
            ("a\nb\n", "@@\n a\n-b\n+B\n", Tier::Exact),
            ("a  \nb\n", "@@\n a\n-b\n+B\n", Tier::TrailingWhitespace),
            (
                "    a\n    b\n",
                "@@\n a\n-b\n+B\n",
                Tier::SurroundingWhitespace,
            ),
            (
                "\u{201C}a\u{201D}\nb\n",
                "@@\n \"a\"\n-b\n+B\n",
                Tier::Punctuation,
            ),
        ];
        for (text, body, tier) in cases {
            let p = apply_chunks(text, &chunks(body)).unwrap();
            assert_eq!(p.hunks[0].matched_with, tier, "{text:?}");
            assert_eq!((p.added, p.removed), (1, 1));
            assert!(p.text.ends_with("B\n"));
        }
    }

    #[test]
    fn a_whitespace_blind_match_carries_its_indentation_to_added_lines() {
        // The file indents the hunk's lines 4 more: so are the added ones.
        let p = apply_chunks(
            "def f():\n    x = 1\n    return x\n",
            &chunks("@@\n x = 1\n-return x\n+if x:\n+    return x\n"),
        )
        .unwrap();
        assert_eq!(p.text, "def f():\n    x = 1\n    if x:\n        return x\n");
        // Over-indented hunks lose their extra indentation.
        let p = apply_chunks("a\n  b\n", &chunks("@@\n   a\n-    b\n+    c\n")).unwrap();
        assert_eq!(p.text, "a\n  c\n");
        // Lines shifted by different amounts: adding would indent wrongly.
        let e = apply_chunks("    a\nb\n", &chunks("@@\n a\n-b\n+B\n")).unwrap_err();
        assert!(matches!(e, PlanError::ContextNotFound { .. }), "{e:?}");
    }

    #[test]
    fn hunks_already_applied_are_skipped_when_asked() {
        let text = "one\nTWO\nthree\nfour\n";
        let body = "@@\n one\n-two\n+TWO\n three\n@@\n three\n-four\n+FOUR\n";
        assert!(apply_chunks(text, &chunks(body)).is_err());
        let p = apply_chunks_skipping_applied(text, &chunks(body), &|| false).unwrap();
        assert_eq!(p.text, "one\nTWO\nthree\nFOUR\n");
        assert_eq!(
            p.hunks
                .iter()
                .map(|h| h.already_applied)
                .collect::<Vec<_>>(),
            [true, false]
        );
        // A one-line addition without context is never taken for applied.
        let p = apply_chunks_skipping_applied("x\n", &chunks("@@\n+x\n"), &|| false).unwrap();
        assert_eq!(p.text, "x\nx\n");
    }

    #[test]
    fn exact_later_beats_fuzzy_earlier() {
        let p = apply_chunks("x  \nmid\nx\n", &chunks("@@\n-x\n+y\n")).unwrap();
        assert_eq!(p.text, "x  \nmid\ny\n");
    }

    #[test]
    fn ambiguity_and_not_found_carry_repair_data() {
        let e = apply_chunks("k\nv\nk\nv\n", &chunks("@@\n k\n-v\n+w\n")).unwrap_err();
        assert_eq!(
            e,
            PlanError::Ambiguous {
                index: 0,
                patch_line: 3,
                count: 2,
                lines: vec![1, 3],
                tier: Tier::Exact
            }
        );
        let e = apply_chunks(
            "fn a() {\n    one();\n    two();\n}\n",
            &chunks("@@\n fn a() {\n-    one();\n-    three();\n+    four();\n"),
        )
        .unwrap_err();
        let PlanError::ContextNotFound {
            closest: Some(c),
            expected,
            ..
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(expected.len(), 3);
        assert_eq!((c.line, c.matching_lines), (1, 2));
        assert_eq!(
            c.first_difference,
            Some(("    three();".into(), "two();".into()))
        );
    }

    #[test]
    fn hunks_in_order_disambiguate_and_out_of_order_still_apply() {
        // `k v` occurs twice, but only once after the first hunk.
        let p = apply_chunks(
            "h\nk\nv\nk\nv\n",
            &chunks("@@\n h\n-k\n+K\n@@\n k\n-v\n+w\n"),
        )
        .unwrap();
        assert_eq!(p.text, "h\nK\nv\nk\nw\n");
        let p = apply_chunks("a\nb\nc\nd\n", &chunks("@@\n-d\n+D\n@@\n-a\n+A\n")).unwrap();
        assert_eq!(p.text, "A\nb\nc\nD\n");
    }

    #[test]
    fn form_feed_and_unicode_line_separators_are_not_line_breaks() {
        let text = "a\u{c}b\nx\u{2028}y\nend\n";
        let p = apply_chunks(text, &chunks("@@\n a\u{c}b\n-x\u{2028}y\n+z\n")).unwrap();
        assert_eq!(p.text, "a\u{c}b\nz\nend\n");
    }
}
