//! `read_file`: a line range, streamed, bounded, UTF-8 safe.

use std::io::{BufRead, BufReader, Read};

use crate::error::FsError;
use crate::path::{Kind, Workspace, WorkspacePath};

/// Bytes inspected for NUL to call a file binary.
const BINARY_PROBE_BYTES: usize = 8 * 1024;
const READ_BUFFER: usize = 64 * 1024;

/// What to read; [`Default`] is the whole file from line 1, at most 128 KiB.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadRequest {
    /// First line (1-based).
    pub start_line: u64,
    /// Last line (inclusive), if bounded.
    pub end_line: Option<u64>,
    /// Most lines.
    pub max_lines: Option<u64>,
    /// Most content bytes.
    pub max_bytes: usize,
}

impl Default for ReadRequest {
    fn default() -> Self {
        Self {
            start_line: 1,
            end_line: None,
            max_lines: None,
            max_bytes: 128 * 1024,
        }
    }
}

/// Why fewer lines came back than the range asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncatedBy {
    /// The byte budget.
    MaxBytes,
    /// The line budget.
    MaxLines,
}

impl TruncatedBy {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxBytes => "max_bytes",
            Self::MaxLines => "max_lines",
        }
    }
}

/// A read range and the file's full metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOutcome {
    /// The lines, as UTF-8, with their own line endings.
    pub content: String,
    /// First line returned (the requested start).
    pub start_line: u64,
    /// Last line returned (`start_line - 1` when none).
    pub end_line: u64,
    /// Lines in the whole file — or, when `total_lines_exact` is false, at
    /// least this many (counting stops [`COUNT_AHEAD_BYTES`] past the range).
    pub total_lines: u64,
    /// Whether `total_lines` counted the whole file.
    pub total_lines_exact: bool,
    /// Bytes in the whole file.
    pub total_bytes: u64,
    /// A budget cut the range short.
    pub truncated_by: Option<TruncatedBy>,
    /// The first line alone exceeded `max_bytes` and was cut.
    pub first_line_exceeds_limit: bool,
    /// Where to continue, when a budget cut the range short and lines of it
    /// remain.
    pub next_start_line: Option<u64>,
}

/// How far past the served range lines are counted for `total_lines`: a
/// read of line 1 of a 32 GiB file must not read 32 GiB.
pub const COUNT_AHEAD_BYTES: u64 = 64 * 1024 * 1024;

/// Reads `req` of `path`, streaming: lines before the range are skipped
/// without being kept, lines after it are only counted.
pub fn read_file(
    ws: &Workspace,
    path: &WorkspacePath,
    req: &ReadRequest,
) -> Result<ReadOutcome, FsError> {
    let shown = path.as_given().to_owned();
    if let Some(end) = req.end_line
        && end < req.start_line
    {
        return Err(FsError::InvalidArgument(format!(
            "end_line ({end}) is before start_line ({})",
            req.start_line
        )));
    }
    let (file, kind) = ws.open_beneath(path)?;
    match kind {
        Kind::File => {}
        Kind::Directory => return Err(FsError::IsDirectory(shown)),
        Kind::Other => return Err(FsError::NotRegular(shown)),
    }
    let mut reader = BufReader::with_capacity(READ_BUFFER, file);
    let io = |e: std::io::Error| FsError::io(&shown, e);
    {
        let head = reader.fill_buf().map_err(io)?;
        if memchr::memchr(0, &head[..head.len().min(BINARY_PROBE_BYTES)]).is_some() {
            return Err(FsError::Binary(shown));
        }
    }
    let range_last = [
        req.end_line,
        req.max_lines
            .map(|n| req.start_line.saturating_add(n.saturating_sub(1))),
    ]
    .into_iter()
    .flatten()
    .min();
    let mut counter = Counter {
        line: 1,
        bytes: 0,
        open_line: false,
    };
    // 1. Skip to start_line. A NUL on the way makes the file binary: text
    // has none, and a sparse tail of zeros must not be walked to its end.
    while counter.line < req.start_line {
        match counter.skip_line(&mut reader, u64::MAX, true).map_err(io)? {
            Skip::Line => {}
            Skip::Eof | Skip::Limit => break,
            Skip::Nul => return Err(FsError::Binary(shown)),
        }
    }
    let content_start_offset = counter.bytes;
    // 2. Collect the range within the byte budget.
    let mut out: Vec<u8> = Vec::new();
    let mut end_line = req.start_line - 1;
    let mut truncated_by = None;
    let mut first_line_exceeds_limit = false;
    let mut pending_partial = false;
    // Past the range, at most `COUNT_AHEAD_BYTES` are read: the rest of a
    // cut line and the count of the lines after it share that budget.
    let mut ahead = COUNT_AHEAD_BYTES;
    loop {
        if range_last.is_some_and(|last| end_line >= last) {
            // The range asked for is served whole; only a `max_lines`
            // shorter than an explicit `end_line` leaves part of it out.
            if req
                .max_lines
                .is_some_and(|n| end_line - req.start_line + 1 >= n)
                && req.end_line.is_some_and(|e| e > end_line)
            {
                truncated_by = Some(TruncatedBy::MaxLines);
            }
            break;
        }
        let budget = req.max_bytes - out.len();
        let this_line = counter.line;
        match counter.take_line(&mut reader, budget).map_err(io)? {
            LineTake::Eof => break,
            LineTake::Whole(bytes) => {
                out.extend_from_slice(&bytes);
                end_line = this_line;
            }
            LineTake::TooLong { prefix, finished } => {
                if out.is_empty() {
                    // A single line over the budget: show its start, cut at a char boundary.
                    let cut = utf8_floor(&prefix, req.max_bytes);
                    out.extend_from_slice(&prefix[..cut]);
                    first_line_exceeds_limit = true;
                    if !finished {
                        pending_partial = true;
                    }
                    end_line = this_line;
                } else {
                    pending_partial = !finished;
                }
                truncated_by = Some(TruncatedBy::MaxBytes);
                break;
            }
        }
    }
    if memchr::memchr(0, &out).is_some() {
        return Err(FsError::Binary(shown));
    }
    let content = match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = req.start_line + memchr::memchr_iter(b'\n', &bytes[..valid]).count() as u64;
            return Err(FsError::UnsupportedEncoding {
                path: shown,
                offset: content_start_offset + valid as u64,
                line,
            });
        }
    };
    // 3. Count the rest for the file's totals, within the look-ahead.
    let mut total_lines_exact = true;
    if pending_partial {
        let before = counter.bytes;
        match counter.skip_line(&mut reader, ahead, false).map_err(io)? {
            Skip::Line | Skip::Eof | Skip::Nul => {}
            Skip::Limit => total_lines_exact = false,
        }
        ahead -= (counter.bytes - before).min(ahead);
    }
    if total_lines_exact {
        total_lines_exact = counter.count_rest(&mut reader, ahead).map_err(io)?;
    }
    let total_lines = counter.total_lines();
    let total_bytes = if total_lines_exact {
        counter.bytes
    } else {
        reader
            .get_ref()
            .metadata()
            .map_or(counter.bytes, |m| m.len().max(counter.bytes))
    };
    // A continuation only when a budget cut the range short and lines of
    // it remain: a range served whole has none, though the file goes on.
    let range_end = total_lines.min(req.end_line.unwrap_or(u64::MAX));
    let next_start_line = (truncated_by.is_some() && end_line < range_end).then_some(end_line + 1);
    Ok(ReadOutcome {
        content,
        start_line: req.start_line,
        end_line,
        total_lines,
        total_lines_exact,
        total_bytes,
        truncated_by,
        first_line_exceeds_limit,
        next_start_line,
    })
}

fn utf8_floor(bytes: &[u8], limit: usize) -> usize {
    let mut cut = limit.min(bytes.len());
    while cut > 0 && cut < bytes.len() && (bytes[cut] & 0b1100_0000) == 0b1000_0000 {
        cut -= 1;
    }
    cut
}

/// How a skip over the rest of a line ended.
enum Skip {
    /// At its newline (consumed).
    Line,
    /// At end of file.
    Eof,
    /// At a NUL byte (not consumed).
    Nul,
    /// At the byte limit, inside the line.
    Limit,
}

enum LineTake {
    Eof,
    Whole(Vec<u8>),
    /// The line exceeded the budget; `prefix` holds up to budget+4 bytes of
    /// it, and `finished` says whether its newline was consumed too.
    TooLong {
        prefix: Vec<u8>,
        finished: bool,
    },
}

/// Line and byte position of the reader; lines are split on `\n` only.
struct Counter {
    /// The line the reader is at (1-based).
    line: u64,
    bytes: u64,
    /// The last byte consumed was not `\n` (a final line without newline).
    open_line: bool,
}

impl Counter {
    fn consume<R: Read>(&mut self, r: &mut BufReader<R>, n: usize, newline: bool) {
        r.consume(n);
        self.bytes += n as u64;
        if newline {
            self.line += 1;
            self.open_line = false;
        } else if n > 0 {
            self.open_line = true;
        }
    }

    /// Skips the rest of the current line, reading at most `limit` bytes;
    /// with `stop_at_nul`, a NUL byte in it ends the skip.
    fn skip_line<R: Read>(
        &mut self,
        r: &mut BufReader<R>,
        limit: u64,
        stop_at_nul: bool,
    ) -> std::io::Result<Skip> {
        let mut read = 0u64;
        loop {
            let buf = r.fill_buf()?;
            if buf.is_empty() {
                return Ok(Skip::Eof);
            }
            if read >= limit {
                return Ok(Skip::Limit);
            }
            let room = usize::try_from(limit - read).unwrap_or(usize::MAX);
            let buf = &buf[..buf.len().min(room)];
            let newline = memchr::memchr(b'\n', buf);
            let span = newline.map_or(buf.len(), |i| i + 1);
            if stop_at_nul && memchr::memchr(0, &buf[..span]).is_some() {
                return Ok(Skip::Nul);
            }
            self.consume(r, span, newline.is_some());
            read += span as u64;
            if newline.is_some() {
                return Ok(Skip::Line);
            }
        }
    }

    fn take_line<R: Read>(
        &mut self,
        r: &mut BufReader<R>,
        budget: usize,
    ) -> std::io::Result<LineTake> {
        let mut line = Vec::new();
        loop {
            let buf = r.fill_buf()?;
            if buf.is_empty() {
                // A final line without a newline is still a line.
                return Ok(if line.is_empty() {
                    LineTake::Eof
                } else {
                    LineTake::Whole(line)
                });
            }
            let (chunk, newline) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if line.len() + chunk > budget {
                let keep = (budget + 4 - line.len().min(budget + 4)).min(chunk);
                let finished = newline && keep == chunk;
                line.extend_from_slice(&buf[..keep]);
                self.consume(r, keep, finished);
                return Ok(LineTake::TooLong {
                    prefix: line,
                    finished,
                });
            }
            line.extend_from_slice(&buf[..chunk]);
            self.consume(r, chunk, newline);
            if newline {
                return Ok(LineTake::Whole(line));
            }
        }
    }

    /// Counts the lines of the rest of the file, at most `limit` bytes of
    /// it; whether it reached the end.
    fn count_rest<R: Read>(&mut self, r: &mut BufReader<R>, limit: u64) -> std::io::Result<bool> {
        let mut scanned = 0u64;
        loop {
            let buf = r.fill_buf()?;
            if buf.is_empty() {
                return Ok(true);
            }
            if scanned >= limit {
                return Ok(false);
            }
            let n = buf.len();
            scanned += n as u64;
            let newlines = memchr::memchr_iter(b'\n', buf).count() as u64;
            let ends_open = buf[n - 1] != b'\n';
            r.consume(n);
            self.bytes += n as u64;
            self.line += newlines;
            self.open_line = ends_open;
        }
    }

    fn total_lines(&self) -> u64 {
        if self.bytes == 0 {
            0
        } else {
            // `line` is the line the reader is at; it exists only if it has bytes.
            self.line - u64::from(!self.open_line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(content: &[u8]) -> (tempfile::TempDir, Workspace, WorkspacePath) {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f.txt"), content).unwrap();
        let ws = Workspace::open(t.path()).unwrap();
        let p = ws.resolve_lexically("f.txt").unwrap();
        (t, ws, p)
    }

    fn req(start: u64, end: Option<u64>, max_lines: Option<u64>, max_bytes: usize) -> ReadRequest {
        ReadRequest {
            start_line: start,
            end_line: end,
            max_lines,
            max_bytes,
        }
    }

    fn lines(n: u64) -> Vec<u8> {
        (1..=n)
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn whole_file_and_totals() {
        let (_t, ws, p) = setup(b"a\nb\nc");
        let r = read_file(&ws, &p, &req(1, None, None, 1024)).unwrap();
        assert_eq!(r.content, "a\nb\nc");
        assert_eq!(
            (r.start_line, r.end_line, r.total_lines, r.total_bytes),
            (1, 3, 3, 5)
        );
        assert_eq!(r.next_start_line, None);
        assert_eq!(r.truncated_by, None);
    }

    #[test]
    fn ranges_and_continuations() {
        let (_t, ws, p) = setup(&lines(30));
        // `max_lines` alone is the range start..start+max_lines-1: served
        // whole, it is not truncated and has no continuation.
        let r = read_file(&ws, &p, &req(3, None, Some(4), 1024)).unwrap();
        assert_eq!(r.content, "line 3\nline 4\nline 5\nline 6\n");
        assert_eq!(
            (r.end_line, r.total_lines, r.next_start_line),
            (6, 30, None)
        );
        assert_eq!(r.truncated_by, None);
        // A `max_lines` shorter than an explicit `end_line` pages within it.
        let r = read_file(&ws, &p, &req(3, Some(20), Some(4), 1024)).unwrap();
        assert_eq!(
            (r.end_line, r.next_start_line, r.truncated_by),
            (6, Some(7), Some(TruncatedBy::MaxLines))
        );
        // ... up to the end of that range, not of the file.
        let r = read_file(&ws, &p, &req(3, Some(4), None, 8)).unwrap();
        assert_eq!(
            (r.end_line, r.next_start_line, r.truncated_by),
            (3, Some(4), Some(TruncatedBy::MaxBytes))
        );
        let r = read_file(&ws, &p, &req(3, Some(3), None, 8)).unwrap();
        assert_eq!((r.end_line, r.next_start_line), (3, None));
        let r = read_file(&ws, &p, &req(28, Some(40), None, 1024)).unwrap();
        assert_eq!(r.content, "line 28\nline 29\nline 30\n");
        assert_eq!(
            (r.end_line, r.next_start_line, r.truncated_by),
            (30, None, None)
        );
        let r = read_file(&ws, &p, &req(10, Some(11), None, 1024)).unwrap();
        assert_eq!(
            (r.end_line, r.next_start_line, r.truncated_by),
            (11, None, None)
        );
        // Byte budget: stops at a line boundary.
        let r = read_file(&ws, &p, &req(1, None, None, 20)).unwrap();
        assert_eq!(r.content, "line 1\nline 2\n");
        assert_eq!(
            (r.next_start_line, r.truncated_by),
            (Some(3), Some(TruncatedBy::MaxBytes))
        );
        assert_eq!(r.total_lines, 30);
        // Past the end.
        let r = read_file(&ws, &p, &req(99, None, None, 1024)).unwrap();
        assert_eq!(
            (r.content.as_str(), r.end_line, r.next_start_line),
            ("", 98, None)
        );
    }

    #[test]
    fn long_line_is_cut_at_a_char_boundary() {
        let mut body = "é".repeat(100).into_bytes();
        body.extend_from_slice(b"\nnext\n");
        let (_t, ws, p) = setup(&body);
        let r = read_file(&ws, &p, &req(1, None, None, 51)).unwrap();
        assert_eq!(r.content.len(), 50);
        assert!(r.first_line_exceeds_limit);
        assert_eq!(
            (r.end_line, r.next_start_line, r.total_lines),
            (1, Some(2), 2)
        );
    }

    #[test]
    fn binary_encoding_and_kinds() {
        let (t, ws, p) = setup(b"text\0more");
        assert!(matches!(
            read_file(&ws, &p, &req(1, None, None, 100)),
            Err(FsError::Binary(_))
        ));
        std::fs::write(t.path().join("latin1.txt"), b"ok\ncaf\xe9\n").unwrap();
        let l = ws.resolve_lexically("latin1.txt").unwrap();
        assert_eq!(
            read_file(&ws, &l, &req(1, None, None, 100)),
            Err(FsError::UnsupportedEncoding {
                path: "latin1.txt".into(),
                offset: 6,
                line: 2
            })
        );
        // The valid part alone reads fine.
        assert_eq!(
            read_file(&ws, &l, &req(1, Some(1), None, 100))
                .unwrap()
                .content,
            "ok\n"
        );
        let d = ws.resolve_lexically(".").unwrap();
        assert!(matches!(
            read_file(&ws, &d, &req(1, None, None, 100)),
            Err(FsError::IsDirectory(_))
        ));
        assert!(read_file(&ws, &p, &req(5, Some(2), None, 100)).is_err());
    }

    #[test]
    fn empty_crlf_and_no_final_newline() {
        let (_t, ws, p) = setup(b"");
        let r = read_file(&ws, &p, &req(1, None, None, 100)).unwrap();
        assert_eq!((r.total_lines, r.total_bytes, r.end_line), (0, 0, 0));
        let (_t, ws, p) = setup(b"a\r\nb\r\n");
        let r = read_file(&ws, &p, &req(2, None, None, 100)).unwrap();
        assert_eq!((r.content.as_str(), r.total_lines), ("b\r\n", 2));
    }

    #[test]
    fn a_cut_line_is_finished_within_the_look_ahead_only() {
        // A first line longer than the look-ahead: the read answers after
        // the budget, with the count marked as a lower bound.
        let mut body = vec![b'a'; COUNT_AHEAD_BYTES as usize + 4096];
        body.extend_from_slice(b"\nsecond\n");
        let (_t, ws, p) = setup(&body);
        let r = read_file(&ws, &p, &req(1, None, Some(1), 100)).unwrap();
        assert!(r.first_line_exceeds_limit);
        assert_eq!(r.content.len(), 100);
        assert!(!r.total_lines_exact);
        assert_eq!((r.total_lines, r.total_bytes), (1, body.len() as u64));
        assert_eq!(r.next_start_line, None, "the range (line 1) was served");
        // The same after a line that fit: the partial second line is
        // finished within the budget too.
        let mut body = b"x\n".to_vec();
        body.extend(std::iter::repeat_n(b'b', COUNT_AHEAD_BYTES as usize + 4096));
        let (_t, ws, p) = setup(&body);
        let r = read_file(&ws, &p, &req(1, None, Some(2), 10)).unwrap();
        assert_eq!(r.content, "x\n");
        assert!(!r.total_lines_exact);
        assert_eq!((r.total_lines, r.next_start_line), (2, Some(2)));
        // A short cut line is still finished and counted exactly.
        let (_t, ws, p) = setup(b"x\nbbbbbbbbbbbbbbbbbbbb\nc\n");
        let r = read_file(&ws, &p, &req(1, None, Some(3), 10)).unwrap();
        assert!(r.total_lines_exact);
        assert_eq!((r.total_lines, r.next_start_line), (3, Some(2)));
    }

    #[test]
    fn a_nul_before_the_range_makes_the_file_binary() {
        // Past the probe at the start, which would call it binary at once.
        let mut body = lines(2000);
        assert!(body.len() > BINARY_PROBE_BYTES);
        body.extend_from_slice(b"zero\0s\n");
        body.extend_from_slice(&lines(3));
        let (_t, ws, p) = setup(&body);
        assert!(matches!(
            read_file(&ws, &p, &req(2003, None, None, 100)),
            Err(FsError::Binary(_))
        ));
        // Before the NUL, the file reads as text.
        let r = read_file(&ws, &p, &req(2, Some(3), None, 100)).unwrap();
        assert_eq!(r.content, "line 2\nline 3\n");
    }

    #[test]
    fn large_file_streams() {
        let body = lines(200_000);
        let (_t, ws, p) = setup(&body);
        let r = read_file(&ws, &p, &req(150_000, None, Some(2), 1024)).unwrap();
        assert_eq!(r.content, "line 150000\nline 150001\n");
        assert_eq!((r.total_lines, r.total_bytes), (200_000, body.len() as u64));
    }
}
