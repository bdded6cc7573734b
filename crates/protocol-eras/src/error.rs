//! JSON-RPC error codes and their HTTP statuses per era.

use serde_json::{Map, Value, json};

use crate::era::Era;

/// The JSON-RPC error codes this server emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// -32700: the body is not JSON.
    ParseError,
    /// -32600: the envelope is not a valid JSON-RPC request.
    InvalidRequest,
    /// -32601: unknown method (in this era).
    MethodNotFound,
    /// -32602: invalid params, including a missing or mistyped required `_meta` field.
    InvalidParams,
    /// -32603: unexpected server failure.
    InternalError,
    /// -32020: headers do not mirror the body.
    HeaderMismatch,
    /// -32022: `_meta` names a protocol version this server does not speak.
    UnsupportedProtocolVersion,
}

impl ErrorCode {
    /// The numeric JSON-RPC code.
    pub fn code(self) -> i64 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::InternalError => -32603,
            Self::HeaderMismatch => -32020,
            Self::UnsupportedProtocolVersion => -32022,
        }
    }

    /// HTTP status of a dispatched error in `era` (contract, "Errors and HTTP statuses").
    ///
    /// Handshake-era dispatched errors are always 200; transport refusals before
    /// dispatch carry their own status and do not use this table.
    pub fn http_status(self, era: Era) -> u16 {
        match era {
            Era::Handshake => 200,
            Era::Modern => match self {
                Self::InvalidRequest | Self::InternalError => 200,
                Self::MethodNotFound => 404,
                Self::InvalidParams
                | Self::HeaderMismatch
                | Self::UnsupportedProtocolVersion
                | Self::ParseError => 400,
            },
        }
    }
}

/// A JSON-RPC error object: code, human message, optional data.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// Which error.
    pub code: ErrorCode,
    /// What went wrong, for a human.
    pub message: String,
    /// Machine-readable detail (`reason`, `supported`, `requested`, ...).
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a `data.reason` tag.
    pub fn new(code: ErrorCode, message: impl Into<String>, reason: &str) -> Self {
        Self {
            code,
            message: message.into(),
            data: Some(json!({ "reason": reason })),
        }
    }

    /// Adds one field to `data` (creating it when absent).
    pub fn with_data(mut self, key: &str, value: Value) -> Self {
        let mut map = match self.data.take() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        map.insert(key.to_owned(), value);
        self.data = Some(Value::Object(map));
        self
    }

    /// The JSON `error` object.
    pub fn to_json(&self) -> Value {
        let mut obj = json!({ "code": self.code.code(), "message": self.message });
        if let (Some(data), Value::Object(m)) = (&self.data, &mut obj) {
            m.insert("data".into(), data.clone());
        }
        obj
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the contract's table, in both eras.
    #[test]
    fn status_table_matches_contract() {
        let rows = [
            (ErrorCode::InvalidRequest, -32600, 200),
            (ErrorCode::MethodNotFound, -32601, 404),
            (ErrorCode::InvalidParams, -32602, 400),
            (ErrorCode::HeaderMismatch, -32020, 400),
            (ErrorCode::UnsupportedProtocolVersion, -32022, 400),
            (ErrorCode::InternalError, -32603, 200),
            (ErrorCode::ParseError, -32700, 400),
        ];
        for (code, num, modern) in rows {
            assert_eq!(code.code(), num);
            assert_eq!(code.http_status(Era::Modern), modern, "{code:?}");
            assert_eq!(code.http_status(Era::Handshake), 200, "{code:?}");
        }
    }

    #[test]
    fn error_json_carries_data_only_when_present() {
        let plain = RpcError {
            code: ErrorCode::InternalError,
            message: "boom".into(),
            data: None,
        };
        assert_eq!(plain.to_json(), json!({"code": -32603, "message": "boom"}));
        let tagged = RpcError::new(ErrorCode::InvalidParams, "bad", "x").with_data("n", json!(1));
        assert_eq!(
            tagged.to_json(),
            json!({"code": -32602, "message": "bad", "data": {"reason": "x", "n": 1}})
        );
    }
}
