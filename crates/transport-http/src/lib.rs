//! The Streamable HTTP transport of coding-tools-mcp, on hyper 1.x.
//!
//! `POST /mcp` carries one JSON-RPC message per request and answers with one
//! JSON object (or an empty `202` for notifications). Everything the transport
//! must refuse before dispatch is refused here with its own status: `403` for a
//! foreign `Origin`, `405` for other methods on `/mcp` (with `Allow: POST`),
//! `415` for a non-JSON content type, `411` without `Content-Length`, `413`
//! over the body limit, `400` for a malformed wait-budget header or an unusable
//! `Content-Length` (see `length`), each a JSON-RPC error with `id: null`. No session
//! is ever created: `Mcp-Session-Id` is neither sent nor required.
//!
//! The server card is served at `/.well-known/mcp.json` and
//! `/.well-known/mcp/server-card.json`.
//!
//! `GET /healthz` answers `200 ok` to anyone, before the `Host`, `Origin`
//! and credential checks: a liveness probe needs nothing and learns
//! nothing. With [`HttpConfig::metrics`] set, connections and responses are
//! counted and `GET /metrics` serves the exposition behind the same
//! authentication as `/mcp`; without it `/metrics` is `404` like any
//! unknown path.
//!
//! Every request must name this server in `Host` (`403` otherwise; see
//! `host`), which also fixes the canonical URL OAuth issues and verifies
//! tokens for and the server card names. Behind a reverse proxy trusted with
//! `CODING_TOOLS_MCP_TRUST_PROXY_HEADERS`, the proxy's `X-Forwarded-*`
//! headers name it instead (see `forwarded`). Each client address may hold a bounded share of the
//! connection slots, and failed credentials from an address make it back off
//! (`429` with `Retry-After`; see `throttle`).
//!
//! With `--oauth-issuer` the server is a resource server of an external
//! authorization server: it publishes RFC 9728 metadata naming it, verifies
//! its JWT access tokens against its fetched JWKS, and serves no OAuth
//! endpoints of its own (see `issuer`).
//!
//! A closed connection fires the request's cancellation signal (the
//! in-flight future is dropped, and a guard turns the drop into a cancel).

#![deny(missing_docs)]

mod forwarded;
mod host;
mod issuer;
mod length;
mod observe;
mod origin;
mod peers;
mod service;
mod stall;
mod throttle;

pub use issuer::{
    ExternalIssuer, FETCH_TIMEOUT, MAX_DOCUMENT_BYTES, MAX_KEY_AGE, REFRESH_BURST, REFRESH_EVERY,
    check_fetch_url,
};
pub use observe::{Exposition, HttpMetrics, MetricsSink};
pub use origin::is_loopback_origin;

/// Whether `url` is one [`HttpConfig::public_base_url`] can be
/// (`http(s)://host[:port][/path]`); a server refuses to start with
/// another rather than fall back to names a request gives.
pub fn is_public_base_url(url: &str) -> bool {
    host::Configured::parse(url).is_some()
}
pub use peers::{PeerPolicy, PeerSocket, loopback_peer, loopback_peer_uid, peer_owner_known};
pub use service::{
    BUDGET_HEADER, CardSource, EventSink, HEALTH_PATH, HttpConfig, METRICS_PATH, serve,
    serve_with_peers,
};
