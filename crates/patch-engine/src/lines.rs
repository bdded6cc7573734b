//! Line-addressed edits and file revisions (the edit layer of
//! `apply_changes`).
//!
//! A file's lines are counted as `read_file` (and `search_text`, `git_blame`)
//! count them: an LF ends a line (with the CR before it, a CRLF), a final
//! terminator opens no line, and an empty file has none. A CR without an LF
//! is a character of its line (the reference 0.5.0 ends a line there, as its
//! own `read_file` does; ours counts LF). Every edit of one change names lines of the file *as it
//! was read*; each becomes a span of the original (an insertion is an empty
//! span) and the spans are spliced back to front, so no edit shifts the
//! numbers of another.
//!
//! Bytes the edits do not address keep their bytes: a line's own
//! terminator stays what it was (a lone CR stays a lone CR), a UTF-8 BOM
//! stays, a file without a final newline stays without one. New lines take
//! the file's style: CRLF when its first LF is preceded by a CR, else LF.

use ring::digest::{SHA256, digest};

/// The name of the digest behind [`revision`].
pub const REVISION_ALGORITHM: &str = "sha256";

/// The most changes one `apply_changes` call takes.
pub const MAX_CHANGES: usize = 100;

/// The most edits one change takes.
pub const MAX_EDITS: usize = 200;

/// A file's revision: the lowercase hex SHA-256 of all of its bytes (also
/// when only part of it was read).
pub fn revision(bytes: &[u8]) -> String {
    let d = digest(&SHA256, bytes);
    let mut out = String::with_capacity(64);
    for b in d.as_ref() {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

/// The lines of `bytes` as `read_file` counts them (an LF ends a line; a
/// final one opens none).
pub fn total_lines(bytes: &[u8]) -> usize {
    let n = bytes.iter().filter(|c| **c == b'\n').count();
    n + usize::from(bytes.last().is_some_and(|c| *c != b'\n'))
}

/// What one edit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditOp {
    /// Replace lines `start_line..=end_line` with the content.
    Replace,
    /// Remove lines `start_line..=end_line`.
    Delete,
    /// Insert the content after line `line` (0: at the top).
    InsertAfter,
    /// Insert the content before line `line` (total + 1: at the end).
    InsertBefore,
}

impl EditOp {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "replace",
            Self::Delete => "delete",
            Self::InsertAfter => "insert_after",
            Self::InsertBefore => "insert_before",
        }
    }

    /// The operation named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "replace" => Self::Replace,
            "delete" => Self::Delete,
            "insert_after" => Self::InsertAfter,
            "insert_before" => Self::InsertBefore,
            _ => return None,
        })
    }
}

/// One line-addressed edit, in the numbers of the file as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineEdit {
    op: EditOp,
    /// First line of the span, 1-based (replace, delete).
    start_line: usize,
    /// Last line of the span, 1-based, inclusive (replace, delete).
    end_line: usize,
    /// The insertion point's line (inserts).
    line: usize,
    /// The new lines, without terminators.
    lines: Vec<String>,
}

/// Why a [`LineEdit`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditShapeError {
    /// `start_line` under 1.
    #[error("start_line must be >= 1")]
    StartBelowOne,
    /// `end_line` before `start_line`.
    #[error("end_line must be >= start_line")]
    EndBeforeStart,
    /// `insert_before`'s line under 1.
    #[error("line must be >= 1 for insert_before; total_lines + 1 appends")]
    InsertBeforeZero,
}

impl LineEdit {
    /// Replaces lines `start_line..=end_line` with `content`'s lines
    /// (`""` is no line: a deletion).
    pub fn replace(
        start_line: usize,
        end_line: usize,
        content: &str,
    ) -> Result<Self, EditShapeError> {
        Self::span(
            EditOp::Replace,
            start_line,
            end_line,
            content_lines(content),
        )
    }

    /// Removes lines `start_line..=end_line`.
    pub fn delete(start_line: usize, end_line: usize) -> Result<Self, EditShapeError> {
        Self::span(EditOp::Delete, start_line, end_line, Vec::new())
    }

    /// Inserts `content`'s lines after line `line` (0: at the top).
    pub fn insert_after(line: usize, content: &str) -> Self {
        Self {
            op: EditOp::InsertAfter,
            start_line: 0,
            end_line: 0,
            line,
            lines: content_lines(content),
        }
    }

    /// Inserts `content`'s lines before line `line` (total + 1: appends).
    pub fn insert_before(line: usize, content: &str) -> Result<Self, EditShapeError> {
        if line < 1 {
            return Err(EditShapeError::InsertBeforeZero);
        }
        Ok(Self {
            op: EditOp::InsertBefore,
            start_line: 0,
            end_line: 0,
            line,
            lines: content_lines(content),
        })
    }

    fn span(
        op: EditOp,
        start_line: usize,
        end_line: usize,
        lines: Vec<String>,
    ) -> Result<Self, EditShapeError> {
        if start_line < 1 {
            return Err(EditShapeError::StartBelowOne);
        }
        if end_line < start_line {
            return Err(EditShapeError::EndBeforeStart);
        }
        Ok(Self {
            op,
            start_line,
            end_line,
            line: 0,
            lines,
        })
    }

    /// The operation.
    pub fn op(&self) -> EditOp {
        self.op
    }

    /// The numbers as the caller gave them: `(start_line, end_line)` of a
    /// span, or `line` of an insertion.
    pub fn requested(&self) -> Requested {
        match self.op {
            EditOp::Replace | EditOp::Delete => Requested::Span {
                start_line: self.start_line,
                end_line: self.end_line,
            },
            EditOp::InsertAfter | EditOp::InsertBefore => Requested::Line(self.line),
        }
    }

    /// The lines it inserts.
    pub fn new_lines(&self) -> usize {
        self.lines.len()
    }

    /// The half-open 0-based span of the original it replaces.
    fn bounds(&self) -> (usize, usize) {
        match self.op {
            EditOp::Replace | EditOp::Delete => (self.start_line - 1, self.end_line),
            EditOp::InsertAfter => (self.line, self.line),
            EditOp::InsertBefore => (self.line - 1, self.line - 1),
        }
    }

    /// The original lines it removes, once placed.
    pub fn removed_lines(&self) -> usize {
        let (s, e) = self.bounds();
        e - s
    }
}

/// The numbers of an edit as its caller wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// `start_line`, `end_line`.
    Span {
        /// First line.
        start_line: usize,
        /// Last line.
        end_line: usize,
    },
    /// `line`.
    Line(usize),
}

/// Why a change's edits cannot be placed in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceError {
    /// An edit names a line the file does not have.
    PastEnd {
        /// The edit's index in the change.
        edit_index: usize,
        /// The file's lines.
        total_lines: usize,
    },
    /// Two edits address the same lines, or insert at one point.
    Overlap {
        /// The two edits' indexes, in file order.
        edit_indexes: [usize; 2],
    },
}

/// A range of the new file that differs from the old one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangedRange {
    /// First line, 1-based.
    pub start_line: usize,
    /// Last line, inclusive; `start_line - 1` for a pure removal.
    pub end_line: usize,
    /// Lines of the new file in the range.
    pub added_lines: usize,
    /// Lines of the old file it replaced.
    pub removed_lines: usize,
}

/// The result of [`apply_line_edits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The new bytes.
    pub content: Vec<u8>,
    /// What changed, in the new file's numbers and order.
    pub changed_ranges: Vec<ChangedRange>,
}

/// Content given as text: whole lines. A CRLF becomes an LF (the file's
/// style is put back on write), then it is split on LF: `""` is no line,
/// and a trailing newline adds an empty line.
pub fn content_lines(content: &str) -> Vec<String> {
    if content.is_empty() {
        return Vec::new();
    }
    content
        .replace("\r\n", "\n")
        .split('\n')
        .map(str::to_owned)
        .collect()
}

/// One line of a file: its text and its own terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Line<'a> {
    text: &'a str,
    end: &'a str,
}

const BOM: &str = "\u{feff}";

fn split_file(text: &str) -> Vec<Line<'_>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while let Some(at) = b[i..].iter().position(|c| *c == b'\n') {
        let lf = i + at;
        let cut = if lf > start && b[lf - 1] == b'\r' {
            lf - 1
        } else {
            lf
        };
        out.push(Line {
            text: &text[start..cut],
            end: &text[cut..=lf],
        });
        i = lf + 1;
        start = i;
    }
    if start < b.len() {
        out.push(Line {
            text: &text[start..],
            end: "",
        });
    }
    out
}

/// The terminator new lines get: CRLF when the file's first LF follows a CR.
fn style_of(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// Applies `edits`, all in the numbers of `text`, to `text`.
pub fn apply_line_edits(text: &str, edits: &[LineEdit]) -> Result<Edited, PlaceError> {
    let (bom, body) = match text.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", text),
    };
    let style = style_of(body);
    let mut lines = split_file(body);
    if !bom.is_empty() && body.is_empty() {
        // A file of only a BOM is one line to read_file: so it is here.
        lines.push(Line { text: "", end: "" });
    }
    let total = lines.len();
    let mut spans: Vec<(usize, usize, usize)> = Vec::with_capacity(edits.len());
    for (i, e) in edits.iter().enumerate() {
        let (s, end) = e.bounds();
        if s > total || end > total {
            return Err(PlaceError::PastEnd {
                edit_index: i,
                total_lines: total,
            });
        }
        spans.push((s, end, i));
    }
    // File order; an insertion sorts before a replacement starting at its
    // point and lands before it.
    spans.sort_by_key(|&(s, e, _)| (s, e));
    for w in spans.windows(2) {
        let (ps, pe, pi) = w[0];
        let (cs, ce, ci) = w[1];
        let both_empty = ps == pe && cs == ce;
        if cs < pe || (both_empty && cs == ps) {
            return Err(PlaceError::Overlap {
                edit_indexes: [pi, ci],
            });
        }
    }
    let had_final = lines.last().is_some_and(|l| !l.end.is_empty());
    let mut out: Vec<(std::borrow::Cow<'_, str>, &str)> = Vec::with_capacity(total);
    let mut ranges = Vec::new();
    let mut at = 0;
    for &(s, e, i) in &spans {
        out.extend(lines[at..s].iter().map(|l| (l.text.into(), l.end)));
        let new = &edits[i].lines;
        let old: Vec<&str> = lines[s..e].iter().map(|l| l.text).collect();
        if old.iter().copied().ne(new.iter().map(String::as_str)) {
            let limit = old.len().min(new.len());
            let prefix = (0..limit).take_while(|&k| old[k] == new[k]).count();
            let suffix = (0..limit - prefix)
                .take_while(|&k| old[old.len() - 1 - k] == new[new.len() - 1 - k])
                .count();
            let start = out.len() + prefix;
            let added = new.len() - prefix - suffix;
            ranges.push(ChangedRange {
                start_line: start + 1,
                end_line: start + added,
                added_lines: added,
                removed_lines: old.len() - prefix - suffix,
            });
        }
        // Lines the edit restates keep their own terminators.
        for (k, l) in new.iter().enumerate() {
            let end = if k < old.len() && old[k] == l.as_str() {
                lines[s + k].end
            } else {
                ""
            };
            out.push((l.as_str().into(), end));
        }
        at = e;
    }
    out.extend(lines[at..].iter().map(|l| (l.text.into(), l.end)));
    // The final-newline state stays; an empty file that gains lines ends
    // with one.
    let final_newline = if total == 0 { true } else { had_final };
    let n = out.len();
    let mut content = String::with_capacity(text.len() + 64);
    content.push_str(bom);
    for (k, (t, end)) in out.iter().enumerate() {
        content.push_str(t);
        let last = k + 1 == n;
        match (last, end.is_empty()) {
            (false, true) => content.push_str(style),
            (false, false) => content.push_str(end),
            (true, _) if !final_newline => {}
            (true, true) => content.push_str(style),
            (true, false) => content.push_str(end),
        }
    }
    Ok(Edited {
        content: content.into_bytes(),
        changed_ranges: ranges,
    })
}

/// The lines of `text` (BOM dropped), without terminators, for a diff.
fn diff_lines(text: &str) -> Vec<&str> {
    let body = text.strip_prefix(BOM).unwrap_or(text);
    split_file(body).into_iter().map(|l| l.text).collect()
}

/// Past this many line pairs (of the part between the common prefix and
/// suffix), [`diff_ranges`] reports that part as one range instead of
/// matching inside it.
const MAX_DIFF_PAIRS: usize = 4_000_000;

/// The ranges of `new` that differ from `old`, in `new`'s numbers: past the
/// lines both start and end with, the non-equal blocks of a
/// longest-matching-block line diff (Ratcliff and Obershelp, as Python's
/// `difflib.SequenceMatcher` without junk).
pub fn diff_ranges(old: &str, new: &str) -> Vec<ChangedRange> {
    let a = diff_lines(old);
    let b = diff_lines(new);
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let whole = || vec![(ma.len(), mb.len(), 0)];
    let blocks = if ma.len().saturating_mul(mb.len()) <= MAX_DIFF_PAIRS {
        matching_blocks(ma, mb).unwrap_or_else(whole)
    } else {
        whole()
    };
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    for (ai, bj, size) in blocks {
        if i < ai || j < bj {
            out.push(ChangedRange {
                start_line: prefix + j + 1,
                end_line: prefix + bj,
                added_lines: bj - j,
                removed_lines: ai - i,
            });
        }
        i = ai + size;
        j = bj + size;
    }
    out
}

/// The most line comparisons one diff may make: repeated lines make the
/// matching cubic in the worst case (issue 34's review: 1 KB of content
/// took seconds), and the evidence is not worth that.
const MAX_DIFF_STEPS: usize = 2_000_000;

/// Matching blocks `(i, j, size)` in order, ending with `(len a, len b, 0)`;
/// `None` past [`MAX_DIFF_STEPS`].
fn matching_blocks(a: &[&str], b: &[&str]) -> Option<Vec<(usize, usize, usize)>> {
    let mut steps = 0usize;
    let mut b2j: std::collections::HashMap<&str, Vec<usize>> = std::collections::HashMap::new();
    for (j, l) in b.iter().enumerate() {
        b2j.entry(l).or_default().push(j);
    }
    let mut queue = vec![(0, a.len(), 0, b.len())];
    let mut found = Vec::new();
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = longest_match(a, &b2j, (alo, ahi, blo, bhi), &mut steps)?;
        if k == 0 {
            continue;
        }
        found.push((i, j, k));
        if alo < i && blo < j {
            queue.push((alo, i, blo, j));
        }
        if i + k < ahi && j + k < bhi {
            queue.push((i + k, ahi, j + k, bhi));
        }
    }
    found.sort_unstable();
    let mut merged: Vec<(usize, usize, usize)> = Vec::with_capacity(found.len() + 1);
    for (i, j, k) in found {
        match merged.last_mut() {
            Some((pi, pj, pk)) if *pi + *pk == i && *pj + *pk == j => *pk += k,
            _ => merged.push((i, j, k)),
        }
    }
    merged.push((a.len(), b.len(), 0));
    Some(merged)
}

/// The longest common run of `a[alo..ahi]` and `b[blo..bhi]`: the earliest
/// in `a`, then in `b`, among the longest.
fn longest_match(
    a: &[&str],
    b2j: &std::collections::HashMap<&str, Vec<usize>>,
    (alo, ahi, blo, bhi): (usize, usize, usize, usize),
    steps: &mut usize,
) -> Option<(usize, usize, usize)> {
    let (mut besti, mut bestj, mut bestk) = (alo, blo, 0);
    let mut j2len: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for (i, line) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut next = std::collections::HashMap::new();
        // Every line of `a` and every position of `b` looked at counts,
        // skipped ones too (the second review: they were most of the work).
        *steps += 1;
        for &j in b2j.get(line).map(Vec::as_slice).unwrap_or(&[]) {
            *steps += 1;
            if *steps > MAX_DIFF_STEPS {
                return None;
            }
            if j < blo {
                continue;
            }
            if j >= bhi {
                break;
            }
            let k = j
                .checked_sub(1)
                .and_then(|p| j2len.get(&p))
                .copied()
                .unwrap_or(0)
                + 1;
            next.insert(j, k);
            if k > bestk {
                (besti, bestj, bestk) = (i + 1 - k, j + 1 - k, k);
            }
        }
        j2len = next;
    }
    Some((besti, bestj, bestk))
}

/// The range of a file written whole: all its lines, added.
pub fn whole_file_range(bytes: &[u8]) -> Vec<ChangedRange> {
    let n = total_lines(bytes);
    vec![ChangedRange {
        start_line: 1,
        end_line: n,
        added_lines: n,
        removed_lines: 0,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(text: &str, edits: &[LineEdit]) -> String {
        String::from_utf8(apply_line_edits(text, edits).unwrap().content).unwrap()
    }

    #[test]
    fn lines_are_counted_as_read_file_counts_them() {
        assert_eq!(total_lines(b""), 0);
        assert_eq!(total_lines(b"a"), 1);
        assert_eq!(total_lines(b"a\n"), 1);
        assert_eq!(total_lines(b"a\r\nb"), 2);
        assert_eq!(total_lines(b"a\rb\r"), 1);
        assert_eq!(total_lines(b"\n\n"), 2);
    }

    #[test]
    fn edits_use_the_numbers_of_the_file_as_read() {
        let t = "1\n2\n3\n4\n";
        let edits = [
            LineEdit::replace(1, 1, "one").unwrap(),
            LineEdit::delete(3, 3).unwrap(),
            LineEdit::insert_after(4, "five"),
        ];
        assert_eq!(apply(t, &edits), "one\n2\n4\nfive\n");
    }

    #[test]
    fn untouched_lines_keep_their_bytes_and_new_lines_take_the_style() {
        // A lone CR inside line 3 stays; new lines get CRLF (the first LF
        // is CRLF); an LF line keeps its LF.
        let t = "a\r\nb\nc\rd\r\n";
        assert_eq!(
            apply(t, &[LineEdit::replace(1, 1, "A").unwrap()]),
            "A\r\nb\nc\rd\r\n"
        );
        assert_eq!(
            apply(t, &[LineEdit::insert_after(3, "e")]),
            "a\r\nb\nc\rd\r\ne\r\n"
        );
        assert_eq!(apply(t, &[LineEdit::replace(3, 3, "c\rd").unwrap()]), t);
        // No final newline stays none.
        assert_eq!(apply("a\nb", &[LineEdit::insert_after(2, "c")]), "a\nb\nc");
        assert_eq!(apply("a\nb", &[LineEdit::delete(2, 2).unwrap()]), "a");
        // An empty file that gains lines ends with one; a BOM stays.
        assert_eq!(
            apply("", &[LineEdit::insert_before(1, "x").unwrap()]),
            "x\n"
        );
        assert_eq!(
            apply("\u{feff}a\n", &[LineEdit::replace(1, 1, "b").unwrap()]),
            "\u{feff}b\n"
        );
        assert_eq!(apply("a\nb\n", &[LineEdit::delete(1, 2).unwrap()]), "");
        // Replacing with "" deletes; "B\n" is B and a blank line.
        assert_eq!(
            apply("a\nb\n", &[LineEdit::replace(1, 1, "").unwrap()]),
            "b\n"
        );
        assert_eq!(
            apply("a\nb\n", &[LineEdit::replace(1, 1, "B\n").unwrap()]),
            "B\n\nb\n"
        );
    }

    #[test]
    fn overlaps_and_double_inserts_are_refused() {
        let t = "1\n2\n3\n";
        let overlap =
            |e: &[LineEdit]| matches!(apply_line_edits(t, e), Err(PlaceError::Overlap { .. }));
        assert!(overlap(&[
            LineEdit::replace(1, 2, "x").unwrap(),
            LineEdit::delete(2, 3).unwrap()
        ]));
        assert!(overlap(&[
            LineEdit::insert_after(1, "x"),
            LineEdit::insert_before(2, "y").unwrap()
        ]));
        assert!(overlap(&[
            LineEdit::insert_before(1, "x").unwrap(),
            LineEdit::insert_after(0, "y")
        ]));
        // Adjacent spans, and an insert at a replacement's first line.
        assert_eq!(
            apply(
                t,
                &[
                    LineEdit::replace(2, 2, "B").unwrap(),
                    LineEdit::replace(1, 1, "A").unwrap()
                ]
            ),
            "A\nB\n3\n"
        );
        assert_eq!(
            apply(
                t,
                &[
                    LineEdit::replace(2, 2, "B").unwrap(),
                    LineEdit::insert_before(2, "x").unwrap()
                ]
            ),
            "1\nx\nB\n3\n"
        );
        assert_eq!(
            apply_line_edits(t, &[LineEdit::delete(4, 4).unwrap()]),
            Err(PlaceError::PastEnd {
                edit_index: 0,
                total_lines: 3
            })
        );
    }

    #[test]
    fn changed_ranges_are_in_the_new_files_numbers() {
        let r = apply_line_edits(
            "1\n2\n3\n4\n",
            &[
                LineEdit::insert_after(0, "a\nb"),
                LineEdit::delete(3, 3).unwrap(),
            ],
        )
        .unwrap();
        assert_eq!(
            r.changed_ranges,
            [
                ChangedRange {
                    start_line: 1,
                    end_line: 2,
                    added_lines: 2,
                    removed_lines: 0
                },
                ChangedRange {
                    start_line: 5,
                    end_line: 4,
                    added_lines: 0,
                    removed_lines: 1
                },
            ]
        );
    }

    #[test]
    fn a_pathological_diff_is_bounded() {
        let k = 1400;
        let old = format!("P\n{}Q\n", "x\n".repeat(k));
        let new = format!("R\n{}S\n", "x\ny\n".repeat(k));
        // Past the step bound the middle is one range (matched, it would be
        // hundreds: minutes of work before the bound).
        assert_eq!(
            diff_ranges(&old, &new),
            [ChangedRange {
                start_line: 1,
                end_line: 2 * k + 2,
                added_lines: 2 * k + 2,
                removed_lines: k + 2
            }]
        );
    }

    #[test]
    fn a_bom_only_file_has_one_line() {
        assert_eq!(
            apply("\u{feff}", &[LineEdit::replace(1, 1, "x").unwrap()]),
            "\u{feff}x"
        );
    }

    #[test]
    fn diff_ranges_name_what_differs() {
        assert_eq!(
            diff_ranges("a\nb\nc\n", "a\nB\nc\nd\n"),
            [
                ChangedRange {
                    start_line: 2,
                    end_line: 2,
                    added_lines: 1,
                    removed_lines: 1
                },
                ChangedRange {
                    start_line: 4,
                    end_line: 4,
                    added_lines: 1,
                    removed_lines: 0
                },
            ]
        );
        assert_eq!(
            diff_ranges("", "x\n"),
            [ChangedRange {
                start_line: 1,
                end_line: 1,
                added_lines: 1,
                removed_lines: 0
            }]
        );
        assert!(diff_ranges("same\n", "same\n").is_empty());
    }
}
