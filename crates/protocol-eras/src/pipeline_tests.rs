//! The ordering rules of the contract, end to end through the pure pipeline.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use serde_json::{Value, json};

use crate::*;

/// A dispatcher that answers the way the server does for the methods it can
/// fake without tools: `tools/call` of `boom`/`bad` returns -32603/-32602.
struct Echo;

impl Dispatcher for Echo {
    #[expect(
        clippy::manual_async_fn,
        reason = "mirrors the trait's Send-bounded signature"
    )]
    fn handle(
        &self,
        method: Method,
        req: Request,
        ctx: RequestContext,
    ) -> impl Future<Output = MethodOutcome> + Send {
        async move {
            match method {
                Method::ToolsCall => match req.param_str("name") {
                    Some("boom") => Err(RpcError {
                        code: ErrorCode::InternalError,
                        message: "boom".into(),
                        data: None,
                    }),
                    _ => Err(RpcError::new(
                        ErrorCode::InvalidParams,
                        "Unknown tool",
                        "unknown_tool",
                    )),
                },
                Method::Initialize => Ok(json!({
                    "protocolVersion": negotiate(req.param_str("protocolVersion"))
                })),
                _ => Ok(json!({"era": format!("{:?}", ctx.era), "v": ctx.protocol_version})),
            }
        }
    }
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

const V: &str = "2026-07-28";

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}})
}

fn hdr(version: &[&str], method: &[&str], name: &[&str]) -> MirrorHeaders {
    let f = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect();
    MirrorHeaders {
        protocol_version: f(version),
        method: f(method),
        name: f(name),
    }
}

fn serve(body: Value, headers: Option<MirrorHeaders>) -> Reply {
    serve_raw(body.to_string().as_bytes(), headers)
}

fn serve_raw(body: &[u8], headers: Option<MirrorHeaders>) -> Reply {
    let seed = ContextSeed {
        wait_budget: WaitBudget::deployment(30),
        cancel: Cancellation::new(),
        transport: "test",
    };
    block_on(serve_message(&Echo, body, headers.as_ref(), seed))
}

fn code(r: &Reply) -> i64 {
    r.body.as_ref().unwrap()["error"]["code"].as_i64().unwrap()
}

fn modern(method: &str, params: Value) -> Value {
    let mut p = params;
    p["_meta"] = meta();
    json!({"jsonrpc":"2.0","id":1,"method":method,"params":p})
}

#[test]
fn transport_refusals_before_dispatch() {
    let r = serve_raw(b"{not json", None);
    assert_eq!((r.status, code(&r)), (400, -32700));
    assert!(r.body.unwrap().get("id").is_none());
    let r = serve_raw(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, None);
    assert_eq!((r.status, code(&r)), (400, -32600));
    let r = serve(
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        Some(hdr(&["1999-01-01"], &[], &[])),
    );
    assert_eq!((r.status, code(&r)), (400, -32600));
    assert_eq!(
        r.body.unwrap()["error"]["data"]["supported"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"])
    );
}

#[test]
fn invalid_envelope_is_200_in_either_era() {
    let r = serve(json!({"jsonrpc":"1.0","id":4,"method":"ping"}), None);
    assert_eq!((r.status, code(&r)), (200, -32600));
    assert_eq!(r.body.unwrap()["id"], 4);
}

#[test]
fn modern_request_needs_no_handshake_and_is_encoded() {
    let r = serve(modern("ping", json!({})), Some(hdr(&[V], &["ping"], &[])));
    assert_eq!(r.status, 200);
    let res = &r.body.unwrap()["result"];
    assert_eq!(res["resultType"], "complete");
    assert_eq!(res["era"], "Modern");
    let r = serve(modern("tools/list", json!({})), None);
    assert_eq!(r.body.unwrap()["result"]["cacheScope"], "private");
}

#[test]
fn body_is_checked_before_headers() {
    // Missing clientCapabilities and a contradicting header: -32602 wins.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion": V}}});
    let r = serve(body, Some(hdr(&["2025-11-25"], &["ping"], &[])));
    assert_eq!((r.status, code(&r)), (400, -32602));
    // Unsupported _meta version and a header that disagrees: -32022 wins.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion": "v999.0.0", "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = serve(body.clone(), Some(hdr(&[V], &["tools/list"], &[])));
    assert_eq!((r.status, code(&r)), (400, -32022));
    let data = r.body.unwrap()["error"]["data"].clone();
    assert_eq!(
        data,
        json!({"supported": [V], "requested": "v999.0.0", "received": "v999.0.0"})
    );
    // The same over stdio (no headers).
    let r = serve(body, None);
    assert_eq!(code(&r), -32022);
}

#[test]
fn header_mismatch_then_method() {
    let r = serve(
        modern("tools/list", json!({})),
        Some(hdr(&[V], &["tools/call"], &[])),
    );
    assert_eq!((r.status, code(&r)), (400, -32020));
    let r = serve(
        modern("nope/nope", json!({})),
        Some(hdr(&[V], &["nope/nope"], &[])),
    );
    assert_eq!((r.status, code(&r)), (404, -32601));
    // Unknown method with a bad mirror: the mirror is checked first.
    let r = serve(
        modern("nope/nope", json!({})),
        Some(hdr(&[V], &["other"], &[])),
    );
    assert_eq!((r.status, code(&r)), (400, -32020));
}

#[test]
fn modern_header_over_handshake_body_is_a_mirror_violation() {
    let r = serve(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        Some(hdr(&[V], &["tools/list"], &[])),
    );
    assert_eq!((r.status, code(&r)), (400, -32020));
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
    let r = serve(init, Some(hdr(&[V], &["initialize"], &[])));
    assert_eq!((r.status, code(&r)), (400, -32020));
}

#[test]
fn initialize_is_always_the_handshake() {
    let mut init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"c","version":"1"}}});
    init["params"]["_meta"] = meta();
    let r = serve(init, None);
    let res = r.body.unwrap()["result"].clone();
    assert_eq!(res["protocolVersion"], "2025-11-25");
    assert!(
        res.get("resultType").is_none(),
        "handshake results carry no modern fields"
    );
}

#[test]
fn discover_is_modern_only() {
    let r = serve(
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover"}),
        None,
    );
    assert_eq!((r.status, code(&r)), (200, -32601));
    let r = serve(
        modern("server/discover", json!({})),
        Some(hdr(&[V], &["server/discover"], &[])),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn dispatched_error_statuses_per_era() {
    let call =
        |name: &str| json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":name}});
    let r = serve(call("nope"), None);
    assert_eq!((r.status, code(&r)), (200, -32602));
    let r = serve(call("boom"), None);
    assert_eq!((r.status, code(&r)), (200, -32603));
    let r = serve(
        modern("tools/call", json!({"name":"nope"})),
        Some(hdr(&[V], &["tools/call"], &["nope"])),
    );
    assert_eq!((r.status, code(&r)), (400, -32602));
    let r = serve(
        modern("tools/call", json!({"name":"boom"})),
        Some(hdr(&[V], &["tools/call"], &["boom"])),
    );
    assert_eq!((r.status, code(&r)), (200, -32603));
    let r = serve(json!({"jsonrpc":"2.0","id":1,"method":"nope"}), None);
    assert_eq!((r.status, code(&r)), (200, -32601));
}

#[test]
fn notifications_are_silent_unless_mirrors_are_wrong() {
    let n = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(
        serve(n.clone(), None),
        Reply {
            status: 202,
            body: None
        }
    );
    assert_eq!(
        serve(json!({"jsonrpc":"2.0","method":"no/such"}), None).body,
        None
    );
    let mut modern_n =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
    modern_n["params"]["_meta"] = meta();
    let ok = serve(
        modern_n.clone(),
        Some(hdr(&[V], &["notifications/cancelled"], &[])),
    );
    assert_eq!(
        ok,
        Reply {
            status: 202,
            body: None
        }
    );
    let bad = serve(modern_n, Some(hdr(&[V], &[], &[])));
    assert_eq!((bad.status, code(&bad)), (400, -32020));
    assert!(bad.body.unwrap().get("id").is_none());
    // A modern notification whose _meta is wrong is still answered with nothing.
    let broken = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"io.modelcontextprotocol/protocolVersion": 1}}});
    assert_eq!(serve(broken, None).body, None);
    // A client's response is accepted silently.
    assert_eq!(
        serve(json!({"jsonrpc":"2.0","id":5,"result":{}}), None).status,
        202
    );
    // A handshake notification with a modern header is refused.
    let r = serve(n, Some(hdr(&[V], &[], &[])));
    assert_eq!((r.status, code(&r)), (400, -32020));
}

#[test]
fn handshake_context_carries_the_header_version() {
    let r = serve(
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        Some(hdr(&["2025-06-18"], &[], &[])),
    );
    assert_eq!(r.body.unwrap()["result"]["v"], "2025-06-18");
    let r = serve(
        json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        Some(MirrorHeaders::default()),
    );
    assert_eq!(r.body.unwrap()["result"]["v"], "2025-11-25");
}
