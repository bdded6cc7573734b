//! `read_file`: a line range, streamed, bounded, UTF-8 safe.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::error::FsError;
use crate::path::{Kind, Workspace, WorkspacePath};

/// Bytes inspected for NUL to call a file binary.
const BINARY_PROBE_BYTES: usize = 8 * 1024;
const READ_BUFFER: usize = 64 * 1024;
/// With at least this much of a page's budget left, lines are read straight
/// into the page rather than through the read buffer.
const DIRECT_READ_MIN: usize = 2 * READ_BUFFER;

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
    /// Also report the file's revision (the SHA-256 of all of its bytes,
    /// which then are all read).
    pub revision: bool,
}

impl Default for ReadRequest {
    fn default() -> Self {
        Self {
            start_line: 1,
            end_line: None,
            max_lines: None,
            max_bytes: 128 * 1024,
            revision: false,
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
    /// The lowercase hex SHA-256 of the whole file, when asked for and the
    /// file is at most [`MAX_REVISION_BYTES`] and held still for a read.
    pub revision: Option<String>,
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
    if !req.revision {
        return read_open(ws, &file, shown, req);
    }
    // The revision names the bytes the content came from: the file is
    // hashed through the same descriptor after the read, and the pair
    // counts only when nothing wrote to it meanwhile (its change time, size
    // and modification time are those before the read).
    let rewind = |f: &File| {
        use std::io::Seek;
        let mut f = f;
        f.seek(SeekFrom::Start(0))
            .map(|_| ())
            .map_err(|e| FsError::io(&shown, e))
    };
    for _ in 0..MAX_REVISION_TRIES {
        // Every attempt reads from the start (the last one left the
        // position where it stopped).
        rewind(&file)?;
        let before = Stamp::of(&file).map_err(|e| FsError::io(&shown, e))?;
        let mut out = read_open(ws, &file, shown.clone(), req)?;
        if out.total_bytes > MAX_REVISION_BYTES {
            return Ok(out);
        }
        // A file someone has open for writing may change through a shared
        // mapping without moving its times: no revision for it (the line
        // cache's probe, before and after).
        if !nobody_writes(&file) {
            return Ok(out);
        }
        let digest = hash_all(&file).map_err(|e| FsError::io(&shown, e))?;
        if Stamp::of(&file).map_err(|e| FsError::io(&shown, e))? == before && nobody_writes(&file) {
            out.revision = Some(digest);
            return Ok(out);
        }
    }
    rewind(&file)?;
    read_open(ws, &file, shown, req)
}

/// Reads of a file being written that are retried for a revision before
/// the read is answered without one.
const MAX_REVISION_TRIES: usize = 3;

/// Files larger than this get no revision (the edit tools refuse files
/// over 32 MiB anyway; hashing more would make every read of a large file
/// read all of it).
pub const MAX_REVISION_BYTES: u64 = 64 * 1024 * 1024;

/// What changes whenever a file is written.
#[derive(PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(file: &File) -> std::io::Result<Self> {
        let m = file.metadata()?;
        Ok(Self {
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// The lowercase hex SHA-256 of all of `file`'s bytes (read from offset 0,
/// whatever its position).
fn hash_all(file: &File) -> std::io::Result<String> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; READ_BUFFER];
    let mut at = 0u64;
    loop {
        let n = match file.read_at(&mut buf, at) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        ctx.update(&buf[..n]);
        at += n as u64;
    }
    let mut out = String::with_capacity(64);
    for b in ctx.finish().as_ref() {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    Ok(out)
}

/// [`read_file`] of an opened regular file.
fn read_open(
    ws: &Workspace,
    file: &File,
    shown: String,
    req: &ReadRequest,
) -> Result<ReadOutcome, FsError> {
    let cache = ws.line_cache();
    // Positions are cached, and used, only for a file nobody has open for
    // writing: a writable shared mapping changes the content without
    // moving the file's times (issue 33, item 3).
    let id = Identity::of(file).filter(|_| nobody_writes(file));
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
    // 1. Start from the nearest line start a read of this very file found
    // before (a paged read's next page), if the byte before it is still a
    // newline.
    if let Some(id) = &id
        && let Some((line, offset)) = cache.start_at_or_before(id, req.start_line)
        && starts_a_line(reader.get_ref(), offset)
    {
        reader.seek(SeekFrom::Start(offset)).map_err(io)?;
        counter = Counter {
            line,
            bytes: offset,
            open_line: false,
        };
    }
    // Then skip to start_line. A NUL on the way makes the file binary: text
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
    // The page's room at once (or the file's, when smaller): not grown by
    // doubling and copying. A line over the budget may add 4 bytes.
    let size_hint = reader.get_ref().metadata().map_or(0, |m| m.len());
    let room = usize::try_from(size_hint.saturating_sub(counter.bytes))
        .unwrap_or(usize::MAX)
        .min(req.max_bytes + 4);
    let mut out: Vec<u8> = Vec::with_capacity(room);
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
        // Whole lines that fit, a buffer at a time; the line that crosses
        // a buffer's end or the budget is taken line by line below.
        let left = range_last.map_or(u64::MAX, |last| last - end_line);
        end_line += counter
            .take_whole_lines(&mut reader, &mut out, req.max_bytes, left)
            .map_err(io)?;
        if range_last.is_some_and(|last| end_line >= last) {
            continue;
        }
        let before = out.len();
        let this_line = counter.line;
        match counter
            .take_line(&mut reader, &mut out, req.max_bytes)
            .map_err(io)?
        {
            LineTake::Eof => break,
            LineTake::Whole => end_line = this_line,
            LineTake::TooLong { finished } => {
                if before == 0 {
                    // A single line over the budget: show its start, cut at a char boundary.
                    let cut = utf8_floor(&out, req.max_bytes);
                    out.truncate(cut);
                    first_line_exceeds_limit = true;
                    if !finished {
                        pending_partial = true;
                    }
                    end_line = this_line;
                } else {
                    out.truncate(before);
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
    if let Some(id) = &id
        && counter_reached(req.start_line, end_line, &content)
    {
        let mut starts = vec![(req.start_line, content_start_offset)];
        if !first_line_exceeds_limit && content.ends_with('\n') {
            starts.push((end_line + 1, content_start_offset + content.len() as u64));
        }
        cache.remember(id, &starts, None);
    }
    // 3. Count the rest for the file's totals, within the look-ahead (or
    // take them from an earlier count of this very file).
    if let Some(total_lines) = id.as_ref().and_then(|id| cache.total_lines(id)) {
        let total_bytes = id.as_ref().map_or(counter.bytes, |id| id.size);
        return Ok(outcome(
            req,
            content,
            end_line,
            (total_lines, true, total_bytes),
            truncated_by,
            first_line_exceeds_limit,
        ));
    }
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
    if total_lines_exact && let Some(id) = &id {
        cache.remember(id, &[], Some(total_lines));
    }
    Ok(outcome(
        req,
        content,
        end_line,
        (total_lines, total_lines_exact, total_bytes),
        truncated_by,
        first_line_exceeds_limit,
    ))
}

/// Whether the range's first line was reached (not the end of the file
/// before it): then its offset is where `start_line` begins.
fn counter_reached(start_line: u64, end_line: u64, content: &str) -> bool {
    end_line >= start_line || !content.is_empty()
}

fn outcome(
    req: &ReadRequest,
    content: String,
    end_line: u64,
    (total_lines, total_lines_exact, total_bytes): (u64, bool, u64),
    truncated_by: Option<TruncatedBy>,
    first_line_exceeds_limit: bool,
) -> ReadOutcome {
    // A continuation only when a budget cut the range short and lines of
    // it remain: a range served whole has none, though the file goes on.
    let range_end = total_lines.min(req.end_line.unwrap_or(u64::MAX));
    let next_start_line = (truncated_by.is_some() && end_line < range_end).then_some(end_line + 1);
    ReadOutcome {
        content,
        start_line: req.start_line,
        end_line,
        total_lines,
        total_lines_exact,
        total_bytes,
        truncated_by,
        first_line_exceeds_limit,
        next_start_line,
        revision: None,
    }
}

/// Files whose line starts are kept, most recently read first.
const CACHED_FILES: usize = 8;
/// Line starts kept per file (a 5 MB file read in 1 MiB pages needs 6).
const STARTS_PER_FILE: usize = 256;
/// A file changed more recently than this is not cached: two writes within
/// one tick of the file system's clock could leave the same size and
/// timestamps behind.
const SETTLED: Duration = Duration::from_secs(1);

/// Where lines begin, and how many there are, in files read recently: the
/// next page of a paged read starts where the last one ended instead of
/// counting lines from the top, and the file's totals are not counted
/// again. An entry holds only while the file's device, inode, size,
/// modification and change times are those it was recorded with; the
/// change time moves on every write and every `utimes`, so no writer can
/// keep an entry alive. A start is used only if the byte before it is
/// still a newline.
#[derive(Debug, Default)]
pub(crate) struct LineCache {
    files: Mutex<Vec<Known>>,
}

#[derive(Debug)]
struct Known {
    id: Identity,
    /// (line, byte offset of its first byte), sorted by line.
    starts: Vec<(u64, u64)>,
    total_lines: Option<u64>,
}

/// What must be unchanged for a cached position to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    /// `None` for a file changed within [`SETTLED`] (or without metadata).
    fn of(file: &File) -> Option<Self> {
        let m = file.metadata().ok()?;
        let changed = m.modified().ok()?.max(
            SystemTime::UNIX_EPOCH
                + Duration::new(
                    u64::try_from(m.ctime()).ok()?,
                    u32::try_from(m.ctime_nsec()).ok()?,
                ),
        );
        let age = SystemTime::now().duration_since(changed).ok()?;
        (age >= SETTLED).then_some(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl LineCache {
    fn files(&self) -> std::sync::MutexGuard<'_, Vec<Known>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest known line start at or before `line` (beyond line 1).
    fn start_at_or_before(&self, id: &Identity, line: u64) -> Option<(u64, u64)> {
        let files = self.files();
        let known = files.iter().find(|k| k.id == *id)?;
        let i = known.starts.partition_point(|&(l, _)| l <= line);
        i.checked_sub(1).map(|i| known.starts[i])
    }

    fn total_lines(&self, id: &Identity) -> Option<u64> {
        self.files()
            .iter()
            .find(|k| k.id == *id)
            .and_then(|k| k.total_lines)
    }

    /// Records line starts and, when counted, the total; the file becomes
    /// the most recent (an entry of a changed file is replaced).
    fn remember(&self, id: &Identity, starts: &[(u64, u64)], total_lines: Option<u64>) {
        let mut files = self.files();
        let mut known = match files.iter().position(|k| k.id == *id) {
            Some(i) => files.remove(i),
            None => {
                files.retain(|k| (k.id.dev, k.id.ino) != (id.dev, id.ino));
                Known {
                    id: *id,
                    starts: Vec::new(),
                    total_lines: None,
                }
            }
        };
        for &(line, offset) in starts.iter().filter(|&&(l, _)| l > 1) {
            match known.starts.binary_search_by_key(&line, |&(l, _)| l) {
                Ok(i) => known.starts[i] = (line, offset),
                Err(i) => known.starts.insert(i, (line, offset)),
            }
        }
        if known.starts.len() > STARTS_PER_FILE {
            // Keep every other start: the gaps double, the reach stays.
            let mut keep = false;
            known.starts.retain(|_| {
                keep = !keep;
                keep
            });
        }
        if total_lines.is_some() {
            known.total_lines = total_lines;
        }
        files.insert(0, known);
        files.truncate(CACHED_FILES);
    }
}

/// Whether no process has `file` open for writing, a writable shared
/// mapping included: a read lease can be taken (and is given back at once)
/// only then. A lease break would signal us: that signal is `SIGURG`,
/// whose default is to be ignored (the default `SIGIO` would end the
/// process). Unknown (not the file's owner, a file system without leases)
/// counts as written.
fn nobody_writes(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    /// `F_SETSIG` on Linux (every architecture).
    const F_SETSIG: libc::c_int = 10;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function borrows; no memory is
    // passed.
    #[expect(
        unsafe_code,
        reason = "fcntl(F_SETSIG/F_SETLEASE) has no safe wrapper here"
    )]
    unsafe {
        if libc::fcntl(fd, F_SETSIG, libc::SIGURG) != 0 {
            return false;
        }
        if libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) != 0 {
            return false;
        }
        libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
    }
    true
}

/// Whether `offset` is the first byte of a line: the byte before it is a
/// newline.
fn starts_a_line(file: &File, offset: u64) -> bool {
    let mut before = [0u8; 1];
    offset > 0 && matches!(file.read_at(&mut before, offset - 1), Ok(1)) && before[0] == b'\n'
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

/// How taking a line into the page ended.
enum LineTake {
    Eof,
    /// The whole line was appended.
    Whole,
    /// The line would not fit: up to 4 bytes past the budget of it were
    /// appended (for a char-boundary cut), and `finished` says whether its
    /// newline was consumed too.
    TooLong {
        finished: bool,
    },
}

/// The whole lines at the start of `got` within `room` bytes, at most
/// `lines` of them: their length and count, or `None` when there is none.
fn whole_lines(got: &[u8], room: usize, lines: u64) -> Option<(usize, u64)> {
    let room = room.min(got.len());
    let last = memchr::memrchr(b'\n', &got[..room])?;
    let span = last + 1;
    let n = memchr::memchr_iter(b'\n', &got[..span]).count() as u64;
    if n <= lines {
        return Some((span, n));
    }
    // `lines` is below `n`, the number of newlines in the span.
    let nth = usize::try_from(lines.checked_sub(1)?).ok()?;
    let end = memchr::memchr_iter(b'\n', &got[..span]).nth(nth)?;
    Some((end + 1, lines))
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

    /// Appends the whole lines at the front of the rest of the file that
    /// fit within `max` bytes of `out`, at most `lines` of them; how many it
    /// appended. While much of the budget is left, the file is read
    /// straight into `out` after what the read buffer held (one system
    /// call and no copy for most of a page) and what follows the last whole
    /// line is given back by seeking; then a read buffer at a time.
    fn take_whole_lines(
        &mut self,
        r: &mut BufReader<&File>,
        out: &mut Vec<u8>,
        max: usize,
        lines: u64,
    ) -> std::io::Result<u64> {
        let mut taken = 0u64;
        while taken < lines {
            let left = max.saturating_sub(out.len());
            let start = out.len();
            // The page's room was reserved for the file's size: only when
            // much of it is still free (a large file) is the file read
            // straight into it, and only when no line bound can end the page
            // early (a range would read the whole budget and give most of it
            // back).
            let free = out.capacity() - out.len();
            let (got, plan) = if lines == u64::MAX
                && left >= DIRECT_READ_MIN
                && free >= r.buffer().len() + DIRECT_READ_MIN
            {
                // What the read buffer holds, then the file straight after.
                let held = r.buffer().len();
                out.extend_from_slice(r.buffer());
                r.consume(held);
                let n = rustix::io::read(r.get_ref(), rustix::buffer::spare_capacity(out))?;
                let plan = whole_lines(&out[start..], left, lines - taken);
                // Keep the whole lines; give back what follows them.
                let span = plan.map_or(0, |(span, _)| span);
                out.truncate(start + span);
                // A seek from the current position drops the (empty) buffer and
                // moves the file itself; `seek_relative` would move within
                // the stale buffer.
                r.seek(SeekFrom::Current(-((held + n - span) as i64)))?;
                (held + n, plan)
            } else {
                let buf = r.fill_buf()?;
                let plan = whole_lines(buf, left, lines - taken);
                if let Some((span, _)) = plan {
                    out.extend_from_slice(&buf[..span]);
                }
                let got = buf.len();
                r.consume(plan.map_or(0, |(span, _)| span));
                (got, plan)
            };
            let Some((span, n)) = plan else {
                break;
            };
            self.bytes += span as u64;
            self.line += n;
            self.open_line = false;
            taken += n;
            if span != got {
                break;
            }
        }
        Ok(taken)
    }

    /// Appends the next line to `out`, which may grow to `max` bytes (a
    /// line that does not fit is appended up to 4 bytes past that).
    fn take_line<R: Read>(
        &mut self,
        r: &mut BufReader<R>,
        out: &mut Vec<u8>,
        max: usize,
    ) -> std::io::Result<LineTake> {
        let start = out.len();
        loop {
            let buf = r.fill_buf()?;
            if buf.is_empty() {
                // A final line without a newline is still a line.
                return Ok(if out.len() == start {
                    LineTake::Eof
                } else {
                    LineTake::Whole
                });
            }
            let (chunk, newline) = match memchr::memchr(b'\n', buf) {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if out.len() + chunk > max {
                let keep = (max + 4).saturating_sub(out.len()).min(chunk);
                let finished = newline && keep == chunk;
                out.extend_from_slice(&buf[..keep]);
                self.consume(r, keep, finished);
                return Ok(LineTake::TooLong { finished });
            }
            out.extend_from_slice(&buf[..chunk]);
            self.consume(r, chunk, newline);
            if newline {
                return Ok(LineTake::Whole);
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
            revision: false,
        }
    }

    #[test]
    fn a_revision_names_all_of_the_files_bytes() {
        let (_t, ws, p) = setup(b"one\ntwo\nthree\n");
        let mut r = req(2, Some(2), None, 1024);
        assert_eq!(read_file(&ws, &p, &r).unwrap().revision, None);
        r.revision = true;
        let out = read_file(&ws, &p, &r).unwrap();
        assert_eq!(out.content, "two\n");
        // sha256 of "one\ntwo\nthree\n" (Python's hashlib agrees).
        assert_eq!(
            out.revision.as_deref(),
            Some("b6285c57e8797db5d4c51c80d6f11938afda9b11c6a003549709189e9b4b92a2")
        );
    }

    fn lines(n: u64) -> Vec<u8> {
        (1..=n)
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
            .into_bytes()
    }

    /// What a read must give, worked out line by line: the lines from
    /// `start` to the range's end that fit in `max_bytes` together (cases
    /// whose first line alone is over the budget are left to other tests).
    fn model(file: &[u8], r: &ReadRequest) -> Option<(String, u64, bool)> {
        let lines: Vec<&[u8]> = file.split_inclusive(|b| *b == b'\n').collect();
        let last = [
            r.end_line,
            r.max_lines.map(|n| r.start_line + n - 1),
            Some(lines.len() as u64),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap();
        let (mut content, mut end) = (Vec::new(), r.start_line - 1);
        while end < last {
            let line = lines[end as usize];
            if content.len() + line.len() > r.max_bytes {
                if content.is_empty() {
                    return None;
                }
                return Some((String::from_utf8(content).unwrap(), end, true));
            }
            content.extend_from_slice(line);
            end += 1;
        }
        Some((String::from_utf8(content).unwrap(), end, false))
    }

    #[test]
    fn pages_equal_a_line_by_line_model_across_buffer_boundaries() {
        // Lines of every length from 0 to well past the read buffer, so
        // that lines end at, just before and just after its boundaries.
        let mut file = Vec::new();
        let mut len = 0usize;
        for i in 0..400u64 {
            file.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, len));
            file.push(b'\n');
            len = (len * 7 + 13) % (READ_BUFFER + READ_BUFFER / 3);
            if i % 50 == 0 {
                len = READ_BUFFER - 1 - (i as usize % 3);
            }
        }
        file.extend_from_slice(b"tail without newline");
        let total = file.split_inclusive(|b| *b == b'\n').count() as u64;
        let (_t, ws, p) = setup(&file);
        let mut checked = 0;
        for start in [1, 2, 7, 50, 51, 199, 390, total] {
            for (end, max_lines) in [
                (None, None),
                (Some(start + 3), None),
                (None, Some(1)),
                (None, Some(17)),
                (Some(start + 40), Some(9)),
            ] {
                for max_bytes in [
                    READ_BUFFER / 2,
                    READ_BUFFER,
                    READ_BUFFER + 1,
                    3 * READ_BUFFER + 7,
                    1 << 20,
                    8 << 20,
                ] {
                    let r = req(start, end, max_lines, max_bytes);
                    let Some((content, end_line, cut)) = model(&file, &r) else {
                        continue;
                    };
                    let got = read_file(&ws, &p, &r).unwrap();
                    let what = format!("{r:?}");
                    assert_eq!(got.content, content, "{what}");
                    assert_eq!(got.end_line, end_line, "{what}");
                    assert_eq!(
                        got.truncated_by == Some(TruncatedBy::MaxBytes),
                        cut,
                        "{what}"
                    );
                    assert_eq!(got.total_lines, total, "{what}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 150, "only {checked} cases were checked");
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

    /// Every page of `p` in `max_bytes` pages, following continuations.
    fn pages(ws: &Workspace, p: &WorkspacePath, max_bytes: usize) -> Vec<ReadOutcome> {
        let mut out = Vec::new();
        let mut start = 1;
        loop {
            let r = read_file(ws, p, &req(start, None, None, max_bytes)).unwrap();
            let next = r.next_start_line;
            out.push(r);
            match next {
                Some(n) => start = n,
                None => return out,
            }
        }
    }

    fn known_starts(ws: &Workspace) -> usize {
        ws.line_cache().files().iter().map(|k| k.starts.len()).sum()
    }

    #[test]
    fn paged_reads_of_a_settled_file_resume_where_the_last_page_ended() {
        let mut body = lines(3000);
        body.extend_from_slice("ünïcode line without newline".as_bytes());
        let (_t, ws, p) = setup(&body);
        // Fresh: no position is kept (its timestamps could repeat).
        let fresh = pages(&ws, &p, 4000);
        assert_eq!(known_starts(&ws), 0);
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let first = pages(&ws, &p, 4000);
        assert!(known_starts(&ws) >= first.len() - 1, "pages left no starts");
        // The same pages again, now from the kept starts and totals, and
        // pages of another size, which start between kept ones.
        let again = pages(&ws, &p, 4000);
        let other_ws = Workspace::open(ws.root()).unwrap();
        for size in [100, 4000, 7777] {
            assert_eq!(
                pages(&ws, &p, size),
                pages(&other_ws, &p, size),
                "pages of {size}"
            );
        }
        assert_eq!(fresh, first);
        assert_eq!(first, again);
        assert_eq!(first.last().unwrap().total_lines, 3001);
    }

    #[test]
    fn a_kept_start_is_not_used_once_the_file_changed() {
        let (t, ws, p) = setup(&lines(500));
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let first = pages(&ws, &p, 1000);
        assert!(first.len() > 2 && known_starts(&ws) > 0);
        // Same size, lines shifted: "line 1\n" becomes "line\n1 ".
        let mut body = lines(500);
        body[4] = b'\n';
        body[5] = b'1';
        body[6] = b' ';
        std::fs::write(t.path().join("f.txt"), &body).unwrap();
        // Settled again: the entry's identity (times) no longer matches.
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let after = pages(&ws, &p, 1000);
        let other_ws = Workspace::open(ws.root()).unwrap();
        assert_eq!(after, pages(&other_ws, &p, 1000));
        assert_ne!(after, first);
    }

    #[test]
    fn a_kept_start_that_is_not_after_a_newline_is_ignored() {
        let (_t, ws, p) = setup(&lines(500));
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let first = read_file(&ws, &p, &req(1, None, None, 1000)).unwrap();
        let next = first.next_start_line.unwrap();
        // Corrupt the kept start: one byte early (inside the line before).
        for k in ws.line_cache().files().iter_mut() {
            for s in &mut k.starts {
                s.1 -= 1;
            }
        }
        let r = read_file(&ws, &p, &req(next, Some(next), None, 1000)).unwrap();
        assert_eq!(r.content, format!("line {next}\n"));
    }
}
