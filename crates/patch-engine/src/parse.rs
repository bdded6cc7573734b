//! The patch grammar: `*** Begin Patch` … `*** End Patch` with Add, Delete
//! and Update (optionally Move) operations. Lenient where models are sloppy
//! and the meaning is unambiguous; every error names its patch line.

/// A parsed patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// Operations in patch order.
    pub ops: Vec<Op>,
}

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `*** Add File:` with its content lines.
    Add {
        /// Target path as written.
        path: String,
        /// Content lines (each becomes a `\n`-terminated line).
        lines: Vec<String>,
        /// Patch line of the header (1-based).
        line: usize,
    },
    /// `*** Delete File:`.
    Delete {
        /// Target path as written.
        path: String,
        /// Patch line of the header.
        line: usize,
    },
    /// `*** Update File:` with an optional `*** Move to:` and its hunks.
    Update {
        /// Source path as written.
        path: String,
        /// Destination, for a move.
        move_to: Option<String>,
        /// Hunks in patch order.
        chunks: Vec<Chunk>,
        /// Patch line of the header.
        line: usize,
    },
}

/// One hunk of an Update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// `@@ text` anchors, outermost first; each is located after the previous.
    pub anchors: Vec<String>,
    /// Body lines in order.
    pub lines: Vec<HunkLine>,
    /// Closed by `*** End of File`: must match at the end of the file.
    pub eof: bool,
    /// Patch line where the hunk starts.
    pub line: usize,
}

/// One body line of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    /// ` text`: kept (the file's own bytes are kept).
    Context(String),
    /// `-text`: removed.
    Remove(String),
    /// `+text`: added.
    Add(String),
}

impl Chunk {
    /// The lines the hunk leaves in the file (context and added).
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Add(t) => Some(t.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }

    /// The lines the hunk expects in the file (context and removed).
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }
}

/// A patch that does not parse, with the patch line it stopped at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid patch at line {line}: {message}")]
#[non_exhaustive]
pub struct ParseError {
    /// 1-based line of the patch text.
    pub line: usize,
    /// What is wrong and what was expected.
    pub message: String,
    /// A path names a control character (CR, LF, NUL, ...): bad input like
    /// such a path given to any tool, rather than a malformed envelope.
    pub control_character: bool,
}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
        control_character: false,
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const EOF_MARKER: &str = "*** End of File";

/// Strips `<<EOF` / `<<'EOF'` / `<<"EOF"` heredoc wrappers (optionally after a
/// command word such as `apply_patch`). Returns the lines and how many lines
/// were dropped at the top (to keep error line numbers true).
fn unwrap_heredoc(lines: Vec<&str>) -> (Vec<&str>, usize) {
    let Some(end) = lines.iter().rposition(|l| !l.trim().is_empty()) else {
        return (lines, 0);
    };
    if end < 3 {
        return (lines, 0);
    }
    let first = lines[0].trim();
    let last = lines[end].trim();
    let Some(pos) = first.find("<<") else {
        return (lines, 0);
    };
    let tag = first[pos + 2..].trim();
    let word = match tag.as_bytes().first() {
        Some(b'\'') => tag.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')),
        Some(b'"') => tag.strip_prefix('"').and_then(|t| t.strip_suffix('"')),
        _ => Some(tag),
    };
    match word {
        Some(w)
            if !w.is_empty()
                && w == last
                && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            (lines[1..end].to_vec(), 1)
        }
        _ => (lines, 0),
    }
}

/// A unified-diff hunk header (`@@ -1,3 +1,4 @@ ...`) carries no anchor.
fn is_unified_range(text: &str) -> bool {
    let mut parts = text.split_whitespace();
    let old = parts.next().unwrap_or("");
    let new = parts.next().unwrap_or("");
    let close = parts.next().unwrap_or("");
    let range = |s: &str, sign: char| {
        s.strip_prefix(sign).is_some_and(|r| {
            !r.is_empty()
                && r.split(',')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    range(old, '-') && range(new, '+') && close == "@@"
}

/// Parses patch text.
pub fn parse(text: &str) -> Result<Patch, ParseError> {
    let raw: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let (lines, offset) = unwrap_heredoc(raw);
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return Err(err(
            1,
            "the patch is empty; it must start with '*** Begin Patch'",
        ));
    };
    let no = |i: usize| i + 1 + offset;
    if lines[first].trim() != BEGIN {
        return Err(err(
            no(first),
            format!(
                "the first line must be '{BEGIN}', got '{}'",
                lines[first].trim()
            ),
        ));
    }
    if lines[last].trim() != END || last == first {
        return Err(err(
            no(last),
            format!(
                "the last line must be '{END}', got '{}'",
                lines[last].trim()
            ),
        ));
    }
    let body = &lines[first + 1..last];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i];
        let t = line.trim();
        let at = no(first + 1 + i);
        if t.is_empty() {
            i += 1;
        } else if t.starts_with(ADD) {
            let path = nonempty_path(after(line, ADD), at)?;
            let mut content = Vec::new();
            i += 1;
            while i < body.len() {
                match body[i].strip_prefix('+') {
                    Some(c) => content.push(c.to_owned()),
                    None => break,
                }
                i += 1;
            }
            ops.push(Op::Add {
                path,
                lines: content,
                line: at,
            });
        } else if t.starts_with(DELETE) {
            ops.push(Op::Delete {
                path: nonempty_path(after(line, DELETE), at)?,
                line: at,
            });
            i += 1;
        } else if t.starts_with(UPDATE) {
            let path = nonempty_path(after(line, UPDATE), at)?;
            i += 1;
            let mut move_to = None;
            if let Some(dest) = body
                .get(i)
                .filter(|l| l.trim().starts_with(MOVE))
                .map(|l| after(l, MOVE))
            {
                move_to = Some(nonempty_path(dest, no(first + 1 + i))?);
                i += 1;
            }
            let (chunks, next) = parse_chunks(body, i, |k| no(first + 1 + k))?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(err(
                    at,
                    format!(
                        "Update File for '{path}' has no hunks (add @@ and ' '/'-'/'+' lines, or a '*** Move to:' line)"
                    ),
                ));
            }
            i = next;
            ops.push(Op::Update {
                path,
                move_to,
                chunks,
                line: at,
            });
        } else {
            return Err(err(
                at,
                format!(
                    "'{t}' is not an operation header; expected '{ADD} <path>', '{DELETE} <path>' or '{UPDATE} <path>'"
                ),
            ));
        }
    }
    Ok(Patch { ops })
}

/// The path of an operation header. `raw` is what follows the header's
/// marker on the line, untrimmed (only the line's own `\n` or `\r\n` is
/// gone). Spaces and tabs around it are dropped; a control character (CR, LF,
/// NUL, ...) or a Unicode line/paragraph separator anywhere else is refused:
/// no file name the patch writes carries one.
fn nonempty_path(raw: &str, line: usize) -> Result<String, ParseError> {
    let inner = raw.trim_matches([' ', '\t']);
    if let Some(c) = inner
        .chars()
        .find(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'))
    {
        return Err(ParseError {
            control_character: true,
            ..err(
                line,
                format!(
                    "the path contains the control character U+{:04X}; file names in a patch are plain text on one line",
                    u32::from(c)
                ),
            )
        });
    }
    let p = raw.trim();
    if p.is_empty() {
        Err(err(line, "the operation names no path"))
    } else {
        Ok(p.to_owned())
    }
}

/// What follows `marker` on `line` (leading whitespace skipped), untrimmed.
fn after<'l>(line: &'l str, marker: &str) -> &'l str {
    line.trim_start().strip_prefix(marker).unwrap_or_default()
}

/// Parses the hunks of one Update, from `start` up to the next operation.
fn parse_chunks(
    body: &[&str],
    start: usize,
    no: impl Fn(usize) -> usize,
) -> Result<(Vec<Chunk>, usize), ParseError> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut cur: Option<Chunk> = None;
    let mut i = start;
    let finish =
        |cur: &mut Option<Chunk>, chunks: &mut Vec<Chunk>, at: usize| -> Result<(), ParseError> {
            if let Some(mut c) = cur.take() {
                // Bare empty lines at the end of a hunk separate hunks; they are not context.
                while matches!(c.lines.last(), Some(HunkLine::Context(t)) if t.is_empty())
                    && c.lines.len() > 1
                {
                    c.lines.pop();
                }
                if c.lines.is_empty() {
                    return Err(err(
                        c.line.max(1).min(at),
                        "the hunk has no ' ', '-' or '+' lines",
                    ));
                }
                chunks.push(c);
            }
            Ok(())
        };
    while i < body.len() {
        let line = body[i];
        let t = line.trim();
        let at = no(i);
        if t == EOF_MARKER {
            match cur.as_mut() {
                Some(c) if !c.lines.is_empty() => c.eof = true,
                _ => {
                    return Err(err(
                        at,
                        "'*** End of File' must close a hunk that has lines",
                    ));
                }
            }
            finish(&mut cur, &mut chunks, at)?;
            i += 1;
            continue;
        }
        if t.starts_with("*** ") {
            break;
        }
        if line.starts_with("@@") && (line.len() == 2 || line[2..].starts_with(' ') || t == "@@") {
            let text = line[2..].trim();
            if cur.as_ref().is_some_and(|c| !c.lines.is_empty()) {
                finish(&mut cur, &mut chunks, at)?;
            }
            let c = cur.get_or_insert_with(|| Chunk {
                line: at,
                ..Chunk::default()
            });
            if !text.is_empty() && !is_unified_range(text) {
                c.anchors.push(text.to_owned());
            }
            i += 1;
            continue;
        }
        if line.starts_with("\\ No newline") {
            return Err(err(
                at,
                "'\\ No newline at end of file' is unified-diff syntax; the final newline is a line here: remove it with a '-' line for the empty last line",
            ));
        }
        let hunk_line = match line.chars().next() {
            Some(' ') => HunkLine::Context(line[1..].to_owned()),
            Some('-') => HunkLine::Remove(line[1..].to_owned()),
            Some('+') => HunkLine::Add(line[1..].to_owned()),
            // Transports strip the space of blank context lines.
            None => HunkLine::Context(String::new()),
            Some(_) => {
                // A blank separator between hunks is allowed; anything else is not.
                if t.is_empty() {
                    HunkLine::Context(String::new())
                } else {
                    return Err(err(
                        at,
                        format!(
                            "unexpected line in a hunk: '{line}'; hunk lines start with ' ', '-' or '+', hunks with '@@'"
                        ),
                    ));
                }
            }
        };
        let c = cur.get_or_insert_with(|| Chunk {
            line: at,
            ..Chunk::default()
        });
        c.lines.push(hunk_line);
        i += 1;
    }
    let end = no(i.saturating_sub(1));
    finish(&mut cur, &mut chunks, end)?;
    // A hunk made only of blank lines between hunks is no hunk.
    chunks.retain(|c| {
        !(c.anchors.is_empty()
            && c.lines
                .iter()
                .all(|l| matches!(l, HunkLine::Context(t) if t.is_empty())))
    });
    Ok((chunks, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Vec<Op> {
        parse(text).unwrap_or_else(|e| panic!("{e}")).ops
    }

    #[test]
    fn full_grammar() {
        let ops = ok(
            "*** Begin Patch\n*** Add File: a/new.txt\n+one\n+two\n*** Delete File: old.txt\n*** Update File: src/x.py\n*** Move to: src/y.py\n@@ class A\n@@ def m(self):\n ctx\n-old\n+new\n\n*** Update File: z.txt\n-last\n+LAST\n*** End of File\n*** End Patch\n",
        );
        assert_eq!(ops.len(), 4);
        assert_eq!(
            ops[0],
            Op::Add {
                path: "a/new.txt".into(),
                lines: vec!["one".into(), "two".into()],
                line: 2
            }
        );
        assert_eq!(
            ops[1],
            Op::Delete {
                path: "old.txt".into(),
                line: 5
            }
        );
        let Op::Update {
            path,
            move_to,
            chunks,
            ..
        } = &ops[2]
        else {
            panic!()
        };
        assert_eq!(
            (path.as_str(), move_to.as_deref()),
            ("src/x.py", Some("src/y.py"))
        );
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].anchors, ["class A", "def m(self):"]);
        assert_eq!(chunks[0].old_lines(), ["ctx", "old"]);
        let Op::Update { chunks, .. } = &ops[3] else {
            panic!()
        };
        assert!(chunks[0].eof);
    }

    #[test]
    fn leniencies() {
        // Padded markers, CRLF, heredoc, missing first @@, unified-diff header numbers.
        let p = "cat <<'EOF'\r\n  *** Begin Patch  \r\n  *** Update File: a.txt\r\n-x\r\n+y\r\n@@ -10,2 +10,2 @@\r\n a\r\n-b\r\n+c\r\n *** End Patch \r\nEOF\r\n";
        let ops = ok(p);
        let Op::Update { chunks, .. } = &ops[0] else {
            panic!()
        };
        assert_eq!(chunks.len(), 2);
        assert!(chunks[1].anchors.is_empty());
        assert_eq!(chunks[1].old_lines(), ["a", "b"]);
        // A bare empty line inside a hunk is empty context.
        let ops = ok("*** Begin Patch\n*** Update File: a\n@@\n a\n\n-b\n*** End Patch");
        let Op::Update { chunks, .. } = &ops[0] else {
            panic!()
        };
        assert_eq!(chunks[0].old_lines(), ["a", "", "b"]);
        // Begin + End only: zero ops.
        assert!(ok("*** Begin Patch\n*** End Patch\n").is_empty());
        // Pure rename.
        let ops = ok("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch");
        assert!(
            matches!(&ops[0], Op::Update { chunks, move_to: Some(_), .. } if chunks.is_empty())
        );
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("*** Update File: a\n*** End Patch", 1),
            ("*** Begin Patch\n*** Update File: a\n-x\n", 3),
            ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch", 2),
            ("*** Begin Patch\n*** Update File: a\n*** End Patch", 2),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n?y\n*** End Patch",
                5,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch",
                4,
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n\\ No newline at end of file\n*** End Patch",
                5,
            ),
            ("", 1),
            ("*** Begin Patch\n*** Add File:   \n*** End Patch", 2),
        ];
        for (text, line) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        // Control characters in a path: refused, not written into a name.
        for bad in [
            "*** Begin Patch\n*** Add File: a\rb.txt\n+x\n*** End Patch",
            "*** Begin Patch\n*** Add File: a.txt\r\r\n+x\n*** End Patch",
            "*** Begin Patch\n*** Delete File: a\0b\n*** End Patch",
            "*** Begin Patch\n*** Update File: a\u{1b}[31m\n@@\n-x\n+y\n*** End Patch",
            "*** Begin Patch\n*** Update File: a\n*** Move to: b\u{85}c\n*** End Patch",
            "*** Begin Patch\n*** Add File: a\u{2028}b\n+x\n*** End Patch",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.message.contains("control character"), "{bad:?}: {e}");
            assert!(e.line == 2 || e.line == 3, "{bad:?}: {e}");
        }
        // A CRLF patch still parses, and spaces or tabs around a path are dropped.
        let ok =
            parse("*** Begin Patch\r\n*** Add File:\t a.txt \r\n+x\r\n*** End Patch\r\n").unwrap();
        assert!(matches!(&ok.ops[0], Op::Add { path, .. } if path == "a.txt"));
        // Mismatched heredoc quotes are not unwrapped.
        assert!(parse("<<'EOF\n*** Begin Patch\n*** End Patch\nEOF").is_err());
    }
}
