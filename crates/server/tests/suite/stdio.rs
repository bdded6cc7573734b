//! The stdio transport, end to end.

use serde_json::{Value, json};

use super::harness::*;

#[test]
fn handshake_in_both_versions_and_repeated_initialize() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    for (id, asked, answered) in [
        (1, "2025-11-25", "2025-11-25"),
        (2, "2025-06-18", "2025-06-18"),
        (3, "2026-07-28", "2025-11-25"),
        (4, "1999-01-01", "2025-11-25"),
    ] {
        let r = s.request(&init_request(id, asked));
        assert_eq!(r["id"], id);
        let res = &r["result"];
        assert_eq!(res["protocolVersion"], answered, "asked {asked}");
        assert_eq!(
            res["capabilities"],
            json!({"tools": {"listChanged": false}})
        );
        assert_eq!(res["serverInfo"]["name"], "coding-tools-mcp");
        assert_eq!(res["serverInfo"]["version"], "0.3.0");
        assert!(
            res["instructions"]
                .as_str()
                .unwrap()
                .contains("Run cargo test before you stop.")
        );
        assert!(
            res.get("resultType").is_none(),
            "handshake result gained a modern field"
        );
    }
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let r = s.request(&json!({"jsonrpc":"2.0","id":9,"method":"ping"}));
    assert_eq!(r, json!({"jsonrpc":"2.0","id":9,"result":{}}));
}

#[test]
fn calls_before_initialize_are_served() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let r = s.request(&json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 18);
    let r = s.request(&call(2, "server_info", json!({"detail": "full"})));
    assert_eq!(r["result"]["isError"], false);
    assert_eq!(r["result"]["structuredContent"]["tool_count"], 18);
}

/// A first request that is not `initialize` (the server then makes the
/// workspace's instructions after answering it) loses nothing: sent with
/// `initialize` in one write, both are answered in order, and the
/// instructions are those an `initialize`-first client gets.
#[test]
fn instructions_made_after_a_first_tools_list_are_the_same() {
    let ws = workspace();
    let first = {
        let mut s = StdioServer::start(ws.path(), &[]);
        let r = s.request(&init_request(1, "2025-11-25"));
        r["result"]["instructions"].as_str().unwrap().to_owned()
    };
    assert!(first.contains("Run cargo test before you stop."), "{first}");
    let mut s = StdioServer::start(ws.path(), &[]);
    let both = format!(
        "{}\n{}",
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        init_request(2, "2025-11-25")
    );
    s.send_raw(&both);
    let r = s.recv();
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), 18);
    let r = s.recv();
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"]["instructions"], first.as_str());
}

#[test]
fn modern_requests_without_a_handshake() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let r = s.request(
        &json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta": meta()}}),
    );
    let res = &r["result"];
    assert_eq!(res["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(res["resultType"], "complete");
    assert_eq!(
        (res["ttlMs"].clone(), res["cacheScope"].clone()),
        (json!(0), json!("private"))
    );
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "coding-tools-mcp"
    );
    assert!(
        res["instructions"]
            .as_str()
            .unwrap()
            .contains("Run cargo test")
    );
    let r = s.request(&json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"server_info","arguments":{},"_meta": meta()}}));
    assert_eq!(r["result"]["resultType"], "complete");
    assert!(r["result"].get("ttlMs").is_none());
    let r = s.request(&json!({"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta": meta()}}));
    assert_eq!(r["result"]["resultType"], "complete");
    // Unsupported modern version over stdio: -32022 with supported and requested.
    let mut bad = meta();
    bad["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let r =
        s.request(&json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"_meta": bad}}));
    assert_eq!(r["error"]["code"], -32022);
    assert_eq!(r["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(r["error"]["data"]["received"], "2099-01-01");
    // server/discover without modern _meta is a handshake-era unknown method.
    let r = s.request(&json!({"jsonrpc":"2.0","id":5,"method":"server/discover"}));
    assert_eq!(r["error"]["code"], -32601);
}

#[test]
fn protocol_errors_and_silence() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    s.send_raw("{oops");
    let r = s.recv();
    assert_eq!(r["error"]["code"], -32700);
    assert!(r.get("id").is_none());
    s.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    assert_eq!(s.recv()["error"]["code"], -32600);
    // Notifications and client responses get nothing; the next answer is the ping's.
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}));
    s.send(&json!({"jsonrpc":"2.0","method":"no/such/notification"}));
    s.send(&json!({"jsonrpc":"2.0","id":"c1","result":{}}));
    s.send_raw("");
    let r = s.request(&json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    assert_eq!(r["id"], "p");
    let r = s.request(&json!({"jsonrpc":"2.0","id":6,"method":"resources/list"}));
    assert_eq!(r["error"]["code"], -32601);
    let r =
        s.request(&json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"nope"}}));
    assert_eq!(r["error"]["code"], -32602);
    let r = s.request(&json!({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"server_info","arguments":[1]}}));
    assert_eq!(r["error"]["code"], -32602);
}

#[test]
fn pipelined_requests_are_all_answered_once() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let n = 200;
    let mut batch = String::new();
    for i in 0..n {
        let msg = if i % 2 == 0 {
            json!({"jsonrpc":"2.0","id":i,"method":"ping"})
        } else {
            call(i, "server_info", json!({"detail": "full"}))
        };
        batch.push_str(&msg.to_string());
        batch.push('\n');
    }
    s.send_raw(batch.trim_end());
    let mut ids: Vec<i64> = (0..n).map(|_| s.recv()["id"].as_i64().unwrap()).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
}

#[test]
fn eof_ends_cleanly_and_stdout_is_protocol_only() {
    let ws = workspace();
    let mut s = StdioServer::start_with(
        command(ws.path(), &["--stdio"]).env("CODING_TOOLS_MCP_TRACE", "full"),
    );
    let r = s.request(&call(
        0,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let runtime_dir = std::path::PathBuf::from(
        r["result"]["structuredContent"]["runtime"]["runtime_dir"]
            .as_str()
            .unwrap(),
    );
    assert!(runtime_dir.is_dir());
    s.send(&init_request(1, "2025-11-25"));
    s.send(&call(
        2,
        "exec_command",
        json!({"cmd": "echo hi", "env": {"API_TOKEN": "hunter2"}}),
    ));
    s.send(&call(
        3,
        "read_file",
        json!({"path": "AGENTS.md", "start_line": 1.0}),
    ));
    s.send_raw("not json");
    s.close_stdin();
    let status = s.wait();
    assert!(status.success(), "{status:?}");
    // Both readers end at EOF: drain them to the end.
    while s.stdout.next().is_some() {}
    while s.stderr.next().is_some() {}
    let out = s.stdout.seen.lock().unwrap().clone();
    assert_eq!(out.len(), 5, "{out:?}");
    for line in &out {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        assert!(v.get("result").is_some() || v.get("error").is_some());
    }
    // The trace went to stderr, with the secret redacted and nothing on stdout.
    let err = s.stderr.seen.lock().unwrap().join("\n");
    assert!(err.contains("\"event\":\"tool_call\""), "{err}");
    assert!(err.contains("\"event\":\"request_policy_selected\""));
    assert!(!err.contains("hunter2"), "secret leaked into the trace");
    assert!(err.contains("[REDACTED]"));
    assert!(!out.iter().any(|l| l.contains("\"event\"")));
    // The runtime directory is gone after exit.
    assert!(!runtime_dir.exists(), "{}", runtime_dir.display());
}

#[test]
fn trace_file_alone_traces_arguments_with_secret_values_redacted() {
    let ws = workspace();
    let trace = ws.path().join(".runtime-tmp/trace.jsonl");
    let trace_arg = trace.to_str().unwrap().to_owned();
    let mut s = StdioServer::start(ws.path(), &["--trace-file", &trace_arg]);
    s.request(&init_request(0, "2025-06-18"));
    let token = format!("ghp_{}", "Z9".repeat(18));
    let long = "x".repeat(1000);
    s.request(&call(
        1,
        "exec_command",
        json!({"cmd": format!("echo {token} | wc -c; echo {long} >/dev/null"), "env": {"A": "1"}}),
    ));
    s.request(&call(
        2,
        "search_text",
        json!({"query": format!("password={token}")}),
    ));
    // A long chain of name=value pieces neither crashes nor stalls the trace.
    let r = s.request(&call(
        3,
        "search_text",
        json!({"query": "a=".repeat(50_000)}),
    ));
    assert!(r.get("result").is_some(), "{r}");
    s.close_stdin();
    s.wait();
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(!text.contains(&token), "a token reached the trace: {text}");
    let calls: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 3, "{text}");
    let exec = &calls[0];
    assert_eq!(exec["tool"], "exec_command");
    assert_eq!(exec["status"], "exited", "{exec}");
    assert!(exec["command_id"].is_string(), "{exec}");
    assert!(exec["timestamp"].as_str().unwrap().ends_with('Z'));
    let cmd = exec["args"]["cmd"].as_str().unwrap();
    assert!(cmd.starts_with("echo [REDACTED] | wc -c"), "{cmd}");
    assert!(cmd.ends_with("...[truncated]") && cmd.len() < 300, "{cmd}");
    assert_eq!(exec["args"]["env"], "[REDACTED]");
    assert_eq!(calls[1]["args"]["query"], "password=[REDACTED]");
    // Nothing of the trace on stdout.
    assert!(
        !s.stdout
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("\"event\""))
    );
}

#[test]
fn odd_meta_values_keep_the_request_id_and_reasons_are_the_references() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let with_meta = |id: u32, extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{{"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"x":{extra}}}}}}}"#
        )
    };
    // A lone surrogate is served, as the reference serves it.
    s.send_raw(&with_meta(1, r#""\udc00""#));
    let r = s.recv();
    assert_eq!(
        (r["id"].clone(), r["result"]["resultType"].clone()),
        (json!(1), json!("complete")),
        "{r}"
    );
    // What cannot be parsed is still answered to its id.
    s.send_raw(&with_meta(2, "NaN"));
    let r = s.recv();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(2), json!(-32700)),
        "{r}"
    );
    // The reference's reason words for a mistyped _meta version.
    s.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":5,"io.modelcontextprotocol/clientCapabilities":{}}}}"#);
    let r = s.recv();
    assert_eq!(
        (r["id"].clone(), r["error"]["data"]["reason"].clone()),
        (json!(3), json!("protocol_version")),
        "{r}"
    );
    // Params that are not an object: invalid params.
    let r = s.request(&json!({"jsonrpc":"2.0","id":4,"method":"ping","params":"x"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn an_over_long_line_is_refused_and_the_next_is_served() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    // 17 MiB on one line: over the 16 MiB limit.
    let pad = "x".repeat(17 * 1024 * 1024);
    let r =
        s.request(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": pad}}));
    assert_eq!(
        r["error"]["code"],
        -32700,
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    assert_eq!(r["error"]["data"]["reason"], "line_too_long");
    assert_eq!(r["error"]["data"]["max_bytes"], 16 * 1024 * 1024);
    let r = s.request(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    assert_eq!(r["id"], 2);
    assert!(r.get("result").is_some(), "{r}");
    // A message of exactly the limit (its newline not counted) is served.
    let frame =
        json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"pad": ""}}).to_string();
    let pad = "x".repeat(16 * 1024 * 1024 - frame.len());
    let exact = json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"pad": pad}});
    assert_eq!(exact.to_string().len(), 16 * 1024 * 1024);
    let r = s.request(&exact);
    assert_eq!(
        r["id"],
        3,
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    assert!(r.get("result").is_some());
}

#[test]
fn a_message_of_millions_of_values_is_refused_before_it_is_built() {
    // Attacker review of issue 17, L2: 16 MiB of `{},` is about 5.6 million
    // values, which as a value tree took 1.4 GB. Refused unparsed; the next
    // message is served.
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let junk = vec!["{}"; 5_000_000].join(",");
    s.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"x"}},"junk":[{junk}]}}}}"#
    ));
    let r = s.recv();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(1), json!(-32600)),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["reason"], "too_many_values", "{r}");
    assert_eq!(r["error"]["data"]["max_values"], 100_000, "{r}");
    let r = s.request(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}));
    assert!(r.get("result").is_some(), "{r}");
}

/// A client that sends without reading its answers: once 64 answers wait
/// to be written, the server stops reading its input instead of queueing
/// answers without bound (400 unread reads once took 822 MB). All answers
/// arrive once the client reads.
// See: target/attack-session3.md L4
#[test]
fn a_client_that_never_reads_cannot_make_answers_pile_up() {
    use std::io::{BufRead, Write};
    let ws = workspace();
    let text: String = (0..16_384).map(|i| format!("line {i:026}\n")).collect();
    std::fs::write(ws.path().join("big.txt"), &text).unwrap();
    let mut child = command(ws.path(), &["--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    const N: i64 = 400;
    let writer = std::thread::spawn(move || {
        for id in 1..=N {
            let msg = call(
                id,
                "read_file",
                json!({"path": "big.txt", "max_bytes": 1_048_576}),
            );
            if writeln!(stdin, "{msg}").is_err() {
                return;
            }
        }
        // Keep stdin open until the reader is done.
        std::thread::sleep(std::time::Duration::from_secs(3));
        drop(stdin);
    });
    // Give the server time to answer what it will read; nothing is read back.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let peak_kib = peak_rss_kib(child.id());
    // 400 answers of ~1 MiB (twice, as text and structured) would be about
    // 800 MB; 64 of them under 200 MB.
    assert!(
        peak_kib < 300 * 1024,
        "peak RSS {peak_kib} KiB: unread answers piled up"
    );
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = std::collections::BTreeSet::new();
    let mut line = String::new();
    while seen.len() < N as usize {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["result"]["isError"],
            false,
            "{}",
            &line[..200.min(line.len())]
        );
        seen.insert(v["id"].as_i64().unwrap());
    }
    assert_eq!(seen.len(), N as usize, "every request is answered");
    writer.join().unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

/// A client that closed its end of our stdout but keeps writing gets
/// nothing executed: its requests are not taken, and the server ends.
#[test]
fn nothing_runs_for_a_client_that_stopped_reading() {
    use std::io::Write;
    use std::process::Stdio;
    let ws = workspace();
    let mut child = command(ws.path(), &["--stdio", "--permission-mode", "trusted"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reading end of the server's stdout, closed before any answer.
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    let marker = ws.path().join("ran.txt");
    let mut lines = String::new();
    for id in 1..=3 {
        lines.push_str(
            &call(
                id,
                "exec_command",
                json!({"cmd": format!("echo {id} >> ran.txt")}),
            )
            .to_string(),
        );
        lines.push('\n');
    }
    // Written whether or not the server still reads (it may have gone).
    let _ = stdin.write_all(lines.as_bytes());
    let _ = stdin.flush();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if started.elapsed() > std::time::Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !marker.exists(),
        "a request ran for a client that cannot read its answer: {:?}",
        std::fs::read_to_string(&marker)
    );
    assert!(
        status.is_some(),
        "the server kept running with its output closed"
    );
}
