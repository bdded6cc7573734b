//! Result and error encoding per era.

use serde_json::{Map, Value, json};

use crate::dispatch::Method;
use crate::era::Era;
use crate::error::RpcError;

/// `serverInfo.name`.
pub const SERVER_NAME: &str = "coding-tools-mcp";
/// `serverInfo.title`.
pub const SERVER_TITLE: &str = "Coding Tools MCP";
/// `serverInfo.version`: the version of the coding-tools-mcp server this
/// crate answers for. Written here rather than taken from this crate's own
/// version, which moves on its own; the server's tests require it to be the
/// server's version.
pub const SERVER_VERSION: &str = "0.3.0";

/// The `serverInfo` object.
pub fn server_info() -> Value {
    json!({ "name": SERVER_NAME, "title": SERVER_TITLE, "version": SERVER_VERSION })
}

/// Encodes a method's result for `era`.
///
/// Handshake-era results are returned unchanged. Modern results gain
/// `resultType: "complete"` and `_meta["io.modelcontextprotocol/serverInfo"]`;
/// `tools/list` and `server/discover` also gain `ttlMs: 0` and
/// `cacheScope: "private"`.
pub fn encode_result(era: Era, method: Method, result: Value) -> Value {
    if era == Era::Handshake {
        return result;
    }
    let mut obj = match result {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".into(), other);
            m
        }
    };
    obj.insert("resultType".into(), json!("complete"));
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert("io.modelcontextprotocol/serverInfo".into(), server_info());
    }
    if matches!(method, Method::ToolsList | Method::Discover) {
        obj.insert("ttlMs".into(), json!(0));
        obj.insert("cacheScope".into(), json!("private"));
    }
    Value::Object(obj)
}

/// A JSON-RPC error response; `id` is omitted when it is unknown.
pub fn error_response(id: Option<&Value>, error: &RpcError) -> Value {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        obj.insert("id".into(), id.clone());
    }
    obj.insert("error".into(), error.to_json());
    Value::Object(obj)
}

/// A JSON-RPC success response.
pub fn result_response(id: &Value, result: Value) -> Value {
    // Built by hand: `json!` would deep-copy a large result.
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), json!("2.0"));
    obj.insert("id".into(), id.clone());
    obj.insert("result".into(), result);
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn handshake_results_are_untouched() {
        let r = json!({"tools": []});
        assert_eq!(
            encode_result(Era::Handshake, Method::ToolsList, r.clone()),
            r
        );
    }

    #[test]
    fn modern_results_carry_result_type_and_server_info() {
        let ping = encode_result(Era::Modern, Method::Ping, json!({}));
        assert_eq!(ping["resultType"], "complete");
        assert_eq!(
            ping["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            SERVER_NAME
        );
        assert!(ping.get("ttlMs").is_none());
        assert!(ping.get("cacheScope").is_none());
        for m in [Method::ToolsList, Method::Discover] {
            let r = encode_result(Era::Modern, m, json!({}));
            assert_eq!(r["ttlMs"], 0);
            assert_eq!(r["cacheScope"], "private");
        }
        let call = encode_result(
            Era::Modern,
            Method::ToolsCall,
            json!({"isError": true, "_meta": {"x": 1}}),
        );
        assert_eq!(call["resultType"], "complete");
        assert_eq!(call["_meta"]["x"], 1);
        assert!(call.get("ttlMs").is_none());
    }

    #[test]
    fn unknown_id_is_omitted() {
        let e = RpcError {
            code: ErrorCode::ParseError,
            message: "x".into(),
            data: None,
        };
        let v = error_response(None, &e);
        assert!(v.as_object().unwrap().get("id").is_none());
        assert_eq!(error_response(Some(&json!(7)), &e)["id"], 7);
    }
}
