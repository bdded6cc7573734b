//! The process tools through the real binary: yield, poll, budgets,
//! cancellation, kill, paging, PTY, and that a long call blocks nothing.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::*;

fn sc(r: &Value) -> Value {
    r["result"]["structuredContent"].clone()
}

#[test]
fn exec_poll_and_exit() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let r = s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "echo out; echo err >&2; exit 3"}),
    ));
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.starts_with("Status: exited | exit code 3"), "{text}");
    let v = sc(&r);
    assert_eq!(
        (
            v["status"].clone(),
            v["exit_code"].clone(),
            v["stdout"].clone(),
            v["stderr"].clone()
        ),
        (json!("exited"), json!(3), json!("out\n"), json!("err\n"))
    );
    let r = s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "for i in 1 2 3; do echo $i; sleep 0.4; done", "yield_time_ms": 100.0}),
    ));
    let v = sc(&r);
    assert_eq!(v["status"], "running");
    let id = v["command_id"].as_str().unwrap().to_owned();
    assert_eq!(
        v["next_action"],
        json!({"tool": "write_stdin", "arguments": {"command_id": id, "chars": "", "yield_time_ms": 10000}})
    );
    let mut out = v["stdout"].as_str().unwrap().to_owned();
    loop {
        let v = sc(&s.request(&call(
            3,
            "write_stdin",
            json!({"command_id": id, "chars": "", "yield_time_ms": 5000}),
        )));
        out.push_str(v["stdout"].as_str().unwrap());
        if v["status"] != "running" {
            assert_eq!(v["exit_code"], 0);
            break;
        }
    }
    assert_eq!(out, "1\n2\n3\n");
    // A poll of the finished command still answers; unknown ids do not.
    let v = sc(&s.request(&call(4, "write_stdin", json!({"command_id": id}))));
    assert_eq!(v["status"], "exited");
    let v = sc(&s.request(&call(5, "write_stdin", json!({"command_id": "nope"}))));
    assert_eq!(v["error"]["code"], "COMMAND_NOT_FOUND");
    let v = sc(&s.request(&call(6, "kill_command", json!({"command_id": "nope"}))));
    assert_eq!(
        (v["error"]["code"].clone(), v["status"].clone()),
        (json!("COMMAND_NOT_FOUND"), json!("not_found"))
    );
}

#[test]
fn a_long_call_does_not_block_ping() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    s.send(&call(
        1,
        "exec_command",
        json!({"cmd": "sleep 3", "yield_time_ms": 10000}),
    ));
    let t = Instant::now();
    let r = s.request(&json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
    assert_eq!(r["id"], "p", "the ping was answered after the long call");
    assert!(t.elapsed() < Duration::from_secs(2));
    let r = s.recv();
    assert_eq!(r["id"], 1);
}

#[test]
fn cancellation_ends_the_wait_at_once_and_the_command_lives() {
    let ws = workspace();
    let mut s = StdioServer::start_with(
        command(ws.path(), &["--stdio"]).env("CODING_TOOLS_MCP_TRACE", "1"),
    );
    s.send(&call(
        7,
        "exec_command",
        json!({"cmd": "sleep 30", "yield_time_ms": 30000}),
    ));
    std::thread::sleep(Duration::from_millis(500));
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}));
    // The next answer is the ping's: the cancelled request gets none.
    let r = s.request(&json!({"jsonrpc":"2.0","id":8,"method":"ping"}));
    assert_eq!(r["id"], 8);
    let mut duration = None;
    while duration.is_none() {
        let line = s.stderr.next().expect("trace");
        if line.contains("\"event\":\"tool_call\"") && line.contains("exec_command") {
            let v: Value = serde_json::from_str(&line).unwrap();
            duration = v["duration_ms"].as_u64();
        }
    }
    let d = duration.unwrap();
    // Cancelled at ~500 ms: the 30 s yield must end then, not at its deadline.
    // (No tight wall-clock bound here: the machine is shared; the bench measures it.)
    assert!(
        d < 5_000,
        "the 30 s yield ended {d} ms after start (cancelled at ~500 ms)"
    );
    eprintln!("cancel-to-answer: the yield ended {d} ms after start, cancelled at ~500 ms");
    // Commands cannot see the host's processes (no /proc of others), so ask
    // the server how many commands are alive.
    let r = s.request(&call(
        9,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    assert_eq!(
        sc(&r)["active_commands"],
        1,
        "the command must outlive its cancelled request"
    );
}

#[test]
fn budget_header_cuts_the_wait() {
    let ws = workspace();
    let server = HttpServer::start(ws.path(), &[]);
    let t = Instant::now();
    let r = server.post(
        &call(
            1,
            "exec_command",
            json!({"cmd": "sleep 5", "yield_time_ms": 30000}),
        ),
        &[("X-Coding-Tools-Budget-Secs", "1")],
    );
    let took = t.elapsed();
    let v = r.json()["result"]["structuredContent"].clone();
    assert_eq!(v["status"], "running");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(v["wait"]["cut_by_budget"], true);
    assert_eq!(v["wait"]["budget_source"], "request_header");
    assert_eq!(v["wait"]["effective_wait_ms"], 1000);
    let text = r.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("X-Coding-Tools-Budget-Secs"), "{text}");
}

#[test]
fn output_is_bounded_and_paged_with_read_output() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let r = s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "seq 1 20000", "max_output_bytes": 1000}),
    ));
    let v = sc(&r);
    assert_eq!(v["stdout_truncated"], true);
    let stdout = v["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("1\n2\n3\n") && stdout.ends_with("19999\n20000\n"),
        "both ends kept"
    );
    let action = v["next_action"].clone();
    assert_eq!(action["tool"], "read_output");
    let mut offset = action["arguments"]["offset"].as_u64().unwrap();
    let oref = action["arguments"]["output_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut paged = String::new();
    let mut pages = 0;
    loop {
        let p = sc(&s.request(&call(
            2,
            "read_output",
            json!({"output_ref": oref, "offset": offset, "limit": 20000}),
        )));
        paged.push_str(p["content"].as_str().unwrap());
        pages += 1;
        match p["next_offset"].as_u64() {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert!(pages > 1);
    assert!(paged.ends_with("20000\n"));
    let e = sc(&s.request(&call(
        3,
        "read_output",
        json!({"output_ref": oref, "stream": "stderr"}),
    )));
    assert_eq!(e["error"]["code"], "INVALID_ARGUMENT");
    let e = sc(&s.request(&call(4, "read_output", json!({"output_ref": "bogus"}))));
    assert_eq!(e["error"]["code"], "INVALID_ARGUMENT");
}

#[test]
fn pty_and_kill_through_the_tools() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &["--permission-mode", "trusted"]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "sh", "tty": true, "yield_time_ms": 300}),
    )));
    let id = v["command_id"].as_str().unwrap().to_owned();
    let v = sc(&s.request(&call(
        2,
        "write_stdin",
        json!({"command_id": id, "chars": "echo $((6*7))\n", "yield_time_ms": 5000}),
    )));
    assert!(v["stdout"].as_str().unwrap().contains("42"), "{v}");
    let v = sc(&s.request(&call(
        3,
        "kill_command",
        json!({"command_id": id, "signal": "KILL"}),
    )));
    assert_eq!(
        (
            v["status"].clone(),
            v["signal_sent"].clone(),
            v.get("signals_sent").cloned()
        ),
        (json!("killed"), json!("SIGKILL"), None)
    );
    let v = sc(&s.request(&call(
        4,
        "exec_command",
        json!({"cmd": "trap '' TERM; sleep 30", "yield_time_ms": 200}),
    )));
    let id = v["command_id"].as_str().unwrap().to_owned();
    let v = sc(&s.request(&call(
        5,
        "kill_command",
        json!({"command_id": id, "wait_ms": 300}),
    )));
    assert_eq!(
        (
            v["status"].clone(),
            v["signals_sent"].clone(),
            v["signal"].clone()
        ),
        (
            json!("killed"),
            json!(["SIGTERM", "SIGKILL"]),
            json!("SIGKILL")
        )
    );
}

#[test]
fn policy_refusals_are_failed_launches() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "curl https://example.com"}),
    )));
    assert_eq!(
        (
            v["status"].clone(),
            v["error"]["code"].clone(),
            v["error"]["details"]["permission"].clone()
        ),
        (
            json!("failed"),
            json!("PERMISSION_REQUIRED"),
            json!("network")
        )
    );
    let v = sc(&s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "ls", "workdir": "../"}),
    )));
    assert_eq!(v["error"]["code"], "PATH_OUTSIDE_WORKSPACE");
    let v = sc(&s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "ls", "workdir": "a", "cwd": "b"}),
    )));
    assert_eq!(v["error"]["code"], "INVALID_ARGUMENT");
    let mut n = StdioServer::start(ws.path(), &["--allow-network"]);
    let v = sc(&n.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    )));
    assert_eq!(
        (
            v["gates"]["network"].clone(),
            v["gates"]["shell_expansion"].clone()
        ),
        (json!("allowed"), json!("blocked"))
    );
}

/// A cut result shows both ends of the new output, and its gap line's
/// read_output call returns exactly the middle.
#[test]
fn cut_output_shows_head_and_tail_and_the_exact_middle() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let full: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "seq 1 3000", "max_output_bytes": 1000}),
    )));
    let text = v["stdout"].as_str().unwrap().to_owned();
    assert!(text.starts_with("1\n2\n3\n"), "{text}");
    // One cut stream: its call is next_action, and the reference's
    // one-entry next_actions list names it too (issue 32: every field the
    // reference sends stays).
    assert_eq!(
        v["next_action"]["arguments"]["limit"],
        v["stdout_info"]["elided"]["bytes"]
    );
    assert_eq!(v["next_actions"], json!([v["next_action"]]), "{v}");
    assert!(text.ends_with("2999\n3000\n"), "{text}");
    assert_eq!(v["stdout_truncated_by"], "bytes", "{v}");
    let info = &v["stdout_info"];
    let gap = &info["elided"];
    assert_eq!(
        info["head_bytes"].as_u64().unwrap()
            + gap["bytes"].as_u64().unwrap()
            + info["tail_bytes"].as_u64().unwrap(),
        full.len() as u64,
        "{v}"
    );
    assert_eq!(
        v["stdout_output_bytes"].as_u64().unwrap(),
        info["head_bytes"].as_u64().unwrap() + info["tail_bytes"].as_u64().unwrap()
    );
    let (offset, bytes) = (
        gap["offset"].as_u64().unwrap(),
        gap["bytes"].as_u64().unwrap(),
    );
    let call_text = format!(
        "read_output(output_ref=\"{}\", offset={offset}, limit={bytes})",
        v["output_refs"]["stdout"].as_str().unwrap()
    );
    assert_eq!(text.matches(&call_text).count(), 1, "{text}");
    let page = sc(&s.request(&call(
        2,
        "read_output",
        json!({"output_ref": v["output_refs"]["stdout"], "offset": offset, "limit": bytes}),
    )));
    let middle = page["content"].as_str().unwrap();
    assert_eq!(middle.len() as u64, bytes);
    let head_len = offset as usize;
    let tail_len = full.len() - head_len - middle.len();
    assert_eq!(&full[..head_len], &text[..head_len]);
    assert_eq!(&full[head_len..head_len + middle.len()], middle);
    assert!(text.ends_with(&full[full.len() - tail_len..]));
}

/// A PTY command returns once it has printed and gone quiet, so the next
/// write_stdin talks to the live program.
#[test]
fn an_interactive_start_returns_at_its_prompt() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("repl.py"),
        "print('ready', flush=True)\nwhile True:\n    line = input()\n    if line == 'quit':\n        print('bye')\n        break\n    print('echo:' + line, flush=True)\n",
    )
    .unwrap();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "python3 repl.py", "tty": true, "timeout_ms": 20000}),
    )));
    assert_eq!(v["status"], "running", "{v}");
    assert_eq!(v["wait"]["ended_by"], "output_quiet", "{v}");
    assert!(v["stdout"].as_str().unwrap().contains("ready"), "{v}");
    let id = v["command_id"].as_str().unwrap().to_owned();
    let v = sc(&s.request(&call(
        2,
        "write_stdin",
        json!({"command_id": id, "chars": "hello\n"}),
    )));
    assert!(v["stdout"].as_str().unwrap().contains("echo:hello"), "{v}");
    let v = sc(&s.request(&call(
        3,
        "write_stdin",
        json!({"command_id": id, "chars": "quit\n"}),
    )));
    assert!(v["stdout"].as_str().unwrap().contains("bye"), "{v}");
}

/// The suggested poll waits the default yield, so a 2-second command takes
/// two calls; writing to an ended command says how it ended.
#[test]
fn one_poll_suffices_and_an_ended_command_says_how_it_ended() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "sleep 2; echo done", "yield_time_ms": 300}),
    )));
    assert_eq!(v["status"], "running", "{v}");
    let next = v["next_action"].clone();
    assert_eq!(next["arguments"]["yield_time_ms"], 10000, "{v}");
    let running = s.request(&call(
        9,
        "exec_command",
        json!({"cmd": "sleep 5", "yield_time_ms": 100}),
    ));
    let text = running["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = sc(&running)["command_id"].as_str().unwrap().to_owned();
    assert_eq!(
        text.matches(&other).count(),
        1,
        "the id is stated once: {text}"
    );
    let killed = s.request(&call(10, "kill_command", json!({"command_id": other})));
    let text = killed["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&format!("Kill: command {other} ")), "{text}");
    let gone = s.request(&call(
        11,
        "write_stdin",
        json!({"command_id": "0000000000000000", "chars": ""}),
    ));
    let text = gone["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("COMMAND_NOT_FOUND: Command not found; stdin access denied.\n"),
        "{text}"
    );
    // read_output has no stdin to deny: the reference's words (the
    // contract's category, not_found).
    let gone = s.request(&call(
        12,
        "read_output",
        json!({"output_ref": "command:0000000000000000:stdout"}),
    ));
    let text = gone["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("COMMAND_NOT_FOUND: Output command not found.\nCategory: not_found."),
        "{text}"
    );
    let v = sc(&s.request(&call(2, "write_stdin", next["arguments"].clone())));
    assert_eq!(
        (v["status"].clone(), v["stdout"].clone()),
        (json!("exited"), json!("done\n"))
    );
    let id = v["command_id"].clone();
    let r = s.request(&call(
        3,
        "write_stdin",
        json!({"command_id": id, "chars": "x\n"}),
    ));
    let e = &sc(&r)["error"];
    assert_eq!(e["code"], "COMMAND_CLOSED", "{r}");
    // The reference's category: the command's state refuses the write.
    assert_eq!(e["category"], "runtime", "{r}");
    assert_eq!(e["details"]["ended"], "exited with code 0", "{r}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("exited with code 0"),
        "{r}"
    );
}

#[test]
fn reference_output_counters_and_retry_hints() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "seq 1 5; echo err >&2"}),
    )));
    // As the reference counts them: pieces between newlines.
    assert_eq!(v["stdout_output_lines"], 6, "{v}");
    assert_eq!(v["stderr_output_lines"], 2);
    assert_eq!(v["stdout_dropped_bytes"], 0);
    // More than the retained buffer: the evicted bytes are counted.
    let v = sc(&s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "head -c 5000000 /dev/zero | tr '\\0' a", "max_output_bytes": 1000}),
    )));
    let dropped = v["stdout_dropped_bytes"].as_u64().unwrap();
    assert!(dropped > 0 && dropped < 5_000_000, "{v}");
    // Advice sits where the reference's clients read it, too.
    let r = s.request(&call(3, "kill_command", json!({"command_id": "nope"})));
    let e = &sc(&r)["error"];
    assert_eq!(e["code"], "COMMAND_NOT_FOUND");
    // Issue 19: once, in `details.retry_hint` (no `recovery` copy), and
    // the same words on the text's Retry line.
    assert!(e.get("recovery").is_none(), "{e}");
    let hint = e["details"]["retry_hint"].as_str().unwrap();
    assert!(!hint.is_empty());
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&format!("\nRetry: {hint}")), "{text}");
}

// Issue 15, second pass: the reference's names on the exec tools' wire.

/// A refusal carries the reference's top-level `permission_request` (with
/// `retryable`), its `details.command` / `details.option`, and a
/// `diagnostics` entry for the gates a restart opens.
#[test]
fn permission_refusals_carry_the_reference_request_and_diagnostics() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let cases = [
        (
            json!({"cmd": "curl   http://example.com"}),
            "network",
            Some("NETWORK_PERMISSION_REQUIRED"),
        ),
        (
            json!({"cmd": "python3 -c \"print(1)\""}),
            "inline_script",
            Some("INLINE_SCRIPT_PERMISSION_REQUIRED"),
        ),
        (
            json!({"cmd": "echo $(whoami)"}),
            "shell_expansion",
            Some("SHELL_EXPANSION_PERMISSION_REQUIRED"),
        ),
        (
            json!({"cmd": "ls", "env": {"LD_PRELOAD": "/x.so", "A": "b"}}),
            "sensitive_env",
            Some("SECRET_ENV_REJECTED"),
        ),
        (json!({"cmd": "cat /etc/shadow"}), "filesystem_escape", None),
    ];
    for (i, (args, permission, code)) in cases.into_iter().enumerate() {
        let v = sc(&s.request(&call(i as i64, "exec_command", args.clone())));
        assert_eq!(v["status"], "failed", "{v}");
        assert_eq!(v["error"]["code"], "PERMISSION_REQUIRED", "{v}");
        assert_eq!(
            v["permission_request"],
            json!({"tool_name": "exec_command", "permission": permission, "status": "required", "retryable": true}),
            "{args}: {v}"
        );
        match code {
            Some(code) => {
                let d = &v["diagnostics"][0];
                assert_eq!(
                    (d["code"].as_str(), d["severity"].as_str()),
                    (Some(code), Some("error")),
                    "{v}"
                );
                assert!(d["evidence"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
                assert!(
                    d["suggested_fix"].as_str().is_some_and(|e| !e.is_empty()),
                    "{v}"
                );
                let flag = (permission != "sensitive_env").then_some("--permission-mode trusted");
                assert_eq!(d["suggested_server_flag"].as_str(), flag, "{v}");
            }
            None => assert!(v.get("diagnostics").is_none(), "{v}"),
        }
        let details = &v["error"]["details"];
        match permission {
            "network" => assert_eq!(details["command"], "curl http://example.com", "{v}"),
            "shell_expansion" => assert_eq!(details["command"], "echo $(whoami)", "{v}"),
            "inline_script" => assert_eq!(
                (details["command"].clone(), details["option"].clone()),
                (json!("python3"), json!("-c")),
                "{v}"
            ),
            "sensitive_env" => assert_eq!(details["env_keys"], json!(["A", "LD_PRELOAD"]), "{v}"),
            _ => assert_eq!(details["path"], "/etc/shadow", "{v}"),
        }
    }
}

/// kill_command answers with the reference's `signal_sent`, `killed`,
/// `evicted`, and the negative signal number as `exit_code`.
#[test]
fn kill_reports_the_reference_fields() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    for (i, (signal, name, code, status)) in [
        (None, "SIGTERM", -15, "terminated"),
        (Some("INT"), "SIGINT", -2, "terminated"),
        (Some("KILL"), "SIGKILL", -9, "killed"),
    ]
    .into_iter()
    .enumerate()
    {
        let i = i as i64 * 2;
        let v = sc(&s.request(&call(
            i,
            "exec_command",
            json!({"cmd": "sleep 30", "yield_time_ms": 200}),
        )));
        let id = v["command_id"].clone();
        let mut args = json!({"command_id": id});
        if let Some(sig) = signal {
            args["signal"] = json!(sig);
        }
        let v = sc(&s.request(&call(i + 1, "kill_command", args)));
        assert_eq!(
            (
                v["status"].clone(),
                v["signal_sent"].clone(),
                v["killed"].clone(),
                v["evicted"].clone(),
                v["exit_code"].clone(),
                v["signal"].clone(),
            ),
            (
                json!(status),
                json!(name),
                json!(true),
                json!(true),
                json!(code),
                json!(name)
            ),
            "{v}"
        );
        assert_eq!(v["signal_sent"], json!(name), "{v}");
        // One signal: `signal_sent` says it all.
        assert!(v.get("signals_sent").is_none(), "{v}");
    }
    // A command that had ended: nothing is sent, nothing is killed.
    let v = sc(&s.request(&call(10, "exec_command", json!({"cmd": "echo x"}))));
    let v = sc(&s.request(&call(
        11,
        "kill_command",
        json!({"command_id": v["command_id"]}),
    )));
    assert_eq!(
        (
            v["status"].clone(),
            v["signal_sent"].clone(),
            v["killed"].clone(),
            v["evicted"].clone(),
            v["exit_code"].clone()
        ),
        (
            json!("exited"),
            json!(null),
            json!(false),
            json!(true),
            json!(0)
        ),
        "{v}"
    );
}

/// A timeout reports the negative signal number and `COMMAND_TIMED_OUT`; a
/// missing executable `EXECUTABLE_NOT_FOUND`; a clean run no diagnostics.
#[test]
fn timeouts_and_missing_executables_are_diagnosed() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "sleep 5", "timeout_ms": 300}),
    )));
    assert_eq!(
        (
            v["status"].clone(),
            v["exit_code"].clone(),
            v["signal"].clone()
        ),
        (json!("timeout"), json!(-15), json!("SIGTERM")),
        "{v}"
    );
    let d = &v["diagnostics"][0];
    assert_eq!(
        (d["code"].clone(), d["severity"].clone()),
        (json!("COMMAND_TIMED_OUT"), json!("error")),
        "{v}"
    );
    assert!(d["suggested_fix"].is_string(), "{v}");
    let v = sc(&s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "nonexistent_cmd_xyz"}),
    )));
    assert_eq!(v["exit_code"], 127, "{v}");
    let d = &v["diagnostics"][0];
    assert_eq!(
        (
            d["code"].clone(),
            d["severity"].clone(),
            d["suggested_next_command"].clone()
        ),
        (
            json!("EXECUTABLE_NOT_FOUND"),
            json!("error"),
            json!("command -v nonexistent_cmd_xyz")
        ),
        "{v}"
    );
    assert!(
        d["evidence"]
            .as_str()
            .unwrap()
            .contains("nonexistent_cmd_xyz"),
        "{v}"
    );
    let v = sc(&s.request(&call(3, "exec_command", json!({"cmd": "echo ok"}))));
    assert!(v.get("diagnostics").is_none(), "{v}");
}

/// Cut output names its stream and reference as the reference does, with
/// its warning words and `OUTPUT_TRUNCATED`; the inline text stays head and
/// tail (issue 14).
#[test]
fn truncated_output_names_its_stream() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "seq 1 300", "max_output_bytes": 100}),
    )));
    let id = v["command_id"].as_str().unwrap().to_owned();
    assert_eq!(v["output_ref"], format!("command:{id}:stdout"), "{v}");
    assert_eq!(v["output_stream"], "stdout", "{v}");
    assert_eq!(v["output_truncated"], true, "{v}");
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(v["truncated_output_streams"], json!(["stdout"]), "{v}");
    assert_eq!(
        v["warnings"],
        json!(["stdout truncated from middle by bytes"]),
        "{v}"
    );
    let d = &v["diagnostics"][0];
    assert_eq!(
        (d["code"].clone(), d["severity"].clone()),
        (json!("OUTPUT_TRUNCATED"), json!("warning")),
        "{v}"
    );
    let out = v["stdout"].as_str().unwrap();
    assert!(
        out.starts_with("1\n2\n") && out.ends_with("299\n300\n"),
        "{v}"
    );
    // Uncut output has none of these.
    let v = sc(&s.request(&call(2, "exec_command", json!({"cmd": "echo hi"}))));
    for name in [
        "output_ref",
        "output_stream",
        "output_truncated",
        "truncated_output_streams",
        "summary",
    ] {
        assert!(v.get(name).is_none(), "{name}: {v}");
    }
    // Output evicted before a poll could return it: the cursor skipped it.
    let v = sc(&s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "head -c 200000 /dev/zero | tr '\\0' a; sleep 2; head -c 2000000 /dev/zero | tr '\\0' b", "yield_time_ms": 1000}),
    )));
    assert_eq!(v["status"], "running", "{v}");
    let v = sc(&s.request(&call(
        4,
        "write_stdin",
        json!({"command_id": v["command_id"], "yield_time_ms": 20000}),
    )));
    assert_eq!(v["status"], "exited", "{v}");
    assert!(v["stdout_omitted_bytes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        v["warnings"],
        json!([
            "stdout truncated from middle by bytes",
            "stdout cursor skipped dropped bytes"
        ]),
        "{v}"
    );
}

/// An explicit verbosity adds `summary`, `output_ref` and `output_stream`;
/// summary is not truncation; a preview shows the head and says it was cut.
#[test]
fn verbosity_reports_summary_and_preview_head() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "echo hi", "verbosity": "full"}),
    )));
    let id = v["command_id"].as_str().unwrap().to_owned();
    let summary = v["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("exit 0 | ") && summary.ends_with(" | 1 lines | tail: 'hi'"),
        "{v}"
    );
    assert_eq!(v["output_ref"], format!("command:{id}:stdout"), "{v}");
    assert_eq!(v["output_stream"], "stdout", "{v}");
    assert_eq!(v["stdout"], "hi\n", "{v}");
    let v = sc(&s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "echo hi", "verbosity": "summary"}),
    )));
    assert_eq!(v["truncated"], false, "{v}");
    assert!(
        v["summary"].as_str().unwrap().starts_with("exit 0 | "),
        "{v}"
    );
    assert_eq!(v["output_stream"], "stdout", "{v}");
    assert!(v.get("stdout").is_none(), "{v}");
    let v = sc(&s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "seq 1 50", "verbosity": "preview", "preview_bytes": 20}),
    )));
    assert_eq!(v["preview"], "--- stdout ---\n1\n2\n3", "{v}");
    assert_eq!(v["preview_truncated"], true, "{v}");
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(v["truncated_output_streams"], json!(["stdout"]), "{v}");
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .ends_with(" | 50 lines | tail: '50'"),
        "{v}"
    );
    assert_eq!(v["next_action"]["tool"], "read_output", "{v}");
    let v = sc(&s.request(&call(
        4,
        "exec_command",
        json!({"cmd": "echo hi; echo e >&2", "verbosity": "preview"}),
    )));
    assert_eq!(
        v["preview"], "--- stdout ---\nhi\n\n--- stderr ---\ne\n",
        "{v}"
    );
    assert_eq!(
        (v["preview_truncated"].clone(), v["truncated"].clone()),
        (json!(false), json!(false)),
        "{v}"
    );
    assert!(v.get("next_action").is_none(), "{v}");
}

/// read_output reports the reference's retention fields, and echoes an
/// offset past the end (serving nothing) instead of clamping it.
#[test]
fn read_output_reports_the_reference_retention_fields() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(1, "exec_command", json!({"cmd": "seq 1 200000"}))));
    let oref = format!("command:{}:stdout", v["command_id"].as_str().unwrap());
    let p = sc(&s.request(&call(
        2,
        "read_output",
        json!({"output_ref": oref, "offset": 300000, "limit": 50}),
    )));
    assert_eq!(p["stream_output_ref"], oref, "{p}");
    assert_eq!(p["total_stream_bytes"], 1_288_895, "{p}");
    let gap = p["evicted_gap_bytes"].as_u64().unwrap();
    assert!(gap > 0, "{p}");
    let start = p["retained_start_offset"].as_u64().unwrap();
    assert_eq!(p["offset"], start, "clamped forward to the tail: {p}");
    assert_eq!(
        p["total_retained_bytes"].as_u64().unwrap(),
        p["head_retained_bytes"].as_u64().unwrap() + (1_288_895 - start),
        "{p}"
    );
    assert_eq!(
        (
            p["stdout_dropped_bytes"].clone(),
            p["stderr_dropped_bytes"].clone(),
            p["stream_dropped_bytes"].clone()
        ),
        (json!(gap), json!(0), json!(gap)),
        "{p}"
    );
    assert_eq!(p["truncated"], true, "{p}");
    assert_eq!(
        p["warnings"][0], "stdout offset skipped dropped bytes",
        "{p}"
    );
    let v = sc(&s.request(&call(3, "exec_command", json!({"cmd": "echo 123456789"}))));
    let oref = format!("command:{}:stdout", v["command_id"].as_str().unwrap());
    let p = sc(&s.request(&call(
        4,
        "read_output",
        json!({"output_ref": oref, "offset": 100}),
    )));
    assert_eq!(
        (
            p["offset"].clone(),
            p["requested_offset"].clone(),
            p["content"].clone(),
            p["next_offset"].clone(),
            p["truncated"].clone(),
            p["retained_start_offset"].clone(),
            p["total_retained_bytes"].clone(),
            p["warnings"].clone()
        ),
        (
            json!(100),
            json!(100),
            json!(""),
            json!(null),
            json!(false),
            json!(0),
            json!(10),
            json!([])
        ),
        "{p}"
    );
    // An unknown command stays not_found, as the contract's example says.
    let e = sc(&s.request(&call(
        5,
        "read_output",
        json!({"output_ref": "command:nope123:stdout"}),
    )));
    assert_eq!(
        (e["error"]["code"].clone(), e["error"]["category"].clone()),
        (json!("COMMAND_NOT_FOUND"), json!("not_found"))
    );
}
