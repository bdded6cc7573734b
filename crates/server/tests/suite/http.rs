//! The Streamable HTTP transport, end to end: statuses, mirrors, card, auth.

use serde_json::{Value, json};

use super::harness::*;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn ping() -> Value {
    json!({"jsonrpc":"2.0","id":1,"method":"ping"})
}

fn modern_body(method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc":"2.0","id":7,"method":method,"params":params})
}

#[test]
fn handshake_over_http_in_both_versions() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    for v in ["2025-11-25", "2025-06-18"] {
        let r = s.post(&init_request(1, v), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["result"]["protocolVersion"], v);
        assert!(
            r.header("mcp-session-id").is_none(),
            "a session id was minted"
        );
        let r = s.post(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
            &[("MCP-Protocol-Version", v)],
        );
        assert_eq!(r.status, 200);
        assert!(r.json()["result"].get("ttlMs").is_none());
    }
    // A client's stale session id is ignored, not refused.
    let r = s.post(&ping(), &[("Mcp-Session-Id", "stale-123")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    // Notifications are an empty 202.
    let r = s.post(
        &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        &[],
    );
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty());
}

#[test]
fn transport_refusals() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    for m in ["GET", "HEAD", "DELETE", "PUT"] {
        let r = s.raw_request(m, "/mcp", &[], None);
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("POST"), "{m}");
    }
    let body = ping().to_string();
    let r = s.raw_request(
        "POST",
        "/mcp",
        &[("Content-Type", "text/plain")],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 415);
    let r = s.raw_request("POST", "/mcp", &[], Some(body.as_bytes()));
    assert_eq!(r.status, 415);
    // No Content-Length (chunked body): 411.
    let chunked = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    assert_eq!(s.raw(chunked.as_bytes()).status, 411);
    // Over 1 MiB: 413 with data.max_bytes.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1024 * 1024)
    );
    let r = s.raw_request("POST", "/mcp", &[JSON], Some(big.as_bytes()));
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["data"]["max_bytes"], 1_048_576);
    // Parse error and batch: 400.
    let r = s.raw_request("POST", "/mcp", &[JSON], Some(b"{nope"));
    assert_eq!((r.status, r.code()), (400, -32700));
    assert!(r.json().get("id").is_none());
    let r = s.raw_request(
        "POST",
        "/mcp",
        &[JSON],
        Some(format!("[{body}]").as_bytes()),
    );
    assert_eq!((r.status, r.code()), (400, -32600));
    // Invalid envelope: 200 with -32600.
    let r = s.post(&json!({"jsonrpc":"1.0","id":3,"method":"ping"}), &[]);
    assert_eq!((r.status, r.code()), (200, -32600));
    assert_eq!(r.json()["id"], 3);
    // Unknown handshake version header: 400 before dispatch, every version listed.
    let r = s.post(&ping(), &[("MCP-Protocol-Version", "2024-01-01")]);
    assert_eq!((r.status, r.code()), (400, -32600));
    assert_eq!(
        r.json()["error"]["data"]["supported"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"])
    );
    // Unknown path.
    assert_eq!(s.raw_request("GET", "/nope", &[], None).status, 404);
}

#[test]
fn origin_is_checked_against_dns_rebinding() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &["--allowed-origin", "https://app.example"]);
    let r = s.post(&ping(), &[("Origin", "http://evil.example")]);
    assert_eq!(r.status, 403);
    for ok in [
        "http://localhost:5173",
        "http://127.0.0.1:8000",
        "http://[::1]:3000",
        "https://app.example",
    ] {
        let r = s.post(&ping(), &[("Origin", ok)]);
        assert_eq!(r.status, 200, "{ok}");
        assert_eq!(r.header("access-control-allow-origin"), Some(ok));
    }
    let r = s.raw_request(
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", "http://localhost:5173"),
            ("Access-Control-Request-Method", "POST"),
        ],
        None,
    );
    assert_eq!(r.status, 204);
    // The reference's spelling and order, then the headers only we read.
    // No session or stream-resumption headers: there are neither (issue 36).
    let allowed = r.header("access-control-allow-headers").unwrap();
    assert!(
        !allowed.contains("Mcp-Session-Id") && !allowed.contains("Last-Event-ID"),
        "{allowed}"
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .starts_with(
                "Accept, Authorization, Content-Type, MCP-Protocol-Version, Mcp-Method, Mcp-Name, X-Coding-Tools-Budget-Secs"
            ),
        "{:?}",
        r.headers
    );
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, HEAD, POST, OPTIONS")
    );
    assert_eq!(r.header("allow"), Some("GET, HEAD, POST, OPTIONS"));
    let r = s.raw_request(
        "OPTIONS",
        "/mcp",
        &[("Origin", "http://evil.example")],
        None,
    );
    assert_eq!(r.status, 403);
}

#[test]
fn modern_error_table_over_http() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let v = MODERN;
    // OK, with no handshake.
    let r = s.post_modern("tools/list", json!({}));
    assert_eq!(r.status, 200);
    let res = r.json()["result"].clone();
    assert_eq!(
        (
            res["ttlMs"].clone(),
            res["cacheScope"].clone(),
            res["resultType"].clone()
        ),
        (json!(0), json!("private"), json!("complete"))
    );
    // -32601 → 404.
    let r = s.post(
        &modern_body("resources/list", json!({})),
        &[
            ("MCP-Protocol-Version", v),
            ("Mcp-Method", "resources/list"),
        ],
    );
    assert_eq!((r.status, r.code()), (404, -32601));
    // -32602 (missing clientCapabilities) → 400, even with contradicting headers.
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion": v}}});
    let r = s.post(
        &body,
        &[
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Mcp-Method", "ping"),
        ],
    );
    assert_eq!((r.status, r.code()), (400, -32602));
    // -32602 unknown tool → 400 in the modern era.
    let r = s.post_modern("tools/call", json!({"name": "no_such_tool"}));
    assert_eq!((r.status, r.code()), (400, -32602));
    // -32022 → 400 with supported + requested, even when the header disagrees.
    let mut meta_bad = meta();
    meta_bad["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": meta_bad}});
    let r = s.post(
        &body,
        &[("MCP-Protocol-Version", v), ("Mcp-Method", "tools/list")],
    );
    assert_eq!((r.status, r.code()), (400, -32022));
    assert_eq!(
        r.json()["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "v999.0.0", "received": "v999.0.0"})
    );
    // -32020 → 400: missing, duplicated, contradicting.
    let b = modern_body("tools/list", json!({}));
    for headers in [
        vec![("Mcp-Method", "tools/list")],
        vec![("MCP-Protocol-Version", v)],
        vec![
            ("MCP-Protocol-Version", v),
            ("MCP-Protocol-Version", v),
            ("Mcp-Method", "tools/list"),
        ],
        vec![
            ("MCP-Protocol-Version", v),
            ("Mcp-Method", "tools/list"),
            ("Mcp-Method", "tools/list"),
        ],
        vec![("MCP-Protocol-Version", v), ("Mcp-Method", "TOOLS/LIST")],
    ] {
        let r = s.post(&b, &headers);
        assert_eq!((r.status, r.code()), (400, -32020), "{headers:?}");
    }
    // A modern header over a handshake body is a mirror violation, initialize included.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        &[("MCP-Protocol-Version", v)],
    );
    assert_eq!((r.status, r.code()), (400, -32020));
    let r = s.post(
        &init_request(1, "2025-11-25"),
        &[("MCP-Protocol-Version", v), ("Mcp-Method", "initialize")],
    );
    assert_eq!((r.status, r.code()), (400, -32020));
    // Tool failures stay 200 with isError and resultType complete.
    let r = s.post_modern(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": 5}}),
    );
    assert_eq!(r.status, 200);
    let res = r.json()["result"].clone();
    assert_eq!(res["isError"], true);
    assert_eq!(res["resultType"], "complete");
    assert_eq!(
        res["structuredContent"]["error"]["code"],
        "INVALID_ARGUMENT"
    );
    // Handshake-era dispatched errors stay 200.
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}),
        &[],
    );
    assert_eq!((r.status, r.code()), (200, -32601));
    let r = s.post(&call(1, "no_such_tool", json!({})), &[]);
    assert_eq!((r.status, r.code()), (200, -32602));
    let r = s.post(
        &json!({"jsonrpc":"2.0","id":1,"method":"server/discover"}),
        &[],
    );
    assert_eq!((r.status, r.code()), (200, -32601));
}

#[test]
fn mcp_name_mirrors_with_base64_and_whitespace() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let b = modern_body(
        "tools/call",
        json!({"name": "server_info", "arguments": {}}),
    );
    let base = [
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
    ];
    let with = |name: &[(&'static str, &'static str)]| {
        let mut h = base.to_vec();
        h.extend_from_slice(name);
        s.post(&b, &h)
    };
    assert_eq!(with(&[("Mcp-Name", "server_info")]).status, 200);
    assert_eq!(with(&[("Mcp-Name", "  server_info  ")]).status, 200);
    assert_eq!(
        with(&[("Mcp-Name", "=?base64?c2VydmVyX2luZm8=?=")]).status,
        200
    );
    for bad in [
        vec![],
        vec![("Mcp-Name", "read_file")],
        vec![("Mcp-Name", "server_info"), ("Mcp-Name", "server_info")],
        vec![("Mcp-Name", "=?base64?bm90LWl0?=")],
        vec![("Mcp-Name", "=?base64?***?=")],
    ] {
        let r = with(&bad);
        assert_eq!((r.status, r.code()), (400, -32020), "{bad:?}");
    }
    // A non-ASCII subject must travel as base64.
    let b = modern_body("tools/call", json!({"name": "outil_é", "arguments": {}}));
    let r = s.post(
        &b,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?b3V0aWxfw6k=?="),
        ],
    );
    assert_eq!(
        (r.status, r.code()),
        (400, -32602),
        "mirror passed, unknown tool"
    );
    // Base64 payload over 8192 characters is refused.
    let long = format!("=?base64?{}?=", "QUFB".repeat(2049));
    let b = modern_body("tools/call", json!({"name": "A".repeat(6147)}));
    let r = s.post(
        &b,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", &long),
        ],
    );
    assert_eq!((r.status, r.code()), (400, -32020));
}

#[test]
fn modern_notifications() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let n = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta": meta()}});
    let r = s.post(
        &n,
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "notifications/cancelled"),
        ],
    );
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty());
    let r = s.post(&n, &[("MCP-Protocol-Version", MODERN)]);
    assert_eq!((r.status, r.code()), (400, -32020));
}

#[test]
fn server_card_lists_versions_newest_first() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    for path in ["/.well-known/mcp.json", "/.well-known/mcp/server-card.json"] {
        let r = s.raw_request("GET", path, &[], None);
        assert_eq!(r.status, 200);
        let card = r.json();
        assert_eq!(
            card["supportedProtocolVersions"],
            json!(["2026-07-28", "2025-11-25", "2025-06-18"])
        );
        assert_eq!(card["tools"]["count"], 18);
        assert_eq!(card["transport"]["endpoint"], "/mcp");
        assert_eq!(card["transport"]["methods"], json!(["POST", "OPTIONS"]));
        // The reference's spelling, and its null scheme/header without auth.
        assert_eq!(card["transport"]["type"], "streamable_http");
        assert_eq!(
            (
                card["auth"]["type"].clone(),
                card["auth"]["scheme"].clone(),
                card["auth"]["header"].clone()
            ),
            (json!("none"), Value::Null, Value::Null)
        );
        assert!(card["auth"].get("scheme").is_some() && card["auth"].get("header").is_some());
        assert_eq!(
            card["tools"]["annotations"]["apply_patch"]["destructiveHint"],
            true
        );
    }
    assert_eq!(
        s.raw_request("POST", "/.well-known/mcp.json", &[JSON], Some(b"{}"))
            .status,
        405
    );
}

#[test]
fn wait_budget_header() {
    let ws = workspace();
    let s = HttpServer::start_with(
        command(ws.path(), &["--port", "0", "--max-wait-secs", "20"])
            .env("CODING_TOOLS_MCP_TRACE", "1"),
    );
    let r = s.post(
        &call(1, "server_info", json!({"detail": "full"})),
        &[("X-Coding-Tools-Budget-Secs", "5")],
    );
    assert_eq!(r.status, 200);
    for bad in ["0", "-3", "abc", "1.5"] {
        let r = s.post(
            &call(1, "server_info", json!({"detail": "full"})),
            &[("X-Coding-Tools-Budget-Secs", bad)],
        );
        assert_eq!((r.status, r.code()), (400, -32602), "{bad}");
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert!(text.contains("X-Coding-Tools-Budget-Secs"));
        assert!(
            !text.contains(&format!("\"{bad}\"")),
            "echoed the raw value"
        );
    }
    let r = s.post(
        &call(1, "server_info", json!({"detail": "full"})),
        &[
            ("X-Coding-Tools-Budget-Secs", "5"),
            ("X-Coding-Tools-Budget-Secs", "6"),
        ],
    );
    assert_eq!(r.status, 400);
    // Trace: the header's budget, clamped to the deployment maximum, with its source.
    let r = s.post(
        &call(2, "server_info", json!({"detail": "full"})),
        &[("X-Coding-Tools-Budget-Secs", "90")],
    );
    assert_eq!(r.status, 200);
    let r = s.post(&call(3, "server_info", json!({"detail": "full"})), &[]);
    assert_eq!(r.status, 200);
    let mut policies = Vec::new();
    while policies.len() < 3 {
        let line = s.stderr.next().expect("trace line");
        if line.contains("request_policy_selected") {
            policies.push(serde_json::from_str::<Value>(&line).unwrap());
        }
    }
    assert_eq!(policies[0]["effective_wait_secs"], 5);
    assert_eq!(policies[0]["budget_source"], "request_header");
    assert_eq!(policies[1]["effective_wait_secs"], 20);
    assert_eq!(policies[1]["requested_budget_secs"], 90);
    assert_eq!(policies[2]["budget_source"], "deployment");
    assert_eq!(policies[2]["requested_budget_secs"], Value::Null);
    // Above the maximum, however large, is capped rather than refused.
    for huge in ["21", "99999999999999999999999"] {
        let r = s.post(
            &call(4, "server_info", json!({"detail": "full"})),
            &[("X-Coding-Tools-Budget-Secs", huge)],
        );
        assert_eq!(
            r.status,
            200,
            "{huge}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let policy = loop {
            let line = s.stderr.next().expect("trace line");
            if line.contains("request_policy_selected") {
                break serde_json::from_str::<Value>(&line).unwrap();
            }
        };
        assert_eq!(policy["effective_wait_secs"], 20, "{huge}");
        assert_eq!(policy["budget_source"], "request_header", "{huge}");
    }
}

#[test]
fn bearer_token() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &["--auth-token", "tok-123"]);
    let r = s.post(&ping(), &[]);
    assert_eq!(r.status, 401);
    // A static token has no OAuth metadata to point to (RFC 9728's
    // resource_metadata is for OAuth only), and none is served.
    assert_eq!(
        r.header("www-authenticate").unwrap(),
        "Bearer realm=\"coding-tools-mcp\""
    );
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        assert_eq!(s.raw_request("GET", path, &[], None).status, 404, "{path}");
    }
    let r = s.post(&ping(), &[("Authorization", "Bearer wrong")]);
    assert_eq!(r.status, 401);
    assert!(
        !r.header("www-authenticate")
            .unwrap()
            .contains("resource_metadata")
    );
    let r = s.post(&ping(), &[("Authorization", "Bearer tok-123")]);
    assert_eq!(r.status, 200);
    // The card stays public and says auth is required.
    let card = s.raw_request("GET", "/.well-known/mcp.json", &[], None);
    assert_eq!(card.status, 200);
    assert_eq!(card.json()["auth"]["type"], "bearer");
    assert!(!String::from_utf8_lossy(&card.body).contains("tok-123"));
}

#[test]
fn non_loopback_bind_with_token_serves() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &["--host", "0.0.0.0", "--auth-token", "t0k"]);
    assert_eq!(
        s.post(&ping(), &[("Authorization", "Bearer t0k")]).status,
        200
    );
}

/// The error object of a response, with its id.
fn error_of(r: &HttpResponse) -> (u16, Value, Value) {
    let v = r.json();
    (r.status, v["error"].clone(), v["id"].clone())
}

#[test]
fn unsupported_versions_name_the_received_version() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    // From the body, with headers that repeat it or not.
    let mut m = meta();
    m["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": m}});
    for version_header in ["2099-01-01", MODERN] {
        let r = s.post(
            &body,
            &[
                ("MCP-Protocol-Version", version_header),
                ("Mcp-Method", "tools/list"),
            ],
        );
        let (status, error, id) = error_of(&r);
        assert_eq!(
            (status, error["code"].clone(), id),
            (400, json!(-32022), json!(1))
        );
        assert_eq!(error["data"]["received"], "2099-01-01");
        assert_eq!(error["data"]["requested"], "2099-01-01");
        assert_eq!(error["data"]["supported"], json!(["2026-07-28"]));
    }
    // From the header of a handshake-era request: refused before dispatch, id null.
    let r = s.post(&ping(), &[("MCP-Protocol-Version", "2024-01-01")]);
    let (status, error, id) = error_of(&r);
    assert_eq!((status, error["code"].clone()), (400, json!(-32600)));
    assert_eq!(id, Value::Null);
    assert!(r.json().as_object().unwrap().contains_key("id"));
    assert_eq!(error["data"]["received"], "2024-01-01");
    assert_eq!(
        error["data"]["supported"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"])
    );
}

#[test]
fn reason_words_are_the_references() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let v = MODERN;
    let list = modern_body("tools/list", json!({}));
    let reason = |body: &Value, headers: &[(&str, &str)]| {
        let r = s.post(body, headers);
        let (status, error, id) = error_of(&r);
        assert_eq!((status, id), (400, json!(7)), "{error}");
        (
            error["code"].as_i64().unwrap(),
            error["data"]["reason"].as_str().unwrap_or("").to_owned(),
            error["data"].clone(),
        )
    };
    let (code, why, data) = reason(
        &list,
        &[
            ("MCP-Protocol-Version", v),
            ("MCP-Protocol-Version", v),
            ("Mcp-Method", "tools/list"),
        ],
    );
    assert_eq!((code, why.as_str()), (-32020, "duplicate"));
    assert_eq!(data["header"], "MCP-Protocol-Version");
    let (_, why, _) = reason(
        &list,
        &[("MCP-Protocol-Version", v), ("Mcp-Method", "ping")],
    );
    assert_eq!(why, "mismatch");
    let (_, why, _) = reason(&list, &[("Mcp-Method", "tools/list")]);
    assert_eq!(why, "missing");
    let call_body = modern_body("tools/call", json!({"name": "server_info"}));
    let call = |name: &str| {
        reason(
            &call_body,
            &[
                ("MCP-Protocol-Version", v),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", name),
            ],
        )
    };
    let long = format!("=?base64?{}?=", "QUFB".repeat(2049));
    let (code, why, data) = call(&long);
    assert_eq!((code, why.as_str()), (-32020, "oversized"));
    assert_eq!(data["max_length"], 8192);
    let (_, why, _) = call("=?base64?***?=");
    assert_eq!(why, "undecodable");
    let (_, why, _) = call("read_file");
    assert_eq!(why, "mismatch");
    // Mistyped _meta fields.
    let headers = [("MCP-Protocol-Version", v), ("Mcp-Method", "tools/list")];
    for (key, value, expected) in [
        (
            "io.modelcontextprotocol/protocolVersion",
            json!(5),
            "protocol_version",
        ),
        (
            "io.modelcontextprotocol/clientCapabilities",
            json!([]),
            "client_capabilities",
        ),
        (
            "io.modelcontextprotocol/clientInfo",
            json!("me"),
            "client_info",
        ),
    ] {
        let mut body = list.clone();
        body["params"]["_meta"][key] = value;
        let (code, why, _) = reason(&body, &headers);
        assert_eq!((code, why.as_str()), (-32602, expected), "{key}");
    }
    // Envelope reasons.
    let r = s.post(&json!({"jsonrpc":"2.0","id":2,"method":5}), &[]);
    assert_eq!(r.json()["error"]["data"]["reason"], "method");
    let r = s.post(&json!({"jsonrpc":"2.0","id":[2],"method":"ping"}), &[]);
    assert_eq!(r.json()["error"]["data"]["reason"], "id");
}

#[test]
fn odd_meta_values_keep_the_request_id() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let headers = [
        JSON,
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
    ];
    let with_meta = |extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"x"}},"x":{extra}}}}}}}"#
        )
    };
    // A lone surrogate is grammatical JSON: served, as the reference serves it.
    let r = s.raw_request(
        "POST",
        "/mcp",
        &headers,
        Some(with_meta(r#""\ud800""#).as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["id"], 1);
    assert!(r.json()["result"]["tools"].is_array());
    // Nested 200 deep: carried, not walked, and served (issue 36).
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let r = s.raw_request("POST", "/mcp", &headers, Some(with_meta(&deep).as_bytes()));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Values no JSON parser here reads, and nesting past 1,000 levels:
    // still answered to id 1.
    for extra in [
        "NaN",
        "-Infinity",
        &format!("{}{}", "[".repeat(1_200), "]".repeat(1_200)),
    ] {
        let r = s.raw_request("POST", "/mcp", &headers, Some(with_meta(extra).as_bytes()));
        assert_eq!(
            (r.status, r.code(), r.json()["id"].clone()),
            (400, -32700, json!(1)),
            "{extra}"
        );
    }
}

#[test]
fn unusable_content_length_is_a_json_rpc_refusal() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let body = ping().to_string();
    let send = |length: &str| {
        let raw = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n{body}"
        );
        s.raw(raw.as_bytes())
    };
    for (length, status) in [
        ("abc", 400),
        ("-5", 400),
        ("+2", 400),
        ("1_0", 400),
        ("", 400),
        ("99999999999999999999999", 413),
        ("99999999999", 413),
    ] {
        let r = send(length);
        let (got, error, id) = error_of(&r);
        assert_eq!(
            (got, error["code"].clone()),
            (status, json!(-32600)),
            "{length:?}"
        );
        assert_eq!(id, Value::Null, "{length:?}");
        assert!(r.json().as_object().unwrap().contains_key("id"));
        if status == 413 {
            assert_eq!(error["data"]["max_bytes"], 1_048_576);
        } else {
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("Content-Length")
            );
        }
    }
    // Two lengths that disagree.
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nContent-Length: 3\r\n\r\n{body}",
        body.len()
    );
    let r = s.raw(raw.as_bytes());
    assert_eq!((r.status, r.code()), (400, -32600));
    assert_eq!(r.header("connection"), Some("close"));
    // Before the length, the transport's other checks still come first.
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: abc\r\n\r\n{body}"
    );
    assert_eq!(s.raw(raw.as_bytes()).status, 415);
    // Pipelined requests with good lengths on one connection are all served.
    let one = |id: u32, close: bool| {
        let b = json!({"jsonrpc":"2.0","id":id,"method":"ping"}).to_string();
        format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{b}",
            b.len(),
            if close { "Connection: close\r\n" } else { "" }
        )
    };
    let raw = format!("{}{}{}", one(1, false), one(2, false), one(3, true));
    let mut conn = std::net::TcpStream::connect(&s.addr).unwrap();
    conn.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
    std::io::Write::write_all(&mut conn, raw.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = std::io::Read::read_to_string(&mut conn, &mut out);
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3, "{out}");
    for id in 1..=3 {
        assert!(out.contains(&format!(r#""id":{id},"result""#)), "{out}");
    }
}

#[test]
fn a_json_value_that_is_not_an_object_is_refused_with_400() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    for body in ["5", "\"ping\"", "null", "true"] {
        let r = s.raw_request("POST", "/mcp", &[JSON], Some(body.as_bytes()));
        assert_eq!((r.status, r.code()), (400, -32600), "{body}");
    }
}

#[test]
fn refusal_messages_are_the_references() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &["--auth-token", "tok-123"]);
    for auth in [None, Some("Bearer wrong")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        let r = s.post(&ping(), &headers);
        let (status, error, id) = error_of(&r);
        assert_eq!(status, 401);
        assert_eq!(error["message"], "Unauthorized");
        assert_eq!(id, Value::Null);
    }
    let r = s.post(
        &ping(),
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", "Bearer tok-123"),
        ],
    );
    let (status, error, id) = error_of(&r);
    assert_eq!(status, 403);
    assert!(
        error["message"].as_str().unwrap().contains("Origin denied"),
        "{error}"
    );
    assert_eq!(id, Value::Null);
}

/// Security case S10 (issue 17, item 3): a loopback server answers 403 to a
/// Host that names another server (DNS rebinding), and serves every
/// loopback spelling of itself.
#[test]
fn foreign_host_is_refused_on_a_loopback_server() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_owned();
    let other_port = if port == "1" { "2" } else { "1" };
    let body = ping().to_string();
    let send = |host_line: &str, target: &str| {
        let raw = format!(
            "POST {target} HTTP/1.1\r\n{host_line}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.raw(raw.as_bytes())
    };
    for host in [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        format!("localhost:{other_port}"),
        format!("localhost.attacker.example:{port}"),
        format!("127.0.0.1:{other_port}"),
        "10.0.0.1".to_owned(),
    ] {
        let r = send(&format!("Host: {host}\r\n"), "/mcp");
        assert_eq!(r.status, 403, "{host}");
        assert_eq!(
            r.json()["error"]["data"]["reason"],
            "host_not_allowed",
            "{host}"
        );
    }
    // An absolute-form target names the server too.
    let r = send(
        &format!("Host: localhost:{port}\r\n"),
        "http://attacker.example/mcp",
    );
    assert_eq!(r.status, 403);
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
        format!("LOCALHOST:{port}"),
    ] {
        let r = send(&format!("Host: {host}\r\n"), "/mcp");
        assert_eq!(
            r.status,
            200,
            "{host}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // No Host at all (an HTTP/1.0 client) is no rebinding browser.
    let raw = format!(
        "POST /mcp HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(s.raw(raw.as_bytes()).status, 200);
    // ... but an HTTP/1.1 request must carry one (RFC 9112 §3.2).
    let raw = format!(
        "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let r = s.raw(raw.as_bytes());
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["data"]["reason"], "host_not_allowed");
    // The card is refused to a foreign Host as well.
    let r = s.raw(b"GET /.well-known/mcp.json HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 403);
}

/// Issue 17, item 1: one address holds at most 64 connections, so 200
/// idle connections from it leave room for another client.
#[test]
fn one_address_cannot_hold_every_connection_slot() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let held: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = s.from("127.0.0.2").post(&ping(), &[]);
    assert_eq!((r.status, r.json()["id"].clone()), (200, json!(1)));
    // Beyond its share, the address is told so (read before sending: the
    // refusal is written at once and the connection closed).
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
    let mut raw = String::new();
    std::io::Read::read_to_string(&mut c, &mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 429 "), "{raw}");
    assert!(raw.contains("too_many_connections"), "{raw}");
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(s.post(&ping(), &[]).status, 200);
}

#[test]
fn a_client_that_never_reads_its_answers_loses_its_connection() {
    // Issue 17 (attacker review, H1): pipelined requests into a socket the
    // client never drains held the connection (and a slot) for ever.
    use std::io::{Read, Write};
    use std::time::Duration;
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let addr = s.addr.clone();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    let writer = conn.try_clone().unwrap();
    let requests = 20_000;
    let sent = std::thread::spawn(move || {
        let mut w = writer;
        let one = format!("GET /.well-known/mcp.json HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        let mut n = 0;
        for _ in 0..requests {
            if w.write_all(one.as_bytes()).is_err() {
                break;
            }
            n += 1;
        }
        n
    });
    // Read nothing for longer than the write deadline (10 s).
    std::thread::sleep(Duration::from_secs(13));
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let _ = conn.read_to_end(&mut got);
    let answers = String::from_utf8_lossy(&got)
        .matches("HTTP/1.1 200")
        .count();
    let written = sent.join().unwrap();
    assert!(
        answers < written,
        "{answers} answers to {written} requests: the stalled connection was kept"
    );
    // The server serves others meanwhile and after.
    assert_eq!(s.post(&ping(), &[]).status, 200);
}

/// Issue 36: an unknown path is the contract's JSON-RPC error (-32601,
/// `id: null`, status 404), as the reference answers it.
#[test]
fn an_unknown_path_is_a_json_rpc_error() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let r = s.raw_request("GET", "/no/such/path", &[], None);
    assert_eq!(r.status, 404);
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["id"], Value::Null, "{v}");
    assert_eq!(v["error"]["code"], -32601, "{v}");
}

/// Issue 36: `_meta` is carried, not walked: a `2026-07-28` request whose
/// client capabilities nest 600 deep is served (the reference serves it);
/// past 1,000 levels a message is refused, and the server keeps serving.
#[test]
fn a_deep_capability_document_is_served_and_a_deeper_one_refused() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let deep = |levels: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"x":{}1{}}}}}}}}}"#,
            r#"{"a":"#.repeat(levels),
            "}".repeat(levels)
        )
    };
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];
    let r = s.raw_request("POST", "/mcp", &headers, Some(deep(600).as_bytes()));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        r.json()["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() == 18),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r = s.raw_request("POST", "/mcp", &headers, Some(deep(5_000).as_bytes()));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    let r = s.raw_request("POST", "/mcp", &headers, Some(deep(600).as_bytes()));
    assert_eq!(r.status, 200);
}
