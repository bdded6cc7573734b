//! The properties the fuzz targets check (`fuzz/`, run by `cargo xtask fuzz`)
//! and the regression tests replay (`tests/replay.rs`, in every CI run).
//!
//! Each `check_*` takes the raw fuzz input, drives one parser of the server
//! with it, and panics when a property fails: a panic inside the parser
//! itself is a finding, and so is an answer that breaks the contract. The
//! inputs that ever failed are kept under `fuzz/regressions/<target>/`, the
//! seeds under `fuzz/seeds/<target>/`; both are replayed by the tests.

#![deny(missing_docs)]
#![expect(
    clippy::unwrap_used,
    reason = "a failed property must stop the fuzzer with the input that broke it"
)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ctm_patch_engine::{HunkLine, Op};
use ctm_protocol_eras::{
    MAX_BASE64_CHARS, Method, MirrorHeaders, Prepared, decode_header_value, prepare,
};
use serde_json::Value;

/// One property check over one raw input.
pub type Check = fn(&[u8]);

/// The fuzz targets, by name: the directory names under `fuzz/seeds` and
/// `fuzz/regressions`, and the `cargo fuzz` target names.
pub const TARGETS: &[(&str, Check)] = &[
    ("jsonrpc_eras", check_jsonrpc_eras),
    ("patch_plan", check_patch_plan),
    ("tool_arguments", check_tool_arguments),
    ("mcp_name", check_mcp_name),
    ("shell_lexer", check_shell_lexer),
];

/// Separates the parts of one input (never valid inside UTF-8 text).
const SEP: u8 = 0xFF;

/// JSON-RPC envelope, era classification, `_meta` and mirror headers.
///
/// Input: the body, then `0xFF`-separated header values whose first byte
/// picks the header (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).
/// Properties: no panic; the same input gives the same answer; a reply body is
/// a JSON-RPC 2.0 error response that serializes and parses back; statuses
/// are the contract's; a call's method is routed and, when mirrored, its
/// version is the one the header carried.
pub fn check_jsonrpc_eras(data: &[u8]) {
    let mut parts = data.split(|b| *b == SEP);
    let body = parts.next().unwrap_or_default();
    let mut headers = MirrorHeaders::default();
    for part in parts {
        let Some((&kind, value)) = part.split_first() else {
            continue;
        };
        let slot = match kind % 3 {
            0 => &mut headers.protocol_version,
            1 => &mut headers.method,
            _ => &mut headers.name,
        };
        slot.push(value.to_vec());
    }
    for h in [None, Some(&headers)] {
        let first = prepare(body, h);
        let again = prepare(body, h);
        assert_eq!(
            format!("{first:?}"),
            format!("{again:?}"),
            "same input, different answer"
        );
        match first {
            Prepared::Reply(reply) => {
                assert!(
                    matches!(reply.status, 200 | 202 | 400 | 404),
                    "status {} is not one the contract gives",
                    reply.status
                );
                match reply.body {
                    None => assert_eq!(reply.status, 202, "a silent reply is 202"),
                    Some(body) => check_error_response(&body),
                }
            }
            Prepared::Call(call) => {
                let name = match call.method {
                    Method::Initialize => "initialize",
                    Method::Ping => "ping",
                    Method::Discover => "server/discover",
                    Method::ToolsList => "tools/list",
                    Method::ToolsCall => "tools/call",
                };
                assert_eq!(call.req.method, name, "routed elsewhere");
                assert!(call.req.id.is_some(), "a call without id");
                if let Some(h) = h
                    && call.era == ctm_protocol_eras::Era::Modern
                {
                    let mirrored = decode_header_value(&h.protocol_version[0]);
                    assert_eq!(mirrored.as_deref(), Some(call.protocol_version.as_str()));
                }
            }
            Prepared::Notification(req, _) => assert!(req.is_notification()),
        }
    }
}

fn check_error_response(body: &Value) {
    assert_eq!(
        body["jsonrpc"], "2.0",
        "not a JSON-RPC 2.0 response: {body}"
    );
    let code = body["error"]["code"].as_i64();
    assert!(
        matches!(
            code,
            Some(-32700 | -32600 | -32601 | -32602 | -32603 | -32020 | -32022)
        ),
        "error code outside the contract: {body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert!(body.get("result").is_none());
    let id = &body["id"];
    assert!(
        id.is_null() || id.is_string() || id.is_number(),
        "id {id} is not a JSON-RPC id"
    );
    let text = serde_json::to_vec(body).unwrap();
    let back: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(&back, body, "the response does not survive serialization");
}

/// The patch parser and the hunk planner.
///
/// Input: the patch text, `0xFF`, the file text (both read lossily as UTF-8).
/// Properties: no panic; parse errors name a line of the patch; each Update's
/// hunks either plan or fail with a reason; a plan reports one placement per
/// hunk, counts exactly the hunks' added and removed lines, places hunks
/// inside the file, and a plan of context-only hunks changes nothing.
pub fn check_patch_plan(data: &[u8]) {
    let (patch, file) = match data.iter().position(|b| *b == SEP) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let patch = String::from_utf8_lossy(patch);
    let file = String::from_utf8_lossy(file);
    let parsed = match ctm_patch_engine::parse(&patch) {
        Ok(p) => p,
        Err(e) => {
            let lines = patch.split('\n').count().max(1);
            assert!(
                e.line <= lines + 1,
                "error names line {} of a {lines}-line patch",
                e.line
            );
            assert!(!e.message.is_empty());
            return;
        }
    };
    let file_lines = file.split('\n').count();
    for op in &parsed.ops {
        let Op::Update { chunks, .. } = op else {
            continue;
        };
        let Ok(planned) = ctm_patch_engine::apply_chunks(&file, chunks) else {
            continue;
        };
        assert_eq!(planned.hunks.len(), chunks.len(), "one report per hunk");
        let count = |pick: fn(&HunkLine) -> bool| {
            chunks
                .iter()
                .flat_map(|c| c.lines.iter())
                .filter(|l| pick(l))
                .count()
        };
        assert_eq!(planned.added, count(|l| matches!(l, HunkLine::Add(_))));
        assert_eq!(planned.removed, count(|l| matches!(l, HunkLine::Remove(_))));
        for h in &planned.hunks {
            assert!(
                h.start_line >= 1 && h.start_line <= file_lines + 1,
                "hunk placed at line {} of a {file_lines}-line file",
                h.start_line
            );
        }
        if planned.added == 0 && planned.removed == 0 {
            assert_eq!(planned.text, file, "context-only hunks changed the file");
        }
    }
}

/// The integer argument decoder, through the server's argument validation.
///
/// Input: first byte picks a mode. Mode 0: the rest is a JSON number literal
/// put as `start_line` of `read_file` (domain 1..=2^53-1); the exact decimal
/// value of the literal decides (see [`exact_integer`]): it must be accepted,
/// and decoded to exactly that integer, iff it is an integer in the domain.
/// Mode 1: the rest is a JSON value given as the arguments of one of the
/// tools (picked by the second byte); an accepted argument set keeps only
/// known names and its numbers are canonical integers, a refusal is an
/// `INVALID_ARGUMENT` tool result.
pub fn check_tool_arguments(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let Ok(literal) = std::str::from_utf8(rest) else {
            return;
        };
        let Ok(value) = serde_json::from_str::<Value>(literal) else {
            return;
        };
        let Value::Number(_) = value else { return };
        let literal = literal.trim_matches(|c: char| c.is_ascii_whitespace());
        let args = serde_json::json!({ "path": "a", "start_line": value });
        let outcome = coding_tools_mcp::validate_arguments("read_file", true, Some(&args)).unwrap();
        let expected = exact_integer(literal).filter(|n| (1..=MAX_SAFE).contains(n));
        match (outcome, expected) {
            (Ok(map), Some(n)) => assert_eq!(map["start_line"], Value::from(n), "{literal}"),
            (Err(result), None) => check_invalid_argument(&result),
            (Ok(map), None) => panic!("{literal} accepted as {}", map["start_line"]),
            (Err(result), Some(n)) => panic!("{literal} (= {n}) refused: {result}"),
        }
        return;
    }
    let Some((&pick, json)) = rest.split_first() else {
        return;
    };
    let Ok(args) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let count = coding_tools_mcp::tool_names().count();
    let Some(tool) = coding_tools_mcp::tool_names().nth(usize::from(pick) % count) else {
        return;
    };
    let outcome = coding_tools_mcp::validate_arguments(tool, true, Some(&args)).unwrap();
    match outcome {
        Ok(map) => {
            let given = args.as_object();
            for (k, v) in &map {
                assert!(
                    given.is_some_and(|g| g.contains_key(k)),
                    "{tool}: {k} appeared from nowhere"
                );
                if let Value::Number(n) = v {
                    assert!(
                        n.as_u64().is_some_and(|u| u <= MAX_SAFE),
                        "{tool}: {k} = {n} is not a canonical safe integer"
                    );
                }
            }
        }
        Err(result) => check_invalid_argument(&result),
    }
}

const MAX_SAFE: u64 = (1 << 53) - 1;

fn check_invalid_argument(result: &Value) {
    assert_eq!(result["isError"], true, "{result}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENT", "{result}");
    assert_eq!(error["category"], "validation", "{result}");
    assert_eq!(error["retryable"], false, "{result}");
}

/// The exact value of a JSON number literal when it is a non-negative integer
/// that fits in a `u64`; `None` for fractions, negatives and larger values.
/// Decided on the decimal digits, never through a float.
pub fn exact_integer(literal: &str) -> Option<u64> {
    let (negative, rest) = match literal.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, literal),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int}{frac}");
    let mut scale = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
    // Strip zeros at the end into the scale, then leading zeros.
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
        scale += 1;
    }
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    if negative || scale < 0 {
        return None;
    }
    let zeros = usize::try_from(scale).ok()?;
    if digits.len() + zeros > 20 {
        return None;
    }
    format!("{digits}{}", "0".repeat(zeros)).parse::<u64>().ok()
}

/// The `Mcp-Name` header decoder (`=?base64?…?=`).
///
/// Properties: no panic; a decoded sentinel re-encodes to exactly its payload
/// (nothing lenient is accepted twice over); any text short enough encodes
/// and decodes back to itself, whatever whitespace surrounds the header.
pub fn check_mcp_name(data: &[u8]) {
    if let Some(decoded) = decode_header_value(data) {
        let text = std::str::from_utf8(data).unwrap();
        let trimmed = text.trim_matches([' ', '\t']);
        if let Some(inner) = trimmed
            .strip_prefix("=?base64?")
            .and_then(|r| r.strip_suffix("?="))
            && STANDARD.decode(inner).is_ok()
        {
            assert_eq!(STANDARD.encode(decoded.as_bytes()), inner);
        } else {
            assert_eq!(decoded, trimmed, "a plain value is its own text");
            assert!(
                decoded
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
            );
        }
    }
    let text = String::from_utf8_lossy(data);
    let encoded = format!(" =?base64?{}?=\t", STANDARD.encode(text.as_bytes()));
    let back = decode_header_value(encoded.as_bytes());
    if encoded.len() - 13 <= MAX_BASE64_CHARS {
        assert_eq!(back.as_deref(), Some(text.as_ref()));
    } else {
        assert_eq!(back, None, "a payload over the limit was decoded");
    }
}

/// The one lexer every command gate reads (`ctm_exec_runtime::CommandLine`)
/// and the gates on top of it.
///
/// Input: a command line (lossy UTF-8). Properties: no panic, in the lexer
/// or any gate; and nothing a closed line leaves behind can hide what
/// follows it: when the line ends outside any quote, substitution,
/// here-document or continuation, the shell reads a next line as commands,
/// and so must every gate — a `$(...)` there is an expansion, a `curl` there
/// needs the network, and a path there is checked.
pub fn check_shell_lexer(data: &[u8]) {
    use ctm_exec_runtime::{CommandLine, Permission, classify, path_arguments};
    let cmd = String::from_utf8_lossy(data);
    let line = CommandLine::lex(&cmd);
    let _ = classify(&cmd, &[]);
    let _ = path_arguments(&cmd);
    if line.open {
        return;
    }
    let then = |next: &str| format!("{cmd}\n{next}");
    assert!(
        CommandLine::lex(&then("echo $(id)")).expansion.is_some(),
        "an expansion after {cmd:?} is not seen"
    );
    assert!(
        classify(&then("nc 127.0.0.1 9"), &[])
            .iter()
            .any(|r| r.permission == Permission::Network),
        "a network command after {cmd:?} is not seen"
    );
    assert!(
        path_arguments(&then("cat /etc/fuzz-marker"))
            .iter()
            .any(|a| a.text == "/etc/fuzz-marker"),
        "a path after {cmd:?} is not checked"
    );
}
