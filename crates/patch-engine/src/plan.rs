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

#[derive(Debug, Clone, PartialEq, Eq)]
struct Seg {
    text: String,
    /// A `\r` stood before this segment's `\n`.
    cr: bool,
}

/// A text file split into segments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileText {
    bom: bool,
    segs: Vec<Seg>,
}

const BOM: &str = "\u{FEFF}";

impl FileText {
    fn parse(text: &str) -> Self {
        let (bom, body) = match text.strip_prefix(BOM) {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let mut parts: Vec<&str> = body.split('\n').collect();
        let last = parts.pop().unwrap_or("");
        let mut segs: Vec<Seg> = parts
            .into_iter()
            .map(|p| match p.strip_suffix('\r') {
                Some(t) => Seg {
                    text: t.to_owned(),
                    cr: true,
                },
                None => Seg {
                    text: p.to_owned(),
                    cr: false,
                },
            })
            .collect();
        segs.push(Seg {
            text: last.to_owned(),
            cr: false,
        });
        Self { bom, segs }
    }

    fn render(&self) -> String {
        let mut out = String::with_capacity(self.segs.iter().map(|s| s.text.len() + 2).sum());
        if self.bom {
            out.push_str(BOM);
        }
        let n = self.segs.len();
        for (i, s) in self.segs.iter().enumerate() {
            out.push_str(&s.text);
            if i + 1 < n {
                if s.cr {
                    out.push('\r');
                }
                out.push('\n');
            }
        }
        out
    }

    /// CRLF when the first line break is CRLF.
    fn prefers_crlf(&self) -> bool {
        self.segs.len() > 1 && self.segs[0].cr
    }

    /// Index of the trailing empty segment, when the file ends with `\n`.
    fn ends_with_newline(&self) -> bool {
        self.segs.len() > 1 && self.segs.last().is_some_and(|s| s.text.is_empty())
    }
}

/// What planning one hunk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkReport {
    /// Index of the hunk in its Update (0-based).
    pub index: usize,
    /// The tier it matched at.
    pub matched_with: Tier,
    /// First file line it covers (1-based; for pure additions, the line it
    /// was inserted before).
    pub start_line: usize,
}

/// The nearest place a hunk almost matched, for the error.
#[derive(Debug, Clone, PartialEq, Eq)]
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
pub enum PlanError {
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

struct Placement {
    hunk: usize,
    start: usize,
    old_len: usize,
    lines: Vec<HunkLine>,
}

/// Applies `chunks` to `text`.
pub fn apply_chunks(text: &str, chunks: &[Chunk]) -> Result<Planned, PlanError> {
    let file = FileText::parse(text);
    let norms: Vec<Vec<String>> = Tier::ALL
        .iter()
        .map(|t| {
            file.segs
                .iter()
                .map(|s| t.normalize(&s.text).into_owned())
                .collect()
        })
        .collect();
    let mut cursor = 0usize;
    let mut placements: Vec<Placement> = Vec::new();
    let mut reports = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let mut window_start = cursor;
        for anchor in &chunk.anchors {
            window_start = find_anchor(&norms, anchor, window_start).ok_or_else(|| {
                PlanError::AnchorNotFound {
                    index,
                    patch_line: chunk.line,
                    anchor: anchor.clone(),
                }
            })? + 1;
        }
        let mut lines = chunk.lines.clone();
        let mut old: Vec<String> = chunk.old_lines().into_iter().map(str::to_owned).collect();
        let (start, tier) = if old.is_empty() {
            (insertion_point(&file, chunk, window_start), Tier::Exact)
        } else {
            match locate(&file, &norms, &old, chunk, window_start, index)? {
                Some(found) => found,
                None if old.last().is_some_and(String::is_empty)
                    && matches!(lines.last(), Some(HunkLine::Context(t)) if t.is_empty()) =>
                {
                    // A trailing blank context line written for the final newline.
                    old.pop();
                    lines.pop();
                    match locate(&file, &norms, &old, chunk, window_start, index)? {
                        Some(found) => found,
                        None => return Err(not_found(&norms, &old, chunk, index)),
                    }
                }
                None => return Err(not_found(&norms, &old, chunk, index)),
            }
        };
        cursor = cursor.max(start + old.len());
        reports.push(HunkReport {
            index,
            matched_with: tier,
            start_line: start + 1,
        });
        placements.push(Placement {
            hunk: index,
            start,
            old_len: old.len(),
            lines,
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

fn build(file: &FileText, placements: &[Placement], hunks: Vec<HunkReport>) -> Planned {
    let crlf = file.prefers_crlf();
    let last_index = file.segs.len() - 1;
    // Each output segment, and whether it is the file's old (unterminated) last one.
    let mut out: Vec<(Seg, bool)> = Vec::with_capacity(file.segs.len() + 8);
    let (mut added, mut removed) = (0, 0);
    let mut pos = 0;
    let copy =
        |out: &mut Vec<(Seg, bool)>, i: usize| out.push((file.segs[i].clone(), i == last_index));
    for p in placements {
        while pos < p.start {
            copy(&mut out, pos);
            pos += 1;
        }
        let mut j = p.start;
        for l in &p.lines {
            match l {
                HunkLine::Context(_) => {
                    copy(&mut out, j);
                    j += 1;
                }
                HunkLine::Remove(_) => {
                    removed += 1;
                    j += 1;
                }
                HunkLine::Add(t) => {
                    added += 1;
                    out.push((
                        Seg {
                            text: t.clone(),
                            cr: crlf,
                        },
                        false,
                    ));
                }
            }
        }
        pos = j.max(pos);
    }
    while pos <= last_index {
        copy(&mut out, pos);
        pos += 1;
    }
    if out.is_empty() {
        out.push((
            Seg {
                text: String::new(),
                cr: false,
            },
            false,
        ));
    }
    // The old last line had no ending; if the edit put lines after it, it
    // gains the file's preferred ending.
    let n = out.len();
    let segs = out
        .into_iter()
        .enumerate()
        .map(|(i, (mut seg, was_last))| {
            if was_last && i + 1 < n {
                seg.cr = crlf;
            }
            seg
        })
        .collect();
    let text = FileText {
        bom: file.bom,
        segs,
    }
    .render();
    Planned {
        text,
        hunks,
        added,
        removed,
    }
}

/// Where a pure addition goes: after the last anchor, else at the end
/// (before the final newline's empty segment).
fn insertion_point(file: &FileText, chunk: &Chunk, after_anchors: usize) -> usize {
    if !chunk.anchors.is_empty() && !chunk.eof {
        return after_anchors;
    }
    if file.ends_with_newline() || (file.segs.len() == 1 && file.segs[0].text.is_empty()) {
        file.segs.len() - 1
    } else {
        file.segs.len()
    }
}

fn find_anchor(norms: &[Vec<String>], anchor: &str, from: usize) -> Option<usize> {
    for (t, tier) in Tier::ALL.iter().enumerate() {
        let want = tier.normalize(anchor);
        if let Some(i) = norms[t].iter().skip(from).position(|l| *l == *want) {
            return Some(from + i);
        }
    }
    None
}

/// Finds the hunk's expected lines; `Ok(None)` when no tier finds them.
fn locate(
    file: &FileText,
    norms: &[Vec<String>],
    old: &[String],
    chunk: &Chunk,
    window_start: usize,
    index: usize,
) -> Result<Option<(usize, Tier)>, PlanError> {
    let n = file.segs.len();
    if old.len() > n {
        return Ok(None);
    }
    let last_start = n - old.len();
    let starts: Vec<usize> = if chunk.eof {
        // At the very end, or just before the final newline's empty segment.
        let mut v = vec![last_start];
        if file.ends_with_newline() && last_start > 0 {
            v.push(last_start - 1);
        }
        v
    } else if window_start <= last_start {
        (window_start..=last_start).collect()
    } else {
        Vec::new()
    };
    for (t, tier) in Tier::ALL.iter().enumerate() {
        let want: Vec<String> = old.iter().map(|l| tier.normalize(l).into_owned()).collect();
        let hits: Vec<usize> = starts
            .iter()
            .copied()
            .filter(|&s| norms[t][s..s + want.len()] == want[..])
            .collect();
        // Anchors and the end marker say where: the nearest wins.
        let pinned = !chunk.anchors.is_empty() || chunk.eof;
        if let Some(found) = verdict(&hits, *tier, pinned, chunk, index)? {
            return Ok(Some(found));
        }
    }
    // Models sometimes write hunks out of file order: accept a unique match
    // before the window too (overlaps are caught afterwards).
    if window_start > 0 && !chunk.eof {
        for (t, tier) in Tier::ALL.iter().enumerate() {
            let want: Vec<String> = old.iter().map(|l| tier.normalize(l).into_owned()).collect();
            let hits: Vec<usize> = (0..window_start.min(last_start + 1))
                .filter(|&s| norms[t][s..s + want.len()] == want[..])
                .collect();
            if let Some(found) = verdict(&hits, *tier, false, chunk, index)? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// One tier's matches: none (try the next tier), one (or several when
/// `pinned`: the first) found, or several and ambiguous.
fn verdict(
    hits: &[usize],
    tier: Tier,
    pinned: bool,
    chunk: &Chunk,
    index: usize,
) -> Result<Option<(usize, Tier)>, PlanError> {
    match hits {
        [] => Ok(None),
        [only] => Ok(Some((*only, tier))),
        [first, ..] if pinned => Ok(Some((*first, tier))),
        _ => Err(PlanError::Ambiguous {
            index,
            patch_line: chunk.line,
            count: hits.len(),
            lines: hits.iter().map(|s| s + 1).collect(),
            tier,
        }),
    }
}

fn not_found(norms: &[Vec<String>], old: &[String], chunk: &Chunk, index: usize) -> PlanError {
    let trimmed = &norms[2];
    let want: Vec<String> = old.iter().map(|l| l.trim().to_owned()).collect();
    let mut best: Option<Closest> = None;
    if !want.is_empty() && !trimmed.is_empty() {
        let span = want.len().min(trimmed.len());
        for s in 0..=(trimmed.len() - span) {
            let agree = (0..span).filter(|&k| trimmed[s + k] == want[k]).count();
            if agree > 0 && best.as_ref().is_none_or(|b| agree > b.matching_lines) {
                let diff = (0..span)
                    .find(|&k| trimmed[s + k] != want[k])
                    .map(|k| (old[k].clone(), trimmed[s + k].clone()));
                best = Some(Closest {
                    line: s + 1,
                    matching_lines: agree,
                    first_difference: diff,
                });
            }
        }
    }
    PlanError::ContextNotFound {
        index,
        patch_line: chunk.line,
        expected: old.to_vec(),
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
                "    a\nb\n",
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
