//! Head + rolling-tail retention of one output stream, with absolute offsets.

use std::collections::VecDeque;

/// One stream's retained bytes: a frozen head (the first bytes ever written)
/// and a rolling tail (the most recent); whatever falls between is evicted
/// and counted. Offsets are absolute and never change.
#[derive(Debug, Clone)]
pub struct RetainedStream {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes ever written.
    total: u64,
    /// Absolute offset of `tail[0]`.
    tail_start: u64,
    /// Newlines ever written.
    newlines: u64,
    /// The last byte written, if any.
    last: Option<u8>,
}

/// A read of retained bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The offset actually served: the one asked for, or the tail's start
    /// when that lies in the evicted gap. An offset past the end is kept
    /// (and serves nothing).
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Bytes skipped because they were evicted (`offset - requested`).
    pub omitted: u64,
    /// Where the next read continues, `None` at the end of what was written.
    pub next_offset: Option<u64>,
}

impl RetainedStream {
    /// A stream keeping `budget` bytes: 1/8 head, the rest tail.
    pub fn new(budget: usize) -> Self {
        let head_cap = budget / 8;
        Self {
            head_cap,
            tail_cap: budget - head_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            tail_start: 0,
            newlines: 0,
            last: None,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.newlines += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&b) = bytes.last() {
            self.last = Some(b);
        }
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            self.total += n as u64;
            self.tail_start = self.total;
        }
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            let skip = bytes.len() - self.tail_cap;
            self.tail.clear();
            self.tail.extend(&bytes[skip..]);
            self.total += bytes.len() as u64;
            self.tail_start = self.total - self.tail.len() as u64;
            return;
        }
        self.tail.extend(bytes);
        self.total += bytes.len() as u64;
        let excess = self.tail.len().saturating_sub(self.tail_cap);
        if excess > 0 {
            self.tail.drain(..excess);
            self.tail_start += excess as u64;
        }
    }

    /// Bytes ever written.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes of the frozen head.
    pub fn head_len(&self) -> u64 {
        self.head.len() as u64
    }

    /// Bytes lost between head and tail.
    pub fn evicted_gap(&self) -> u64 {
        self.tail_start - self.head_len()
    }

    /// Lines ever written: the newlines, and one more when the output
    /// does not end with one.
    pub fn lines(&self) -> u64 {
        self.newlines + u64::from(self.last.is_some_and(|b| b != b'\n'))
    }

    /// Bytes currently retained.
    pub fn retained(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Absolute offset where the tail starts.
    pub fn tail_start(&self) -> u64 {
        self.tail_start
    }

    /// Reads up to `limit` bytes from `offset`; inside the evicted gap the
    /// read clamps forward to the tail.
    pub fn read(&self, offset: u64, limit: usize) -> Slice {
        let head_len = self.head_len();
        let (start, omitted) = if offset >= head_len && offset < self.tail_start {
            (self.tail_start, self.tail_start - offset)
        } else {
            (offset, 0)
        };
        let mut out = Vec::new();
        let mut pos = start;
        if pos < head_len {
            let end = head_len.min(pos + limit as u64);
            out.extend_from_slice(&self.head[pos as usize..end as usize]);
            pos = end;
        }
        // Continue into the tail only when no gap separates them.
        if out.len() < limit && pos >= self.tail_start && pos < self.total {
            let from = (pos - self.tail_start) as usize;
            let n = (limit - out.len()).min(self.tail.len() - from);
            let (a, b) = self.tail.as_slices();
            for i in from..from + n {
                out.push(if i < a.len() { a[i] } else { b[i - a.len()] });
            }
            pos += n as u64;
        }
        let next = if pos < self.total {
            Some(if pos == head_len && self.tail_start > head_len {
                self.tail_start
            } else {
                pos
            })
        } else {
            None
        };
        Slice {
            offset: start,
            bytes: out,
            omitted,
            next_offset: next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_head_and_tail_with_absolute_offsets() {
        let mut s = RetainedStream::new(80); // head 10, tail 70
        for i in 0..100u8 {
            s.push(&[i]);
        }
        assert_eq!(
            (s.total(), s.head_len(), s.tail_start(), s.evicted_gap()),
            (100, 10, 30, 20)
        );
        let head = s.read(0, 1000);
        assert_eq!(head.bytes, (0..10).collect::<Vec<u8>>());
        assert_eq!(head.next_offset, Some(30));
        let gap = s.read(15, 5);
        assert_eq!(
            (gap.offset, gap.omitted, gap.bytes.clone()),
            (30, 15, vec![30, 31, 32, 33, 34])
        );
        let end = s.read(95, 100);
        assert_eq!(
            (end.bytes, end.next_offset),
            (vec![95, 96, 97, 98, 99], None)
        );
        assert_eq!(s.read(100, 10).bytes, Vec::<u8>::new());
        let past = s.read(150, 10);
        assert_eq!(
            (past.offset, past.next_offset, past.bytes.len()),
            (150, None, 0)
        );
    }

    #[test]
    fn oversize_chunk_keeps_its_end_and_small_streams_read_contiguously() {
        let mut s = RetainedStream::new(16); // head 2, tail 14
        s.push(b"ab");
        s.push(&[b'x'; 100]);
        s.push(b"END");
        assert_eq!(s.total(), 105);
        assert_eq!(s.retained(), 16);
        assert!(s.read(91, 100).bytes.ends_with(b"END"));
        let mut small = RetainedStream::new(80);
        assert_eq!(small.lines(), 0);
        small.push(b"hello world");
        assert_eq!(small.lines(), 1);
        small.push(b"\nagain\n");
        assert_eq!(small.lines(), 2);
        let r = small.read(0, 11);
        assert_eq!(
            (r.bytes.as_slice(), r.next_offset),
            (&b"hello world"[..], Some(11))
        );
        let r = small.read(3, 4);
        assert_eq!((r.bytes.as_slice(), r.next_offset), (&b"lo w"[..], Some(7)));
    }

    #[test]
    fn memory_stays_bounded() {
        let mut s = RetainedStream::new(1024);
        for _ in 0..10_000 {
            s.push(&[7u8; 333]);
        }
        assert_eq!(s.retained(), 1024);
        assert_eq!(s.total(), 3_330_000);
    }
}
