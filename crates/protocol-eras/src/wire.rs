//! Messages as the bytes on the wire, each long string escaped once.
//!
//! A page of `read_file` travels twice in one answer: as the text of its
//! content block (the page and a continuation line) and as
//! `structuredContent.content` (the page). [`to_wire`] writes exactly what
//! `serde_json::to_vec` writes, but remembers every long string it has
//! escaped in the message: a later string that begins with an earlier one,
//! or is the beginning of one, copies those escaped bytes instead of
//! escaping them again. Escaping itself scans eight bytes at a time for the
//! few that need it and copies the runs between them.

use serde_json::Value;

/// Strings at least this long are remembered for reuse within a message.
const LONG: usize = 16 * 1024;
/// At most this many long strings are remembered per message (each later
/// one is compared with them: the work stays linear in the message).
const LONG_KEPT: usize = 8;
/// A remembered string notes how far its escaped form had got every this
/// many input bytes, so a prefix of it can be copied up to a mark.
const MARK_EVERY: usize = 4096;
/// [`to_wire_streaming`] hands on what is written once this much is new.
pub const STREAM_EVERY: usize = 256 * 1024;

/// Where [`to_wire_streaming`] hands on the bytes it has written.
pub type Sink<'s> = &'s mut dyn FnMut(&[u8]) -> std::io::Result<()>;

/// `value` as compact JSON, byte for byte what `serde_json::to_vec` gives.
pub fn to_wire(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    to_wire_into(value, &mut out);
    out
}

/// [`to_wire`] appended to `out`: a writer that keeps one buffer for its
/// messages does not allocate (and fault in) a new one for each.
pub fn to_wire_into(value: &Value, out: &mut Vec<u8>) {
    // A sink that takes everything cannot fail.
    let _ = write_into(value, out, None);
}

/// [`to_wire_into`] that hands the bytes on as they are written: each time
/// [`STREAM_EVERY`] bytes of `out` are new, `sink` gets them, so a writer
/// can send the start of a large answer while the rest is escaped. Returns
/// where in `out` the bytes not yet given to `sink` begin; the caller sends
/// those (and its line end). After `sink` fails it is not called again,
/// and its error is returned once the message is written.
pub fn to_wire_streaming(
    value: &Value,
    out: &mut Vec<u8>,
    sink: Sink<'_>,
) -> std::io::Result<usize> {
    write_into(value, out, Some(sink))
}

fn write_into(value: &Value, out: &mut Vec<u8>, sink: Option<Sink<'_>>) -> std::io::Result<usize> {
    let raw = raw_len(value);
    // Room for the text and a little escaping: a large answer is written
    // into one allocation, not grown and copied.
    let need = raw + raw / 32 + 64;
    if out.capacity() - out.len() < need {
        // A quarter more than this answer needs, not double what the
        // buffer had: a kept buffer grown by doubling for a page a little
        // longer than the last would pass the caller's keep limit, be
        // dropped, and be faulted in afresh for every page.
        out.reserve_exact(need + need / 4);
    }
    let sent = out.len();
    let mut w = Writer {
        out: std::mem::take(out),
        long: Vec::new(),
        sink,
        sent,
        failed: None,
    };
    w.value(value);
    *out = w.out;
    match w.failed {
        Some(e) => Err(e),
        None => Ok(w.sent),
    }
}

/// About the length of `value` as JSON before escaping (strings' bytes,
/// quotes and separators; numbers counted short).
fn raw_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(|v| raw_len(v) + 1).sum::<usize>() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + raw_len(v))
                .sum::<usize>()
                + 2
        }
    }
}

/// A long string already written: its text, where its escaped form starts
/// in the output, and marks (input offset, output offset) along the way,
/// the last at its end.
struct Written<'a> {
    text: &'a [u8],
    start: usize,
    marks: Vec<(usize, usize)>,
}

struct Writer<'a, 's> {
    out: Vec<u8>,
    long: Vec<Written<'a>>,
    /// Where new bytes go as they are written, if anywhere.
    sink: Option<Sink<'s>>,
    /// `out[..sent]` was given to the sink.
    sent: usize,
    failed: Option<std::io::Error>,
}

impl<'a> Writer<'a, '_> {
    /// Gives the sink what is new, once there is [`STREAM_EVERY`] of it.
    fn stream(&mut self) {
        if self.out.len() - self.sent < STREAM_EVERY {
            return;
        }
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        if let Err(e) = sink(&self.out[self.sent..]) {
            self.sink = None;
            self.failed = Some(e);
            return;
        }
        self.sent = self.out.len();
    }

    fn value(&mut self, v: &'a Value) {
        match v {
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Number(n) => {
                // Writing a number into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut self.out, n);
            }
            Value::String(s) => self.string(s.as_bytes()),
            Value::Array(items) => {
                self.out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.value(item);
                }
                self.out.push(b']');
            }
            Value::Object(map) => {
                self.out.push(b'{');
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.string(k.as_bytes());
                    self.out.push(b':');
                    self.value(item);
                }
                self.out.push(b'}');
            }
        }
    }

    fn string(&mut self, s: &'a [u8]) {
        self.out.push(b'"');
        if s.len() < LONG {
            escape(&mut self.out, s);
            self.out.push(b'"');
            return;
        }
        let start = self.out.len();
        let mut marks = Vec::with_capacity(s.len() / MARK_EVERY + 1);
        let mut done = 0;
        if let Some(n) = self.reusable(s) {
            // Its escaped bytes up to the last mark within `s`, copied.
            let w = &self.long[n];
            marks.extend(
                w.marks
                    .iter()
                    .take_while(|&&(i, _)| i <= s.len())
                    .map(|&(i, o)| (i, o - w.start + start)),
            );
            done = marks.last().map_or(0, |&(i, _)| i);
            let copy_end = marks.last().map_or(w.start, |&(_, o)| o - start + w.start);
            let from = w.start;
            self.out.extend_from_within(from..copy_end);
            self.stream();
        }
        for chunk in s[done..].chunks(MARK_EVERY) {
            escape(&mut self.out, chunk);
            done += chunk.len();
            marks.push((done, self.out.len()));
            self.stream();
        }
        self.out.push(b'"');
        if self.long.len() == LONG_KEPT {
            return;
        }
        self.long.push(Written {
            text: s,
            start,
            marks,
        });
    }

    /// A remembered string that `s` begins with, or that begins with `s`.
    fn reusable(&self, s: &[u8]) -> Option<usize> {
        self.long
            .iter()
            .position(|w| s.starts_with(w.text) || w.text.starts_with(s))
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that JSON must escape: below 0x20, `"`
/// or `\`. The lowest set bit is always exact (a borrow only runs upwards
/// from a byte that matched), which is all the scan uses.
fn needs_escape(w: u64) -> u64 {
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGHS
}

/// Appends `bytes` (part of a UTF-8 string) escaped as JSON does: `\"`,
/// `\\`, `\b \f \n \r \t`, other control bytes as `\u00xx`; nothing else.
fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 16);
    let mut run = 0;
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[i..i + 8]);
        let hits = needs_escape(u64::from_le_bytes(word));
        if hits == 0 {
            i += 8;
            continue;
        }
        let at = i + (hits.trailing_zeros() / 8) as usize;
        out.extend_from_slice(&bytes[run..at]);
        escape_byte(out, bytes[at]);
        i = at + 1;
        run = i;
    }
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x20 || b == b'"' || b == b'\\' {
            out.extend_from_slice(&bytes[run..i]);
            escape_byte(out, b);
            run = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[run..]);
}

fn escape_byte(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match b {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same_as_serde(v: &Value) {
        let ours = to_wire(v);
        let theirs = serde_json::to_vec(v).unwrap();
        assert!(
            ours == theirs,
            "differs from serde_json:\nours:   {}\ntheirs: {}",
            String::from_utf8_lossy(&ours[..ours.len().min(300)]),
            String::from_utf8_lossy(&theirs[..theirs.len().min(300)])
        );
    }

    /// A deterministic text of `len` bytes with every kind of byte JSON
    /// escapes, multi-byte characters, and long plain runs.
    fn text(seed: u64, len: usize) -> String {
        let pieces = [
            "plain words here ",
            "\n",
            "\"q\"",
            "\\",
            "\t",
            "\u{1}\u{1f}\u{8}\u{c}\r",
            "ünï€😀",
            "\u{7f}",
            "x",
        ];
        let mut s = String::new();
        let mut r = seed;
        while s.len() < len {
            r = r
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            s.push_str(pieces[(r >> 33) as usize % pieces.len()]);
        }
        s
    }

    #[test]
    fn every_ascii_byte_escapes_as_serde_json_does() {
        for b in 0u8..0x80 {
            let s = String::from(char::from(b));
            // Alone, at every offset of a word, and in the bytewise tail.
            for pad in 0..10 {
                let padded = format!("{}{s}{}", "a".repeat(pad), "b".repeat(9 - pad));
                same_as_serde(&json!(padded));
            }
        }
    }

    #[test]
    fn values_of_every_kind_match_serde_json() {
        same_as_serde(&json!({
            "null": null, "t": true, "f": false,
            "n": [0, -1, 1.5, 1e300, 12345678901234567890u64, -0.0],
            "nested": {"a\n\"key": [[], {}, "", "é"]},
            "text": text(1, 5000),
        }));
    }

    #[test]
    fn long_strings_sharing_a_start_match_serde_json() {
        for seed in 0..6 {
            let page = text(seed, LONG * 3 + 1234);
            let with_tail = format!("{page}\n[continue with read_file(start_line=9)]");
            // The longer first (a read_file answer), the shorter first,
            // equal strings, a string sharing only part, and one short.
            let cut = &page[..page.floor_char_boundary(LONG + 77)];
            same_as_serde(
                &json!({"content": [{"text": with_tail}], "structured": {"content": page}}),
            );
            same_as_serde(&json!([page, with_tail, page, cut, "short"]));
            same_as_serde(&json!([cut, page, with_tail]));
            same_as_serde(&json!([page, text(seed + 100, LONG * 2)]));
            // More long strings than are remembered.
            let many: Vec<String> = (0..LONG_KEPT as u64 + 4)
                .map(|k| text(seed + k, LONG + 10))
                .collect();
            same_as_serde(&json!([many, page, with_tail]));
        }
    }

    #[test]
    fn a_repeated_page_is_escaped_once() {
        let page = text(7, 1 << 20);
        let with_tail = format!("{page}\ntail");
        let v = json!({"content": [{"text": with_tail}], "structuredContent": {"content": page}});
        let mut w = Writer {
            out: Vec::new(),
            long: Vec::new(),
            sink: None,
            sent: 0,
            failed: None,
        };
        w.value(&v);
        // The second string was copied: its marks came from the first.
        assert_eq!(w.long.len(), 2);
        let (first, second) = (&w.long[0], &w.long[1]);
        assert_eq!(
            second.marks[..10],
            first.marks[..10]
                .iter()
                .map(|&(i, o)| (i, o - first.start + second.start))
                .collect::<Vec<_>>()[..]
        );
        assert_eq!(w.out, serde_json::to_vec(&v).unwrap());
    }

    #[test]
    fn streamed_bytes_are_the_message_in_order() {
        let page = text(3, (1 << 20) + 333);
        let with_tail = format!("{page}\n[continue]");
        let v = json!({"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": with_tail}], "structuredContent": {"content": page, "n": 1}}});
        // Bytes already in the buffer stay there and are not streamed.
        let mut out = b"earlier".to_vec();
        let mut streamed = Vec::new();
        let mut calls = Vec::new();
        let rest = to_wire_streaming(&v, &mut out, &mut |b: &[u8]| {
            calls.push(b.len());
            streamed.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert!(calls.len() >= 4, "{calls:?}");
        assert!(calls.iter().all(|&n| n >= STREAM_EVERY), "{calls:?}");
        assert_eq!(&out[..7], b"earlier");
        assert_eq!(&out[7..rest], &streamed[..]);
        streamed.extend_from_slice(&out[rest..]);
        assert_eq!(streamed, serde_json::to_vec(&v).unwrap());
        // A small message is left whole to the caller.
        let mut out = Vec::new();
        let rest = to_wire_streaming(&json!({"a": 1}), &mut out, &mut |_: &[u8]| {
            panic!("a small message was streamed")
        })
        .unwrap();
        assert_eq!((rest, &out[..]), (0, &b"{\"a\":1}"[..]));
    }

    #[test]
    fn a_failing_sink_is_not_called_again_and_its_error_returned() {
        let v = json!([text(4, 3 * STREAM_EVERY)]);
        let mut calls = 0;
        let mut out = Vec::new();
        let err = to_wire_streaming(&v, &mut out, &mut |_: &[u8]| {
            calls += 1;
            Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"))
        })
        .unwrap_err();
        assert_eq!((calls, err.kind()), (1, std::io::ErrorKind::BrokenPipe));
        // The message is still written whole into the buffer.
        assert_eq!(out, serde_json::to_vec(&v).unwrap());
    }
}
