//! `GET /healthz` and the opt-in `GET /metrics` through the real binary:
//! liveness whatever the authentication, no metrics route without
//! `--metrics`, the series a mixed workload leaves, and `/metrics` behind
//! the credential of `/mcp`.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::harness::*;

const TOKEN: &str = "metrics-test-token-0123456789abcdefghij";

fn post_call(
    s: &HttpClient,
    id: i64,
    name: &str,
    arguments: Value,
    auth: &[(&str, &str)],
) -> Value {
    let r = s.post(&call(id, name, arguments), auth);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// The samples of an exposition in the text format: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse::<f64>().unwrap())
        })
        .collect()
}

fn sample(all: &HashMap<String, f64>, series: &str) -> f64 {
    *all.get(series)
        .unwrap_or_else(|| panic!("no series {series} in the scrape: {all:#?}"))
}

fn assert_healthy(s: &HttpClient) {
    let r = s.raw_request("GET", "/healthz", &[], None);
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok\n".as_slice()));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let head = s.raw_request("HEAD", "/healthz", &[], None);
    assert_eq!((head.status, head.body.len()), (200, 0));
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = s.raw_request(method, "/healthz", &[], Some(b""));
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method}");
    }
    // A probe that names no host of the server, and a foreign Origin.
    let bytes = b"GET /healthz HTTP/1.1\r\nHost: probe.invalid\r\nOrigin: https://evil.example\r\nConnection: close\r\n\r\n";
    assert_eq!(s.raw(bytes).status, 200);
}

#[test]
fn healthz_needs_no_credential_whatever_the_auth_mode() {
    let ws = workspace();
    let open = HttpServer::start(ws.path(), &[]);
    assert_healthy(&open);

    let bearer = HttpServer::start(ws.path(), &["--auth-token", TOKEN]);
    assert_healthy(&bearer);
    let r = bearer.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &[]);
    assert_eq!(r.status, 401, "/mcp still needs the token");

    let mut cmd = command(ws.path(), &["--port", "0", "--oauth-mode"]);
    cmd.env(
        "CODING_TOOLS_MCP_OAUTH_PASSWORD",
        "correct horse battery staple",
    );
    let oauth = HttpServer::start_with(&mut cmd);
    assert_healthy(&oauth);
    let r = oauth.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &[]);
    assert_eq!(r.status, 401, "/mcp still needs an access token");
}

#[test]
fn metrics_is_no_route_without_the_flag() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    for method in ["GET", "HEAD"] {
        let r = s.raw_request(method, "/metrics", &[], None);
        assert_eq!(r.status, 404, "{method}");
    }
    // The environment variable turns it on, like the flag.
    let mut cmd = command(ws.path(), &["--port", "0"]);
    cmd.env("CODING_TOOLS_MCP_METRICS", "1");
    let on = HttpServer::start_with(&mut cmd);
    assert_eq!(on.raw_request("GET", "/metrics", &[], None).status, 200);
    // And it is HTTP only.
    let out = command(ws.path(), &["--stdio", "--metrics"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics"));
}

#[test]
fn metrics_count_a_mixed_workload() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "alpha\nbeta\n").unwrap();
    let s = HttpServer::start(ws.path(), &["--metrics"]);
    let c = &s.client;
    for id in 1..=2 {
        let r = post_call(c, id, "read_file", json!({"path": "a.txt"}), &[]);
        assert_eq!(r["result"]["isError"], false);
    }
    let r = post_call(c, 3, "read_file", json!({"path": "missing.txt"}), &[]);
    assert_eq!(
        r["result"]["structuredContent"]["error"]["code"],
        "NOT_FOUND"
    );
    let r = post_call(c, 4, "list_dir", json!({"path": ".", "bogus": 1}), &[]);
    assert_eq!(
        r["result"]["structuredContent"]["error"]["code"],
        "INVALID_ARGUMENT"
    );
    let r = post_call(c, 5, "exec_command", json!({"cmd": "echo hello"}), &[]);
    let sc = &r["result"]["structuredContent"];
    assert_eq!(
        (&sc["status"], &sc["stdout"]),
        (&json!("exited"), &json!("hello\n"))
    );
    // Refusals before dispatch count as responses, not as tool calls.
    assert_eq!(c.raw_request("GET", "/mcp", &[], None).status, 405);
    assert_eq!(c.raw_request("GET", "/healthz", &[], None).status, 200);

    let r = c.raw_request("GET", "/metrics", &[], None);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = String::from_utf8(r.body.clone()).unwrap();
    let all = samples(&text);
    let calls = |tool: &str, outcome: &str, code: &str| {
        sample(
            &all,
            &format!(
                "coding_tools_mcp_tool_calls_total{{code=\"{code}\",outcome=\"{outcome}\",tool=\"{tool}\"}}"
            ),
        )
    };
    assert_eq!(calls("read_file", "ok", ""), 2.0);
    assert_eq!(calls("read_file", "error", "NOT_FOUND"), 1.0);
    assert_eq!(calls("list_dir", "error", "INVALID_ARGUMENT"), 1.0);
    assert_eq!(calls("list_dir", "ok", ""), 0.0);
    assert_eq!(calls("exec_command", "ok", ""), 1.0);
    assert_eq!(
        calls("git_status", "ok", ""),
        0.0,
        "every tool has its series"
    );
    let count = |tool: &str| {
        sample(
            &all,
            &format!("coding_tools_mcp_tool_call_duration_seconds_count{{tool=\"{tool}\"}}"),
        )
    };
    assert_eq!(
        (count("read_file"), count("list_dir"), count("exec_command")),
        (3.0, 1.0, 1.0)
    );
    assert_eq!(
        sample(
            &all,
            "coding_tools_mcp_tool_call_duration_seconds_bucket{tool=\"read_file\",le=\"+Inf\"}"
        ),
        3.0
    );
    assert!(
        sample(
            &all,
            "coding_tools_mcp_tool_call_duration_seconds_sum{tool=\"exec_command\"}"
        ) > 0.0
    );
    // Five tool calls and /healthz answered 200, GET /mcp 405; the scrape
    // itself is counted after it is rendered.
    assert_eq!(
        sample(&all, "coding_tools_mcp_http_responses_total{code=\"200\"}"),
        6.0
    );
    assert_eq!(
        sample(&all, "coding_tools_mcp_http_responses_total{code=\"405\"}"),
        1.0
    );
    assert!(sample(&all, "coding_tools_mcp_http_connections_open") >= 1.0);
    assert_eq!(sample(&all, "coding_tools_mcp_commands_active"), 0.0);
    assert_eq!(sample(&all, "coding_tools_mcp_commands_retained"), 1.0);
    assert_eq!(
        sample(&all, "coding_tools_mcp_command_output_retained_bytes"),
        6.0,
        "hello\\n"
    );
    assert!(sample(&all, "process_resident_memory_bytes") > 1e6);
    assert!(sample(&all, "process_open_fds") >= 3.0);
    for family in [
        "coding_tools_mcp_tool_calls_total counter",
        "coding_tools_mcp_tool_call_duration_seconds histogram",
        "coding_tools_mcp_http_responses_total counter",
        "process_open_fds gauge",
    ] {
        assert!(text.contains(&format!("# TYPE {family}\n")), "{family}");
    }

    // The scrape was counted; HEAD has the headers only; other methods 405.
    let again =
        samples(&String::from_utf8(c.raw_request("GET", "/metrics", &[], None).body).unwrap());
    assert_eq!(
        sample(
            &again,
            "coding_tools_mcp_http_responses_total{code=\"200\"}"
        ),
        7.0
    );
    let head = c.raw_request("HEAD", "/metrics", &[], None);
    assert_eq!((head.status, head.body.len()), (200, 0));
    let post = c.raw_request("POST", "/metrics", &[], Some(b""));
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
}

#[test]
fn metrics_need_the_credential_of_mcp() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &["--metrics", "--auth-token", TOKEN]);
    let bearer = format!("Bearer {TOKEN}");
    let r = s.raw_request("GET", "/metrics", &[], None);
    assert_eq!(r.status, 401);
    assert!(
        r.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer"))
    );
    assert!(!String::from_utf8_lossy(&r.body).contains("coding_tools_mcp_"));
    let wrong = s.raw_request(
        "GET",
        "/metrics",
        &[("Authorization", "Bearer not-the-token")],
        None,
    );
    assert_eq!(wrong.status, 401);
    let ok = s.raw_request(
        "GET",
        "/metrics",
        &[("Authorization", bearer.as_str())],
        None,
    );
    assert_eq!(ok.status, 200);
    let all = samples(&String::from_utf8(ok.body).unwrap());
    // The two refusals are in the scrape.
    assert_eq!(
        sample(&all, "coding_tools_mcp_http_responses_total{code=\"401\"}"),
        2.0
    );
    // A foreign Host is refused as on /mcp, token or not.
    let bytes = format!(
        "GET /metrics HTTP/1.1\r\nHost: attacker.invalid\r\nAuthorization: {bearer}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(s.raw(bytes.as_bytes()).status, 403);
    // Liveness stays open.
    assert_eq!(s.raw_request("GET", "/healthz", &[], None).status, 200);
}
