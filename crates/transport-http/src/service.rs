//! The hyper service: routing, transport refusals, and the protocol pipeline.

#![expect(
    clippy::result_large_err,
    reason = "a refusal response is built once per refused request"
)]

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

use crate::peers::PeerPolicy;
use crate::stall::WriteDeadline;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::forwarded::Forwarded;
use crate::host::{
    Arrival, Canonical, Configured, HostRefusal, canonical_base, is_public_origin, token_audience,
};
use crate::length::{LengthGuard, MARKER};
use crate::observe::{MetricsSink, OpenConnection};
use crate::origin::is_loopback_origin;
use crate::throttle::{
    Backoff, Blocked, ConnectionCounts, Credential, FailureKey, GlobalBudget, TraceBudget,
};

/// The per-request wait-budget header (client contract notes §3).
pub const BUDGET_HEADER: &str = "x-coding-tools-budget-secs";

const CARD_PATHS: [&str; 2] = ["/.well-known/mcp.json", "/.well-known/mcp/server-card.json"];
/// Liveness: answered to anyone, before any other check.
pub const HEALTH_PATH: &str = "/healthz";
/// The metrics exposition, a route only when metrics are on.
pub const METRICS_PATH: &str = "/metrics";
/// RFC 9728 metadata, at the root and in the `/mcp` path form.
const RESOURCE_METADATA_PATHS: [&str; 2] = [
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
];
/// CORS request headers, spelled as the reference spells them (its six
/// first), then the wait-budget header and the two a stale SDK may still send.
/// The request headers a browser may send: the reference's list and our
/// wait-budget header. No `Mcp-Session-Id` or `Last-Event-ID`: there are
/// no sessions and no resumable streams (issue 36).
const ALLOW_HEADERS: &str = "Accept, Authorization, Content-Type, MCP-Protocol-Version, Mcp-Method, Mcp-Name, X-Coding-Tools-Budget-Secs";
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
    /// The server card served at the well-known paths, built for the
    /// request's canonical base URL.
    pub server_card: CardSource,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send its request body once the headers
    /// are in (a body that never ends is answered 408).
    pub body_read_timeout: Duration,
    /// Connections served at once; further clients wait in the listen
    /// backlog until one ends.
    pub max_connections: usize,
    /// Connections one client address (an IPv4 address, an IPv6 /64) may
    /// hold at once; a further one is answered `429` and closed.
    pub max_connections_per_ip: usize,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// When set, `/mcp` requires `Authorization: Bearer <token>`.
    pub bearer: Option<ctm_auth::BearerToken>,
    /// When set, the OAuth 2.1 authorization server is mounted and its
    /// access tokens are accepted on `/mcp`.
    pub oauth: Option<Arc<ctm_auth::OAuthServer>>,
    /// When set, this server is a pure resource server: it accepts the JWT
    /// access tokens of this external authorization server and publishes
    /// RFC 9728 metadata naming it (exclusive with `oauth`).
    pub issuer: Option<Arc<crate::issuer::ExternalIssuer>>,
    /// The public base URL (`CODING_TOOLS_MCP_SERVER_URL`): the only name
    /// besides the server's own addresses it answers to, and the OAuth
    /// issuer and audience (see [`crate::host`]).
    pub public_base_url: Option<String>,
    /// Honour `X-Forwarded-Host`/`-Proto`/`-Prefix` and `Forwarded`
    /// (behind a trusted proxy; see [`crate::forwarded`]).
    pub trust_proxy_headers: bool,
    /// Receives transport events for the trace (`auth_failure`).
    pub events: Option<EventSink>,
    /// When set, connections and responses are counted and `GET /metrics`
    /// serves the exposition, behind the same authentication as `/mcp`.
    pub metrics: Option<MetricsSink>,
}

/// What builds the server card for a canonical base URL.
#[derive(Clone)]
pub struct CardSource(pub Arc<dyn Fn(&str) -> Value + Send + Sync>);

impl CardSource {
    /// A card that does not depend on the URL it is served at.
    pub fn fixed(card: Value) -> Self {
        Self(Arc::new(move |_| card.clone()))
    }
}

impl std::fmt::Debug for CardSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CardSource")
    }
}

/// A receiver of transport events: a name and its fields.
#[derive(Clone)]
pub struct EventSink(pub Arc<EventFn>);

/// What an [`EventSink`] calls.
pub type EventFn = dyn Fn(&str, serde_json::Map<String, Value>) + Send + Sync;

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSink")
    }
}

impl HttpConfig {
    fn auth_required(&self) -> bool {
        self.bearer.is_some() || self.oauth.is_some() || self.issuer.is_some()
    }
}

struct State<D> {
    dispatcher: Arc<D>,
    config: HttpConfig,
    configured: Option<Configured>,
    /// Failed bearer tokens, per address.
    bearer_backoff: Backoff,
    /// Failed passwords, per address and `client_id`.
    password_backoff: Backoff,
    /// Failed passwords, server-wide.
    password_budget: GlobalBudget,
    /// `auth_failure` trace lines, server-wide.
    trace_budget: TraceBudget,
}

/// Where a request came from and arrived.
#[derive(Debug, Clone, Copy)]
struct Peer {
    remote: SocketAddr,
    arrival: Arrival,
}

/// Serves connections from `listener` until `shutdown` resolves, then lets
/// in-flight requests finish (up to `shutdown_grace`).
pub async fn serve<D: Dispatcher>(
    dispatcher: Arc<D>,
    config: HttpConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with_peers(dispatcher, config, listener, shutdown, PeerPolicy::Anyone).await
}

/// [`serve`], admitting only the connections `peers` allows: a refused one
/// is answered `403` (`other_user`) and closed before anything is read.
pub async fn serve_with_peers<D: Dispatcher>(
    dispatcher: Arc<D>,
    config: HttpConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    peers: PeerPolicy,
) -> std::io::Result<()> {
    let grace = config.shutdown_grace;
    let configured = config.public_base_url.as_deref().and_then(|u| {
        let c = Configured::parse(u);
        if c.is_none() {
            tracing::warn!("CODING_TOOLS_MCP_SERVER_URL is not an http(s) URL; it is ignored");
        }
        c
    });
    let bound = listener.local_addr()?;
    let state = Arc::new(State {
        dispatcher,
        config,
        configured,
        bearer_backoff: Backoff::default(),
        password_backoff: Backoff::default(),
        password_budget: GlobalBudget::default(),
        trace_budget: TraceBudget::default(),
    });
    let per_ip = Arc::new(ConnectionCounts::default());
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
                if !peers.admits(peer, stream.local_addr().unwrap_or(bound)) {
                    tracing::warn!("{peer}: a loopback connection of another local user refused (--allow-other-users serves it)");
                    refuse_other_user(stream);
                    if let Some(m) = &state.config.metrics {
                        m.0.response(StatusCode::FORBIDDEN.as_u16());
                    }
                    continue;
                }
                let Some(permit) = per_ip.acquire(peer.ip(), state.config.max_connections_per_ip) else {
                    tracing::debug!("{peer}: too many connections from this address");
                    too_many_connections(stream);
                    if let Some(m) = &state.config.metrics {
                        m.0.response(StatusCode::TOO_MANY_REQUESTS.as_u16());
                    }
                    continue;
                };
                let open = OpenConnection::new(state.config.metrics.as_ref());
                let peer = Peer {
                    remote: peer,
                    arrival: Arrival {
                        bound,
                        local: stream.local_addr().unwrap_or(bound),
                    },
                };
                let st = state.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(handle(st, req, peer).await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(state.config.header_read_timeout)
                    .serve_connection(
                        TokioIo::new(WriteDeadline::new(
                            LengthGuard::new(stream),
                            state.config.body_read_timeout,
                        )),
                        svc,
                    );
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("connection from {} ended: {e}", peer.remote);
                    }
                    drop(open);
                    drop(permit);
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

/// Answers a connection over the per-address limit `429` and closes it,
/// without reading from it (the write fits the socket buffer, or is lost).
fn too_many_connections(stream: tokio::net::TcpStream) {
    let body = refusal(
        "Too many connections from this address; close one and retry",
        "too_many_connections",
    )
    .to_string();
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncache-control: no-store\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

/// Answers a connection of another local user `403` and closes it,
/// without reading from it.
fn refuse_other_user(stream: tokio::net::TcpStream) {
    let body = refusal(
        "This server serves only its own user's clients on loopback; another local account connected. The operator can allow that with --allow-other-users or require a token (--auth-token-file)",
        "other_user",
    )
    .to_string();
    let head = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncache-control: no-store\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

/// Why a body could not be read.
enum BodyError {
    Timeout,
    TooLarge,
    Failed,
}

/// Reads a whole request body within `timeout` and `limit` bytes: the one
/// body reader of every route.
async fn read_body(body: Incoming, limit: usize, timeout: Duration) -> Result<Bytes, BodyError> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_elapsed) => Err(BodyError::Timeout),
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Ok(Err(_)) => Err(BodyError::Failed),
    }
}

/// The declared `Content-Length`, if usable.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Largest OAuth request body: its forms and registrations are small.
const OAUTH_MAX_BODY_BYTES: usize = 64 * 1024;

impl<D> State<D> {
    fn event(&self, name: &str, fields: Value) {
        if let (Some(sink), Value::Object(map)) = (&self.config.events, fields) {
            (sink.0)(name, map);
        }
    }

    /// An `auth_failure` line, within the server-wide budget of such lines
    /// (a line carries `suppressed`: how many were dropped before it).
    fn auth_event(&self, mut fields: Value) {
        if self.config.events.is_none() {
            return;
        }
        if let Some(suppressed) = self.trace_budget.admit(Instant::now()) {
            if suppressed > 0 {
                fields["suppressed"] = json!(suppressed);
            }
            self.event("auth_failure", fields);
        }
    }

    /// `429` with `Retry-After` for an attempt that must wait; the trace
    /// gets one line per report the throttle asks for, never one per attempt.
    fn throttled(
        &self,
        kind: Credential,
        client: IpAddr,
        blocked: Blocked,
        server_wide: bool,
    ) -> Resp {
        let secs = ctm_auth::retry_after_secs(blocked.wait);
        if let Some(count) = blocked.report {
            self.auth_event(
                json!({"credential": kind.as_str(), "client": client.to_string(), "throttled": true, "count": count, "scope": if server_wide { "server" } else { "address" }, "retry_after_secs": secs}),
            );
        }
        let message = if server_wide {
            "Too many failed attempts on this server; retry after the Retry-After delay"
        } else {
            "Too many failed attempts from this address; retry after the Retry-After delay"
        };
        let body = if kind == Credential::Password {
            json!({"error": "slow_down", "error_description": message})
        } else {
            refusal(message, "too_many_failed_attempts")
        };
        let mut r = respond(StatusCode::TOO_MANY_REQUESTS, Some(&body));
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }

    fn backoff(&self, kind: Credential) -> &Backoff {
        match kind {
            Credential::Bearer => &self.bearer_backoff,
            Credential::Password => &self.password_backoff,
        }
    }

    fn failed(&self, kind: Credential, key: FailureKey) {
        let f = self.backoff(kind).fail(key, Instant::now());
        if f.delay > Duration::ZERO && f.failures == crate::throttle::FREE_FAILURES + 1 {
            tracing::warn!(
                "{}: {} failed {} attempts; backing off",
                key.client(),
                kind.as_str(),
                f.failures
            );
        }
        self.auth_event(
            json!({"credential": kind.as_str(), "client": key.client().to_string(), "throttled": false, "failures": f.failures, "retry_after_secs": f.delay.as_secs()}),
        );
    }
}

async fn handle<D: Dispatcher>(state: Arc<State<D>>, req: Request<Incoming>, peer: Peer) -> Resp {
    let resp = route(&state, req, peer).await;
    if let Some(m) = &state.config.metrics {
        m.0.response(resp.status().as_u16());
    }
    resp
}

async fn route<D: Dispatcher>(state: &State<D>, req: Request<Incoming>, peer: Peer) -> Resp {
    // Liveness says nothing and changes nothing: a probe gets it whatever
    // its Host, Origin or credentials (a load balancer's probe sends none).
    if req.uri().path() == HEALTH_PATH {
        let mut r = health(req.method());
        if req.headers().contains_key(MARKER) {
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return r;
    }
    let (canonical, audience) = match base_url(state, &req, peer.arrival) {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    let base = canonical.base.as_str();
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if let Some(o) = &origin
        && !origin_allowed(&state.config, o, &canonical)
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
    } else if RESOURCE_METADATA_PATHS.contains(&path.as_str())
        && let Some(issuer) = &state.config.issuer
    {
        let doc = issuer.resource_metadata(&ctm_auth::resource_url(base));
        match *req.method() {
            Method::GET => respond(StatusCode::OK, Some(&doc)),
            Method::HEAD => {
                let mut r = respond(StatusCode::OK, Some(&doc));
                *r.body_mut() = Full::new(Bytes::new());
                r
            }
            _ => method_not_allowed("GET, HEAD"),
        }
    } else if ctm_auth::OAuthServer::handles(&path) && state.config.oauth.is_some() {
        oauth(state, req, base, &audience, peer.remote.ip()).await
    } else if path == "/mcp" {
        if let Err(refused) =
            authorized(state, req.headers(), base, &audience, peer.remote.ip()).await
        {
            refused
        } else if req.method() == Method::POST {
            post_mcp(state, req).await
        } else {
            method_not_allowed("POST")
        }
    } else if path == METRICS_PATH
        && let Some(metrics) = &state.config.metrics
    {
        // The exposition tells load and failures: the same credential as /mcp.
        if let Err(refused) =
            authorized(state, req.headers(), base, &audience, peer.remote.ip()).await
        {
            refused
        } else {
            match *req.method() {
                Method::GET => exposition(metrics, false),
                Method::HEAD => exposition(metrics, true),
                _ => method_not_allowed("GET, HEAD"),
            }
        }
    } else if CARD_PATHS.contains(&path.as_str()) {
        let card = || (state.config.server_card.0)(base);
        match *req.method() {
            Method::GET => respond(StatusCode::OK, Some(&card())),
            Method::HEAD => {
                let mut r = respond(StatusCode::OK, Some(&card()));
                *r.body_mut() = Full::new(Bytes::new());
                r
            }
            _ => method_not_allowed("GET, HEAD"),
        }
    } else {
        // The contract's table: an unknown path is a JSON-RPC error,
        // -32601 with a null id, status 404.
        let err = json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32601, "message": format!("Unknown endpoint {path}; the MCP endpoint is POST /mcp")},
        });
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

/// The canonical base URL of this request and its token audience (see
/// [`crate::host`]), or the refusal of a `Host` that does not name this
/// server or of a malformed trusted forwarded header.
fn base_url<D>(
    state: &State<D>,
    req: &Request<Incoming>,
    arrival: Arrival,
) -> Result<(Canonical, String), Resp> {
    let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
    let refuse = |status: StatusCode, message: &str| {
        let err = refusal(message, "host_not_allowed");
        Err(respond(status, Some(&err)))
    };
    if hosts.len() > 1 {
        return refuse(StatusCode::BAD_REQUEST, "Host must appear at most once");
    }
    // An absolute-form target's authority is what the request names (RFC 9112 §3.2.2).
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    let host = match (&authority, hosts.first()) {
        (Some(a), _) => Some(a.as_str()),
        (None, Some(h)) => Some(h.to_str().unwrap_or("\u{0}")),
        // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400.
        (None, None) if req.version() == hyper::Version::HTTP_11 => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "Host is required in an HTTP/1.1 request",
            );
        }
        (None, None) => None,
    };
    // Without the flag a forwarded header is anyone's claim: never read.
    let forwarded = if state.config.trust_proxy_headers {
        Forwarded::from_headers(req.headers())
    } else {
        None
    };
    match canonical_base(state.configured.as_ref(), arrival, host, forwarded.as_ref()) {
        Ok(c) => {
            let audience = token_audience(&c.base, c.named, arrival);
            Ok((c, audience))
        }
        Err(HostRefusal::Foreign) => refuse(
            StatusCode::FORBIDDEN,
            "Host not allowed: this server answers only to its own addresses (loopback names on a loopback connection) and CODING_TOOLS_MCP_SERVER_URL",
        ),
        Err(HostRefusal::Malformed(name)) => {
            let err = refusal(
                &format!(
                    "{name} from the trusted proxy is malformed: fix the proxy's configuration"
                ),
                "forwarded_header_malformed",
            );
            Err(respond(StatusCode::BAD_REQUEST, Some(&err)))
        }
    }
}

/// `Ok` when no auth is configured or a configured credential matches;
/// otherwise the refusal: `401`, `403` for a valid external token without
/// the required scope, `503` while an external issuer's keys cannot be
/// fetched, or `429` while the client backs off after failed tokens.
/// High-entropy credentials (OAuth access tokens, a static token of at
/// least [`ctm_auth::STRONG_TOKEN_CHARS`] characters) are verified first
/// and always served: guessing them is hopeless, so a block only slows
/// failures and never locks out a client sharing the address. A shorter
/// static token is checked only when the address is not blocked.
async fn authorized<D>(
    state: &State<D>,
    headers: &HeaderMap,
    base: &str,
    audience: &str,
    ip: IpAddr,
) -> Result<(), Resp> {
    let config = &state.config;
    if !config.auth_required() {
        return Ok(());
    }
    let challenge = Challenge {
        base,
        metadata: config.oauth.is_some() || config.issuer.is_some(),
        scope: config.issuer.as_ref().and_then(|i| i.required_scope()),
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        // No credential is no guess: the discovery step of every client.
        return Err(challenge.unauthorized(None));
    };
    let key = FailureKey::address(ip);
    let static_match = config
        .bearer
        .as_ref()
        .filter(|t| t.verify_header(value.as_bytes()));
    if static_match.is_some_and(ctm_auth::BearerToken::is_strong) {
        return Ok(());
    }
    let token =
        ctm_auth::bearer_credential(value.as_bytes()).and_then(|t| std::str::from_utf8(t).ok());
    let verdict = match (token, &config.oauth, &config.issuer) {
        (None, _, _) => Err("not a Bearer token"),
        (Some(t), Some(o), _) => o.verify(t, audience),
        (Some(t), None, Some(i)) if static_match.is_none() => {
            match i.verify(t, &ctm_auth::resource_url(base)).await {
                Ok(()) => Ok(()),
                // A valid token of the issuer: no guess, so no backoff.
                Err(ctm_auth::TokenRejection::InsufficientScope) => {
                    return Err(challenge.insufficient_scope());
                }
                Err(ctm_auth::TokenRejection::KeysUnavailable) => {
                    return Err(keys_unavailable());
                }
                Err(r) => Err(r.description()),
            }
        }
        (Some(_), _, _) => Err("wrong token"),
    };
    // A success does not forget the address's failures: on a shared
    // address they may be someone else's.
    if verdict.is_ok() {
        return Ok(());
    }
    if let Some(blocked) = state.bearer_backoff.check(key, Instant::now()) {
        return Err(state.throttled(Credential::Bearer, key.client(), blocked, false));
    }
    if static_match.is_some() {
        return Ok(());
    }
    state.failed(Credential::Bearer, key);
    let why = verdict.err().unwrap_or("wrong token");
    Err(challenge.unauthorized(Some(why)))
}

/// What a `Bearer` challenge names: RFC 9728's `resource_metadata` only
/// when OAuth (built in or external) serves the document (a static token
/// has no authorization server to discover), and the required scope.
struct Challenge<'a> {
    base: &'a str,
    metadata: bool,
    scope: Option<&'a str>,
}

impl Challenge<'_> {
    fn header(&self, error: Option<(&str, &str)>) -> String {
        let mut challenge = "Bearer realm=\"coding-tools-mcp\"".to_owned();
        if self.metadata {
            challenge.push_str(&format!(
                ", resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
                self.base
            ));
        }
        if let Some(scope) = self.scope {
            challenge.push_str(&format!(", scope=\"{scope}\""));
        }
        if let Some((error, why)) = error {
            challenge.push_str(&format!(", error=\"{error}\", error_description=\"{why}\""));
        }
        challenge
    }

    /// `401`: no credential (`why` is `None`), or an invalid one.
    fn unauthorized(&self, why: Option<&'static str>) -> Resp {
        let err = refusal("Unauthorized", "unauthorized");
        let mut r = respond(StatusCode::UNAUTHORIZED, Some(&err));
        let challenge = self.header(why.map(|w| ("invalid_token", w)));
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// `403` for a valid token without the required scope (RFC 6750 §3.1).
    fn insufficient_scope(&self) -> Resp {
        let err = refusal(
            "Forbidden: the access token lacks the required scope",
            "insufficient_scope",
        );
        let mut r = respond(StatusCode::FORBIDDEN, Some(&err));
        let challenge = self.header(Some((
            "insufficient_scope",
            "the token lacks the required scope",
        )));
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }
}

/// `503` while the external issuer's keys cannot be fetched: the token
/// may be fine, so asking the client for another would not help.
fn keys_unavailable() -> Resp {
    let err = refusal(
        "The authorization server's signing keys are unavailable; retry later",
        "issuer_keys_unavailable",
    );
    let mut r = respond(StatusCode::SERVICE_UNAVAILABLE, Some(&err));
    let secs = crate::issuer::REFRESH_EVERY.as_secs().to_string();
    if let Ok(v) = HeaderValue::from_str(&secs) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Hands an OAuth endpoint request to the authorization server.
async fn oauth<D: Dispatcher>(
    state: &State<D>,
    req: Request<Incoming>,
    base: &str,
    audience: &str,
    ip: IpAddr,
) -> Resp {
    let Some(server) = state.config.oauth.clone() else {
        return respond(StatusCode::NOT_FOUND, None);
    };
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
    let oauth_error = |status: StatusCode, description: &str| {
        respond(
            status,
            Some(&json!({"error": "invalid_request", "error_description": description})),
        )
    };
    if req.headers().contains_key(MARKER) {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "Content-Length must be a non-negative integer",
        );
    }
    let limit = OAUTH_MAX_BODY_BYTES.min(state.config.max_body_bytes);
    if content_length(req.headers()).is_some_and(|n| n > limit as u64) {
        return oauth_error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
    }
    let password = method == "POST" && path == "/oauth/authorize";
    let body = match read_body(req.into_body(), limit, state.config.body_read_timeout).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => {
            return oauth_error(StatusCode::PAYLOAD_TOO_LARGE, "body too large");
        }
        Err(BodyError::Timeout) => {
            return oauth_error(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time; send the whole body at once",
            );
        }
        Err(BodyError::Failed) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            );
        }
    };
    // A short password may be guessable: its throttles are checked before
    // it is (a blocked guess learns nothing), per address and client_id,
    // then server-wide. A strong one (the generated one) is checked first,
    // so the right one always gets through, however many failures others
    // spend the budget on; wrong ones meet the same throttles.
    let client_id = if password {
        ctm_auth::authorize_client_id(&body)
    } else {
        String::new()
    };
    let key = FailureKey::address_and(ip, &client_id);
    let right_and_strong =
        password && server.password_is_strong() && server.authorize_password_matches(&body);
    let reserved = password && !right_and_strong;
    if reserved {
        let now = Instant::now();
        if let Some(blocked) = state.password_backoff.check(key, now) {
            return state.throttled(Credential::Password, key.client(), blocked, false);
        }
        if let Err(blocked) = state.password_budget.reserve(now) {
            return state.throttled(Credential::Password, key.client(), blocked, true);
        }
    }
    let answer = server.handle(&ctm_auth::AuthRequest {
        method: &method,
        path: &path,
        query: &query,
        authorization: authorization.as_deref(),
        content_type: content_type.as_deref(),
        body: &body,
        base_url: base,
        audience,
        client_ip: Some(ip),
    });
    if reserved {
        // Only a wrong password keeps its reservation of the budget.
        match answer.status {
            401 => state.failed(Credential::Password, key),
            302 if !answer.headers.iter().any(|(_, v)| v.contains("error=")) => {
                state.password_backoff.succeed(key);
                state.password_budget.release();
            }
            _ => state.password_budget.release(),
        }
    }
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

/// `GET`/`HEAD /healthz`: `200 ok` while the server serves HTTP.
fn health(method: &Method) -> Resp {
    let body = match *method {
        Method::GET => Bytes::from_static(b"ok\n"),
        Method::HEAD => Bytes::new(),
        _ => return method_not_allowed("GET, HEAD"),
    };
    let mut r = Response::new(Full::new(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The metrics exposition, rendered now (`HEAD`: its headers only).
fn exposition(metrics: &MetricsSink, head: bool) -> Resp {
    let e = metrics.0.render();
    let body = if head {
        Bytes::new()
    } else {
        Bytes::from(e.body)
    };
    let mut r = Response::new(Full::new(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(e.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A loopback origin, a configured one, or the public origin the server is
/// published under (its configured URL's or its trusted proxy's), whose
/// pages are same-origin with it.
fn origin_allowed(config: &HttpConfig, origin: &str, canonical: &Canonical) -> bool {
    is_loopback_origin(origin)
        || config.extra_allowed_origins.iter().any(|o| o == origin)
        || (canonical.named && is_public_origin(origin, &canonical.base))
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
        .map(|b| Bytes::from(ctm_protocol_eras::to_wire(b)))
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
    let Some(len) = content_length(&headers) else {
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
    let body = match read_body(req.into_body(), cfg.max_body_bytes, cfg.body_read_timeout).await {
        Err(BodyError::Timeout) => {
            let err = refusal(
                "The request body did not arrive in time; send the whole body at once",
                "body_read_timeout",
            );
            return respond(StatusCode::REQUEST_TIMEOUT, Some(&err));
        }
        Ok(b) => b,
        Err(BodyError::TooLarge) => return too_large(),
        Err(BodyError::Failed) => {
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
