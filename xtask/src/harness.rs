//! `cargo xtask loop`: a whole agent coding loop through the real binary on a
//! fixture project, over stdio. Every step checks the structured result and
//! follows only the continuations the server names.

use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::build_server;
use crate::peer::Peer;

struct Session {
    peer: Peer,
    calls: usize,
}

impl Session {
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.calls += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.calls, "method": method, "params": params});
        self.peer.send(&msg.to_string())?;
        let v = self.peer.recv()?;
        if v.get("error").is_some() {
            bail!("{method} failed: {}", v["error"]);
        }
        Ok(v["result"].clone())
    }

    /// Calls a tool; returns its structuredContent and whether it failed.
    fn tool(&mut self, name: &str, args: Value) -> Result<(Value, bool)> {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}))?;
        Ok((r["structuredContent"].clone(), r["isError"] == true))
    }

    fn ok(&mut self, name: &str, args: Value) -> Result<Value> {
        let (s, err) = self.tool(name, args)?;
        if err {
            bail!("{name} failed: {}", s["error"]);
        }
        Ok(s)
    }

    /// Follows a `next_action` exactly as given.
    fn follow(&mut self, action: &Value) -> Result<Value> {
        let tool = action["tool"]
            .as_str()
            .context("next_action without tool")?
            .to_owned();
        self.ok(&tool, action["arguments"].clone())
    }
}

fn step(n: &mut usize, what: &str) {
    *n += 1;
    eprintln!("loop step {n}: {what}");
}

pub fn run(_args: &[String]) -> Result<()> {
    let binary = build_server(false)?;
    let ws = tempfile::tempdir()?;
    let root = ws.path();
    std::fs::write(
        root.join("AGENTS.md"),
        "# Project rules\nRun `python3 test_calc.py` before you finish.\n",
    )?;
    std::fs::write(
        root.join("calc.py"),
        "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    )?;
    std::fs::write(
        root.join("test_calc.py"),
        "from calc import add, mul\n\nassert add(2, 3) == 5, add(2, 3)\nassert mul(2, 3) == 6\nprint('all tests passed')\n",
    )?;
    let mut s = Session {
        peer: Peer::spawn(
            Command::new(&binary)
                .args(["--stdio", "--workspace"])
                .arg(root),
        )?,
        calls: 0,
    };
    let mut n = 0;

    step(&mut n, "start-up: the instructions carry AGENTS.md");
    let init = s.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "loop", "version": "1"}}))?;
    if !init["instructions"]
        .as_str()
        .unwrap_or_default()
        .contains("python3 test_calc.py")
    {
        bail!("instructions miss AGENTS.md");
    }

    step(&mut n, "bounded read, then its continuation");
    // A byte budget bounds the read (a `max_lines` range served whole has
    // no continuation).
    let first = s.ok("read_file", json!({"path": "calc.py", "max_bytes": 40}))?;
    let cont = first["next_action"].clone();
    if first["content"] != "def add(a, b):\n    return a - b\n\n\n" || cont["tool"] != "read_file" {
        bail!("bounded read: {first}");
    }
    let rest = s.follow(&cont)?;
    if !rest["content"]
        .as_str()
        .unwrap_or_default()
        .contains("def mul")
        || !rest["next_start_line"].is_null()
    {
        bail!("continuation: {rest}");
    }

    step(&mut n, "a wrong patch");
    let p = s.ok("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: calc.py\n@@ def add(a, b):\n-    return a - b\n+    return a + b + 1\n*** End Patch\n"}))?;
    if p["applied"] != true || p["files"][0]["additions"] != 1 {
        bail!("patch: {p}");
    }

    step(&mut n, "the failing test run");
    let fail = s.ok("exec_command", json!({"cmd": "python3 test_calc.py"}))?;
    if fail["status"] != "exited"
        || fail["exit_code"] == 0
        || !fail["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("AssertionError")
    {
        bail!("expected a failing run: {fail}");
    }

    step(&mut n, "a recovery patch (dry run first)");
    let fix = "*** Begin Patch\n*** Update File: calc.py\n@@\n-    return a + b + 1\n+    return a + b\n*** End Patch\n";
    let dry = s.ok("apply_patch", json!({"patch": fix, "dry_run": true}))?;
    if dry["applied"] != false || dry["files"][0]["would_change"] != true {
        bail!("dry run: {dry}");
    }
    s.ok("apply_patch", json!({"patch": fix}))?;

    step(&mut n, "the passing run");
    let pass = s.ok("exec_command", json!({"cmd": "python3 test_calc.py"}))?;
    if pass["exit_code"] != 0 || pass["stdout"] != "all tests passed\n" {
        bail!("expected a passing run: {pass}");
    }

    step(
        &mut n,
        "a long command, polled to completion through next_action",
    );
    let mut r = s.ok("exec_command", json!({"cmd": "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done", "yield_time_ms": 200}))?;
    let mut ticks = r["stdout"].as_str().unwrap_or_default().to_owned();
    let mut polls = 0;
    while r["status"] == "running" {
        polls += 1;
        r = s.follow(&r["next_action"])?;
        ticks.push_str(r["stdout"].as_str().unwrap_or_default());
        if polls > 50 {
            bail!("the command never finished");
        }
    }
    if r["exit_code"] != 0 || ticks.lines().count() != 5 || polls == 0 {
        bail!("long command: {r} after {polls} polls");
    }

    step(&mut n, "a truncated output, paged with read_output");
    let big = s.ok(
        "exec_command",
        json!({"cmd": "seq 1 5000", "max_output_bytes": 2000}),
    )?;
    if big["stdout_truncated"] != true {
        bail!("expected truncation: {big}");
    }
    let mut page = s.follow(&big["next_action"])?;
    let mut pages = 1;
    while let Some(action) = page.get("next_action").filter(|a| !a.is_null()).cloned() {
        page = s.follow(&action)?;
        pages += 1;
    }
    if !page["content"]
        .as_str()
        .unwrap_or_default()
        .ends_with("5000\n")
    {
        bail!("paging did not reach the end: {page}");
    }

    step(&mut n, "git sees the work");
    s.ok("exec_command", json!({"cmd": "git init -q . && git add -A && git -c user.email=l@o -c user.name=loop commit -qm fixture"}))?;
    let status = s.ok("git_status", json!({}))?;
    if status["clean"] != true {
        bail!("expected a clean tree after the commit: {status}");
    }

    println!(
        "coding loop: {n} steps, {} calls ({polls} polls, {pages} read_output pages), all checks passed",
        s.calls
    );
    Ok(())
}
