//! Era classification and modern `_meta` validation.

use serde_json::{Value, json};

use crate::envelope::Request;
use crate::error::{ErrorCode, RpcError};
use crate::versions::MODERN_VERSIONS;

/// `_meta` key that makes a request modern.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Required `_meta` key of a modern request.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Optional `_meta` key of a modern request.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The protocol era of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize`-negotiated versions (`2025-11-25`, `2025-06-18`).
    Handshake,
    /// Per-request `_meta` versions (`2026-07-28`).
    Modern,
}

/// Decides the era from the request alone: modern iff `params._meta` carries
/// `io.modelcontextprotocol/protocolVersion`; `initialize` is always handshake.
pub fn classify(req: &Request) -> Result<Era, RpcError> {
    if req.method == "initialize" {
        return Ok(Era::Handshake);
    }
    match req.meta() {
        Some(meta) if meta.contains_key(META_PROTOCOL_VERSION) => Ok(Era::Modern),
        _ => Ok(Era::Handshake),
    }
}

/// Validates the `_meta` of a modern request; returns its protocol version.
///
/// Mistyped or missing required keys are `-32602`, each with the reference's
/// `data.reason` word (`protocol_version`, `client_capabilities`,
/// `client_info`) and the offending `data.field`. A version this server does
/// not speak is `-32022` with `data.supported` (modern versions) and the
/// version the request named as both `data.received` (the reference's name)
/// and `data.requested` (the public schema's). The whole `_meta` is judged
/// before its version, so a request that is wrong in both ways is `-32602`.
pub fn validate_modern_meta(req: &Request) -> Result<&str, RpcError> {
    let Some(meta) = req.meta() else {
        return Err(RpcError::new(
            ErrorCode::InvalidParams,
            "params._meta must be an object",
            "invalid_meta",
        ));
    };
    let version = match meta.get(META_PROTOCOL_VERSION) {
        Some(Value::String(v)) => v.as_str(),
        Some(_) => {
            return Err(meta_error(
                META_PROTOCOL_VERSION,
                "must be a string",
                "protocol_version",
            ));
        }
        None => {
            return Err(meta_error(
                META_PROTOCOL_VERSION,
                "is required",
                "protocol_version",
            ));
        }
    };
    match meta.get(META_CLIENT_CAPABILITIES) {
        Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(meta_error(
                META_CLIENT_CAPABILITIES,
                "must be an object",
                "client_capabilities",
            ));
        }
        None => {
            return Err(meta_error(
                META_CLIENT_CAPABILITIES,
                "is required and must be an object",
                "client_capabilities",
            ));
        }
    }
    if let Some(info) = meta.get(META_CLIENT_INFO)
        && !info.is_object()
    {
        return Err(meta_error(
            META_CLIENT_INFO,
            "must be an object when present",
            "client_info",
        ));
    }
    if !MODERN_VERSIONS.contains(&version) {
        return Err(RpcError {
            code: ErrorCode::UnsupportedProtocolVersion,
            message: format!("Unsupported protocol version in _meta: {version}"),
            data: Some(json!({
                "supported": MODERN_VERSIONS,
                "requested": version,
                "received": version,
            })),
        });
    }
    Ok(version)
}

fn meta_error(key: &str, problem: &str, reason: &str) -> RpcError {
    RpcError::new(
        ErrorCode::InvalidParams,
        format!("params._meta[\"{key}\"] {problem}"),
        reason,
    )
    .with_data("field", json!(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{Message, parse_message};

    fn req(body: Value) -> Request {
        match parse_message(body.to_string().as_bytes()).unwrap() {
            Message::Request(r) => r,
            Message::Response => panic!("not a request"),
        }
    }

    fn modern(meta: Value) -> Request {
        req(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": meta}}))
    }

    #[test]
    fn modern_iff_meta_has_protocol_version() {
        let good = json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}});
        assert_eq!(classify(&modern(good.clone())).unwrap(), Era::Modern);
        // progressToken alone does not make a request modern.
        assert_eq!(
            classify(&modern(json!({"progressToken": 1}))).unwrap(),
            Era::Handshake
        );
        assert_eq!(
            classify(&req(json!({"jsonrpc":"2.0","id":1,"method":"ping"}))).unwrap(),
            Era::Handshake
        );
        // A non-object _meta is not modern.
        assert_eq!(
            classify(&req(
                json!({"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":"x"}})
            ))
            .unwrap(),
            Era::Handshake
        );
        // initialize is always the handshake.
        let init =
            req(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta": good}}));
        assert_eq!(classify(&init).unwrap(), Era::Handshake);
    }

    #[test]
    fn meta_validation_errors() {
        let cases = [
            (
                json!({META_PROTOCOL_VERSION: 5, META_CLIENT_CAPABILITIES: {}}),
                ErrorCode::InvalidParams,
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28"}),
                ErrorCode::InvalidParams,
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: []}),
                ErrorCode::InvalidParams,
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}, META_CLIENT_INFO: "me"}),
                ErrorCode::InvalidParams,
            ),
            // Body problems win over the version: a missing capability with an
            // unknown version is still -32602.
            (
                json!({META_PROTOCOL_VERSION: "1999-01-01"}),
                ErrorCode::InvalidParams,
            ),
            (
                json!({META_PROTOCOL_VERSION: "2025-11-25", META_CLIENT_CAPABILITIES: {}}),
                ErrorCode::UnsupportedProtocolVersion,
            ),
        ];
        for (meta, code) in cases {
            assert_eq!(
                validate_modern_meta(&modern(meta.clone()))
                    .unwrap_err()
                    .code,
                code,
                "{meta}"
            );
        }
    }

    #[test]
    fn unsupported_version_names_supported_requested_and_received() {
        let e = validate_modern_meta(&modern(
            json!({META_PROTOCOL_VERSION: "v999", META_CLIENT_CAPABILITIES: {}}),
        ))
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::UnsupportedProtocolVersion);
        assert_eq!(
            e.data,
            Some(json!({"supported": ["2026-07-28"], "requested": "v999", "received": "v999"}))
        );
    }

    /// The reference's `data.reason` words for each mistyped `_meta` field.
    #[test]
    fn meta_reasons_are_the_references() {
        let cases = [
            (
                json!({META_PROTOCOL_VERSION: 5, META_CLIENT_CAPABILITIES: {}}),
                "protocol_version",
            ),
            (
                json!({META_PROTOCOL_VERSION: null, META_CLIENT_CAPABILITIES: {}}),
                "protocol_version",
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28"}),
                "client_capabilities",
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: 1}),
                "client_capabilities",
            ),
            (
                json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}, META_CLIENT_INFO: []}),
                "client_info",
            ),
        ];
        for (meta, reason) in cases {
            let e = validate_modern_meta(&modern(meta.clone())).unwrap_err();
            assert_eq!(e.data.unwrap()["reason"], reason, "{meta}");
        }
    }

    #[test]
    fn client_info_is_optional() {
        let r = modern(json!({META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}));
        assert_eq!(validate_modern_meta(&r).unwrap(), "2026-07-28");
    }
}
