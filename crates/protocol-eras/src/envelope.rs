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
pub fn parse_message(bytes: &[u8]) -> Result<Message, Box<Rejection>> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| Rejection {
        error: RpcError::new(
            ErrorCode::ParseError,
            format!("Parse error: {e}"),
            "parse_error",
        ),
        id: None,
        status: 400,
    })?;
    from_value(value).map_err(Box::new)
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

#[allow(clippy::result_large_err, reason = "boxed once by parse_message")]
fn from_value(value: Value) -> Result<Message, Rejection> {
    let mut obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => {
            return Err(Rejection {
                status: 400,
                ..invalid("JSON-RPC batches are not supported", "batch", None)
            });
        }
        _ => {
            return Err(invalid(
                "a message must be a JSON object",
                "not_an_object",
                None,
            ));
        }
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Value::Number(n)),
        Some(_) => {
            return Err(invalid(
                "id must be a string or an integer",
                "invalid_id",
                None,
            ));
        }
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\"", "jsonrpc_version", id));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return Err(invalid("method must be a string", "invalid_method", id)),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Ok(Message::Response);
        }
        None => return Err(invalid("method is required", "missing_method", id)),
    };
    let params = match obj.remove("params") {
        None => None,
        Some(Value::Object(p)) => Some(p),
        // JSON-RPC allows positional params; no MCP method takes them.
        Some(Value::Array(_)) => {
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
        Some(_) => {
            return Err(invalid(
                "params must be an object",
                "params_not_structured",
                id,
            ));
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
        let body = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(reject(body.as_bytes()).error.code, ErrorCode::ParseError);
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
        for (body, id) in [
            (&br#"5"#[..], None),
            (br#""x""#, None),
            (
                br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                Some(json!(1)),
            ),
            (br#"{"id":"a","method":"ping"}"#, Some(json!("a"))),
            (br#"{"jsonrpc":"2.0","id":2,"method":5}"#, Some(json!(2))),
            (br#"{"jsonrpc":"2.0","id":2}"#, Some(json!(2))),
            (br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, None),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, None),
            (br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, None),
            (
                br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":7}"#,
                Some(json!(3)),
            ),
        ] {
            let r = reject(body);
            assert_eq!(r.error.code, ErrorCode::InvalidRequest, "{body:?}");
            assert_eq!(r.status, 200);
            assert_eq!(r.id, id, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn positional_params_are_invalid_params() {
        let r = reject(br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}"#);
        assert_eq!(r.error.code, ErrorCode::InvalidParams);
        assert_eq!(r.id, Some(json!(3)));
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
