//! JSON-RPC 2.0 envelope parsing.

use serde_json::{Map, Value};

use crate::error::{ErrorCode, RpcError};

/// One JSON-RPC request or notification, envelope already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The request id (a string or an integer), `None` for a notification.
    pub id: Option<Value>,
    /// The method name.
    pub method: String,
    /// The params object, when the message has one.
    pub params: Option<Map<String, Value>>,
}

impl Request {
    /// True for a message without `id`.
    pub fn is_notification(&self) -> bool {
        self.id.is_none()
    }

    /// `params._meta` when it is an object.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.as_ref()?.get("_meta")?.as_object()
    }

    /// A string field of `params`.
    pub fn param_str(&self, key: &str) -> Option<&str> {
        self.params.as_ref()?.get(key)?.as_str()
    }
}

/// What one inbound message turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request (has an id) or a notification (has none).
    Request(Request),
    /// A response from the client (we never send requests, so it is ignored).
    Response,
}

/// Why a message was refused before it could be classified.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The protocol error.
    pub error: RpcError,
    /// The id, when it could be read.
    pub id: Option<Value>,
    /// HTTP status of this refusal.
    pub status: u16,
}

/// Parses one message: `-32700` for bytes that are not JSON, `-32600` for a batch
/// or an envelope that is not JSON-RPC 2.0.
///
/// A string escape of a lone UTF-16 surrogate (`"\ud800"`) is grammatical JSON
/// that a Rust string cannot hold; it is read as U+FFFD rather than refusing
/// the whole message. When the bytes still do not parse, the error carries the
/// message's top-level `id` if that much could be read.
pub fn parse_message(bytes: &[u8]) -> Result<Message, Box<Rejection>> {
    if too_many_values(bytes) {
        return Err(Box::new(Rejection {
            error: RpcError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "the message holds more than {MAX_VALUES} JSON values (array elements and object members); a request needs a handful"
                ),
                "too_many_values",
            )
            .with_data("max_values", serde_json::json!(MAX_VALUES)),
            id: probe_id(bytes),
            status: 400,
        }));
    }
    let depth = nesting_depth(bytes);
    if depth > MAX_DEPTH {
        return Err(Box::new(Rejection {
            error: RpcError::new(
                ErrorCode::ParseError,
                format!("Parse error: the message nests deeper than {MAX_DEPTH} levels"),
                "too_deep",
            )
            .with_data("max_depth", serde_json::json!(MAX_DEPTH)),
            id: probe_id(bytes),
            status: 400,
        }));
    }
    let value: Value = match parse_value(bytes, depth) {
        Ok(v) => v,
        Err(first) => match replace_lone_surrogates(bytes)
            .as_deref()
            .map(|b| parse_value(b, depth))
        {
            Some(Ok(v)) => v,
            _ => {
                return Err(Box::new(Rejection {
                    error: RpcError::new(
                        ErrorCode::ParseError,
                        format!("Parse error: {first}"),
                        "parse_error",
                    ),
                    id: probe_id(bytes),
                    status: 400,
                }));
            }
        },
    };
    from_value(value).map_err(Box::new)
}

/// The deepest nesting a message may have: as deep as the reference
/// (Python's recursion limit) serves; `_meta` is carried, not walked, so a
/// capability document 600 levels deep is served. Deeper is refused
/// before parsing.
pub const MAX_DEPTH: usize = 1_000;

/// Nesting the parser's own guard (128 levels) allows; deeper documents
/// are parsed on a thread with a stack sized for [`MAX_DEPTH`].
const SHALLOW: usize = 120;

/// Parses `bytes`, `depth` levels deep at most.
fn parse_value(bytes: &[u8], depth: usize) -> serde_json::Result<Value> {
    if depth <= SHALLOW {
        return serde_json::from_slice(bytes);
    }
    let owned = bytes.to_vec();
    let deep = move || {
        let mut de = serde_json::Deserializer::from_slice(&owned);
        de.disable_recursion_limit();
        let v = <Value as serde::Deserialize>::deserialize(&mut de)?;
        de.end()?;
        Ok(v)
    };
    // Rare (no client nests this deep): a thread of its own with a stack
    // for MAX_DEPTH levels in any build, rather than every thread's.
    match std::thread::Builder::new()
        .name("deep-json".into())
        .stack_size(16 << 20)
        .spawn(deep)
    {
        Ok(t) => t.join().unwrap_or_else(|_| {
            Err(serde::de::Error::custom(
                "the parser of a deep message failed",
            ))
        }),
        Err(e) => Err(serde::de::Error::custom(format!(
            "no thread to parse a deep message: {e}"
        ))),
    }
}

/// The deepest nesting of arrays and objects in `bytes`, outside strings
/// (a linear scan; stops counting once past [`MAX_DEPTH`]).
fn nesting_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > MAX_DEPTH {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Most JSON values (array elements and object members) one message may
/// hold. A value tree costs up to ~100 bytes of memory per byte of text
/// (`[{},{},...]`), so a message within the size limits could otherwise
/// take gigabytes; no MCP request comes near this count, while one long
/// string (a patch, a file) counts once.
pub const MAX_VALUES: usize = 100_000;

/// Counts array elements and object members outside strings; true once
/// past [`MAX_VALUES`]. Messages too short to hold that many are not
/// scanned.
fn too_many_values(bytes: &[u8]) -> bool {
    // Each counted value takes at least two bytes (`0,`).
    if bytes.len() <= 2 * MAX_VALUES {
        return false;
    }
    let mut count = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // Skip the string: to the next quote not escaped.
                i += 1;
                loop {
                    match memchr::memchr2(b'"', b'\\', &bytes[i.min(bytes.len())..]) {
                        None => return false,
                        Some(j) if bytes[i + j] == b'\\' => i += j + 2,
                        Some(j) => {
                            i += j + 1;
                            break;
                        }
                    }
                }
                continue;
            }
            b',' | b'[' | b'{' => {
                count += 1;
                if count > MAX_VALUES {
                    return true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// Rewrites each `\uXXXX` escape of an unpaired surrogate as `\uFFFD` (same
/// length, so positions in error messages stay true). `None` when there is none.
fn replace_lone_surrogates(bytes: &[u8]) -> Option<Vec<u8>> {
    let escape_at = |b: &[u8], i: usize| -> Option<u16> {
        let esc = b.get(i..i + 6)?;
        if esc[0] != b'\\' || esc[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&esc[2..]).ok()?, 16).ok()
    };
    let is_high = |u: u16| (0xD800..0xDC00).contains(&u);
    let is_low = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match escape_at(bytes, i) {
            Some(u) if is_high(u) && escape_at(bytes, i + 6).is_some_and(is_low) => i += 12,
            Some(u) if is_high(u) || is_low(u) => {
                out.get_or_insert_with(|| bytes.to_vec())[i..i + 6].copy_from_slice(b"\\uFFFD");
                i += 6;
            }
            Some(_) => i += 6,
            // Any other escape is two bytes (`\\` must not start another escape).
            None => i += 2,
        }
    }
    out
}

/// The top-level `"id"` of bytes that did not parse, when it is a string or
/// an integer: a linear scan of the outer object that skips every other value
/// without judging it, so an odd value elsewhere does not hide the id.
fn probe_id(bytes: &[u8]) -> Option<Value> {
    let mut scan = Scan { bytes, at: 0 };
    scan.ws();
    if !scan.eat(b'{') {
        return None;
    }
    let mut id = None;
    loop {
        scan.ws();
        let Some(key) = scan.string() else {
            return id;
        };
        scan.ws();
        if !scan.eat(b':') {
            return id;
        }
        scan.ws();
        let Some(value) = scan.value() else {
            return id;
        };
        if key == b"\"id\"" {
            // The last occurrence wins, as when the message parses.
            id = serde_json::from_slice::<Value>(value)
                .ok()
                .filter(|v| v.is_string() || v.is_i64() || v.is_u64());
        }
        scan.ws();
        if !scan.eat(b',') {
            return id;
        }
    }
}

/// A cursor over bytes that may not be JSON.
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// A whole string token, quotes included.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        if !self.eat(b'"') {
            return None;
        }
        loop {
            match self.peek()? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return self.bytes.get(start..self.at);
                }
                _ => self.at += 1,
            }
        }
    }

    /// One value's bytes: a string, a bracketed value (nesting counted, not
    /// recursed into), or a bare token up to the next delimiter.
    fn value(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        match self.peek()? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                self.at += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.at += 1;
                }
            }
        }
        self.bytes.get(start..self.at)
    }
}

fn invalid(message: &str, reason: &str, id: Option<Value>) -> Rejection {
    Rejection {
        error: RpcError::new(
            ErrorCode::InvalidRequest,
            format!("Invalid Request: {message}"),
            reason,
        ),
        id,
        status: 200,
    }
}

#[expect(clippy::result_large_err, reason = "boxed once by parse_message")]
fn from_value(value: Value) -> Result<Message, Rejection> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => {
            return Err(Rejection {
                status: 400,
                ..invalid("JSON-RPC batches are not supported", "batch", None)
            });
        }
        // Not a request at all, like a batch: the transport refuses it.
        _ => {
            return Err(Rejection {
                status: 400,
                ..invalid("a message must be a JSON object", "not_an_object", None)
            });
        }
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Value::Number(n)),
        Some(_) => {
            return Err(invalid("id must be a string or an integer", "id", None));
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\"", "jsonrpc_version", id));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Err(invalid("method must be a string", "method", id)),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Ok(Message::Response);
        }
        None => return Err(invalid("method is required", "method", id)),
    };
    let params = match obj.remove("params") {
        // `null` params are no params, as in the reference.
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => Some(p),
        // JSON-RPC allows positional params; no MCP method takes them, and a
        // scalar is no better: both are invalid params, as in the reference.
        Some(_) => {
            return Err(Rejection {
                error: RpcError::new(
                    ErrorCode::InvalidParams,
                    "MCP method params must be an object",
                    "params_not_object",
                ),
                id,
                status: 200,
            });
        }
    };
    Ok(Message::Request(Request { id, method, params }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reject(bytes: &[u8]) -> Rejection {
        *parse_message(bytes).unwrap_err()
    }

    #[test]
    fn not_json_is_parse_error_without_id() {
        for body in [&b"{"[..], b"", b"nul", b"{\"a\":1,}", b"\xff\xfe"] {
            let r = reject(body);
            assert_eq!(r.error.code, ErrorCode::ParseError);
            assert_eq!(r.status, 400);
            assert_eq!(r.id, None);
        }
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_crash() {
        for levels in [MAX_DEPTH + 1, 10_000] {
            let body = "[".repeat(levels) + &"]".repeat(levels);
            let r = reject(body.as_bytes());
            assert_eq!(r.error.code, ErrorCode::ParseError, "{levels}");
            assert_eq!(r.error.data.as_ref().unwrap()["reason"], "too_deep");
        }
        // A million levels: refused before parsing (it is also too many
        // values), without harm.
        let body = "[".repeat(1_000_000) + &"]".repeat(1_000_000);
        assert_eq!(reject(body.as_bytes()).status, 400);
    }

    /// Issue 36: `_meta` is carried, not walked: a capability document as
    /// deep as the reference serves (600 levels; Python's limit is ~1,000)
    /// is served, on the parser's deep path.
    #[test]
    fn a_deep_meta_document_is_served() {
        for levels in [SHALLOW + 1, 600, MAX_DEPTH - 10] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":"deep","method":"ping","params":{{"_meta":{{"io.modelcontextprotocol/clientCapabilities":{{"x":{}1{}}}}}}}}}"#,
                r#"{"a":"#.repeat(levels),
                "}".repeat(levels)
            );
            let m = parse_message(body.as_bytes()).unwrap_or_else(|e| panic!("{levels}: {e:?}"));
            assert!(matches!(m, Message::Request(_)), "{levels}");
        }
    }

    #[test]
    fn a_message_of_too_many_values_is_refused_before_parsing() {
        let zeros = vec!["0"; MAX_VALUES + 1].join(",");
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"a":[{zeros}]}}}}"#);
        let r = reject(body.as_bytes());
        assert_eq!(r.error.code, ErrorCode::InvalidRequest);
        assert_eq!(r.error.data.as_ref().unwrap()["reason"], "too_many_values");
        assert_eq!(r.id, Some(json!(7)));
        // One value short of the limit parses.
        let zeros = vec!["0"; MAX_VALUES - 8].join(",");
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"a":[{zeros}]}}}}"#);
        assert!(parse_message(body.as_bytes()).is_ok());
        // Commas, brackets and escaped quotes inside one long string count
        // for nothing.
        let text = r#"a,[{\",\"}"#.repeat(MAX_VALUES);
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"s":"{text}"}}}}"#);
        assert!(
            parse_message(body.as_bytes()).is_ok(),
            "a string is one value"
        );
    }

    #[test]
    fn batches_are_invalid_requests_with_400() {
        let r = reject(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!(r.error.code, ErrorCode::InvalidRequest);
        assert_eq!(r.status, 400);
        assert_eq!(reject(b"[]").status, 400);
    }

    #[test]
    fn envelope_errors_are_invalid_requests_with_200() {
        for (body, id, reason) in [
            (
                &br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#[..],
                Some(json!(1)),
                "jsonrpc_version",
            ),
            (
                br#"{"id":"a","method":"ping"}"#,
                Some(json!("a")),
                "jsonrpc_version",
            ),
            (
                br#"{"jsonrpc":"2.0","id":2,"method":5}"#,
                Some(json!(2)),
                "method",
            ),
            (br#"{"jsonrpc":"2.0","id":2}"#, Some(json!(2)), "method"),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                None,
                "id",
            ),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, None, "id"),
            (br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, None, "id"),
        ] {
            let r = reject(body);
            assert_eq!(r.error.code, ErrorCode::InvalidRequest, "{body:?}");
            assert_eq!(r.status, 200);
            assert_eq!(r.id, id, "{}", String::from_utf8_lossy(body));
            assert_eq!(r.error.data.unwrap()["reason"], reason);
        }
    }

    #[test]
    fn a_json_value_that_is_not_an_object_is_refused_with_400() {
        for body in [&b"5"[..], br#""x""#, b"null", b"true"] {
            let r = reject(body);
            assert_eq!((r.error.code, r.status), (ErrorCode::InvalidRequest, 400));
            assert_eq!(r.id, None);
        }
    }

    #[test]
    fn params_that_are_not_an_object_are_invalid_params() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}"#[..],
            br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":7}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":"x"}"#,
        ] {
            let r = reject(body);
            assert_eq!(r.error.code, ErrorCode::InvalidParams);
            assert_eq!(r.id, Some(json!(3)));
        }
        let Message::Request(r) =
            parse_message(br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":null}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(r.params, None);
    }

    #[test]
    fn lone_surrogates_read_as_replacement_characters() {
        let Message::Request(r) = parse_message(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"x\ud800y","b":"\udc00","c":"\ud83d\ude00","d":"\\ud800"}}"#,
        )
        .unwrap() else {
            panic!()
        };
        let p = r.params.unwrap();
        assert_eq!(p["a"], "x\u{FFFD}y");
        assert_eq!(p["b"], "\u{FFFD}");
        assert_eq!(p["c"], "\u{1F600}", "a real pair is kept");
        assert_eq!(p["d"], "\\ud800", "an escaped backslash is not an escape");
    }

    #[test]
    fn unparsable_messages_keep_a_readable_id() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"deep","method":"ping","params":{{"_meta":{{"x":{}{}}}}}}}"#,
            "[".repeat(MAX_DEPTH + 5),
            "]".repeat(MAX_DEPTH + 5)
        );
        for (body, id) in [
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"x":NaN}}}"#
                    .to_vec(),
                Some(json!(1)),
            ),
            (
                br#"{"params":{"_meta":{"x":[Infinity,{"id":9}]}},"id":7,"method":"ping"}"#
                    .to_vec(),
                Some(json!(7)),
            ),
            (deep.into_bytes(), Some(json!("deep"))),
            (br#"{"jsonrpc":"2.0","id":1.5,"x":NaN}"#.to_vec(), None),
            (br#"{"id":null,"x":NaN}"#.to_vec(), None),
            (b"{not json".to_vec(), None),
            (br#"{"id":1"#.to_vec(), Some(json!(1))),
            (br#"{"id""#.to_vec(), None),
            (br#"[{"id":1},NaN]"#.to_vec(), None),
        ] {
            let r = reject(&body);
            let text = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(r.error.code, ErrorCode::ParseError, "{text}");
            assert_eq!(r.id, id, "{text}");
        }
    }

    #[test]
    fn probing_truncated_or_hostile_bytes_never_panics() {
        let samples: [&[u8]; 8] = [
            b"{\"id\":\"\\",
            b"{\"a\":\"\\u",
            b"{\"a\":[[[[",
            b"{\"a\":]]]]}",
            b"{\"a\":\"\\ud800",
            b"\\u",
            b"{\"\\",
            b"{\"a\":x\\ud800",
        ];
        for s in samples {
            for end in 0..=s.len() {
                let _ = parse_message(&s[..end]);
            }
        }
    }

    #[test]
    fn requests_notifications_and_responses() {
        let Message::Request(r) =
            parse_message(br#"{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{}}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(r.id, Some(json!("x")));
        assert!(!r.is_notification());
        let Message::Request(n) =
            parse_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap()
        else {
            panic!()
        };
        assert!(n.is_notification());
        assert_eq!(
            parse_message(br#"{"jsonrpc":"2.0","id":9,"result":{}}"#).unwrap(),
            Message::Response
        );
        // Large integer ids are echoed exactly.
        let Message::Request(big) =
            parse_message(br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"ping"}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(big.id, Some(json!(18446744073709551615u64)));
    }
}
