//! The hyper service: routing, transport refusals, and the protocol pipeline.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ctm_protocol_eras::{
    Cancellation, ContextSeed, Dispatcher, ErrorCode, MirrorHeaders, Prepared, Reply, RpcError,
    WaitBudget, error_response, prepare, run_call,
};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::length::{LengthGuard, MARKER};
use crate::origin::is_loopback_origin;

/// The per-request wait-budget header (client contract notes §3).
pub const BUDGET_HEADER: &str = "x-coding-tools-budget-secs";

const CARD_PATHS: [&str; 2] = ["/.well-known/mcp.json", "/.well-known/mcp/server-card.json"];
/// CORS request headers, spelled as the reference spells them (its six
/// first), then the wait-budget header and the two a stale SDK may still send.
const ALLOW_HEADERS: &str = "Accept, Authorization, Content-Type, MCP-Protocol-Version, Mcp-Method, Mcp-Name, X-Coding-Tools-Budget-Secs, Last-Event-ID, Mcp-Session-Id";
const ALLOW_METHODS: &str = "GET, HEAD, POST, OPTIONS";

/// What the HTTP transport needs from the composition root.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Origins allowed besides loopback ones (exact `scheme://host[:port]`).
    pub extra_allowed_origins: Vec<String>,
    /// The deployment wait budget in seconds (`--max-wait-secs`).
    pub deployment_wait_secs: u64,
    /// The server card served at the well-known paths.
    pub server_card: Value,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send its request body once the headers
    /// are in (a body that never ends is answered 408).
    pub body_read_timeout: Duration,
    /// Connections served at once; further clients wait in the listen
    /// backlog until one ends.
    pub max_connections: usize,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// When set, `/mcp` requires `Authorization: Bearer <token>`.
    pub bearer: Option<ctm_auth::BearerToken>,
    /// When set, the OAuth 2.1 authorization server is mounted and its
    /// access tokens are accepted on `/mcp`.
    pub oauth: Option<Arc<ctm_auth::OAuthServer>>,
    /// The public base URL (`CODING_TOOLS_MCP_SERVER_URL`); else the request's host.
    pub public_base_url: Option<String>,
    /// Honour `X-Forwarded-Proto`/`X-Forwarded-Host` (behind a trusted proxy).
    pub trust_proxy_headers: bool,
}

impl HttpConfig {
    fn auth_required(&self) -> bool {
        self.bearer.is_some() || self.oauth.is_some()
    }
}

/// The server's base URL as the client sees it.
fn base_url(config: &HttpConfig, headers: &HeaderMap) -> String {
    if let Some(u) = &config.public_base_url {
        return u.trim_end_matches('/').to_owned();
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').next().unwrap_or("").trim().to_owned())
    };
    let (proto, host) = if config.trust_proxy_headers {
        (
            header("x-forwarded-proto"),
            header("x-forwarded-host").or_else(|| header("host")),
        )
    } else {
        (None, header("host"))
    };
    format!(
        "{}://{}",
        proto.unwrap_or_else(|| "http".into()),
        host.unwrap_or_else(|| "localhost".into())
    )
}

struct State<D> {
    dispatcher: Arc<D>,
    config: HttpConfig,
}

/// Serves connections from `listener` until `shutdown` resolves, then lets
/// in-flight requests finish (up to `shutdown_grace`).
pub async fn serve<D: Dispatcher>(
    dispatcher: Arc<D>,
    config: HttpConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let grace = config.shutdown_grace;
    let state = Arc::new(State { dispatcher, config });
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(tokio::sync::Semaphore::new(
        state.config.max_connections.max(1),
    ));
    loop {
        // A free connection slot first: at the limit, new clients queue in
        // the kernel's backlog instead of costing a task and a descriptor.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends must not end the server.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let st = state.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(handle(st, req, peer).await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(state.config.header_read_timeout)
                    .serve_connection(TokioIo::new(LengthGuard::new(stream)), svc);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("connection from {peer} ended: {e}");
                    }
                    drop(slot);
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => tracing::warn!("shutdown grace elapsed with requests in flight"),
    }
    Ok(())
}

type Resp = Response<Full<Bytes>>;

async fn handle<D: Dispatcher>(
    state: Arc<State<D>>,
    req: Request<Incoming>,
    _peer: SocketAddr,
) -> Resp {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(o) = &origin
        && !origin_allowed(&state.config, o)
    {
        let err = refusal(
            "Origin denied: this Origin may not call the server",
            "origin_not_allowed",
        );
        return respond(StatusCode::FORBIDDEN, Some(&err));
    }
    let allow_origin = origin.as_deref();
    let path = req.uri().path().to_owned();
    // The body the client meant to send is still on the wire: never reuse it.
    let unusable_length = req.headers().contains_key(MARKER);
    let mut resp = if req.method() == Method::OPTIONS {
        preflight()
    } else if ctm_auth::OAuthServer::handles(&path) && state.config.oauth.is_some() {
        oauth(&state, req).await
    } else if path == "/mcp" {
        if let Err(why) = authorized(&state.config, req.headers()) {
            let oauth = state.config.oauth.is_some();
            unauthorized(&base_url(&state.config, req.headers()), oauth, why)
        } else if req.method() == Method::POST {
            post_mcp(&state, req).await
        } else {
            method_not_allowed("POST")
        }
    } else if CARD_PATHS.contains(&path.as_str()) {
        match *req.method() {
            Method::GET => respond(StatusCode::OK, Some(&state.config.server_card)),
            Method::HEAD => {
                let mut r = respond(StatusCode::OK, Some(&state.config.server_card));
                *r.body_mut() = Full::new(Bytes::new());
                r
            }
            _ => method_not_allowed("GET, HEAD"),
        }
    } else {
        let err = json!({"error": "not_found", "message": format!("No route for {path}; the MCP endpoint is POST /mcp")});
        respond(StatusCode::NOT_FOUND, Some(&err))
    };
    if let Some(o) = allow_origin
        && let Ok(v) = HeaderValue::from_str(o)
    {
        let h = resp.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
    }
    if unusable_length {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// `Ok` when no auth is configured or a configured credential matches;
/// otherwise why not (`None`: no token was sent).
fn authorized(config: &HttpConfig, headers: &HeaderMap) -> Result<(), Option<&'static str>> {
    if !config.auth_required() {
        return Ok(());
    }
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(None);
    };
    if config
        .bearer
        .as_ref()
        .is_some_and(|t| t.verify_header(value.as_bytes()))
    {
        return Ok(());
    }
    let Some(token) =
        ctm_auth::bearer_credential(value.as_bytes()).and_then(|t| std::str::from_utf8(t).ok())
    else {
        return Err(Some("not a Bearer token"));
    };
    match &config.oauth {
        Some(o) => o.verify(token, &base_url(config, headers)).map_err(Some),
        None => Err(Some("wrong token")),
    }
}

/// `401` with a `Bearer` challenge; RFC 9728's `resource_metadata` names
/// the protected-resource document only when OAuth serves one (a static
/// token has no authorization server to discover).
fn unauthorized(base: &str, oauth: bool, why: Option<&'static str>) -> Resp {
    let err = refusal("Unauthorized", "unauthorized");
    let mut r = respond(StatusCode::UNAUTHORIZED, Some(&err));
    let mut challenge = "Bearer realm=\"coding-tools-mcp\"".to_owned();
    if oauth {
        challenge.push_str(&format!(
            ", resource_metadata=\"{base}/.well-known/oauth-protected-resource\""
        ));
    }
    if let Some(why) = why {
        challenge.push_str(&format!(
            ", error=\"invalid_token\", error_description=\"{why}\""
        ));
    }
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// Hands an OAuth endpoint request to the authorization server.
async fn oauth<D: Dispatcher>(state: &State<D>, req: Request<Incoming>) -> Resp {
    let Some(server) = state.config.oauth.clone() else {
        return respond(StatusCode::NOT_FOUND, None);
    };
    let base = base_url(&state.config, req.headers());
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let get = |n: header::HeaderName| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (authorization, content_type) = (get(header::AUTHORIZATION), get(header::CONTENT_TYPE));
    if req.headers().contains_key(MARKER) {
        return respond(
            StatusCode::BAD_REQUEST,
            Some(
                &json!({"error": "invalid_request", "error_description": "Content-Length must be a non-negative integer"}),
            ),
        );
    }
    let body = match Limited::new(req.into_body(), 64 * 1024).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                Some(&json!({"error": "invalid_request", "error_description": "body too large"})),
            );
        }
    };
    let answer = server.handle(&ctm_auth::AuthRequest {
        method: &method,
        path: &path,
        query: &query,
        authorization: authorization.as_deref(),
        content_type: content_type.as_deref(),
        body: &body,
        base_url: &base,
    });
    let mut r = Response::new(Full::new(Bytes::from(answer.body)));
    *r.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in answer.headers {
        if let (Ok(k), Ok(v)) = (
            header::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(&v),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

fn origin_allowed(config: &HttpConfig, origin: &str) -> bool {
    is_loopback_origin(origin) || config.extra_allowed_origins.iter().any(|o| o == origin)
}

fn preflight() -> Resp {
    let mut r = respond(StatusCode::NO_CONTENT, None);
    let h = r.headers_mut();
    h.insert(header::ALLOW, HeaderValue::from_static(ALLOW_METHODS));
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    r
}

fn method_not_allowed(allow: &'static str) -> Resp {
    let err = refusal(
        &format!("Method not allowed here; allowed: {allow}"),
        "method_not_allowed",
    );
    let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, Some(&err));
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// A JSON-RPC error for a refusal before dispatch: `id: null`, as the
/// reference answers every refusal of the transport.
fn refusal(message: &str, reason: &str) -> Value {
    refused(&RpcError::new(ErrorCode::InvalidRequest, message, reason))
}

fn refused(error: &RpcError) -> Value {
    error_response(Some(&Value::Null), error)
}

fn respond(status: StatusCode, body: Option<&Value>) -> Resp {
    let bytes = body
        .map(|b| Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
        .unwrap_or_default();
    let mut r = Response::new(Full::new(bytes));
    *r.status_mut() = status;
    if body.is_some() {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = ct.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json")
}

fn mirror_headers(headers: &HeaderMap) -> MirrorHeaders {
    let all = |name: &str| -> Vec<Vec<u8>> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes().to_vec())
            .collect()
    };
    MirrorHeaders {
        protocol_version: all("mcp-protocol-version"),
        method: all("mcp-method"),
        name: all("mcp-name"),
    }
}

/// The request's wait budget, or the -32602 refusal of a malformed header.
/// A budget above the deployment maximum, however many digits it has, is
/// capped to it rather than refused. The raw value is never echoed.
fn wait_budget(headers: &HeaderMap, deployment: u64) -> Result<WaitBudget, RpcError> {
    let values: Vec<&HeaderValue> = headers.get_all(BUDGET_HEADER).iter().collect();
    let bad = |msg: &str, reason: &str| {
        RpcError::new(ErrorCode::InvalidParams, msg, reason)
            .with_data("header", json!("X-Coding-Tools-Budget-Secs"))
    };
    match values.as_slice() {
        [] => Ok(WaitBudget::deployment(deployment)),
        [one] => {
            let text = one.to_str().unwrap_or("").trim();
            let secs = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                // Digits only: too many of them is a very large budget, not an error.
                Some(text.parse::<u64>().unwrap_or(u64::MAX)).filter(|s| *s > 0)
            } else {
                None
            };
            secs.map(|s| WaitBudget::requested(s, deployment))
                .ok_or_else(|| {
                    bad(
                        "X-Coding-Tools-Budget-Secs must be a positive integer number of seconds",
                        "invalid_budget_header",
                    )
                })
        }
        _ => Err(bad(
            "X-Coding-Tools-Budget-Secs must appear at most once",
            "duplicated_budget_header",
        )),
    }
}

/// Fires the request's cancellation when hyper drops the request future
/// (the client closed the connection) before the answer was ready.
struct CancelOnDrop {
    cancel: Cancellation,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.cancel.cancel();
        }
    }
}

async fn post_mcp<D: Dispatcher>(state: &State<D>, req: Request<Incoming>) -> Resp {
    let cfg = &state.config;
    let headers = req.headers().clone();
    if !is_json_content_type(&headers) {
        let err = refusal(
            "Content-Type must be application/json",
            "unsupported_media_type",
        );
        return respond(StatusCode::UNSUPPORTED_MEDIA_TYPE, Some(&err));
    }
    if let Some(kind) = headers.get(MARKER) {
        return unusable_length(kind.as_bytes(), cfg.max_body_bytes);
    }
    let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    else {
        let err = refusal("Content-Length is required", "length_required");
        return respond(StatusCode::LENGTH_REQUIRED, Some(&err));
    };
    let too_large = || {
        let mut err = refusal(
            &format!("Request body exceeds {} bytes", cfg.max_body_bytes),
            "body_too_large",
        );
        err["error"]["data"]["max_bytes"] = json!(cfg.max_body_bytes);
        respond(StatusCode::PAYLOAD_TOO_LARGE, Some(&err))
    };
    if len > cfg.max_body_bytes as u64 {
        return too_large();
    }
    let budget = match wait_budget(&headers, cfg.deployment_wait_secs) {
        Ok(b) => b,
        Err(e) => return respond(StatusCode::BAD_REQUEST, Some(&refused(&e))),
    };
    let collected = tokio::time::timeout(
        cfg.body_read_timeout,
        Limited::new(req.into_body(), cfg.max_body_bytes).collect(),
    )
    .await;
    let body = match collected {
        Err(_elapsed) => {
            let err = refusal(
                "The request body did not arrive in time; send the whole body at once",
                "body_read_timeout",
            );
            return respond(StatusCode::REQUEST_TIMEOUT, Some(&err));
        }
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            if e.is::<http_body_util::LengthLimitError>() {
                return too_large();
            }
            let err = refusal("Request body could not be read", "body_read_failed");
            return respond(StatusCode::BAD_REQUEST, Some(&err));
        }
    };
    let mirrors = mirror_headers(&headers);
    let reply = match prepare(&body, Some(&mirrors)) {
        Prepared::Reply(r) => r,
        Prepared::Notification(req, era) => {
            state.dispatcher.notify(&req, era);
            Reply {
                status: 202,
                body: None,
            }
        }
        Prepared::Call(call) => {
            let mut guard = CancelOnDrop {
                cancel: Cancellation::new(),
                armed: true,
            };
            let seed = ContextSeed {
                wait_budget: budget,
                cancel: guard.cancel.clone(),
                transport: "http",
            };
            let ctx = seed.for_call(&call);
            let reply = run_call(state.dispatcher.as_ref(), call, ctx).await;
            guard.armed = false;
            reply
        }
    };
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    respond(status, reply.body.as_ref())
}

/// The refusal of a `Content-Length` hyper could not use (see [`crate::length`]):
/// digits beyond any size are `413` like any over-limit length, anything
/// else is `400`. Both as the reference answers them.
fn unusable_length(kind: &[u8], max_body_bytes: usize) -> Resp {
    if kind == b"too_large" {
        let mut err = refusal(
            &format!("Request body exceeds {max_body_bytes} bytes"),
            "body_too_large",
        );
        err["error"]["data"]["max_bytes"] = json!(max_body_bytes);
        return respond(StatusCode::PAYLOAD_TOO_LARGE, Some(&err));
    }
    let err = refusal(
        "Content-Length must be a non-negative integer",
        "invalid_content_length",
    );
    respond(StatusCode::BAD_REQUEST, Some(&err))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(BUDGET_HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn budget_header_rules() {
        assert_eq!(
            wait_budget(&headers(&[]), 30).unwrap(),
            WaitBudget::deployment(30)
        );
        let b = wait_budget(&headers(&["5"]), 30).unwrap();
        assert_eq!((b.effective_secs, b.requested_secs), (5, Some(5)));
        let clamped = wait_budget(&headers(&["120"]), 30).unwrap();
        assert_eq!(clamped.effective_secs, 30);
        let same = wait_budget(&headers(&["30"]), 30).unwrap();
        assert_eq!(same.source.as_str(), "request_header");
        for bad in ["0", "-1", "1.5", "abc", "", "+5", "00"] {
            let e = wait_budget(&headers(&[bad]), 30).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidParams, "{bad}");
            assert!(!e.to_json().to_string().contains(&format!("\"{bad}\"")) || bad.is_empty());
        }
        assert!(wait_budget(&headers(&["5", "5"]), 30).is_err());
        // Above the maximum, even beyond u64, is capped.
        for huge in ["99999999999999999999999", "18446744073709551616", "31"] {
            let b = wait_budget(&headers(&[huge]), 30).unwrap();
            assert_eq!(b.effective_secs, 30, "{huge}");
            assert_eq!(b.source.as_str(), "request_header");
        }
    }

    #[test]
    fn json_content_types() {
        let mut h = HeaderMap::new();
        assert!(!is_json_content_type(&h));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(is_json_content_type(&h));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(!is_json_content_type(&h));
    }
}
