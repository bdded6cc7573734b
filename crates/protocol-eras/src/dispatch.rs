//! The pipeline every transport runs: prepare (pure) → dispatch → encode.

use std::future::Future;

use serde_json::{Value, json};

use crate::cancel::Cancellation;
use crate::encode::{encode_result, error_response, result_response};
use crate::envelope::{Message, Request, parse_message};
use crate::era::{Era, classify, validate_modern_meta};
use crate::error::{ErrorCode, RpcError};
use crate::mirror::{MirrorHeaders, check_handshake_headers, check_mirror_headers};
use crate::versions::NEWEST_HANDSHAKE_VERSION;

/// The methods this server implements, already checked against the era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `initialize` (handshake era only).
    Initialize,
    /// `ping` (both eras; the contract keeps it in the modern era).
    Ping,
    /// `server/discover` (modern era only).
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall,
}

impl Method {
    fn route(name: &str, era: Era) -> Result<Self, RpcError> {
        match (name, era) {
            ("initialize", Era::Handshake) => Ok(Self::Initialize),
            ("ping", _) => Ok(Self::Ping),
            ("server/discover", Era::Modern) => Ok(Self::Discover),
            ("tools/list", _) => Ok(Self::ToolsList),
            ("tools/call", _) => Ok(Self::ToolsCall),
            _ => Err(RpcError::new(
                ErrorCode::MethodNotFound,
                format!("Method not found: {name}"),
                "unknown_method",
            )
            .with_data("method", json!(name))),
        }
    }
}

/// Where a request's wait budget came from (client contract notes §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitBudgetSource {
    /// The deployment maximum (`--max-wait-secs`).
    Deployment,
    /// The request's `X-Coding-Tools-Budget-Secs` header.
    RequestHeader,
}

impl WaitBudgetSource {
    /// Stable name for results and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "deployment",
            Self::RequestHeader => "request_header",
        }
    }
}

/// The longest a request may wait synchronously, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitBudget {
    /// Effective budget in seconds.
    pub effective_secs: u64,
    /// Where it came from.
    pub source: WaitBudgetSource,
    /// The header's value, when one was sent.
    pub requested_secs: Option<u64>,
    /// The deployment maximum.
    pub deployment_secs: u64,
}

impl WaitBudget {
    /// The budget of a request that asked for nothing.
    pub fn deployment(secs: u64) -> Self {
        Self {
            effective_secs: secs,
            source: WaitBudgetSource::Deployment,
            requested_secs: None,
            deployment_secs: secs,
        }
    }

    /// A request's own budget, clamped to the deployment maximum.
    pub fn requested(secs: u64, deployment_secs: u64) -> Self {
        Self {
            effective_secs: secs.min(deployment_secs),
            source: WaitBudgetSource::RequestHeader,
            requested_secs: Some(secs),
            deployment_secs,
        }
    }
}

/// What a transport knows about one request, handed to the dispatcher.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The request's era.
    pub era: Era,
    /// Its protocol version: `_meta`'s in the modern era, the header's (or the
    /// newest handshake version) in the handshake era.
    pub protocol_version: String,
    /// Its synchronous wait budget.
    pub wait_budget: WaitBudget,
    /// Fires when the request is cancelled.
    pub cancel: Cancellation,
    /// `"stdio"` or `"http"`.
    pub transport: &'static str,
}

/// What the dispatcher answers for one method call.
pub type MethodOutcome = Result<Value, RpcError>;

/// The server side of the protocol: serves typed, era-checked methods.
pub trait Dispatcher: Send + Sync + 'static {
    /// Serves one request.
    fn handle(
        &self,
        method: Method,
        req: Request,
        ctx: RequestContext,
    ) -> impl Future<Output = MethodOutcome> + Send;

    /// Observes a notification (answered with nothing whatever happens).
    fn notify(&self, _req: &Request, _era: Era) {}
}

/// A transport's answer: an HTTP status and a body, or no body at all
/// (HTTP 202 / stdio silence).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status (ignored by stdio).
    pub status: u16,
    /// The JSON-RPC response, `None` for notifications and client responses.
    pub body: Option<Value>,
}

impl Reply {
    fn silent() -> Self {
        Self {
            status: 202,
            body: None,
        }
    }

    fn error(status: u16, id: Option<&Value>, error: &RpcError) -> Self {
        Self {
            status,
            body: Some(error_response(id, error)),
        }
    }
}

/// A request ready to dispatch.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request.
    pub req: Request,
    /// Its routed method.
    pub method: Method,
    /// Its era.
    pub era: Era,
    /// Its protocol version (see [`RequestContext::protocol_version`]).
    pub protocol_version: String,
}

/// The outcome of the pure half of the pipeline.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// Answer at once (a protocol error, or silence).
    Reply(Reply),
    /// Dispatch this request.
    Call(Call),
    /// A notification whose headers mirror it: observe it, answer nothing.
    Notification(Request, Era),
}

/// Parses, classifies and validates one message in the contract's order:
/// envelope → era → `_meta` (body) → mirror headers → method.
///
/// `headers` is `None` on stdio, where nothing is mirrored.
pub fn prepare(body: &[u8], headers: Option<&MirrorHeaders>) -> Prepared {
    let req = match parse_message(body) {
        Ok(Message::Request(req)) => req,
        Ok(Message::Response) => return Prepared::Reply(Reply::silent()),
        Err(rej) => return Prepared::Reply(Reply::error(rej.status, rej.id.as_ref(), &rej.error)),
    };
    let era = match classify(&req) {
        Ok(era) => era,
        Err(e) => return reply_to(&req, Era::Handshake, 200, &e),
    };
    match era {
        Era::Modern => prepare_modern(req, headers),
        Era::Handshake => prepare_handshake(req, headers),
    }
}

fn reply_to(req: &Request, era: Era, status: u16, e: &RpcError) -> Prepared {
    if req.is_notification() && e.code != ErrorCode::HeaderMismatch {
        return Prepared::Reply(Reply::silent());
    }
    let _ = era;
    Prepared::Reply(Reply::error(status, req.id.as_ref(), e))
}

fn prepare_modern(req: Request, headers: Option<&MirrorHeaders>) -> Prepared {
    let version = match validate_modern_meta(&req) {
        Ok(v) => v.to_owned(),
        Err(e) => return reply_to(&req, Era::Modern, e.code.http_status(Era::Modern), &e),
    };
    if let Some(h) = headers
        && let Err(e) = check_mirror_headers(&req, &version, h)
    {
        return reply_to(&req, Era::Modern, 400, &e);
    }
    if req.is_notification() {
        return Prepared::Notification(req, Era::Modern);
    }
    match Method::route(&req.method, Era::Modern) {
        Ok(method) => Prepared::Call(Call {
            req,
            method,
            era: Era::Modern,
            protocol_version: version,
        }),
        Err(e) => reply_to(&req, Era::Modern, 404, &e),
    }
}

fn prepare_handshake(req: Request, headers: Option<&MirrorHeaders>) -> Prepared {
    let mut version = NEWEST_HANDSHAKE_VERSION.to_owned();
    if let Some(h) = headers {
        if let Err(e) = check_handshake_headers(h) {
            if e.code == ErrorCode::InvalidRequest {
                // A version from neither era is the transport's refusal before
                // dispatch, notification or not: `id: null`, as the reference.
                return Prepared::Reply(Reply::error(400, Some(&Value::Null), &e));
            }
            return reply_to(&req, Era::Handshake, 400, &e);
        }
        if let Some(v) = h
            .protocol_version
            .first()
            .and_then(|raw| crate::mirror::decode_header_value(raw))
        {
            version = v;
        }
    }
    if req.is_notification() {
        return Prepared::Notification(req, Era::Handshake);
    }
    match Method::route(&req.method, Era::Handshake) {
        Ok(method) => Prepared::Call(Call {
            req,
            method,
            era: Era::Handshake,
            protocol_version: version,
        }),
        Err(e) => reply_to(&req, Era::Handshake, 200, &e),
    }
}

/// Dispatches a prepared call and encodes its answer for its era.
pub async fn run_call<D: Dispatcher>(dispatcher: &D, call: Call, ctx: RequestContext) -> Reply {
    let Call {
        req, method, era, ..
    } = call;
    let id = req.id.clone().unwrap_or(Value::Null);
    match dispatcher.handle(method, req, ctx).await {
        Ok(result) => Reply {
            status: 200,
            body: Some(result_response(&id, encode_result(era, method, result))),
        },
        Err(e) => Reply::error(e.code.http_status(era), Some(&id), &e),
    }
}

/// Everything but the request's wait budget, cancellation and transport name,
/// which the transport supplies.
#[derive(Debug, Clone)]
pub struct ContextSeed {
    /// The wait budget.
    pub wait_budget: WaitBudget,
    /// The cancellation signal.
    pub cancel: Cancellation,
    /// `"stdio"` or `"http"`.
    pub transport: &'static str,
}

impl ContextSeed {
    /// The full context of `call`.
    pub fn for_call(self, call: &Call) -> RequestContext {
        RequestContext {
            era: call.era,
            protocol_version: call.protocol_version.clone(),
            wait_budget: self.wait_budget,
            cancel: self.cancel,
            transport: self.transport,
        }
    }
}

/// The whole pipeline for one message: prepare, notify or dispatch, encode.
pub async fn serve_message<D: Dispatcher>(
    dispatcher: &D,
    body: &[u8],
    headers: Option<&MirrorHeaders>,
    seed: ContextSeed,
) -> Reply {
    match prepare(body, headers) {
        Prepared::Reply(r) => r,
        Prepared::Notification(req, era) => {
            dispatcher.notify(&req, era);
            Reply::silent()
        }
        Prepared::Call(call) => {
            let ctx = seed.for_call(&call);
            run_call(dispatcher, call, ctx).await
        }
    }
}
