//! Content-Length values hyper would refuse before the service sees them.
//!
//! hyper answers a request head whose `Content-Length` it cannot use (not a
//! number, negative, beyond `u64`, or two values that disagree) with a bare
//! `400` and no body, before any service code runs. A client of this server
//! reads a JSON-RPC error for every refusal, so [`LengthGuard`] sits between
//! the socket and hyper: it holds each request head back until it is
//! complete, and renames such `Content-Length` lines to [`MARKER`], whose value
//! says which refusal the service owes (`invalid` → `400`, `too_large` →
//! `413`). Without a usable length hyper reads no body, and the service
//! answers with `Connection: close`, so the bytes the client meant as a body
//! are never read as a request. Everything else passes through unchanged.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The header an unusable `Content-Length` is renamed to.
pub const MARKER: &str = "x-ctm-unusable-content-length";

/// Longest request head inspected; a longer one is left to hyper (`431`).
const MAX_HEAD: usize = 64 * 1024;

/// Where the byte stream stands between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting a request head.
    Head,
    /// Passing this many body bytes before the next head.
    Body(u64),
    /// No longer inspecting: a chunked body, an over-long head, or a
    /// connection the service is about to close.
    Passthrough,
}

/// The pure half: turns the inbound byte stream into what hyper reads.
#[derive(Debug)]
pub struct HeadRewriter {
    state: State,
    head: Vec<u8>,
}

impl Default for HeadRewriter {
    fn default() -> Self {
        Self {
            state: State::Head,
            head: Vec::new(),
        }
    }
}

impl HeadRewriter {
    /// Consumes `input`, appending what hyper may read to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            match self.state {
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return;
                }
                State::Body(remaining) => {
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = match remaining - n as u64 {
                        0 => State::Head,
                        left => State::Body(left),
                    };
                }
                State::Head => {
                    // Only the bytes that can complete the terminator are rescanned.
                    let from = self.head.len().saturating_sub(3);
                    self.head.extend_from_slice(input);
                    match head_end(&self.head, from) {
                        Some(end) => {
                            // The held bytes had no terminator, so what follows
                            // it lies within `input`.
                            let after = self.head.len() - end;
                            input = &input[input.len() - after..];
                            self.head.truncate(end);
                            let head = std::mem::take(&mut self.head);
                            self.state = rewrite(&head, out);
                        }
                        None if self.head.len() > MAX_HEAD => {
                            out.append(&mut self.head);
                            self.state = State::Passthrough;
                            input = &[];
                        }
                        None => input = &[],
                    }
                }
            }
        }
    }

    /// The peer closed its side: whatever is held goes to hyper as it is.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.head);
    }

    fn passthrough(&self) -> bool {
        self.state == State::Passthrough && self.head.is_empty()
    }
}

/// The index just past the blank line that ends a head, if it is complete.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1..i + 3) == Some(b"\r\n") {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// Why a set of `Content-Length` values is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unusable {
    /// Not a plain run of digits, or two values that disagree.
    Invalid,
    /// Digits only, but more than any body this server accepts.
    TooLarge,
}

impl Unusable {
    fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::TooLarge => "too_large",
        }
    }
}

/// Judges every `Content-Length` value of one head the way hyper does: each
/// a plain run of digits, all of the same number. `Ok(None)` when there is none.
fn judge(values: &[&[u8]]) -> Result<Option<u64>, Unusable> {
    let mut seen: Option<&[u8]> = None;
    for value in values {
        let value = value.trim_ascii();
        if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
            return Err(Unusable::Invalid);
        }
        let first = value.iter().position(|b| *b != b'0').unwrap_or(value.len());
        let digits = &value[first..];
        match seen {
            Some(prev) if prev != digits => return Err(Unusable::Invalid),
            _ => seen = Some(digits),
        }
    }
    let Some(digits) = seen else {
        return Ok(None);
    };
    if digits.is_empty() {
        return Ok(Some(0));
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        // hyper keeps the top two values for its own bookkeeping.
        .filter(|n| *n < u64::MAX - 1)
        .map(Some)
        .ok_or(Unusable::TooLarge)
}

/// Appends `head` to `out`, renaming unusable `Content-Length` lines, and
/// returns the state after it.
fn rewrite(head: &[u8], out: &mut Vec<u8>) -> State {
    let lines: Vec<&[u8]> = head.split_inclusive(|b| *b == b'\n').collect();
    let field = |line: &[u8]| -> Option<(Vec<u8>, usize)> {
        let colon = line.iter().position(|b| *b == b':')?;
        Some((line[..colon].to_ascii_lowercase(), colon))
    };
    let mut lengths = Vec::new();
    let mut chunked = false;
    for line in lines.iter().skip(1) {
        if let Some((name, colon)) = field(line) {
            match name.as_slice() {
                b"content-length" => lengths.push(&line[colon + 1..]),
                b"transfer-encoding" => chunked = true,
                _ => {}
            }
        }
    }
    if chunked {
        // hyper decides between the two framings; nothing to count here.
        out.extend_from_slice(head);
        return State::Passthrough;
    }
    match judge(&lengths) {
        Ok(None) => {
            out.extend_from_slice(head);
            State::Head
        }
        Ok(Some(0)) => {
            out.extend_from_slice(head);
            State::Head
        }
        Ok(Some(n)) => {
            out.extend_from_slice(head);
            State::Body(n)
        }
        Err(why) => {
            for (i, line) in lines.iter().enumerate() {
                let is_length =
                    i > 0 && field(line).is_some_and(|(name, _)| name == b"content-length");
                if is_length {
                    out.extend_from_slice(MARKER.as_bytes());
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(why.as_str().as_bytes());
                    out.extend_from_slice(b"\r\n");
                } else {
                    out.extend_from_slice(line);
                }
            }
            State::Passthrough
        }
    }
}

/// A connection whose request heads pass through a [`HeadRewriter`].
#[derive(Debug)]
pub struct LengthGuard<IO> {
    io: IO,
    rewriter: HeadRewriter,
    ready: Vec<u8>,
    offset: usize,
    eof: bool,
}

impl<IO> LengthGuard<IO> {
    /// Wraps one accepted connection.
    pub fn new(io: IO) -> Self {
        Self {
            io,
            rewriter: HeadRewriter::default(),
            ready: Vec::new(),
            offset: 0,
            eof: false,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for LengthGuard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.offset < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.offset);
                buf.put_slice(&this.ready[this.offset..this.offset + n]);
                this.offset += n;
                return Poll::Ready(Ok(()));
            }
            this.ready.clear();
            this.offset = 0;
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.rewriter.passthrough() {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.rewriter.finish(&mut this.ready);
                this.eof = true;
            } else {
                this.rewriter.feed(read.filled(), &mut this.ready);
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for LengthGuard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut rw = HeadRewriter::default();
        let mut out = Vec::new();
        for c in chunks {
            rw.feed(c, &mut out);
        }
        rw.finish(&mut out);
        out
    }

    fn marker(kind: &str) -> String {
        format!("{MARKER}: {kind}\r\n")
    }

    #[test]
    fn usable_lengths_pass_unchanged_even_byte_by_byte() {
        let two = b"POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}POST /mcp HTTP/1.1\r\ncontent-length: 02\r\n\r\n[]GET / HTTP/1.1\r\n\r\n";
        assert_eq!(run(&[two]), two.to_vec());
        let bytes: Vec<&[u8]> = two.chunks(1).collect();
        assert_eq!(run(&bytes), two.to_vec());
        // A body that looks like a bad head is a body, not a head.
        let body = b"POST /mcp HTTP/1.1\r\nContent-Length: 24\r\n\r\nContent-Length: abc\r\n\r\n";
        assert_eq!(run(&[body]), body.to_vec());
        let same = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 01\r\n\r\nx";
        assert_eq!(run(&[same]), same.to_vec());
    }

    #[test]
    fn unusable_lengths_are_renamed() {
        for (value, kind) in [
            ("abc", "invalid"),
            ("-5", "invalid"),
            ("+2", "invalid"),
            ("", "invalid"),
            ("1_0", "invalid"),
            ("2, 3", "invalid"),
            ("1, 1", "invalid"),
            ("99999999999999999999999", "too_large"),
        ] {
            let req =
                format!("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: {value}\r\n\r\n{{}}");
            let out = String::from_utf8(run(&[req.as_bytes()])).unwrap();
            assert_eq!(
                out,
                format!("POST /mcp HTTP/1.1\r\nHost: x\r\n{}\r\n{{}}", marker(kind)),
                "{value}"
            );
        }
        let two = b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\n";
        let out = String::from_utf8(run(&[two])).unwrap();
        assert_eq!(
            out,
            format!(
                "POST / HTTP/1.1\r\n{}{}\r\n",
                marker("invalid"),
                marker("invalid")
            )
        );
    }

    #[test]
    fn chunked_and_oversized_heads_are_left_to_hyper() {
        let te =
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n0\r\n\r\n";
        assert_eq!(run(&[te]), te.to_vec());
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        assert_eq!(run(&[&long]), long);
    }

    #[test]
    fn head_end_finds_both_line_endings() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nrest", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n", 0), None);
    }
}
