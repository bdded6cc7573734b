//! The edit session of `cargo xtask tokens` (issue 34): what a model reads
//! when it edits with revisions in `--catalog 0.5` — `read_file` with its
//! revision, `apply_changes` (an edit, a stale revision refused, a create,
//! a whole-file write), `apply_patch` with its evidence and sent again,
//! `git_diff` with an untracked file — beside the reference 0.5.0 running
//! the same calls on the same files (`--peer05 CMD`).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::peer::Peer;

/// Our bytes may be at most this share of the reference's, in percent:
/// the text each host shows (Gemini, most hosts) and the structured result
/// Claude Code and Codex show instead.
const BUDGET_TEXT_PCT: usize = 100;
const BUDGET_STRUCTURED_PCT: usize = 115;
/// `tools/list` of catalog 0.5 (our descriptions are ours; the schemas are
/// the reference's plus our `outputSchema`).
const BUDGET_TOOLS_LIST_PCT: usize = 125;

const CALC: &str = "\"\"\"A tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";

/// One measured call.
pub struct Measured {
    pub step: &'static str,
    pub tool: &'static str,
    pub outcome: String,
    pub text_bytes: usize,
    pub structured_bytes: usize,
}

/// A session's measurements.
pub struct EditRun {
    pub tools_list_bytes: usize,
    pub calls: Vec<Measured>,
}

impl EditRun {
    fn text(&self) -> usize {
        self.calls.iter().map(|c| c.text_bytes).sum()
    }

    fn structured(&self) -> usize {
        self.calls.iter().map(|c| c.structured_bytes).sum()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "tools_list_bytes": self.tools_list_bytes,
            "text_bytes": self.text(),
            "structured_bytes": self.structured(),
            "calls": self.calls.iter().map(|c| json!({
                "step": c.step, "tool": c.tool, "outcome": c.outcome,
                "text_bytes": c.text_bytes, "structured_bytes": c.structured_bytes,
            })).collect::<Vec<_>>(),
        })
    }
}

fn git(ws: &Path, args: &[&str]) -> Result<()> {
    let ok = Command::new("git")
        .args([
            "-c",
            "user.name=tokens",
            "-c",
            "user.email=tokens@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(ws)
        .status()?
        .success();
    if !ok {
        bail!("git {args:?} failed in {}", ws.display());
    }
    Ok(())
}

/// A fresh repository with one committed module.
pub fn fixture(dir: &Path) -> Result<std::path::PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(dir.join("src/calc.py"), CALC)?;
    git(dir, &["init", "-q"])?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-q", "-m", "calc"])?;
    Ok(dir.canonicalize()?)
}

struct Session {
    peer: Peer,
    id: u64,
    calls: Vec<Measured>,
}

impl Session {
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.id += 1;
        self.peer.request(self.id, method, params)
    }

    fn call(&mut self, step: &'static str, tool: &'static str, args: Value) -> Result<Value> {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        let r = answer.get("result").cloned().unwrap_or(Value::Null);
        let outcome = if let Some(e) = answer.get("error") {
            format!("rpc {}", e["code"])
        } else if r["isError"] == true {
            r["structuredContent"]["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_owned()
        } else {
            "ok".into()
        };
        let text_bytes = r["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .map(str::len)
            .sum();
        let structured_bytes = r
            .get("structuredContent")
            .map_or(0, |s| s.to_string().len());
        self.calls.push(Measured {
            step,
            tool,
            outcome,
            text_bytes,
            structured_bytes,
        });
        Ok(r)
    }
}

fn revision(r: &Value) -> Result<String> {
    r["structuredContent"]["revision"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no revision in {r:.300}"))
}

/// Plays the edit session on `cmd` (a server of catalog 0.5 on a fixture).
pub fn drive(cmd: &mut Command) -> Result<EditRun> {
    let mut s = Session {
        peer: Peer::spawn(cmd)?,
        id: 0,
        calls: Vec::new(),
    };
    s.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "xtask-tokens-edit", "version": "1"}}),
    )?;
    s.peer
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
    let list = s.request("tools/list", json!({}))?;
    let tools_list_bytes = list["result"].to_string().len();
    let read = s.call("read", "read_file", json!({"path": "src/calc.py"}))?;
    let first = revision(&read)?;
    let fix = s.call(
        "fix add",
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "src/calc.py", "revision": first,
            "edits": [{"op": "replace", "start_line": 5, "content": "    return a + b"}]}]}),
    )?;
    let second = fix["structuredContent"]["affected_files"][0]["revision"]
        .as_str()
        .context("no revision after the edit")?
        .to_owned();
    s.call(
        "stale",
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "src/calc.py", "revision": first,
            "edits": [{"op": "delete", "start_line": 1}]}]}),
    )?;
    s.call(
        "mul",
        "apply_changes",
        json!({"changes": [
            {"action": "edit", "path": "src/calc.py", "revision": second,
                "edits": [{"op": "insert_after", "line": 9, "content": "\n\ndef mul(a, b):\n    return a * b"}]},
            {"action": "create", "path": "tests/test_calc.py",
                "content": "from src.calc import add, mul\n\nassert add(2, 3) == 5\nassert mul(2, 3) == 6\n"}]}),
    )?;
    s.call("reread", "read_file", json!({"path": "src/calc.py"}))?;
    let patch = json!({"patch": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n def sub(a, b):\n-    return a - b\n+    return a - b  # checked\n*** End Patch\n"});
    s.call("patch", "apply_patch", patch.clone())?;
    s.call("patch again", "apply_patch", patch)?;
    s.call("diff", "git_diff", json!({}))?;
    Ok(EditRun {
        tools_list_bytes,
        calls: s.calls,
    })
}

fn pct(a: usize, b: usize) -> String {
    if b == 0 {
        return "-".into();
    }
    format!("{:.2}x", a as f64 / b as f64)
}

/// Prints the session, ours beside the reference's when there is one.
pub fn print(ours: &EditRun, peer: Option<&EditRun>) {
    println!("\n## The edit session (--catalog 0.5)\n");
    println!(
        "| step | tool | outcome | text | structured | 0.5.0 outcome | 0.5.0 text | 0.5.0 structured |"
    );
    println!("|---|---|---|---:|---:|---|---:|---:|");
    for (i, c) in ours.calls.iter().enumerate() {
        let p = peer.and_then(|p| p.calls.get(i));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.step,
            c.tool,
            c.outcome,
            c.text_bytes,
            c.structured_bytes,
            p.map_or("-".into(), |p| p.outcome.clone()),
            p.map_or("-".into(), |p| p.text_bytes.to_string()),
            p.map_or("-".into(), |p| p.structured_bytes.to_string()),
        );
    }
    if let Some(p) = peer {
        println!(
            "\ntotals: text {} vs {} ({}), structured {} vs {} ({}), tools/list {} vs {} ({})",
            ours.text(),
            p.text(),
            pct(ours.text(), p.text()),
            ours.structured(),
            p.structured(),
            pct(ours.structured(), p.structured()),
            ours.tools_list_bytes,
            p.tools_list_bytes,
            pct(ours.tools_list_bytes, p.tools_list_bytes)
        );
    }
}

/// The budgets against the reference 0.5.0, and the outcomes: each call
/// must end as the reference's does. Returns what failed.
pub fn check(ours: &EditRun, peer: &EditRun) -> Vec<String> {
    let mut over = Vec::new();
    for (o, p) in ours.calls.iter().zip(&peer.calls) {
        if o.outcome != p.outcome {
            over.push(format!(
                "edit session, {}: {} answered {} where 0.5.0 answered {}",
                o.step, o.tool, o.outcome, p.outcome
            ));
        }
    }
    for (what, ours, theirs, budget) in [
        (
            "edit session text",
            ours.text(),
            peer.text(),
            BUDGET_TEXT_PCT,
        ),
        (
            "edit session structured results",
            ours.structured(),
            peer.structured(),
            BUDGET_STRUCTURED_PCT,
        ),
        (
            "catalog 0.5 tools/list",
            ours.tools_list_bytes,
            peer.tools_list_bytes,
            BUDGET_TOOLS_LIST_PCT,
        ),
    ] {
        if ours * 100 > theirs * budget {
            over.push(format!(
                "{what}: {ours} bytes, {} of 0.5.0's {theirs} (budget {budget}%)",
                pct(ours, theirs)
            ));
        }
    }
    over
}
