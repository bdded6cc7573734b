//! Hostile HTTP traffic: every malformed request gets its precise answer or
//! is closed by a timeout, descriptors stay bounded, and the server keeps
//! serving the next client.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use super::harness::*;

/// Longest a timed-out connection may stay open: the 10 s read timeouts plus
/// a wide margin for a loaded machine (a liveness bound, not a speed claim).
const CLOSE_WITHIN: Duration = Duration::from_secs(60);

/// Writes what it can (the server may close early) and reads to the end.
fn exchange(addr: &str, bytes: &[u8]) -> Vec<u8> {
    exchange_on(TcpStream::connect(addr).unwrap(), bytes)
}

/// [`exchange`] on a connection already made.
fn exchange_on(mut s: TcpStream, bytes: &[u8]) -> Vec<u8> {
    s.set_read_timeout(Some(CLOSE_WITHIN)).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn status_of(raw: &[u8]) -> Option<u16> {
    let head = String::from_utf8_lossy(raw);
    head.split(' ').nth(1)?.parse().ok()
}

fn post_bytes(s: &HttpServer, body: &[u8]) -> (u16, serde_json::Value) {
    let r = s.raw_request(
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        Some(body),
    );
    let v = serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null);
    (r.status, v)
}

#[test]
fn malformed_bodies_get_precise_errors() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    let s = HttpServer::start(ws.path(), &[]);
    let deep_array = "[".repeat(10_000);
    let deep_params = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{}1{}}}"#,
        r#"{"a":"#.repeat(10_000),
        "}".repeat(10_000)
    );
    // A parse error carries the message's id when that much could be read.
    let parse_errors: Vec<(&str, Vec<u8>, serde_json::Value)> = vec![
        (
            "truncated",
            br#"{"jsonrpc":"2.0","id":1,"method":"pi"#.to_vec(),
            json!(1),
        ),
        ("deep array", deep_array.into_bytes(), json!(null)),
        ("deep params", deep_params.into_bytes(), json!(1)),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xff\xfeng\"}".to_vec(),
            json!(1),
        ),
        ("empty body", Vec::new(), json!(null)),
        ("NUL bytes", b"\0\0\0\0".to_vec(), json!(null)),
    ];
    for (name, body, id) in &parse_errors {
        let (status, v) = post_bytes(&s, body);
        assert_eq!(
            (status, v["error"]["code"].clone()),
            (400, json!(-32700)),
            "{name}: {v}"
        );
        assert_eq!(v.get("id").cloned().unwrap_or_default(), *id, "{name}: {v}");
        if id.is_null() {
            assert!(v.get("id").is_none(), "{name}: {v}");
        }
    }
    let invalid: Vec<(&str, serde_json::Value)> = vec![
        (
            "jsonrpc a number",
            json!({"jsonrpc": 2, "id": 1, "method": "ping"}),
        ),
        (
            "method a number",
            json!({"jsonrpc": "2.0", "id": 1, "method": 5}),
        ),
        (
            "id an object",
            json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}),
        ),
        (
            "id a fraction",
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
        ),
        (
            "id beyond i64",
            serde_json::from_str(
                r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#,
            )
            .unwrap(),
        ),
        ("not an object", json!("ping")),
    ];
    for (name, body) in &invalid {
        let (status, v) = post_bytes(&s, body.to_string().as_bytes());
        assert_eq!(v["error"]["code"], -32600, "{name}: {status} {v}");
        assert!(status == 200 || status == 400, "{name}: {status}");
    }
    // Params that are not an object are invalid params, as in the reference.
    let (status, v) = post_bytes(
        &s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        (status, v["error"]["code"].clone(), v["id"].clone()),
        (200, json!(-32602), json!(1))
    );
    // Wrong types inside a tool call are tool results, not transport errors.
    for args in [
        json!({"path": 5}),
        json!({"path": "a.txt", "start_line": "1"}),
        json!({"path": "a.txt", "start_line": -1}),
        json!({"path": "a.txt", "start_line": 1e300}),
        json!({"path": ["a.txt"]}),
        json!({"path": null}),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "read_file", "arguments": args}});
        let (status, v) = post_bytes(&s, body.to_string().as_bytes());
        assert_eq!(status, 200, "{args}: {v}");
        assert_eq!(v["result"]["isError"], true, "{args}: {v}");
        assert_eq!(
            v["result"]["structuredContent"]["error"]["code"], "INVALID_ARGUMENT",
            "{args}: {v}"
        );
    }
    // Wrong types in every modern _meta field and in the call's own fields
    // (headers mirroring what can be mirrored): -32602 with 400.
    let version = "io.modelcontextprotocol/protocolVersion";
    let caps = "io.modelcontextprotocol/clientCapabilities";
    let info = "io.modelcontextprotocol/clientInfo";
    for (name, method, params) in [
        (
            "version a number",
            "tools/list",
            json!({"_meta": {version: 20_260_728, caps: {}}}),
        ),
        (
            "version null",
            "tools/list",
            json!({"_meta": {version: null, caps: {}}}),
        ),
        (
            "capabilities an array",
            "tools/list",
            json!({"_meta": {version: "2026-07-28", caps: []}}),
        ),
        (
            "capabilities missing",
            "tools/list",
            json!({"_meta": {version: "2026-07-28"}}),
        ),
        (
            "client info a string",
            "tools/list",
            json!({"_meta": {version: "2026-07-28", caps: {}, info: "me"}}),
        ),
        (
            "tool name a number",
            "tools/call",
            json!({"name": 5, "_meta": {version: "2026-07-28", caps: {}}}),
        ),
        (
            "arguments a string",
            "tools/call",
            json!({"name": "server_info", "arguments": "x", "_meta": {version: "2026-07-28", caps: {}}}),
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params});
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        if let Some(subject) = params["name"].as_str() {
            headers.push(("Mcp-Name", subject));
        }
        let r = s.raw_request("POST", "/mcp", &headers, Some(body.to_string().as_bytes()));
        let (status, v): (u16, serde_json::Value) = (
            r.status,
            serde_json::from_slice(&r.body).unwrap_or_default(),
        );
        assert_eq!(
            (status, v["error"]["code"].clone(), v["id"].clone()),
            (400, json!(-32602), json!(3)),
            "{name}: {v}"
        );
    }
    // Numbers beyond any float are valid JSON: read exactly, and refused by the
    // integer decoder with the reason, not as a parse error.
    for (literal, reason) in [
        ("1e400", "unsafe_integer"),
        ("123456789012345678901234567890", "unsafe_integer"),
        ("1e-400", "fractional"),
        ("4503599627370496.5", "fractional"),
        ("1.00000000000000000001", "fractional"),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"a.txt","start_line":{literal}}}}}}}"#
        );
        let (status, v) = post_bytes(&s, body.as_bytes());
        assert_eq!(status, 200, "{literal}: {v}");
        let error = &v["result"]["structuredContent"]["error"];
        assert_eq!(error["code"], "INVALID_ARGUMENT", "{literal}: {v}");
        assert_eq!(error["details"]["reason"], reason, "{literal}: {v}");
    }
    // Duplicate keys: one answer, to one id.
    let (status, v) = post_bytes(&s, br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#);
    assert!(status == 200 || status == 400, "{status} {v}");
    assert!(v.is_object(), "{v}");
    // Still serving.
    let (status, v) = post_bytes(
        &s,
        json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!((status, v["id"].clone()), (200, json!(9)), "{v}");
}

#[test]
fn slow_and_oversized_requests_are_cut_off_and_descriptors_stay_bounded() {
    let ws = workspace();
    let s = HttpServer::start(ws.path(), &[]);
    let addr = s.addr.clone();
    // Oversized headers: refused (431) or closed, never served.
    let huge = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
        "a".repeat(1 << 20)
    );
    let raw = exchange(&addr, huge.as_bytes());
    assert!(
        matches!(status_of(&raw), None | Some(431)),
        "{:?}",
        status_of(&raw)
    );
    // Slow headers (slowloris), a body that never ends, and 400 idle
    // connections, all at once. The two are connected first: from one
    // address only 64 connections are served, the idle ones beyond are
    // refused.
    let slow_headers = {
        let conn = TcpStream::connect(&addr).unwrap();
        std::thread::spawn(move || {
            exchange_on(
                conn,
                b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl",
            )
        })
    };
    let endless_body = {
        let conn = TcpStream::connect(&addr).unwrap();
        std::thread::spawn(move || {
            exchange_on(
                conn,
                b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\":",
            )
        })
    };
    let idle: Vec<TcpStream> = (0..400)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let fds = std::fs::read_dir(format!("/proc/{}/fd", s.child.id()))
        .unwrap()
        .count();
    assert!(
        fds <= 256 + 32,
        "{fds} descriptors with 402 stalled clients (limit 256 connections)"
    );
    let raw = slow_headers.join().unwrap();
    assert!(
        matches!(status_of(&raw), None | Some(408)),
        "slow headers: {:?}",
        String::from_utf8_lossy(&raw)
    );
    let raw = endless_body.join().unwrap();
    assert_eq!(
        status_of(&raw),
        Some(408),
        "endless body: {:?}",
        String::from_utf8_lossy(&raw)
    );
    drop(idle);
    // The next client is served.
    let r = s.post(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}), &[]);
    assert_eq!((r.status, r.json()["id"].clone()), (200, json!(3)));
}

/// `yes` for 30 s and a 2 GiB `/dev/zero` stream at the same time, through
/// the real server over stdio: the server keeps each command's retained
/// output (512 KiB per stream) and drops the rest as it arrives, so its peak
/// RSS grows by at most that budget plus a fixed margin, and both commands
/// are gone afterwards.
#[test]
fn endless_and_huge_output_keeps_server_memory_bounded() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &["--permission-mode", "trusted"]);
    let pid = s.child.id();
    let r = s.request(&call(1, "server_info", json!({"detail": "full"})));
    assert_eq!(r["result"]["isError"], false, "{r}");
    let baseline = status_kib(pid, "VmRSS:");
    let yes = s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "yes", "timeout_ms": 30_000, "yield_time_ms": 0}),
    ));
    let zero = s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "head -c 2147483648 /dev/zero; echo done >&2", "timeout_ms": 600_000, "yield_time_ms": 0}),
    ));
    let id = |r: &serde_json::Value| {
        r["result"]["structuredContent"]["command_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_owned()
    };
    let (yes_id, zero_id) = (id(&yes), id(&zero));
    let running = live_descendants(pid);
    assert!(
        running.len() >= 2,
        "the commands are not seen running: {running:?}"
    );
    // Poll both until they end: yes by its 30 s timeout, the stream by EOF.
    let mut ended = std::collections::BTreeMap::new();
    // Each stream's last answer that carried its output up to then: the
    // answer that says "exited" may carry nothing more (the poll before it
    // reached the end while the command still wrote to stderr).
    let mut last_output = std::collections::BTreeMap::new();
    let mut n = 10;
    while ended.len() < 2 {
        for cid in [&yes_id, &zero_id] {
            if ended.contains_key(cid) {
                continue;
            }
            n += 1;
            let r = s.request(&call(
                n,
                "write_stdin",
                json!({"command_id": cid, "chars": "", "yield_time_ms": 5_000, "max_output_bytes": 1024}),
            ));
            let sc = &r["result"]["structuredContent"];
            let status = sc["status"].as_str().unwrap_or_else(|| panic!("{r}"));
            if sc["stdout_info"]["start_offset"] != sc["stdout_info"]["end_offset"] {
                last_output.insert(cid.clone(), sc.clone());
            }
            if status != "running" {
                ended.insert(cid.clone(), sc.clone());
            }
        }
    }
    let peak = status_kib(pid, "VmHWM:");
    let yes_end = &ended[&yes_id];
    let zero_end = &ended[&zero_id];
    assert_eq!(yes_end["status"], "timeout", "{yes_end}");
    assert_eq!(zero_end["status"], "exited", "{zero_end}");
    let zero_total = zero_end["stdout_info"]["end_offset"].as_u64();
    assert_eq!(zero_total, Some(2_147_483_648), "{zero_end}");
    let zero_output = last_output.get(&zero_id).unwrap_or(zero_end);
    assert_eq!(
        zero_output["truncated"], true,
        "2 GiB reported as whole: {zero_output}"
    );
    let yes_total = yes_end["stdout_info"]["end_offset"].as_u64().unwrap_or(0);
    // Retention: 2 commands x 2 streams x 512 KiB; margin for allocator and
    // pipe buffers.
    let budget_kib = 2 * 2 * 512;
    let margin_kib = 32 * 1024;
    eprintln!(
        "yes wrote {yes_total} bytes, /dev/zero 2 GiB; server RSS {baseline} KiB at rest, peak {peak} KiB"
    );
    assert!(
        peak <= baseline + budget_kib + margin_kib,
        "peak RSS {peak} KiB over {baseline} KiB + {budget_kib} KiB retention + {margin_kib} KiB margin"
    );
    assert!(
        yes_total > 2_147_483_648 / 100,
        "yes barely ran: {yes_total}"
    );
    // Both commands' processes are gone (the shell and what it started).
    let mut left = live_descendants(pid);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = live_descendants(pid);
    }
    assert!(
        left.is_empty(),
        "processes left after the commands ended: {left:?}"
    );
}

/// Live (non-zombie) processes descended from `root`, as `pid comm`.
fn live_descendants(root: u32) -> Vec<String> {
    let mut parent_of = std::collections::HashMap::new();
    let mut names = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...; comm may hold spaces, so split after ')'.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = tail.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(ppid) = fields.get(1).and_then(|p| p.parse::<u32>().ok()) {
            parent_of.insert(pid, ppid);
            names.insert(pid, head.split_once('(').map_or("", |(_, c)| c).to_owned());
        }
    }
    let mut out = Vec::new();
    for &pid in parent_of.keys() {
        let mut p = pid;
        while let Some(&pp) = parent_of.get(&p) {
            if pp == root {
                out.push(format!("{pid} {}", names[&pid]));
                break;
            }
            p = pp;
        }
    }
    out
}
