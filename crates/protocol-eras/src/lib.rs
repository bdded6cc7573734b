//! The wire protocol of coding-tools-mcp, with no I/O.
//!
//! This crate turns the bytes of one JSON-RPC message (plus, over HTTP, the
//! mirror headers that travel with it) into either a typed [`Request`] that a
//! [`Dispatcher`] serves, or a protocol error that already knows its HTTP
//! status. It implements both protocol eras of the runtime contract:
//!
//! * the **handshake era** (`2025-11-25`, `2025-06-18`): `initialize`
//!   negotiates, every dispatched error is HTTP 200;
//! * the **modern era** (`2026-07-28`): a request is modern iff
//!   `params._meta` carries `io.modelcontextprotocol/protocolVersion`; it needs
//!   no handshake, its `_meta` is validated before its mirror headers, and its
//!   results carry `resultType` and `serverInfo`.
//!
//! Invariants: the body is checked before the headers that mirror it; an error
//! whose request id could not be read omits `id` (a refusal before dispatch
//! says `id: null`); a notification is answered
//! with nothing unless its mirror headers are wrong.
//!
//! ```
//! use ctm_protocol_eras::{parse_message, Message, classify, Era};
//! let msg = parse_message(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
//! let Message::Request(req) = msg else { panic!() };
//! assert_eq!(classify(&req).unwrap(), Era::Handshake);
//! ```

#![deny(missing_docs)]

mod cancel;
mod dispatch;
mod encode;
mod envelope;
mod era;
mod error;
mod mirror;
mod versions;
mod wire;

pub use cancel::Cancellation;
pub use dispatch::{
    Call, ContextSeed, Dispatcher, Method, MethodOutcome, Prepared, Reply, RequestContext,
    WaitBudget, WaitBudgetSource, prepare, run_call, serve_message,
};
pub use encode::{
    SERVER_NAME, SERVER_TITLE, SERVER_VERSION, encode_result, error_response, result_response,
    server_info,
};
pub use envelope::{Message, Rejection, Request, parse_message};
pub use era::{
    Era, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, classify,
    validate_modern_meta,
};
pub use error::{ErrorCode, RpcError};
pub use mirror::{
    MAX_BASE64_CHARS, MirrorHeaders, check_handshake_headers, check_mirror_headers,
    decode_header_value,
};
pub use versions::{
    HANDSHAKE_VERSIONS, MODERN_VERSIONS, NEWEST_HANDSHAKE_VERSION, all_versions_newest_first,
    negotiate,
};
pub use wire::{STREAM_EVERY, Sink, to_wire, to_wire_into, to_wire_streaming};

#[cfg(test)]
mod pipeline_tests;
