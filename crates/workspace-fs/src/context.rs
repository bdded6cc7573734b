//! Bounded project instructions (client contract notes §4).

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{FsError, IoCause};
use crate::path::{Kind, Workspace};

/// Root instruction file names, in the order they are loaded.
pub const ROOT_INSTRUCTION_FILES: [&str; 4] = ["AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"];

/// Directories the nested-instruction index never descends into.
const SKIPPED_DIRS: [&str; 6] = [
    ".git",
    "node_modules",
    "target",
    ".venv",
    "__pycache__",
    "dist",
];

/// Budgets of the project context.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextLimits {
    /// Most root instruction files loaded.
    pub max_files: usize,
    /// Most bytes quoted from one file.
    pub per_file_bytes: usize,
    /// Most bytes of the whole instruction text, receipts included.
    pub total_bytes: usize,
    /// Most directory entries the nested index looks at.
    pub max_scan_entries: usize,
    /// Deepest directory level the nested index visits.
    pub max_depth: usize,
    /// Most nested instruction paths listed.
    pub max_nested: usize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        Self {
            max_files: 4,
            per_file_bytes: 12 * 1024,
            total_bytes: 20 * 1024,
            max_scan_entries: 5_000,
            max_depth: 4,
            max_nested: 50,
        }
    }
}

/// What happened to one root instruction file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InstructionFile {
    /// Workspace-relative path.
    pub path: String,
    /// Its full size in bytes.
    pub size_bytes: u64,
    /// Bytes quoted in the instructions.
    pub included_bytes: usize,
    /// Quoted only in part.
    pub truncated: bool,
    /// Not quoted at all (did not fit, or could not be read).
    pub omitted: bool,
}

/// The loaded context: the instruction text and what it is made of.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProjectContext {
    /// The text for `instructions` (empty when there are no files).
    pub text: String,
    /// Root instruction files, in load order.
    pub files: Vec<InstructionFile>,
    /// Nested instruction files, indexed by path, not injected.
    pub nested: Vec<String>,
    /// The nested index stopped at a limit.
    pub nested_truncated: bool,
    /// The notes the text carries in place of, or after, a quote, in order.
    pub notes: Vec<ContextNote>,
    /// Things the operator should know (unreadable files, escapes).
    pub warnings: Vec<ContextWarning>,
}

/// A fact about a root instruction file that the instruction text states
/// beside (or instead of) its quote. The caller words it: see
/// [`project_context_with`]; [`ContextNote::plain`] is a wording that names
/// no tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextNote {
    /// The file is beyond [`ContextLimits::max_files`] and is not quoted.
    BeyondFileLimit {
        /// Workspace-relative path.
        path: String,
        /// Its size.
        size_bytes: u64,
        /// The limit.
        max_files: usize,
    },
    /// The file could not be read; it is not quoted (the reason is in
    /// [`ProjectContext::warnings`]).
    Unreadable {
        /// Workspace-relative path.
        path: String,
    },
    /// Too little of the budget was left to quote the file usefully.
    DidNotFit {
        /// Workspace-relative path.
        path: String,
        /// Its size.
        size_bytes: u64,
        /// [`ContextLimits::total_bytes`].
        budget_bytes: usize,
    },
    /// The quote replaced invalid UTF-8 sequences by U+FFFD.
    InvalidUtf8 {
        /// Workspace-relative path.
        path: String,
        /// Sequences replaced.
        invalid_sequences: usize,
    },
    /// Only the start of the file is quoted.
    Truncated {
        /// Workspace-relative path.
        path: String,
        /// Its size.
        size_bytes: u64,
        /// Bytes of the file quoted.
        shown_bytes: usize,
        /// The first line not (wholly) quoted, 1-based.
        next_line: usize,
    },
}

impl ContextNote {
    /// A wording of the note that names no tool.
    pub fn plain(&self) -> String {
        match self {
            Self::BeyondFileLimit {
                path,
                size_bytes,
                max_files,
            } => format!(
                "[omitted: {path} ({size_bytes} bytes) is beyond the {max_files}-file limit]"
            ),
            Self::Unreadable { path } => format!("[omitted: {path} could not be read]"),
            Self::DidNotFit {
                path,
                size_bytes,
                budget_bytes,
            } => format!(
                "[omitted: {path} ({size_bytes} bytes) did not fit the {budget_bytes}-byte instruction budget]"
            ),
            Self::InvalidUtf8 {
                path,
                invalid_sequences,
            } => format!(
                "[{path} is not valid UTF-8: {invalid_sequences} invalid byte sequence(s) shown as U+FFFD]"
            ),
            Self::Truncated {
                path,
                size_bytes,
                shown_bytes,
                next_line,
            } => format!(
                "[truncated: {path} is {size_bytes} bytes; the first {shown_bytes} are shown; the rest starts at line {next_line}]"
            ),
        }
    }
}

/// Why a root instruction file was not loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextWarning {
    /// It is not a regular file (a directory, FIFO, socket or device).
    NotRegular {
        /// Workspace-relative path.
        path: String,
    },
    /// The workspace boundary refused to open it (a symlink out, a loop).
    Refused {
        /// Workspace-relative path.
        path: String,
        /// The refusal.
        error: FsError,
    },
    /// Reading it failed.
    Unreadable {
        /// Workspace-relative path.
        path: String,
        /// The operating system's error.
        error: IoCause,
    },
}

/// A quote shorter than this is not worth its header: the file is omitted instead.
const MIN_QUOTE_BYTES: usize = 256;

/// Room kept for each note: a worded [`ContextNote`] must stay within it
/// for the text to stay within budget.
const RECEIPT_RESERVE: usize = 320;

/// Loads the root instruction files of `ws` within `limits`, notes worded
/// by [`ContextNote::plain`].
pub fn project_context(ws: &Workspace, limits: &ContextLimits) -> ProjectContext {
    project_context_with(ws, limits, |_| 0, ContextNote::plain)
}

/// [`project_context`] for a caller that puts text of its own around the
/// quoted files (a preamble, the nested index) and words the notes itself.
/// The whole stays within `limits.total_bytes`: once the nested index is
/// known, `reserve` says how many bytes to leave free, and the files are
/// quoted in the rest. `words` renders each [`ContextNote`] into the text;
/// a worded note must stay within 320 bytes.
pub fn project_context_with(
    ws: &Workspace,
    limits: &ContextLimits,
    reserve: impl FnOnce(&ProjectContext) -> usize,
    words: impl Fn(&ContextNote) -> String,
) -> ProjectContext {
    let mut ctx = ProjectContext::default();
    index_nested(ws.root(), limits, &mut ctx);
    let total_bytes = limits.total_bytes.saturating_sub(reserve(&ctx));
    let mut seen = HashSet::new();
    let mut candidates = Vec::new();
    for name in ROOT_INSTRUCTION_FILES {
        if std::fs::symlink_metadata(ws.root().join(name)).is_err() {
            continue;
        }
        let opened = ws.resolve_lexically(name).and_then(|p| ws.open_beneath(&p));
        match opened {
            Ok((file, Kind::File)) => {
                let Ok(m) = file.metadata() else { continue };
                // One file under two spellings (case-insensitive file systems) loads once.
                if seen.insert((m.dev(), m.ino())) {
                    candidates.push((name, file, m.len()));
                }
            }
            Ok(_) => ctx.warnings.push(ContextWarning::NotRegular {
                path: name.to_owned(),
            }),
            Err(error) => ctx.warnings.push(ContextWarning::Refused {
                path: name.to_owned(),
                error,
            }),
        }
    }
    let mut sections = Vec::new();
    let mut used = 0usize;
    let note = |ctx: &mut ProjectContext, n: ContextNote| {
        let text = words(&n);
        ctx.notes.push(n);
        text
    };
    let count = candidates.len().min(limits.max_files);
    for (i, (name, handle, size)) in candidates.into_iter().enumerate() {
        let receipts_left = (count.saturating_sub(i + 1)) * RECEIPT_RESERVE;
        let mut file = InstructionFile {
            path: name.to_owned(),
            size_bytes: size,
            included_bytes: 0,
            truncated: false,
            omitted: true,
        };
        if i >= limits.max_files {
            let n = ContextNote::BeyondFileLimit {
                path: name.to_owned(),
                size_bytes: size,
                max_files: limits.max_files,
            };
            sections.push(note(&mut ctx, n));
            ctx.files.push(file);
            continue;
        }
        let header = format!("Project instructions from {name}:\n");
        let room = total_bytes
            .saturating_sub(used + receipts_left + header.len() + RECEIPT_RESERVE)
            .min(limits.per_file_bytes);
        let quote = match read_prefix(handle, if room < MIN_QUOTE_BYTES { 0 } else { room }) {
            Ok(b) => b,
            Err(e) => {
                ctx.warnings.push(ContextWarning::Unreadable {
                    path: name.to_owned(),
                    error: e.into(),
                });
                let n = ContextNote::Unreadable {
                    path: name.to_owned(),
                };
                sections.push(note(&mut ctx, n));
                used += RECEIPT_RESERVE;
                ctx.files.push(file);
                continue;
            }
        };
        let body = quote.text;
        if body.len() < MIN_QUOTE_BYTES.min(size as usize) {
            let n = ContextNote::DidNotFit {
                path: name.to_owned(),
                size_bytes: size,
                budget_bytes: limits.total_bytes,
            };
            let s = note(&mut ctx, n);
            used += s.len();
            sections.push(s);
            ctx.files.push(file);
            continue;
        }
        let mut section = header;
        section.push_str(&body);
        file.omitted = false;
        // Bytes of the file, which differ from the text's when invalid
        // UTF-8 was replaced: `included_bytes` + the rest = `size_bytes`.
        file.included_bytes = quote.file_bytes;
        if quote.invalid_sequences > 0 && !section.ends_with('\n') {
            section.push('\n');
        }
        if quote.invalid_sequences > 0 {
            let n = ContextNote::InvalidUtf8 {
                path: name.to_owned(),
                invalid_sequences: quote.invalid_sequences,
            };
            section.push_str(&note(&mut ctx, n));
        }
        if (quote.file_bytes as u64) < size {
            file.truncated = true;
            let next_line = body.matches('\n').count() + 1;
            if !section.ends_with('\n') {
                section.push('\n');
            }
            let n = ContextNote::Truncated {
                path: name.to_owned(),
                size_bytes: size,
                shown_bytes: quote.file_bytes,
                next_line,
            };
            section.push_str(&note(&mut ctx, n));
        }
        used += section.len();
        sections.push(section);
        ctx.files.push(file);
    }
    ctx.text = sections.join("\n\n");
    ctx
}

/// The start of a file as text.
struct Quote {
    /// At most the limit's bytes of text.
    text: String,
    /// How many bytes of the file that text stands for.
    file_bytes: usize,
    /// Invalid UTF-8 sequences replaced by U+FFFD.
    invalid_sequences: usize,
}

/// Reads the start of `file` as at most `limit` bytes of text, ending on a
/// whole character; each invalid UTF-8 sequence becomes U+FFFD (3 bytes of
/// text), so the instructions stay text and within budget.
fn read_prefix(file: std::fs::File, limit: usize) -> std::io::Result<Quote> {
    let mut buf = Vec::with_capacity(limit.min(64 * 1024));
    // Up to 3 bytes more: a character the limit cuts is recognised as cut,
    // not mistaken for invalid.
    file.take(limit as u64 + 3).read_to_end(&mut buf)?;
    let mut q = Quote {
        text: String::new(),
        file_bytes: 0,
        invalid_sequences: 0,
    };
    'chunks: for chunk in buf.utf8_chunks() {
        for c in chunk.valid().chars() {
            if q.text.len() + c.len_utf8() > limit {
                break 'chunks;
            }
            q.text.push(c);
            q.file_bytes += c.len_utf8();
        }
        let bad = chunk.invalid();
        if bad.is_empty() {
            continue;
        }
        let at_end = q.file_bytes + bad.len() == buf.len();
        if q.text.len() + 3 > limit || (at_end && buf.len() > limit) {
            break;
        }
        q.text.push('\u{FFFD}');
        q.file_bytes += bad.len();
        q.invalid_sequences += 1;
    }
    Ok(q)
}

fn index_nested(root: &Path, limits: &ContextLimits, ctx: &mut ProjectContext) {
    let mut queue = std::collections::VecDeque::from([(root.to_path_buf(), 0usize)]);
    let mut scanned = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<_> = entries.filter_map(Result::ok).collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            scanned += 1;
            if scanned > limits.max_scan_entries || ctx.nested.len() >= limits.max_nested {
                ctx.nested_truncated = true;
                return;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                if depth + 1 < limits.max_depth
                    && !name.starts_with('.')
                    && !SKIPPED_DIRS.contains(&name.as_ref())
                {
                    queue.push_back((entry.path(), depth + 1));
                }
            } else if depth > 0
                && ft.is_file()
                && ROOT_INSTRUCTION_FILES.contains(&name.as_ref())
                && let Ok(rel) = entry.path().strip_prefix(root)
            {
                ctx.nested.push(rel.to_string_lossy().into_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws_with(files: &[(&str, String)]) -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        for (name, body) in files {
            let p = t.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let w = Workspace::open(t.path()).unwrap();
        (t, w)
    }

    #[test]
    fn small_files_are_quoted_whole() {
        let (_t, w) = ws_with(&[
            ("AGENTS.md", "agents rules\n".into()),
            ("CLAUDE.md", "claude rules\n".into()),
            ("sub/AGENTS.md", "nested\n".into()),
        ]);
        let c = project_context(&w, &ContextLimits::default());
        assert!(c.text.contains("agents rules"));
        assert!(c.text.contains("claude rules"));
        assert!(!c.text.contains("nested"));
        assert_eq!(c.nested, vec!["sub/AGENTS.md".to_string()]);
        assert!(c.files.iter().all(|f| !f.truncated && !f.omitted));
    }

    #[test]
    fn budget_truncates_at_char_boundary_with_receipt() {
        let big = "é".repeat(20_000); // 40,000 bytes
        let (_t, w) = ws_with(&[("AGENTS.md", big), ("CLAUDE.md", "x\n".repeat(10))]);
        let limits = ContextLimits::default();
        let c = project_context(&w, &limits);
        assert!(c.text.len() <= limits.total_bytes, "{}", c.text.len());
        assert!(c.files[0].truncated);
        assert!(c.text.contains("[truncated: AGENTS.md is 40000 bytes"));
        assert!(c.text.contains("the rest starts at line 1]"));
        assert!(matches!(
            &c.notes[..],
            [ContextNote::Truncated { path, size_bytes: 40_000, next_line: 1, .. }] if path == "AGENTS.md"
        ));
        assert!(!c.text.contains('\u{FFFD}'));
        // The second file still gets its place.
        assert!(c.text.contains("Project instructions from CLAUDE.md"));
    }

    #[test]
    fn files_that_do_not_fit_are_listed_as_omitted() {
        let limits = ContextLimits {
            total_bytes: 700,
            ..ContextLimits::default()
        };
        let (_t, w) = ws_with(&[
            ("AGENTS.md", "a".repeat(5000)),
            ("CLAUDE.md", "b".repeat(5000)),
        ]);
        // Notes as long as a host's that name the call to read the rest.
        let words = |n: &ContextNote| format!("{}; read it with read_file(path=...)", n.plain());
        let c = project_context_with(&w, &limits, |_| 0, words);
        assert!(c.text.len() <= limits.total_bytes, "{}", c.text.len());
        assert!(c.files.iter().any(|f| f.omitted), "{:?}", c.files);
        assert!(
            c.text.contains("[omitted: CLAUDE.md (5000 bytes)"),
            "{}",
            c.text
        );
        assert!(c.text.contains("read it with read_file(path=...)"));
    }

    #[test]
    fn symlink_out_is_not_loaded() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
        let (t, w) = ws_with(&[]);
        std::os::unix::fs::symlink(outside.path().join("secret"), t.path().join("AGENTS.md"))
            .unwrap();
        let c = project_context(&w, &ContextLimits::default());
        assert!(!c.text.contains("SECRET"));
        assert!(matches!(
            &c.warnings[..],
            [ContextWarning::Refused { path, error: FsError::SymlinkEscape(_) }] if path == "AGENTS.md"
        ));
    }

    #[test]
    fn invalid_utf8_is_replaced_and_the_counts_add_up() {
        let t = tempfile::tempdir().unwrap();
        let mut body = b"rules \xff\xfe here\n".to_vec();
        body.extend(std::iter::repeat_n(b'\xff', 30_000));
        std::fs::write(t.path().join("AGENTS.md"), &body).unwrap();
        let w = Workspace::open(t.path()).unwrap();
        let limits = ContextLimits::default();
        let c = project_context(&w, &limits);
        let f = &c.files[0];
        assert!(c.text.len() <= limits.total_bytes, "{}", c.text.len());
        assert_eq!(f.size_bytes, body.len() as u64);
        assert!(f.truncated && f.included_bytes < body.len());
        assert!(
            c.text.contains("rules \u{FFFD}\u{FFFD} here"),
            "{}",
            &c.text[..80]
        );
        assert!(c.text.contains("is not valid UTF-8"));
        let shown = format!("the first {} are shown", f.included_bytes);
        assert!(c.text.contains(&shown), "{shown}");
        // Each replacement stands for one invalid byte here.
        let quoted = c.text.split("AGENTS.md:\n").nth(1).unwrap();
        let replaced = quoted.matches('\u{FFFD}').count();
        assert_eq!(f.included_bytes, "rules  here\n".len() + replaced);
    }

    #[test]
    fn a_reserve_is_left_free() {
        let (_t, w) = ws_with(&[
            ("AGENTS.md", "a".repeat(30_000)),
            ("x/AGENTS.md", "n".into()),
        ]);
        let limits = ContextLimits::default();
        let mut seen = Vec::new();
        let c = project_context_with(
            &w,
            &limits,
            |ctx| {
                seen = ctx.nested.clone();
                5_000
            },
            ContextNote::plain,
        );
        assert_eq!(seen, vec!["x/AGENTS.md".to_string()]);
        assert!(
            c.text.len() <= limits.total_bytes - 5_000,
            "{}",
            c.text.len()
        );
    }
}
