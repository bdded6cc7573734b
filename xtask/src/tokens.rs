//! `cargo xtask tokens [--peer CMD]`: what the model reads, in bytes, over one
//! fixed coding session through the real binary (issue 19).
//!
//! The session runs on a scratch repository generated under
//! `target/tokens/` (fixed content and commit dates, so every run sees the
//! same files and hashes): a small Python project with a bug, its tests, a
//! ~234 KB source file and a small image. It makes at least 30 calls over all
//! 18 tools: a bug hunt and fix, deliberate mistakes (bad path, bad argument,
//! ambiguous patch, unknown command_id and output ref, a path escape, a
//! permission refusal and its request) and continuations, each followed as
//! the server itself names it (`next_action`): a large file read to its end,
//! a truncated output paged with read_output, a 2 s command polled with
//! write_stdin until it exits, an interactive command fed with write_stdin,
//! a kill.
//!
//! It reports, per call and in total, the content text bytes (what most
//! clients show the model), the structuredContent bytes (compact JSON: what
//! some clients forward instead) and the number of calls; and the catalog
//! the model sees (name + description + inputSchema, compact JSON, per tool)
//! and the `instructions`. "Bulk" calls are the pages of the large file and
//! of the paged output, whose size is the payload; the rest are "small"
//! results, whose size is mostly framing.
//!
//! Information parity: for every call, the facts a model needs are looked
//! up in the content text (the lines read, match lines, entries, commits,
//! exit code and status, output lines, error code, category and
//! retryability, and the exact continuation call with every argument). A
//! fact missing from OUR text fails the command, so a smaller result cannot
//! win by dropping a fact; the peer's misses are only reported.
//!
//! With `--peer CMD` the same session runs against another server (a fresh
//! copy of the repository; `{ws}` in CMD is the workspace, and without it
//! `--stdio --workspace {ws}` is appended) and the ratios ours/peer are
//! printed. A JSON report goes to `target/tokens.json`. `--budgets` (with
//! `--peer`) also checks our run against the budgets of issues 19 and 32 —
//! most of them ratios to the peer measured in the same run — and fails
//! when one is exceeded. Each call is also measured in the "structured
//! lens" (what Claude Code and Codex hand the model: the JSON of
//! `structuredContent` for a success, the text for an error), and the facts
//! a model needs are checked there too.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::bench::Rng;
use crate::peer::Peer;
use crate::{run_cmd, target_dir};

/// The ~234 KB source file the session reads to its end.
const LARGE_FILE: &str = "src/tables.py";
const LARGE_FILE_BYTES: usize = 234_000;
const SEED: u64 = 0x70c3_2026;

/// The budgets, checked with `--budgets` (as `cargo xtask ci` does).
///
/// Issue 19's, against our own first measurement (2026-11-30, main at
/// fe566c1): small-result text 7,448 B, 38 calls of which 2 poll the 2 s
/// command. The text budget is 0.95x that baseline (the issue's 0.8x would
/// need the contract's error lines — category, retryability, "Do not
/// repeat" — and payload to go).
///
/// Issue 32's, against the reference run in the same invocation (`--peer`,
/// which `--budgets` needs): the catalog the model sees at most the
/// reference's; `tools/list` as served at most 1.25x the reference's; the
/// structured lens of the small results at most 1.15x the reference's.
/// The issue asked for 0.8x there. Out of reach while every field the
/// reference sends stays: our answers cut to exactly the reference's
/// top-level fields measure 1.01x its lens (`structured_lens_floor`; our
/// command ids are shorter, our error texts longer), so 0.8x would mean
/// dropping fields its clients read. 1.15x holds today's lean answers
/// (1.13x, from 1.67x) against growth.
const BASELINE_SMALL_TEXT: usize = 7_448;
const BASELINE_CALLS: usize = 38;
const BASELINE_POLLED_CALLS: usize = 2;
/// Ratios to the reference, in percent.
const BUDGET_TOOLS_LIST_PCT: usize = 125;
const BUDGET_STRUCTURED_LENS_PCT: usize = 115;

/// A 8x8 grayscale PNG (105 bytes) for view_image.
const LOGO_PNG: [u8; 105] = [
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 8, 0, 0, 0, 8, 8, 0, 0,
    0, 0, 225, 100, 225, 87, 0, 0, 0, 48, 73, 68, 65, 84, 120, 218, 99, 96, 80, 112, 72, 104, 88,
    112, 224, 1, 131, 128, 65, 64, 193, 132, 13, 23, 62, 192, 5, 24, 160, 2, 2, 12, 80, 1, 5, 6,
    168, 128, 1, 3, 84, 192, 129, 1, 42, 16, 0, 0, 39, 132, 30, 1, 151, 192, 117, 0, 0, 0, 0, 0,
    73, 69, 78, 68, 174, 66, 96, 130,
];

pub fn run(args: &[String]) -> Result<()> {
    let mut peer: Option<String> = None;
    let mut peer05: Option<String> = None;
    let mut budgets = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--peer" => peer = Some(it.next().context("--peer CMD")?.clone()),
            "--peer05" => peer05 = Some(it.next().context("--peer05 CMD")?.clone()),
            "--budgets" => budgets = true,
            other => bail!("unknown tokens argument: {other}"),
        }
    }
    if budgets && peer.is_none() {
        bail!(
            "--budgets needs --peer CMD: the budgets are ratios to the reference measured in the same run (cargo xtask ci installs it in target/ref-venv)"
        );
    }
    let mut build = crate::cargo();
    build.args([
        "build",
        "--quiet",
        "-p",
        "coding-tools-mcp",
        "--bin",
        "coding-tools-mcp",
    ]);
    run_cmd(&mut build)?;
    let binary = target_dir().join("debug").join("coding-tools-mcp");
    let base = target_dir().join("tokens");

    let ws = fixture(&base.join("ours"))?;
    eprintln!("tokens: running the session against {}", binary.display());
    let mut cmd = Command::new(&binary);
    cmd.args(["--stdio", "--workspace"])
        .arg(&ws)
        .current_dir(&ws);
    let ours = drive(&mut cmd, "ours")?;

    let theirs = match &peer {
        Some(template) => {
            let ws = fixture(&base.join("peer"))?;
            let mut cmd = crate::peer::stdio_command(template, &ws)?;
            eprintln!("tokens: running the session against {cmd:?}");
            Some(drive(&mut cmd, "peer")?)
        }
        None => None,
    };

    print_report(&ours, theirs.as_ref());
    let mut over = match (&theirs, budgets) {
        (Some(reference), true) => check_budgets(&ours, reference),
        _ => Vec::new(),
    };

    // The edit session of catalog 0.5, beside the reference 0.5.0.
    let ws = crate::tokens_edit::fixture(&base.join("edit-ours"))?;
    let mut cmd = Command::new(&binary);
    cmd.args(["--stdio", "--catalog", "0.5", "--workspace"])
        .arg(&ws)
        .current_dir(&ws);
    let edit_ours = crate::tokens_edit::drive(&mut cmd)?;
    let edit_peer = match &peer05 {
        Some(template) => {
            let ws = crate::tokens_edit::fixture(&base.join("edit-peer"))?;
            let mut cmd = crate::peer::stdio_command(template, &ws)?;
            // The reference 0.5.0 reports usage to a remote host unless told not to.
            cmd.env("CODING_TOOLS_MCP_TELEMETRY", "off")
                .env("DO_NOT_TRACK", "1");
            Some(crate::tokens_edit::drive(&mut cmd)?)
        }
        None => None,
    };
    crate::tokens_edit::print(&edit_ours, edit_peer.as_ref());
    if let (Some(p), true) = (&edit_peer, budgets) {
        over.extend(crate::tokens_edit::check(&edit_ours, p));
    }
    let json_path = target_dir().join("tokens.json");
    let report = json!({
        "ours": ours.to_json(),
        "peer": theirs.as_ref().map(Run::to_json),
        "peer_command": peer,
        "edit_session": {"ours": edit_ours.to_json(), "peer05": edit_peer.as_ref().map(crate::tokens_edit::EditRun::to_json)},
        "budgets_checked": budgets,
        "over_budget": over,
    });
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("\nJSON report: {}", json_path.display());

    let missing: Vec<String> = ours
        .calls
        .iter()
        .flat_map(|c| {
            c.missing
                .iter()
                .map(move |m| format!("call {} {}: {m}", c.n, c.tool))
        })
        .chain(ours.calls.iter().filter_map(|c| {
            c.unexpected
                .as_ref()
                .map(|u| format!("call {} {}: {u}", c.n, c.tool))
        }))
        .collect();
    match (missing.is_empty(), over.is_empty()) {
        (true, true) => Ok(()),
        (false, _) => bail!(
            "information parity failed ({} problem(s)):\n  {}{}",
            missing.len(),
            missing.join("\n  "),
            if over.is_empty() {
                String::new()
            } else {
                format!("\nand over budget:\n  {}", over.join("\n  "))
            }
        ),
        (true, false) => bail!("over budget:\n  {}", over.join("\n  ")),
    }
}

/// Prints the budgets against our run and the reference's; returns the
/// ones exceeded.
fn check_budgets(ours: &Run, reference: &Run) -> Vec<String> {
    let pct = |n: usize, p: usize| n * p / 100;
    let rows = [
        (
            "catalog the model sees (at most the reference's)",
            reference.catalog_bytes(),
            ours.catalog_bytes(),
        ),
        (
            "tools/list as served (1.25x the reference's)",
            pct(reference.tools_list_bytes(), BUDGET_TOOLS_LIST_PCT),
            ours.tools_list_bytes(),
        ),
        (
            "structured lens of the small results (1.15x the reference's)",
            pct(
                reference.structured_lens(Some(false)),
                BUDGET_STRUCTURED_LENS_PCT,
            ),
            ours.structured_lens(Some(false)),
        ),
        (
            "text lens of the small results (0.95x the baseline)",
            BASELINE_SMALL_TEXT * 95 / 100,
            ours.text(Some(false)),
        ),
        ("calls in the session", BASELINE_CALLS, ours.count(None)),
        (
            "calls for the polled 2 s command",
            BASELINE_POLLED_CALLS,
            ours.polled_calls,
        ),
    ];
    println!("\n## Budgets (issues 19 and 32)\n");
    println!("| budget | limit | measured | |");
    println!("|---|---:|---:|---|");
    let mut over = Vec::new();
    for (what, limit, measured) in rows {
        let ok = measured <= limit;
        println!(
            "| {what} | {limit} | {measured} | {} |",
            if ok { "ok" } else { "OVER" }
        );
        if !ok {
            over.push(format!("{what}: {measured} > {limit}"));
        }
    }
    println!(
        "\nThe structured lens counting only the reference's top-level fields of each answer: {} B ({} of the reference's {} B).",
        ours.structured_lens_floor(reference),
        ratio(
            ours.structured_lens_floor(reference),
            reference.structured_lens(Some(false))
        ),
        reference.structured_lens(Some(false)),
    );
    over
}

// ---------------------------------------------------------------------------
// The scratch repository.

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "omega", "value", "result", "buffer", "index", "token",
    "parse", "render", "struct", "match", "config", "thread", "socket", "vector", "kernel",
    "cache",
];

const CALC_V1: &str = "\"\"\"A tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n";
const CALC_V2: &str = "\"\"\"A tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n";
const CALC_V3: &str = "\"\"\"A tiny calculator.\"\"\"\n\n\ndef add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n";
const TESTS: &str = "import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), \"..\", \"src\"))\n\nfrom calc import add, mul, sub  # noqa: E402\n\nassert sub(5, 3) == 2, f\"sub(5, 3) == {sub(5, 3)}\"\nassert mul(2, 3) == 6, f\"mul(2, 3) == {mul(2, 3)}\"\nassert add(2, 3) == 5, f\"add(2, 3) == {add(2, 3)}\"\nprint(\"3 tests passed\")\n";

/// The ~234 KB generated module.
fn large_file() -> String {
    let mut rng = Rng(SEED);
    let mut body = String::from("\"\"\"Generated lookup tables.\"\"\"\n\nTABLE = {\n");
    let mut n = 0u64;
    while body.len() < LARGE_FILE_BYTES - 40 {
        n += 1;
        let words: Vec<&str> = (0..2 + rng.below(4))
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        body.push_str(&format!(
            "    \"key_{n:05}\": ({}, \"{}\"),  # {}\n",
            rng.below(100_000),
            words.join("_"),
            "=".repeat(rng.below(24) as usize)
        ));
    }
    body.push_str("}\n");
    body
}

fn git(ws: &Path, args: &[&str], when: &str) -> Result<()> {
    let status = Command::new("git")
        .current_dir(ws)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Ada Tokens")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada Tokens")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_AUTHOR_DATE", when)
        .env("GIT_COMMITTER_DATE", when)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdout(Stdio::null())
        .status()
        .context("git")?;
    if !status.success() {
        bail!("git {args:?} failed: {status}");
    }
    Ok(())
}

/// A fresh copy of the scratch repository under `dir`; returns its path.
fn fixture(dir: &Path) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    let ws = dir.join("calc");
    std::fs::create_dir_all(ws.join("src"))?;
    std::fs::create_dir_all(ws.join("tests"))?;
    std::fs::write(
        ws.join("AGENTS.md"),
        "# Rules\nRun `python3 -B tests/test_calc.py` before you finish.\n",
    )?;
    std::fs::write(
        ws.join("README.md"),
        "# calc\n\nA tiny calculator with generated lookup tables.\n",
    )?;
    std::fs::write(ws.join(".gitignore"), "__pycache__/\n")?;
    std::fs::write(ws.join("src/calc.py"), CALC_V1)?;
    std::fs::write(ws.join(LARGE_FILE), large_file())?;
    std::fs::write(ws.join("tests/test_calc.py"), TESTS)?;
    std::fs::write(ws.join("logo.png"), LOGO_PNG)?;
    git(&ws, &["init", "-q", "-b", "main"], "2026-01-05T10:00:00Z")?;
    git(&ws, &["add", "-A"], "2026-01-05T10:00:00Z")?;
    git(
        &ws,
        &["commit", "-qm", "Initial calculator"],
        "2026-01-05T10:00:00Z",
    )?;
    std::fs::write(ws.join("src/calc.py"), CALC_V2)?;
    git(&ws, &["commit", "-qam", "Add sub"], "2026-01-06T11:30:00Z")?;
    std::fs::write(ws.join("src/calc.py"), CALC_V3)?;
    git(&ws, &["commit", "-qam", "Add mul"], "2026-01-07T09:15:00Z")?;
    Ok(ws)
}

// ---------------------------------------------------------------------------
// The session.

/// What a call is expected to do (on our server; the peer's deviations
/// are only reported).
#[derive(Clone, Copy)]
enum Expect {
    Ok,
    /// A tool error with this code.
    Err(&'static str),
    /// Success with this exit code.
    Exit(i64),
    /// Success with a non-zero exit code.
    ExitNonZero,
    /// Whatever the server answers (a continuation).
    Any,
}

/// One tool call as measured.
struct Call {
    n: usize,
    step: &'static str,
    tool: String,
    args: Value,
    bulk: bool,
    text: String,
    text_bytes: usize,
    structured_bytes: usize,
    image_bytes: usize,
    is_error: bool,
    rpc_error: bool,
    structured: Value,
    /// Facts the content text does not carry.
    missing: Vec<String>,
    facts: usize,
    /// How the call differed from what the session expects.
    unexpected: Option<String>,
}

struct Run {
    server: String,
    instructions_bytes: usize,
    /// (tool, catalog bytes, bytes of descriptions inside its inputSchema,
    /// bytes of the whole tool as tools/list serves it)
    catalog: Vec<(String, usize, usize, usize)>,
    calls: Vec<Call>,
    polled_calls: usize,
    read_pages: usize,
    output_pages: usize,
}

impl Run {
    fn catalog_bytes(&self) -> usize {
        self.catalog.iter().map(|c| c.1).sum()
    }
    fn schema_description_bytes(&self) -> usize {
        self.catalog.iter().map(|c| c.2).sum()
    }
    fn tools_list_bytes(&self) -> usize {
        self.catalog.iter().map(|c| c.3).sum()
    }
    fn text(&self, bulk: Option<bool>) -> usize {
        self.select(bulk).map(|c| c.text_bytes).sum()
    }
    fn structured(&self, bulk: Option<bool>) -> usize {
        self.select(bulk).map(|c| c.structured_bytes).sum()
    }
    /// What Claude Code and Codex hand the model (docs/clients.md): the
    /// JSON of `structuredContent` for a success, the text for an error.
    fn structured_lens(&self, bulk: Option<bool>) -> usize {
        self.select(bulk)
            .map(|c| {
                if c.is_error {
                    c.text_bytes
                } else {
                    c.structured_bytes
                }
            })
            .sum()
    }
    /// The structured lens of the small results counting only the
    /// top-level fields `peer` sent for the same call: the least a
    /// drop-in replacement can send (every field of the reference stays).
    fn structured_lens_floor(&self, peer: &Run) -> usize {
        self.select(Some(false))
            .map(|c| {
                let same = peer
                    .calls
                    .iter()
                    .find(|p| p.step == c.step && p.tool == c.tool && !p.bulk);
                match (
                    c.is_error,
                    c.structured.as_object(),
                    same.and_then(|p| p.structured.as_object()),
                ) {
                    (false, Some(ours), Some(theirs)) => {
                        let kept: Map<String, Value> = ours
                            .iter()
                            .filter(|(k, _)| theirs.contains_key(*k))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        Value::Object(kept).to_string().len()
                    }
                    (true, _, _) => c.text_bytes,
                    _ => c.structured_bytes,
                }
            })
            .sum()
    }
    fn count(&self, bulk: Option<bool>) -> usize {
        self.select(bulk).count()
    }
    fn select(&self, bulk: Option<bool>) -> impl Iterator<Item = &Call> {
        self.calls
            .iter()
            .filter(move |c| bulk.is_none_or(|b| c.bulk == b))
    }

    fn to_json(&self) -> Value {
        json!({
            "server": self.server,
            "instructions_bytes": self.instructions_bytes,
            "catalog_bytes": self.catalog_bytes(),
            "catalog_schema_description_bytes": self.schema_description_bytes(),
            "tools_list_bytes": self.tools_list_bytes(),
            "catalog": self.catalog.iter().map(|(name, bytes, desc, whole)| json!({"tool": name, "bytes": bytes, "schema_description_bytes": desc, "tools_list_bytes": whole})).collect::<Vec<_>>(),
            "calls": self.count(None),
            "small_calls": self.count(Some(false)),
            "bulk_calls": self.count(Some(true)),
            "text_bytes": self.text(None),
            "small_text_bytes": self.text(Some(false)),
            "bulk_text_bytes": self.text(Some(true)),
            "structured_bytes": self.structured(None),
            "small_structured_bytes": self.structured(Some(false)),
            "small_structured_lens_bytes": self.structured_lens(Some(false)),
            "bulk_structured_bytes": self.structured(Some(true)),
            "polled_command_calls": self.polled_calls,
            "large_file_pages": self.read_pages,
            "output_pages": self.output_pages,
            "parity_facts": self.calls.iter().map(|c| c.facts).sum::<usize>(),
            "parity_missing": self.calls.iter().map(|c| c.missing.len()).sum::<usize>(),
            "session": self.calls.iter().map(|c| json!({
                "n": c.n,
                "step": c.step,
                "tool": c.tool,
                "arguments": c.args,
                "bulk": c.bulk,
                "is_error": c.is_error,
                "jsonrpc_error": c.rpc_error,
                "text_bytes": c.text_bytes,
                "structured_bytes": c.structured_bytes,
                "image_bytes": c.image_bytes,
                "facts": c.facts,
                "missing": c.missing,
                "unexpected": c.unexpected,
                // The small results whole, to see what a lens is made of.
                "structured": if c.bulk { Value::Null } else { c.structured.clone() },
                "text": if c.bulk { Value::Null } else { Value::String(c.text.clone()) },
            })).collect::<Vec<_>>(),
        })
    }
}

struct Session {
    peer: Peer,
    id: u64,
    label: &'static str,
    calls: Vec<Call>,
}

impl Session {
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.id += 1;
        self.peer.request(self.id, method, params)
    }

    /// Calls a tool, measures the answer and checks its facts.
    fn call(
        &mut self,
        step: &'static str,
        tool: &str,
        args: Value,
        bulk: bool,
        expect: Expect,
    ) -> Result<Value> {
        let v = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        let mut call = Call {
            n: self.calls.len() + 1,
            step,
            tool: tool.to_owned(),
            args,
            bulk,
            text: String::new(),
            text_bytes: 0,
            structured_bytes: 0,
            image_bytes: 0,
            is_error: false,
            rpc_error: false,
            structured: Value::Null,
            missing: Vec::new(),
            facts: 0,
            unexpected: None,
        };
        if let Some(err) = v.get("error") {
            // A JSON-RPC error: the client shows the model its message.
            call.rpc_error = true;
            call.is_error = true;
            call.text = err["message"].as_str().unwrap_or_default().to_owned();
            call.text_bytes = call.text.len();
        } else {
            let r = &v["result"];
            call.is_error = r["isError"] == true;
            let mut texts = Vec::new();
            for block in r["content"].as_array().into_iter().flatten() {
                match block["type"].as_str() {
                    Some("text") => texts.push(block["text"].as_str().unwrap_or_default()),
                    Some("image") => {
                        call.image_bytes += block["data"].as_str().map_or(0, str::len);
                    }
                    _ => {}
                }
            }
            call.text_bytes = texts.iter().map(|t| t.len()).sum();
            call.text = texts.join("\n");
            call.structured = r.get("structuredContent").cloned().unwrap_or(Value::Null);
            if !call.structured.is_null() {
                call.structured_bytes = call.structured.to_string().len();
            }
        }
        let mut facts = facts(&call);
        facts.extend(structured_facts(&call));
        call.facts = facts.len();
        call.missing = facts
            .into_iter()
            .filter(|(_, present)| !present)
            .map(|(what, _)| what)
            .collect();
        call.unexpected = unexpected(&call, expect);
        if let Some(u) = &call.unexpected {
            eprintln!("tokens ({}): call {} {tool}: {u}", self.label, call.n);
        }
        let structured = call.structured.clone();
        self.calls.push(call);
        Ok(structured)
    }

    /// Follows a `next_action` exactly as the server gave it.
    fn follow(&mut self, step: &'static str, action: &Value, bulk: bool) -> Result<Value> {
        let tool = action["tool"]
            .as_str()
            .context("next_action without tool")?
            .to_owned();
        self.call(step, &tool, action["arguments"].clone(), bulk, Expect::Any)
    }
}

fn next_action(s: &Value) -> Option<&Value> {
    s.get("next_action").filter(|a| a.is_object())
}

fn unexpected(call: &Call, expect: Expect) -> Option<String> {
    let s = &call.structured;
    let code = s["error"]["code"].as_str().unwrap_or_default();
    let exit = s["exit_code"].as_i64();
    match expect {
        Expect::Any => None,
        Expect::Ok if call.is_error => Some(format!("expected success, got error {code}")),
        Expect::Err(want) if !call.is_error => Some(format!("expected error {want}, got success")),
        Expect::Err(want) if code != want => Some(format!(
            "expected error {want}, got {code:?} ({})",
            call.text
        )),
        Expect::Exit(want) if call.is_error || exit != Some(want) => Some(format!(
            "expected exit code {want}, got {exit:?} (error {code:?})"
        )),
        Expect::ExitNonZero if call.is_error || exit.is_none_or(|e| e == 0) => Some(format!(
            "expected a non-zero exit code, got {exit:?} (error {code:?})"
        )),
        _ => None,
    }
}

/// Starts `cmd`, plays the session, and measures it.
fn drive(cmd: &mut Command, label: &'static str) -> Result<Run> {
    let peer = Peer::spawn(cmd)?;
    let mut s = Session {
        peer,
        id: 0,
        label,
        calls: Vec::new(),
    };
    let init = s.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "xtask-tokens", "version": "1"}}),
    )?;
    let init = init.get("result").context("initialize failed")?;
    let server = format!(
        "{} {}",
        init["serverInfo"]["name"].as_str().unwrap_or("?"),
        init["serverInfo"]["version"].as_str().unwrap_or("?")
    );
    let instructions_bytes = init["instructions"].as_str().map_or(0, str::len);
    s.peer
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
    let catalog = catalog(&mut s)?;

    // Look around.
    s.call("orient", "server_info", json!({}), false, Expect::Ok)?;
    s.call(
        "orient",
        "check_exec_environment",
        json!({}),
        false,
        Expect::Ok,
    )?;
    s.call("orient", "list_dir", json!({}), false, Expect::Ok)?;
    s.call(
        "orient",
        "list_files",
        json!({"patterns": ["**/*.py"]}),
        false,
        Expect::Ok,
    )?;
    // The failing tests, then the hunt.
    s.call(
        "tests fail",
        "exec_command",
        json!({"cmd": "python3 -B tests/test_calc.py"}),
        false,
        Expect::ExitNonZero,
    )?;
    s.call(
        "hunt",
        "search_text",
        json!({"query": "def add"}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "hunt",
        "read_file",
        json!({"path": "src/calc.py"}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "hunt",
        "git_log",
        json!({"max_count": 5}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "hunt",
        "git_blame",
        json!({"path": "src/calc.py", "start_line": 4, "end_line": 9}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "hunt",
        "git_show",
        json!({"rev": "HEAD~1"}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "hunt",
        "search_text",
        json!({"query": "def (add|sub)\\(", "regex": true, "context_lines": 1}),
        false,
        Expect::Ok,
    )?;
    // The large file, read to its end by its continuations.
    let mut read_pages = 1;
    let mut page = s.call(
        "large read",
        "read_file",
        json!({"path": LARGE_FILE}),
        true,
        Expect::Ok,
    )?;
    while let Some(action) = next_action(&page).cloned() {
        if read_pages >= 100 {
            bail!("{label}: the large read never ended");
        }
        page = s.follow("large read", &action, true)?;
        read_pages += 1;
    }
    s.call(
        "range read",
        "read_file",
        json!({"path": LARGE_FILE, "start_line": 10, "end_line": 12}),
        false,
        Expect::Ok,
    )?;
    // Four patches: ambiguous, a dry run, the fix, a new file.
    let ambiguous = "*** Begin Patch\n*** Update File: src/calc.py\n@@\n-    return a - b\n+    return a + b\n*** End Patch\n";
    s.call(
        "patch",
        "apply_patch",
        json!({"patch": ambiguous}),
        false,
        Expect::Err("PATCH_CONTEXT_AMBIGUOUS"),
    )?;
    let fix = "*** Begin Patch\n*** Update File: src/calc.py\n@@\n def add(a, b):\n-    return a - b\n+    return a + b\n*** End Patch\n";
    s.call(
        "patch",
        "apply_patch",
        json!({"patch": fix, "dry_run": true}),
        false,
        Expect::Ok,
    )?;
    s.call(
        "patch",
        "apply_patch",
        json!({"patch": fix}),
        false,
        Expect::Ok,
    )?;
    let add =
        "*** Begin Patch\n*** Add File: src/version.py\n+VERSION = \"1.0.1\"\n*** End Patch\n";
    s.call(
        "patch",
        "apply_patch",
        json!({"patch": add}),
        false,
        Expect::Ok,
    )?;
    s.call("review", "git_status", json!({}), false, Expect::Ok)?;
    s.call("review", "git_diff", json!({}), false, Expect::Ok)?;
    s.call(
        "tests pass",
        "exec_command",
        json!({"cmd": "python3 -B tests/test_calc.py"}),
        false,
        Expect::Exit(0),
    )?;
    // A truncated output, paged by its continuations.
    let big = s.call(
        "paged output",
        "exec_command",
        json!({"cmd": "seq 1 3000", "max_output_bytes": 2000}),
        false,
        Expect::Exit(0),
    )?;
    let mut output_pages = 0;
    let mut page = big;
    while let Some(action) = next_action(&page).cloned() {
        if output_pages >= 100 {
            bail!("{label}: paging never ended");
        }
        page = s.follow("paged output", &action, true)?;
        output_pages += 1;
    }
    // A 2 s command polled until it exits.
    let before = s.calls.len();
    let mut r = s.call(
        "polled command",
        "exec_command",
        json!({"cmd": "sleep 2; echo done", "yield_time_ms": 250}),
        false,
        Expect::Ok,
    )?;
    while r["status"] == "running" {
        let Some(action) = next_action(&r).cloned() else {
            bail!("{label}: a running command without next_action: {r}");
        };
        if s.calls.len() - before > 50 {
            bail!("{label}: the polled command never ended");
        }
        r = s.follow("polled command", &action, false)?;
    }
    let polled_calls = s.calls.len() - before;
    // An interactive command fed on its stdin.
    let r = s.call(
        "interactive",
        "exec_command",
        json!({"cmd": "read name; echo hello $name", "tty": true, "yield_time_ms": 300}),
        false,
        Expect::Ok,
    )?;
    let id = r["command_id"].as_str().unwrap_or_default().to_owned();
    let mut r = s.call(
        "interactive",
        "write_stdin",
        json!({"command_id": id, "chars": "world\n"}),
        false,
        Expect::Ok,
    )?;
    for _ in 0..20 {
        if r["status"] != "running" {
            break;
        }
        let Some(action) = next_action(&r).cloned() else {
            break;
        };
        r = s.follow("interactive", &action, false)?;
    }
    // A command killed.
    let r = s.call(
        "kill",
        "exec_command",
        json!({"cmd": "sleep 30", "yield_time_ms": 100}),
        false,
        Expect::Ok,
    )?;
    let id = r["command_id"].as_str().unwrap_or_default().to_owned();
    s.call(
        "kill",
        "kill_command",
        json!({"command_id": id}),
        false,
        Expect::Ok,
    )?;
    // Deliberate mistakes.
    s.call(
        "mistake",
        "write_stdin",
        json!({"command_id": "no-such-command", "chars": ""}),
        false,
        Expect::Err("COMMAND_NOT_FOUND"),
    )?;
    s.call(
        "mistake",
        "read_output",
        json!({"output_ref": "command:no-such-command:stdout"}),
        false,
        Expect::Err("COMMAND_NOT_FOUND"),
    )?;
    s.call(
        "mistake",
        "read_file",
        json!({"path": "src/missing.py"}),
        false,
        Expect::Err("NOT_FOUND"),
    )?;
    s.call(
        "mistake",
        "read_file",
        json!({"path": "src/calc.py", "start_line": 0}),
        false,
        Expect::Err("INVALID_ARGUMENT"),
    )?;
    s.call(
        "mistake",
        "list_files",
        json!({"path": "../"}),
        false,
        Expect::Err("PATH_OUTSIDE_WORKSPACE"),
    )?;
    let refused = json!({"cmd": "curl -s https://example.com"});
    s.call(
        "mistake",
        "exec_command",
        refused.clone(),
        false,
        Expect::Err("PERMISSION_REQUIRED"),
    )?;
    s.call(
        "mistake",
        "request_permissions",
        json!({"tool_name": "exec_command", "permission": "network", "reason": "fetch the example page", "arguments": refused}),
        false,
        Expect::Err("ELICITATION_UNSUPPORTED"),
    )?;
    s.call(
        "look",
        "view_image",
        json!({"path": "logo.png"}),
        false,
        Expect::Ok,
    )?;

    Ok(Run {
        server,
        instructions_bytes,
        catalog,
        calls: s.calls,
        polled_calls,
        read_pages,
        output_pages,
    })
}

/// tools/list, per tool: the bytes of name + description + inputSchema as
/// compact JSON, of the descriptions inside the inputSchema, and of the
/// whole tool as served (outputSchema, annotations and title too: what a
/// client fetches and caches, most of which the model does not see).
fn catalog(s: &mut Session) -> Result<Vec<(String, usize, usize, usize)>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let v = s.request("tools/list", params)?;
        let r = v.get("result").context("tools/list failed")?;
        for tool in r["tools"].as_array().into_iter().flatten() {
            let mut seen = Map::new();
            for key in ["name", "description", "inputSchema"] {
                if let Some(x) = tool.get(key) {
                    seen.insert(key.to_owned(), x.clone());
                }
            }
            let full = Value::Object(seen.clone()).to_string().len();
            if let Some(schema) = seen.get_mut("inputSchema") {
                strip_descriptions(schema);
            }
            let bare = Value::Object(seen).to_string().len();
            out.push((
                tool["name"].as_str().unwrap_or("?").to_owned(),
                full,
                full - bare,
                tool.to_string().len(),
            ));
        }
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok(out),
        }
    }
}

fn strip_descriptions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("description").is_some_and(Value::is_string) {
                m.remove("description");
            }
            m.values_mut().for_each(strip_descriptions);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Information parity.

/// The facts a model needs from this call, each with whether the content
/// text carries it.
fn facts(call: &Call) -> Vec<(String, bool)> {
    let t = call.text.as_str();
    let lower = t.to_lowercase();
    let s = &call.structured;
    let mut f: Vec<(String, bool)> = Vec::new();
    if call.rpc_error {
        // Nothing structured to check against; the message is all there is.
        f.push(("a JSON-RPC error message".into(), !call.text.is_empty()));
        return f;
    }
    // Errors: code, category, retryability.
    if let Some(err) = s.get("error").filter(|e| e.is_object()) {
        if let Some(code) = err["code"].as_str() {
            f.push((format!("error code {code}"), t.contains(code)));
        }
        if let Some(cat) = err["category"].as_str() {
            let cat = cat.to_lowercase();
            f.push((
                format!("error category {cat}"),
                [
                    format!("category: {cat}"),
                    format!("category={cat}"),
                    format!("category {cat}"),
                ]
                .iter()
                .any(|c| lower.contains(c)),
            ));
        }
        if let Some(retry) = err["retryable"].as_bool() {
            let words: &[&str] = if retry {
                &[
                    "retryable: yes",
                    "retryable: true",
                    "retryable=true",
                    "retryable",
                ]
            } else {
                &[
                    "retryable: no",
                    "retryable: false",
                    "retryable=false",
                    "not retryable",
                ]
            };
            // "retryable" alone only counts for `true` when no negation is
            // there.
            let present = if retry {
                words[..3].iter().any(|w| lower.contains(w))
                    || (lower.contains("retryable")
                        && !lower.contains("retryable: no")
                        && !lower.contains("not retryable"))
            } else {
                words.iter().any(|w| lower.contains(w))
            };
            f.push((format!("retryable {retry}"), present));
        }
    }
    if let Some(action) = next_action(s) {
        f.push(continuation(t, action));
    }
    let ok = !call.is_error && s.get("error").is_none_or(Value::is_null);
    if !ok {
        return f;
    }
    match call.tool.as_str() {
        "server_info" => {
            if let Some(v) = s["version"].as_str() {
                f.push((format!("version {v}"), t.contains(v)));
            }
        }
        "check_exec_environment" => {
            f.push(("the Landlock state".into(), lower.contains("landlock")));
        }
        "read_file" => {
            if let Some(c) = s["content"].as_str() {
                f.push(lines_present("line read", t, c));
            }
        }
        "read_output" => {
            if let Some(c) = s["content"].as_str() {
                f.push(lines_present("output line", t, c));
            }
        }
        "list_dir" => {
            for e in s["entries"].as_array().into_iter().flatten() {
                let name = e["name"]
                    .as_str()
                    .or(e["path"].as_str())
                    .unwrap_or_default();
                f.push((format!("entry {name}"), t.contains(name)));
            }
        }
        "list_files" => {
            for e in s["files"].as_array().into_iter().flatten() {
                let p = e["path"].as_str().or(e.as_str()).unwrap_or_default();
                f.push((format!("file {p}"), t.contains(p)));
            }
        }
        "search_text" => {
            for m in s["matches"].as_array().into_iter().flatten() {
                let at = format!(
                    "{}:{}",
                    m["path"].as_str().unwrap_or_default(),
                    m["line"]
                        .as_u64()
                        .or(m["line_number"].as_u64())
                        .unwrap_or(0)
                );
                let preview = m["preview"].as_str().unwrap_or_default().trim();
                f.push((
                    format!("match {at}: {preview}"),
                    t.contains(&at) && t.contains(preview),
                ));
                for ctx in ["before", "after"] {
                    for l in m[ctx].as_array().into_iter().flatten() {
                        let l = l.as_str().or(l["text"].as_str()).unwrap_or_default().trim();
                        if !l.is_empty() {
                            f.push((format!("context line {l:?}"), t.contains(l)));
                        }
                    }
                }
            }
        }
        "apply_patch" => {
            let mut paths: Vec<String> = Vec::new();
            for e in s["files"].as_array().into_iter().flatten() {
                if let Some(p) = e["path"].as_str() {
                    paths.push(p.to_owned());
                }
            }
            if paths.is_empty() {
                for e in s["affected_files"].as_array().into_iter().flatten() {
                    if let Some(p) = e.as_str().or(e["path"].as_str()) {
                        paths.push(p.to_owned());
                    }
                }
            }
            for p in paths {
                f.push((format!("patched file {p}"), t.contains(&p)));
            }
        }
        "exec_command" | "write_stdin" | "kill_command" => {
            if let Some(status) = s["status"].as_str() {
                f.push((format!("status {status}"), lower.contains(status)));
            }
            // How it ended: the signal when one ended it (its exit code is
            // then only the signal's number), else the exit code.
            if let Some(sig) = s["signal"].as_str() {
                f.push((format!("signal {sig}"), t.contains(sig)));
            } else if let Some(code) = s["exit_code"].as_i64() {
                f.push((
                    format!("exit code {code}"),
                    [
                        format!("exit code {code}"),
                        format!("exit code: {code}"),
                        format!("exit_code {code}"),
                        format!("exit_code={code}"),
                        format!("exit_code: {code}"),
                        format!("exited with code {code}"),
                    ]
                    .iter()
                    .any(|c| lower.contains(c)),
                ));
            }
            if s["status"] == "running"
                && let Some(id) = s["command_id"].as_str()
            {
                f.push((format!("command_id {id}"), t.contains(id)));
            }
            for stream in ["stdout", "stderr"] {
                if let Some(out) = s[stream].as_str() {
                    f.push(lines_present(stream, t, out));
                }
            }
        }
        "git_status" => {
            if let Some(b) = s["branch"].as_str().filter(|b| !b.is_empty()) {
                f.push((format!("branch {b}"), t.contains(b)));
            }
            for e in s["entries"].as_array().into_iter().flatten() {
                let p = e["path"].as_str().unwrap_or_default();
                f.push((format!("changed path {p}"), t.contains(p)));
            }
        }
        "git_log" => {
            for c in s["commits"].as_array().into_iter().flatten() {
                let hash = c["hash"].as_str().unwrap_or_default();
                let short = &hash[..hash.len().min(7)];
                let subject = c["subject"].as_str().unwrap_or_default();
                f.push((
                    format!("commit {short} {subject}"),
                    t.contains(short) && t.contains(subject),
                ));
            }
        }
        "git_blame" => {
            for l in s["lines"].as_array().into_iter().flatten() {
                let commit = l["commit"].as_str().unwrap_or_default();
                let short = &commit[..commit.len().min(7)];
                let content = l["content"].as_str().unwrap_or_default().trim();
                let n = l["line"].as_u64().unwrap_or(0);
                f.push((
                    format!("blame line {n} {short} {content:?}"),
                    t.contains(short) && t.contains(content),
                ));
            }
        }
        "git_diff" => {
            if let Some(d) = s["diff"].as_str() {
                f.push(lines_present("diff line", t, d));
            }
        }
        "git_show" => {
            if let Some(d) = s["content"].as_str().or(s["diff"].as_str()) {
                f.push(lines_present("shown line", t, d));
            }
        }
        "view_image" => {
            f.push(("an image block".into(), call.image_bytes > 0));
            if let Some(m) = s["mime_type"].as_str() {
                f.push((format!("mime type {m}"), t.contains(m)));
            }
        }
        "request_permissions" => {
            if let Some(st) = s["status"].as_str() {
                f.push((format!("status {st}"), lower.contains(st)));
            }
        }
        _ => {}
    }
    f
}

/// The facts a model reading `structuredContent` (Claude Code, Codex)
/// needs from it, each with whether it is there: the continuation the
/// text names, a command's id, status, exit code and output, and an
/// error's code, category and retryability.
fn structured_facts(call: &Call) -> Vec<(String, bool)> {
    let s = &call.structured;
    let mut f: Vec<(String, bool)> = Vec::new();
    if call.rpc_error || s.is_null() {
        return f;
    }
    if let Some(err) = s.get("error").filter(|e| e.is_object()) {
        for key in ["code", "category", "retryable"] {
            f.push((
                format!("structured lens: error.{key}"),
                err.get(key).is_some_and(|v| !v.is_null()),
            ));
        }
        return f;
    }
    const CONTINUED_BY: [&str; 6] = [
        "read_output(",
        "write_stdin(",
        "read_file(",
        "git_log(",
        "git_diff(",
        "git_show(",
    ];
    if let Some(tool) = CONTINUED_BY.iter().find(|t| call.text.contains(*t)) {
        f.push((
            format!("structured lens: the continuation {tool}...) the text names"),
            s.get("next_action").is_some_and(Value::is_object)
                || s.get("next_actions").is_some_and(Value::is_array),
        ));
    }
    if ["exec_command", "write_stdin", "kill_command"].contains(&call.tool.as_str()) {
        for key in ["command_id", "status", "exit_code"] {
            f.push((format!("structured lens: {key}"), s.get(key).is_some()));
        }
        let output = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or_default();
        let tail = call.text.lines().rev().find(|l| {
            !l.trim().is_empty()
                && (output("stdout").contains(l.trim()) || output("stderr").contains(l.trim()))
        });
        let has_output = !output("stdout").is_empty() || !output("stderr").is_empty();
        if has_output || s.get("preview").is_some() {
            f.push((
                "structured lens: the output the text shows".into(),
                has_output && tail.is_some() || s.get("preview").is_some_and(Value::is_string),
            ));
        }
    }
    f
}

/// Whether every non-empty line of `body` is a line of `text`, or ends
/// one (after a prefix such as `path:line:` or a blame's commit).
fn lines_present(what: &str, text: &str, body: &str) -> (String, bool) {
    let text_lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let exact: std::collections::HashSet<&str> = text_lines.iter().copied().collect();
    let lines = body.lines().count();
    for l in body.lines() {
        let l = l.trim_end_matches('\r');
        if l.trim().is_empty() || exact.contains(l) {
            continue;
        }
        if !text_lines.iter().any(|t| t.ends_with(l)) {
            return (format!("{what} {l:?} (of {lines})"), false);
        }
    }
    (format!("every {what}"), true)
}

/// Whether the exact continuation is in the text: the tool and each
/// argument with its value (`k=<json>`, `"k":<json>`, or `k <value>`).
fn continuation(text: &str, action: &Value) -> (String, bool) {
    let tool = action["tool"].as_str().unwrap_or_default();
    let args = action["arguments"].as_object().cloned().unwrap_or_default();
    let rendered: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let what = format!("continuation {tool}({})", rendered.join(", "));
    let mut present = text.contains(tool);
    for (k, v) in &args {
        let j = v.to_string();
        let mut forms = vec![
            format!("{k}={j}"),
            format!("\"{k}\":{j}"),
            format!("\"{k}\": {j}"),
            format!("{k}: {j}"),
        ];
        if let Some(raw) = v.as_str() {
            forms.push(format!("{k} {raw}"));
            forms.push(format!("{k}={raw}"));
            forms.push(format!("{k}: {raw}"));
        }
        present &= forms.iter().any(|f| text.contains(f));
    }
    (what, present)
}

// ---------------------------------------------------------------------------
// The report.

fn ratio(a: usize, b: usize) -> String {
    if b == 0 {
        "–".into()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

fn short_args(args: &Value) -> String {
    let s = args.to_string();
    let s = s.replace('\n', "\\n");
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn print_report(ours: &Run, peer: Option<&Run>) {
    println!("# cargo xtask tokens: bytes the model reads in one scripted coding session\n");
    println!("ours: {}", ours.server);
    if let Some(p) = peer {
        println!("peer: {}", p.server);
    }
    println!(
        "\n## Session, per call (text = content text bytes; struct = structuredContent, compact JSON)\n"
    );
    if let Some(p) = peer {
        println!(
            "| # | step | call | ours text | ours struct | peer call | peer text | peer struct | parity (ours) |"
        );
        println!("|---|---|---|---:|---:|---|---:|---:|---|");
        // Rows pair the calls of each step in order: the servers may need
        // different numbers of continuations.
        let mut steps: Vec<&str> = Vec::new();
        for c in ours.calls.iter().chain(&p.calls) {
            if !steps.contains(&c.step) {
                steps.push(c.step);
            }
        }
        for step in steps {
            let a: Vec<&Call> = ours.calls.iter().filter(|c| c.step == step).collect();
            let b: Vec<&Call> = p.calls.iter().filter(|c| c.step == step).collect();
            for i in 0..a.len().max(b.len()) {
                let (a, b) = (a.get(i).copied(), b.get(i).copied());
                let peer_call = match (a, b) {
                    (Some(a), Some(b)) if a.tool == b.tool => "″".to_owned(),
                    (_, Some(b)) => call_cell(b),
                    _ => String::new(),
                };
                let num = |c: Option<&Call>, f: fn(&Call) -> usize| {
                    c.map_or(String::new(), |c| f(c).to_string())
                };
                println!(
                    "| {} | {step} | {} | {} | {} | {peer_call} | {} | {} | {} |",
                    a.map_or(String::new(), |c| c.n.to_string()),
                    a.map_or(String::new(), call_cell),
                    num(a, |c| c.text_bytes),
                    num(a, |c| c.structured_bytes),
                    num(b, |c| c.text_bytes),
                    num(b, |c| c.structured_bytes),
                    a.map_or(String::new(), parity_cell)
                );
            }
        }
    } else {
        println!("| # | step | call | text | struct | parity |");
        println!("|---|---|---|---:|---:|---|");
        for c in &ours.calls {
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                c.n,
                c.step,
                call_cell(c),
                c.text_bytes,
                c.structured_bytes,
                parity_cell(c)
            );
        }
    }

    println!("\n## Catalog (name + description + inputSchema, compact JSON), per tool\n");
    if let Some(p) = peer {
        println!("| tool | ours B | of which schema descriptions | peer B | ours/peer |");
        println!("|---|---:|---:|---:|---:|");
        for (name, bytes, desc, _) in &ours.catalog {
            let theirs = p.catalog.iter().find(|c| &c.0 == name).map(|c| c.1);
            println!(
                "| {name} | {bytes} | {desc} | {} | {} |",
                theirs.map_or("–".into(), |b| b.to_string()),
                theirs.map_or("–".into(), |b| ratio(*bytes, b))
            );
        }
        for (name, bytes, _, _) in &p.catalog {
            if !ours.catalog.iter().any(|c| &c.0 == name) {
                println!("| {name} (peer only) | – | – | {bytes} | – |");
            }
        }
    } else {
        println!("| tool | B | of which schema descriptions |");
        println!("|---|---:|---:|");
        for (name, bytes, desc, _) in &ours.catalog {
            println!("| {name} | {bytes} | {desc} |");
        }
    }

    println!("\n## Totals\n");
    type Row<'a> = (&'a str, Box<dyn Fn(&Run) -> usize>);
    let rows: Vec<Row<'_>> = vec![
        (
            "catalog the model sees (name + description + inputSchema, compact JSON)",
            Box::new(Run::catalog_bytes),
        ),
        (
            "of which descriptions inside inputSchemas",
            Box::new(Run::schema_description_bytes),
        ),
        (
            "tools/list as served (with outputSchema; fetched once, mostly not shown to the model)",
            Box::new(Run::tools_list_bytes),
        ),
        (
            "`instructions` (initialize)",
            Box::new(|r| r.instructions_bytes),
        ),
        ("calls in the session", Box::new(|r| r.count(None))),
        (
            "of which bulk payloads (large-file and output pages)",
            Box::new(|r| r.count(Some(true))),
        ),
        (
            "content text of the small results",
            Box::new(|r| r.text(Some(false))),
        ),
        (
            "structuredContent of the small results",
            Box::new(|r| r.structured(Some(false))),
        ),
        (
            "structured lens of the small results (structuredContent of a success, text of an error: what Claude Code and Codex show)",
            Box::new(|r| r.structured_lens(Some(false))),
        ),
        (
            "content text of the bulk payloads",
            Box::new(|r| r.text(Some(true))),
        ),
        (
            "structuredContent of the bulk payloads",
            Box::new(|r| r.structured(Some(true))),
        ),
        ("content text, all calls", Box::new(|r| r.text(None))),
        (
            "structuredContent, all calls",
            Box::new(|r| r.structured(None)),
        ),
        (
            "calls for one polled 2-second command",
            Box::new(|r| r.polled_calls),
        ),
        ("pages to read the 234 KB file", Box::new(|r| r.read_pages)),
        (
            "read_output pages of the truncated output",
            Box::new(|r| r.output_pages),
        ),
        (
            "parity facts checked (missing)",
            Box::new(|r| r.calls.iter().map(|c| c.facts).sum()),
        ),
    ];
    if let Some(p) = peer {
        println!("| what | peer | ours | ours/peer |");
        println!("|---|---:|---:|---:|");
        for (what, f) in &rows {
            let (a, b) = (f(ours), f(p));
            if what.starts_with("parity") {
                println!(
                    "| {what} | {b} ({}) | {a} ({}) | |",
                    missing_count(p),
                    missing_count(ours)
                );
            } else {
                println!("| {what} | {b} | {a} | {} |", ratio(a, b));
            }
        }
    } else {
        println!("| what | ours |");
        println!("|---|---:|");
        for (what, f) in &rows {
            if what.starts_with("parity") {
                println!("| {what} | {} ({}) |", f(ours), missing_count(ours));
            } else {
                println!("| {what} | {} |", f(ours));
            }
        }
    }
    if let Some(p) = peer {
        let misses: Vec<String> = p
            .calls
            .iter()
            .flat_map(|c| {
                c.missing
                    .iter()
                    .map(move |m| format!("call {} {}: {m}", c.n, c.tool))
            })
            .collect();
        if !misses.is_empty() {
            println!("\nThe peer's content text misses (reported, not failed):");
            for m in misses {
                println!("- {m}");
            }
        }
        let deviations: Vec<String> = p
            .calls
            .iter()
            .filter_map(|c| {
                c.unexpected
                    .as_ref()
                    .map(|u| format!("call {} {}: {u}", c.n, c.tool))
            })
            .collect();
        if !deviations.is_empty() {
            println!("\nWhere the peer answered differently from ours' script:");
            for d in deviations {
                println!("- {d}");
            }
        }
    }
}

fn missing_count(r: &Run) -> usize {
    r.calls.iter().map(|c| c.missing.len()).sum()
}

fn call_cell(c: &Call) -> String {
    format!(
        "{}{} {}{}",
        if c.bulk { "[bulk] " } else { "" },
        c.tool,
        short_args(&c.args),
        if c.is_error { " → error" } else { "" }
    )
}

fn parity_cell(c: &Call) -> String {
    if c.missing.is_empty() {
        format!("{} ok", c.facts)
    } else {
        format!("MISSING: {}", c.missing.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, text: &str, structured: Value, is_error: bool) -> Call {
        Call {
            n: 1,
            step: "test",
            tool: tool.into(),
            args: json!({}),
            bulk: false,
            text: text.into(),
            text_bytes: text.len(),
            structured_bytes: structured.to_string().len(),
            image_bytes: 0,
            is_error,
            rpc_error: false,
            structured,
            missing: Vec::new(),
            facts: 0,
            unexpected: None,
        }
    }

    fn missing(c: &Call) -> Vec<String> {
        facts(c)
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(w, _)| w)
            .collect()
    }

    #[test]
    fn an_exit_code_only_in_structured_content_is_missing() {
        let s = json!({"ok": true, "status": "exited", "exit_code": 1, "signal": null, "stdout": "", "stderr": "boom\n"});
        assert!(
            missing(&call(
                "exec_command",
                "Status: exited | exit code 1\nstderr:\nboom",
                s.clone(),
                false
            ))
            .is_empty()
        );
        assert_eq!(
            missing(&call(
                "exec_command",
                "Status: exited\nboom",
                s.clone(),
                false
            )),
            ["exit code 1"]
        );
        assert_eq!(
            missing(&call(
                "exec_command",
                "Status: exited | exit code 1",
                s,
                false
            ))
            .len(),
            1
        );
    }

    #[test]
    fn an_error_needs_its_code_category_and_retryability() {
        let s = json!({"ok": false, "error": {"code": "NOT_FOUND", "category": "not_found", "retryable": false}});
        let full = "NOT_FOUND: no such file\nCategory: not_found. Retryable: no.";
        assert!(missing(&call("read_file", full, s.clone(), true)).is_empty());
        assert_eq!(
            missing(&call(
                "read_file",
                "NOT_FOUND: no such file",
                s.clone(),
                true
            )),
            ["error category not_found", "retryable false"]
        );
        // A wrong retryability is as bad as none.
        let wrong = "NOT_FOUND: no such file\nCategory: not_found. Retryable: yes.";
        assert_eq!(
            missing(&call("read_file", wrong, s, true)),
            ["retryable false"]
        );
    }

    #[test]
    fn a_continuation_needs_every_argument() {
        let s = json!({"ok": true, "content": "a\nb\n", "next_action": {"tool": "read_file", "arguments": {"path": "x.py", "start_line": 3, "max_bytes": 4}}});
        let full = "a\nb\n[continue with read_file(path=\"x.py\", start_line=3, max_bytes=4)]";
        assert!(missing(&call("read_file", full, s.clone(), false)).is_empty());
        let short = "a\nb\n[continue with read_file(path=\"x.py\", start_line=3)]";
        assert_eq!(
            missing(&call("read_file", short, s.clone(), false)).len(),
            1
        );
        let no_lines = "a\n[continue with read_file(path=\"x.py\", start_line=3, max_bytes=4)]";
        assert_eq!(
            missing(&call("read_file", no_lines, s, false)),
            ["line read \"b\" (of 2)"]
        );
    }
}
