//! SEP-2243 mirror headers: `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use crate::envelope::Request;
use crate::error::{ErrorCode, RpcError};
use crate::versions::{HANDSHAKE_VERSIONS, MODERN_VERSIONS, all_versions_newest_first};

/// Longest base64 payload accepted inside `=?base64?…?=`.
pub const MAX_BASE64_CHARS: usize = 8192;

/// Every occurrence of each mirror header, as raw bytes, in arrival order.
///
/// The transport fills it; stdio has none and never checks mirrors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MirrorHeaders {
    /// `MCP-Protocol-Version` values.
    pub protocol_version: Vec<Vec<u8>>,
    /// `Mcp-Method` values.
    pub method: Vec<Vec<u8>>,
    /// `Mcp-Name` values.
    pub name: Vec<Vec<u8>>,
}

/// Decodes one header value: trims surrounding whitespace, unwraps the
/// `=?base64?…?=` sentinel. `None` when the value cannot be read.
pub fn decode_header_value(raw: &[u8]) -> Option<String> {
    read_header_value(raw).ok()
}

/// Why a mirror header value could not be read: its `data.reason` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    /// A base64 sentinel whose payload exceeds [`MAX_BASE64_CHARS`] (the
    /// reference's `oversized`; it is refused before it is decoded).
    Oversized,
    /// Bad base64, base64 of non-UTF-8, or a raw value that is not visible ASCII.
    Undecodable,
}

fn read_header_value(raw: &[u8]) -> Result<String, Unreadable> {
    let trimmed = trim_ows(raw);
    let text = std::str::from_utf8(trimmed).map_err(|_| Unreadable::Undecodable)?;
    if let Some(inner) = text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        if inner.len() > MAX_BASE64_CHARS {
            return Err(Unreadable::Oversized);
        }
        let bytes = STANDARD
            .decode(inner)
            .map_err(|_| Unreadable::Undecodable)?;
        return String::from_utf8(bytes).map_err(|_| Unreadable::Undecodable);
    }
    // A plain field value is visible ASCII (and inner spaces/tabs).
    if text
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        Ok(text.to_owned())
    } else {
        Err(Unreadable::Undecodable)
    }
}

fn trim_ows(raw: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !is_ows(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |e| e + 1);
    &raw[start..end]
}

fn mismatch(header: &str, reason: &str, message: String) -> RpcError {
    RpcError::new(ErrorCode::HeaderMismatch, message, reason).with_data("header", json!(header))
}

/// The single readable value of a header that must appear exactly once.
fn single(values: &[Vec<u8>], header: &str) -> Result<String, RpcError> {
    match values {
        [] => Err(mismatch(
            header,
            "missing",
            format!("{header} header is required and must mirror the body"),
        )),
        [one] => read_header_value(one).map_err(|why| match why {
            Unreadable::Oversized => mismatch(
                header,
                "oversized",
                format!(
                    "{header} header carries a base64 value longer than {MAX_BASE64_CHARS} characters"
                ),
            )
            .with_data("max_length", json!(MAX_BASE64_CHARS)),
            Unreadable::Undecodable => mismatch(
                header,
                "undecodable",
                format!("{header} header value cannot be decoded"),
            ),
        }),
        _ => Err(mismatch(
            header,
            "duplicate",
            format!("{header} header must appear exactly once"),
        )),
    }
}

fn expect_equal(header: &str, values: &[Vec<u8>], body: &str) -> Result<(), RpcError> {
    let got = single(values, header)?;
    if got == body {
        Ok(())
    } else {
        Err(mismatch(
            header,
            "mismatch",
            format!("{header} header does not match the request body"),
        ))
    }
}

/// The body field `Mcp-Name` mirrors, for the methods that name a subject.
fn subject_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// Checks the mirror headers of a modern request whose `_meta` is already valid.
pub fn check_mirror_headers(
    req: &Request,
    version: &str,
    headers: &MirrorHeaders,
) -> Result<(), RpcError> {
    expect_equal("MCP-Protocol-Version", &headers.protocol_version, version)?;
    expect_equal("Mcp-Method", &headers.method, &req.method)?;
    if let Some(field) = subject_field(&req.method) {
        // A body without its subject is refused by dispatch (-32602): the body
        // is judged before the headers that mirror it.
        if let Some(subject) = req.param_str(field) {
            expect_equal("Mcp-Name", &headers.name, subject)?;
        }
    }
    Ok(())
}

/// Checks the `MCP-Protocol-Version` header of a handshake-era request.
///
/// Returns the error and its HTTP status (always 400: these are transport
/// refusals before dispatch). A modern version over a handshake body is a mirror
/// violation (-32020); a version from neither era is -32600 with every version
/// this server speaks in `data.supported`.
pub fn check_handshake_headers(headers: &MirrorHeaders) -> Result<(), RpcError> {
    if headers.protocol_version.is_empty() {
        return Ok(());
    }
    let version = single(&headers.protocol_version, "MCP-Protocol-Version")?;
    if HANDSHAKE_VERSIONS.contains(&version.as_str()) {
        return Ok(());
    }
    if MODERN_VERSIONS.contains(&version.as_str()) {
        return Err(mismatch(
            "MCP-Protocol-Version",
            "body_is_not_modern",
            format!(
                "MCP-Protocol-Version {version} needs a body that states the same version in params._meta[\"io.modelcontextprotocol/protocolVersion\"]"
            ),
        ));
    }
    Err(RpcError {
        code: ErrorCode::InvalidRequest,
        message: "Unsupported MCP-Protocol-Version header".into(),
        data: Some(json!({
            "reason": "unsupported_protocol_version_header",
            "supported": all_versions_newest_first(),
            "requested": version,
            "received": version,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Message, parse_message};
    use serde_json::Value;

    fn req(body: Value) -> Request {
        match parse_message(body.to_string().as_bytes()).unwrap() {
            Message::Request(r) => r,
            Message::Response => panic!(),
        }
    }

    fn h(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn call(name: &str) -> Request {
        req(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name}}))
    }

    fn headers(version: &[&str], method: &[&str], name: &[&str]) -> MirrorHeaders {
        MirrorHeaders {
            protocol_version: h(version),
            method: h(method),
            name: h(name),
        }
    }

    fn reason(e: &RpcError) -> &str {
        e.data.as_ref().unwrap()["reason"].as_str().unwrap()
    }

    #[test]
    fn base64_sentinel_and_whitespace() {
        assert_eq!(decode_header_value(b"  foo\t").as_deref(), Some("foo"));
        assert_eq!(
            decode_header_value(b"=?base64?w6nDqQ==?=").as_deref(),
            Some("éé")
        );
        assert_eq!(
            decode_header_value(b" =?base64?Zm9v?= ").as_deref(),
            Some("foo")
        );
        assert_eq!(decode_header_value(b"=?base64?!!!?="), None);
        assert_eq!(decode_header_value(b"=?base64?/w==?="), None, "not UTF-8");
        assert_eq!(decode_header_value("é".as_bytes()), None);
        assert_eq!(decode_header_value(b"a\x01b"), None);
        let long = format!("=?base64?{}?=", "A".repeat(MAX_BASE64_CHARS + 4));
        assert_eq!(decode_header_value(long.as_bytes()), None);
        let ok = format!("=?base64?{}?=", "QUFB".repeat(MAX_BASE64_CHARS / 4));
        assert_eq!(
            decode_header_value(ok.as_bytes()).map(|s| s.len()),
            Some(MAX_BASE64_CHARS / 4 * 3)
        );
    }

    #[test]
    fn good_mirror_passes() {
        let r = call("read_file");
        check_mirror_headers(
            &r,
            "2026-07-28",
            &headers(&["2026-07-28"], &["tools/call"], &["read_file"]),
        )
        .unwrap();
        check_mirror_headers(
            &r,
            "2026-07-28",
            &headers(
                &[" 2026-07-28 "],
                &["tools/call "],
                &["=?base64?cmVhZF9maWxl?="],
            ),
        )
        .unwrap();
        // Methods without a subject ignore Mcp-Name.
        let list = req(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        check_mirror_headers(
            &list,
            "2026-07-28",
            &headers(&["2026-07-28"], &["tools/list"], &[]),
        )
        .unwrap();
    }

    #[test]
    fn missing_duplicated_contradicting_are_header_mismatch() {
        let r = call("read_file");
        let v = "2026-07-28";
        let cases: [(MirrorHeaders, &str); 9] = [
            (headers(&[], &["tools/call"], &["read_file"]), "missing"),
            (headers(&[v], &[], &["read_file"]), "missing"),
            (headers(&[v], &["tools/call"], &[]), "missing"),
            (
                headers(&[v, v], &["tools/call"], &["read_file"]),
                "duplicate",
            ),
            (
                headers(&[v], &["tools/call", "tools/call"], &["read_file"]),
                "duplicate",
            ),
            (
                headers(&[v], &["tools/call"], &["read_file", "read_file"]),
                "duplicate",
            ),
            (
                headers(&["2025-11-25"], &["tools/call"], &["read_file"]),
                "mismatch",
            ),
            (headers(&[v], &["TOOLS/CALL"], &["read_file"]), "mismatch"),
            (
                headers(&[v], &["tools/call"], &["=?base64?bm9wZQ==?="]),
                "mismatch",
            ),
        ];
        for (hs, why) in cases {
            let e = check_mirror_headers(&r, v, &hs).unwrap_err();
            assert_eq!(e.code, ErrorCode::HeaderMismatch, "{hs:?}");
            assert_eq!(reason(&e), why, "{hs:?}");
        }
    }

    /// An over-long sentinel is `oversized` (with the limit); bad base64 is
    /// `undecodable`.
    #[test]
    fn unreadable_name_reasons() {
        let r = call("read_file");
        let v = "2026-07-28";
        let long = format!("=?base64?{}?=", "QUFB".repeat(MAX_BASE64_CHARS / 4 + 1));
        let e = check_mirror_headers(&r, v, &headers(&[v], &["tools/call"], &[&long])).unwrap_err();
        assert_eq!(reason(&e), "oversized");
        assert_eq!(e.data.as_ref().unwrap()["max_length"], MAX_BASE64_CHARS);
        assert_eq!(e.data.as_ref().unwrap()["header"], "Mcp-Name");
        for bad in ["=?base64?***?=", "=?base64?/w==?="] {
            let e =
                check_mirror_headers(&r, v, &headers(&[v], &["tools/call"], &[bad])).unwrap_err();
            assert_eq!(reason(&e), "undecodable", "{bad}");
        }
    }

    #[test]
    fn tools_call_without_name_defers_to_dispatch() {
        let r = req(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}));
        check_mirror_headers(
            &r,
            "2026-07-28",
            &headers(&["2026-07-28"], &["tools/call"], &["x"]),
        )
        .unwrap();
    }

    #[test]
    fn handshake_headers() {
        check_handshake_headers(&MirrorHeaders::default()).unwrap();
        check_handshake_headers(&headers(&["2025-06-18"], &[], &[])).unwrap();
        check_handshake_headers(&headers(&[" 2025-11-25"], &["whatever"], &["x"])).unwrap();
        let modern = check_handshake_headers(&headers(&["2026-07-28"], &[], &[])).unwrap_err();
        assert_eq!(modern.code, ErrorCode::HeaderMismatch);
        let unknown = check_handshake_headers(&headers(&["1999-01-01"], &[], &[])).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::InvalidRequest);
        assert_eq!(
            unknown.data.as_ref().unwrap()["supported"],
            json!(["2026-07-28", "2025-11-25", "2025-06-18"])
        );
        let dup =
            check_handshake_headers(&headers(&["2025-11-25", "2025-11-25"], &[], &[])).unwrap_err();
        assert_eq!(dup.code, ErrorCode::HeaderMismatch);
    }
}
