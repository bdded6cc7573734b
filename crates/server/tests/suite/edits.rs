//! The edit layer of `--catalog 0.5` (issue 34) through the real binary:
//! revisions, `apply_changes`, idempotency keys, and the same requests side
//! by side with the reference 0.5.0 when it is installed (`cargo xtask ci`
//! installs it into `target/ref05-venv`; `CTM_REF05` names another).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Map, Value, json};

use super::harness::*;

/// The reference 0.5.0's server, when installed; `CTM_REQUIRE_REF05=1`
/// (set by `cargo xtask ci`) makes its absence a failure.
fn reference() -> Option<PathBuf> {
    let path = std::env::var_os("CTM_REF05")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/ref05-venv/bin/coding-tools-mcp"));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CTM_REQUIRE_REF05").is_none(),
        "CTM_REQUIRE_REF05 is set but the reference 0.5.0 is not at {}",
        path.display()
    );
    eprintln!(
        "NOTE: the reference 0.5.0 is not installed at {} (cargo xtask ci installs it): the side-by-side half of this test checks nothing here",
        path.display()
    );
    None
}

/// One server over stdio, initialized.
struct Client {
    server: StdioServer,
    id: i64,
}

impl Client {
    fn ours(ws: &Path, mode: &str) -> Self {
        Self::start(command(ws, &["--catalog", "0.5", "--permission-mode", mode]).arg("--stdio"))
    }

    fn reference(bin: &Path, ws: &Path, mode: &str) -> Self {
        let mut c = Command::new(bin);
        c.args(["--stdio", "--permission-mode", mode, "--workspace"])
            .arg(ws)
            .current_dir(ws)
            // It reports usage to a remote host unless told not to.
            .env("CODING_TOOLS_MCP_TELEMETRY", "off")
            .env("DO_NOT_TRACK", "1")
            .stdin(Stdio::piped());
        Self::start(&mut c)
    }

    fn start(cmd: &mut Command) -> Self {
        let mut server = StdioServer::start_with(cmd);
        server.send(&init_request(0, "2025-06-18"));
        let _ = server.recv();
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Self { server, id: 1 }
    }

    /// The whole JSON-RPC answer of a `tools/call`.
    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.id += 1;
        self.server.send(&call(self.id, tool, args));
        self.server.recv()
    }

    fn tools(&mut self) -> Vec<Value> {
        self.id += 1;
        self.server
            .send(&json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/list"}));
        self.server.recv()["result"]["tools"]
            .as_array()
            .unwrap()
            .clone()
    }
}

/// `ok`, or the error code of a tool error or of a JSON-RPC refusal of the
/// arguments (the reference refuses what its schema catches as -32602).
fn outcome(answer: &Value) -> String {
    if let Some(e) = answer.get("error") {
        return e
            .pointer("/data/code")
            .and_then(Value::as_str)
            .unwrap_or("RPC_ERROR")
            .to_owned();
    }
    let r = &answer["result"];
    if r["isError"] == true {
        return r["structuredContent"]["error"]["code"]
            .as_str()
            .unwrap_or("?")
            .to_owned();
    }
    "ok".into()
}

fn sc(answer: &Value) -> &Value {
    &answer["result"]["structuredContent"]
}

/// Replaces `"@rev:<path>"` with the revision last seen for the path.
fn substitute(v: &Value, revs: &Map<String, Value>) -> Value {
    match v {
        Value::String(s) => match s.strip_prefix("@rev:") {
            Some(p) => revs
                .get(p)
                .cloned()
                .unwrap_or_else(|| panic!("no revision seen for {p}")),
            None => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute(x, revs)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), substitute(x, revs)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// Learns the revisions an answer reports.
fn learn(tool: &str, args: &Value, answer: &Value, revs: &mut Map<String, Value>) {
    let s = sc(answer);
    if tool == "read_file"
        && let Some(r) = s.get("revision")
    {
        revs.insert(args["path"].as_str().unwrap().to_owned(), r.clone());
    }
    // A dry run's revisions are predictions: the file is not at them.
    if s["dry_run"] == true {
        return;
    }
    for f in s["affected_files"].as_array().into_iter().flatten() {
        if let (Some(p), Some(r)) = (f["path"].as_str(), f.get("revision")) {
            revs.insert(p.to_owned(), r.clone());
        }
    }
}

fn write_files(ws: &Path, files: &Value) {
    for (p, c) in files.as_object().unwrap() {
        let path = ws.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, c.as_str().unwrap()).unwrap();
    }
}

fn read_back(ws: &Path, paths: &[String]) -> Map<String, Value> {
    paths
        .iter()
        .map(|p| {
            let v = std::fs::read(ws.join(p))
                .map(|b| Value::String(String::from_utf8(b).unwrap()))
                .unwrap_or(Value::Null);
            (p.clone(), v)
        })
        .collect()
}

/// What a run of one case saw.
struct Run {
    outcomes: Vec<String>,
    answers: Vec<Value>,
    after: Map<String, Value>,
}

fn rd(path: &str) -> Value {
    json!(["read_file", {"path": path}])
}

fn ac(changes: Value) -> Value {
    json!(["apply_changes", {"changes": changes}])
}

fn edit(path: &str, edits: Value) -> Value {
    json!({"action": "edit", "path": path, "revision": format!("@rev:{path}"), "edits": edits})
}

const FIVE: &str = "one\ntwo\nthree\nfour\nfive\n";

/// The cases: each names its files, its calls (`"@rev:<path>"` is the
/// revision last seen for the path), the outcome of each call and the bytes
/// left. Every expectation is what the reference 0.5.0 answers too, unless
/// the case says `"ours_only"` (a documented difference).
fn cases() -> Vec<Value> {
    vec![
        json!({"name": "replace one line", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"), ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 2, "content": "TWO"}]))]))],
            "expect": ["ok", "ok"], "after": {"a.txt": "one\nTWO\nthree\nfour\nfive\n"}}),
        json!({"name": "edits in the numbers of the file as read, listed out of order", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"), ac(json!([edit("a.txt", json!([
                {"op": "replace", "start_line": 5, "content": "FIVE"},
                {"op": "delete", "start_line": 2, "end_line": 3},
                {"op": "insert_after", "line": 0, "content": "zero"},
                {"op": "insert_before", "line": 6, "content": "six\n"}]))]))],
            "expect": ["ok", "ok"], "after": {"a.txt": "zero\none\nfour\nFIVE\nsix\n\n"}}),
        json!({"name": "an insert at a replacement's first line lands before it", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"), ac(json!([edit("a.txt", json!([
                {"op": "replace", "start_line": 2, "content": "TWO"},
                {"op": "insert_before", "line": 2, "content": "x"}]))]))],
            "expect": ["ok", "ok"], "after": {"a.txt": "one\nx\nTWO\nthree\nfour\nfive\n"}}),
        json!({"name": "overlapping spans and double inserts are refused", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 2, "end_line": 3, "content": "X"}, {"op": "delete", "start_line": 3}]))])),
                ac(json!([edit("a.txt", json!([{"op": "insert_after", "line": 1, "content": "x"}, {"op": "insert_before", "line": 2, "content": "y"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "insert_before", "line": 1, "content": "x"}, {"op": "insert_after", "line": 0, "content": "y"}]))]))],
            "expect": ["ok", "PATCH_HUNKS_OVERLAP", "PATCH_HUNKS_OVERLAP", "PATCH_HUNKS_OVERLAP"], "after": {"a.txt": FIVE}}),
        json!({"name": "a line past the end", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 6, "content": "x"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "insert_before", "line": 7, "content": "x"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "insert_after", "line": 5, "content": "six"}]))]))],
            "expect": ["ok", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "ok"], "after": {"a.txt": "one\ntwo\nthree\nfour\nfive\nsix\n"}}),
        json!({"name": "CRLF, BOM, no final newline, empty file", "files": {"c.txt": "a\r\nb\r\n", "bom.txt": "\u{feff}a\nb\n", "n.txt": "a\nb", "e.txt": ""},
            "steps": [rd("c.txt"), rd("bom.txt"), rd("n.txt"), rd("e.txt"), ac(json!([
                edit("c.txt", json!([{"op": "replace", "start_line": 2, "content": "B\r\nC"}])),
                edit("bom.txt", json!([{"op": "insert_before", "line": 1, "content": "top"}])),
                edit("n.txt", json!([{"op": "insert_after", "line": 2, "content": "c"}])),
                edit("e.txt", json!([{"op": "insert_after", "line": 0, "content": "x"}]))]))],
            "expect": ["ok", "ok", "ok", "ok", "ok"],
            "after": {"c.txt": "a\r\nB\r\nC\r\n", "bom.txt": "\u{feff}top\na\nb\n", "n.txt": "a\nb\nc", "e.txt": "x\n"}}),
        json!({"name": "deleting every line leaves an empty file; replace with \"\" deletes", "files": {"a.txt": "a\nb\n", "b.txt": "a\nb\n"},
            "steps": [rd("a.txt"), rd("b.txt"), ac(json!([
                edit("a.txt", json!([{"op": "delete", "start_line": 1, "end_line": 2}])),
                edit("b.txt", json!([{"op": "replace", "start_line": 1, "content": ""}]))]))],
            "expect": ["ok", "ok", "ok"], "after": {"a.txt": "", "b.txt": "b\n"}}),
        json!({"name": "create, and what create refuses", "files": {"a.txt": FIVE},
            "steps": [ac(json!([{"action": "create", "path": "pkg/sub/new.py", "content": "x = 1\n"}])),
                ac(json!([{"action": "create", "path": "a.txt", "content": "x\n"}])),
                ac(json!([{"action": "create", "path": "b.txt", "content": "x\n", "revision": "abc"}]))],
            "expect": ["ok", "PATCH_FAILED", "INVALID_ARGUMENT"], "after": {"pkg/sub/new.py": "x = 1\n", "a.txt": FIVE, "b.txt": null}}),
        json!({"name": "write needs the revision of an existing file", "files": {"a.txt": FIVE},
            "steps": [ac(json!([{"action": "write", "path": "a.txt", "content": "x\n"}])),
                ac(json!([{"action": "write", "path": "a.txt", "content": "x\n", "revision": "0".repeat(64)}])),
                ac(json!([{"action": "write", "path": "new.txt", "content": "x\n", "revision": "0".repeat(64)}])),
                ac(json!([{"action": "write", "path": "new.txt", "content": "n\n"}])),
                rd("a.txt"),
                ac(json!([{"action": "write", "path": "a.txt", "content": "one\nTWO\n", "revision": "@rev:a.txt"}]))],
            "expect": ["REVISION_REQUIRED", "REVISION_MISMATCH", "REVISION_MISMATCH", "ok", "ok", "ok"],
            "after": {"a.txt": "one\nTWO\n", "new.txt": "n\n"}}),
        json!({"name": "delete, move and copy", "files": {"a.txt": FIVE, "b.txt": "b\n", "c.txt": "c\n", "taken.txt": "t\n"},
            "steps": [rd("a.txt"), rd("b.txt"), rd("c.txt"),
                ac(json!([{"action": "move", "path": "c.txt", "destination": "taken.txt", "revision": "@rev:c.txt"}])),
                ac(json!([{"action": "delete", "path": "a.txt", "revision": "@rev:a.txt"},
                    {"action": "move", "path": "b.txt", "destination": "sub/b2.txt", "revision": "@rev:b.txt"},
                    {"action": "copy", "path": "c.txt", "destination": "c2.txt", "revision": "@rev:c.txt"}]))],
            "expect": ["ok", "ok", "ok", "PATCH_FAILED", "ok"],
            "after": {"a.txt": null, "b.txt": null, "sub/b2.txt": "b\n", "c.txt": "c\n", "c2.txt": "c\n", "taken.txt": "t\n"}}),
        json!({"name": "one path per call; no changes; a path outside", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ac(json!([edit("a.txt", json!([{"op": "delete", "start_line": 1}])), {"action": "delete", "path": "./a.txt", "revision": "@rev:a.txt"}])),
                ac(json!([])),
                ac(json!([{"action": "create", "path": "../outside.txt", "content": "x"}]))],
            "expect": ["ok", "INVALID_ARGUMENT", "PATCH_FAILED", "PATH_OUTSIDE_WORKSPACE"], "after": {"a.txt": FIVE}}),
        json!({"name": "all or nothing: a later change's refusal leaves the earlier file", "files": {"a.txt": FIVE, "b.txt": "b\n"},
            "steps": [rd("a.txt"), rd("b.txt"), ac(json!([
                edit("a.txt", json!([{"op": "replace", "start_line": 1, "content": "ONE"}])),
                edit("b.txt", json!([{"op": "replace", "start_line": 9, "content": "x"}]))]))],
            "expect": ["ok", "ok", "INVALID_ARGUMENT"], "after": {"a.txt": FIVE, "b.txt": "b\n"}}),
        json!({"name": "a stale revision after an outside write", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"), ["write", {"a.txt": "changed\n"}],
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 1, "content": "x"}]))]))],
            "expect": ["ok", "ok", "REVISION_MISMATCH"], "after": {"a.txt": "changed\n"}}),
        json!({"name": "revisions chain from one result to the next edit", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 1, "content": "ONE"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 2, "content": "TWO"}]))]))],
            "expect": ["ok", "ok", "ok"], "after": {"a.txt": "ONE\nTWO\nthree\nfour\nfive\n"}}),
        json!({"name": "a dry run writes nothing; asking for the bytes already there is already applied", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ["apply_changes", {"dry_run": true, "changes": [edit("a.txt", json!([{"op": "replace", "start_line": 1, "content": "ONE"}]))]}],
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 1, "content": "one"}]))])),
                ac(json!([{"action": "write", "path": "a.txt", "content": FIVE, "revision": "@rev:a.txt"}]))],
            "expect": ["ok", "ok", "ok", "ok"], "after": {"a.txt": FIVE}}),
        json!({"name": "a file that is not UTF-8", "files": {"a.txt": FIVE},
            "steps": [["write_bytes", {"bin.txt": [104, 105, 255, 10]}],
                ac(json!([{"action": "edit", "path": "bin.txt", "revision": "0".repeat(64), "edits": [{"op": "delete", "start_line": 1}]}]))],
            "expect": ["ok", "UNSUPPORTED_ENCODING"], "after": {"a.txt": FIVE}}),
        json!({"name": "fields an action or an op does not take", "files": {"a.txt": FIVE},
            "steps": [rd("a.txt"),
                ac(json!([{"action": "edit", "path": "a.txt", "revision": "@rev:a.txt", "content": "x", "edits": [{"op": "delete", "start_line": 1}]}])),
                ac(json!([edit("a.txt", json!([{"op": "delete", "start_line": 1, "content": "x"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "replace", "start_line": 3, "end_line": 2, "content": "x"}]))])),
                ac(json!([edit("a.txt", json!([{"op": "insert_before", "line": 0, "content": "x"}]))])),
                ac(json!([{"action": "move", "path": "a.txt", "revision": "@rev:a.txt"}]))],
            "expect": ["ok", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT"],
            "after": {"a.txt": FIVE}}),
    ]
}

/// Runs a case's steps on a client, with the outside writes a case makes.
fn run(case: &Value, start: &dyn Fn(&Path) -> Client) -> Run {
    // Outside writes are steps of the form ["write", {...}] or
    // ["write_bytes", {path: [bytes]}]; they answer "ok".
    let ws = tempfile::tempdir().unwrap();
    write_files(ws.path(), &case["files"]);
    let mut c = start(ws.path());
    let mut revs = Map::new();
    let (mut outcomes, mut answers) = (Vec::new(), Vec::new());
    for step in case["steps"].as_array().unwrap() {
        let tool = step[0].as_str().unwrap();
        match tool {
            "write" => {
                write_files(ws.path(), &step[1]);
                outcomes.push("ok".into());
                answers.push(Value::Null);
                continue;
            }
            "write_bytes" => {
                for (p, b) in step[1].as_object().unwrap() {
                    let bytes: Vec<u8> = b
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_u64().unwrap() as u8)
                        .collect();
                    std::fs::write(ws.path().join(p), bytes).unwrap();
                }
                outcomes.push("ok".into());
                answers.push(Value::Null);
                continue;
            }
            _ => {}
        }
        let args = substitute(&step[1], &revs);
        let answer = c.call(tool, args.clone());
        learn(tool, &args, &answer, &mut revs);
        outcomes.push(outcome(&answer));
        answers.push(answer);
    }
    let paths: Vec<String> = case["after"].as_object().unwrap().keys().cloned().collect();
    Run {
        outcomes,
        answers,
        after: read_back(ws.path(), &paths),
    }
}

/// What an `apply_changes` success says, for a side-by-side comparison.
fn evidence(answer: &Value) -> Value {
    let s = sc(answer);
    json!({
        "dry_run": s["dry_run"], "already_applied": s["already_applied"], "summary": s["summary"],
        "affected_files": s["affected_files"], "additions": s["additions"], "removals": s["removals"],
    })
}

#[test]
fn apply_changes_cases_match_their_expectations_and_the_reference() {
    let reference = reference();
    for case in cases() {
        let name = case["name"].as_str().unwrap();
        let ours = run(&case, &|ws| Client::ours(ws, "safe"));
        let expect: Vec<String> = case["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            ours.outcomes, expect,
            "{name}: outcomes; answers: {:?}",
            ours.answers
        );
        assert_eq!(
            Value::Object(ours.after.clone()),
            case["after"],
            "{name}: bytes left"
        );
        // Every success of ours carries evidence with a revision per file.
        for a in ours
            .answers
            .iter()
            .filter(|a| outcome(a) == "ok" && !a.is_null())
        {
            for f in sc(a)["affected_files"].as_array().into_iter().flatten() {
                if f["operation"] != "delete" {
                    assert_eq!(
                        f["revision"].as_str().map(str::len),
                        Some(64),
                        "{name}: {f}"
                    );
                }
            }
        }
        let Some(bin) = &reference else { continue };
        let theirs = run(&case, &|ws| Client::reference(bin, ws, "safe"));
        assert_eq!(
            ours.outcomes, theirs.outcomes,
            "{name}: outcomes beside the reference 0.5.0"
        );
        assert_eq!(
            ours.after, theirs.after,
            "{name}: bytes beside the reference 0.5.0"
        );
        for (i, (o, t)) in ours.answers.iter().zip(&theirs.answers).enumerate() {
            if o.is_null() || outcome(o) != "ok" {
                continue;
            }
            if o["result"]["structuredContent"]
                .get("affected_files")
                .is_some()
            {
                assert_eq!(
                    evidence(o),
                    evidence(t),
                    "{name}: call {i}'s evidence beside the reference 0.5.0"
                );
            }
            if let Some(rev) = sc(t).get("revision") {
                assert_eq!(&sc(o)["revision"], rev, "{name}: call {i}'s revision");
                assert_eq!(
                    sc(o)["total_lines"],
                    sc(t)["total_lines"],
                    "{name}: call {i}"
                );
            }
        }
    }
}

/// What each error names: the revision errors carry the current revision
/// and the read to make; an edit past the end is retryable with the file's
/// lines; overlaps name the two edits.
#[test]
fn refusals_carry_what_the_next_call_needs() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
    let mut c = Client::ours(ws.path(), "safe");
    let read = c.call("read_file", json!({"path": "a.txt"}));
    let rev = sc(&read)["revision"].as_str().unwrap().to_owned();
    assert_eq!(sc(&read)["revision_algorithm"], "sha256");
    let text = read["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("[lines 1-5 of 5 revision={rev}]\n")),
        "{text}"
    );
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "delete", "path": "a.txt"}]}),
    );
    let e = &sc(&r)["error"];
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool()),
        (Some("REVISION_REQUIRED"), Some(true))
    );
    assert_eq!(e["details"]["current_revision"], rev.as_str());
    assert_eq!(
        e["details"]["next_action"],
        json!({"tool": "read_file", "arguments": {"path": "a.txt"}})
    );
    let stale = "f".repeat(64);
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "a.txt", "revision": stale, "edits": [{"op": "delete", "start_line": 1}]}]}),
    );
    let e = &sc(&r)["error"];
    assert_eq!(
        (e["code"].as_str(), e["category"].as_str()),
        (Some("REVISION_MISMATCH"), Some("conflict"))
    );
    assert_eq!(e["details"]["expected_revision"], stale.as_str());
    assert_eq!(e["details"]["current_revision"], rev.as_str());
    assert_eq!(e["details"]["total_lines"], 5);
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "a.txt", "revision": rev, "edits": [{"op": "insert_before", "line": 9, "content": "x"}]}]}),
    );
    let e = &sc(&r)["error"];
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool()),
        (Some("INVALID_ARGUMENT"), Some(true))
    );
    let mut details = e["details"].clone();
    // Our errors carry their advice in `retry_hint` as well.
    details.as_object_mut().unwrap().remove("retry_hint");
    assert_eq!(
        details,
        json!({"path": "a.txt", "total_lines": 5, "edit_index": 0, "operation": "insert_before", "requested": {"line": 9}})
    );
    // Integral numbers are numbers (client contract notes section 1).
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "a.txt", "revision": rev, "edits": [{"op": "replace", "start_line": 2.0, "end_line": 2, "content": "TWO"}]}]}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    assert_eq!(
        sc(&r)["affected_files"][0]["changed_ranges"],
        json!([{"start_line": 2, "end_line": 2, "added_lines": 1, "removed_lines": 1}])
    );
    let t = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        t.contains("a.txt: revision=") && t.contains("total_lines=5 changed lines 2-2"),
        "{t}"
    );
    for bad in [json!(2.5), json!(0), json!(-1), json!("2"), json!(true)] {
        let r = c.call(
            "apply_changes",
            json!({"changes": [{"action": "edit", "path": "a.txt", "revision": rev, "edits": [{"op": "replace", "start_line": bad, "content": "x"}]}]}),
        );
        assert_eq!(outcome(&r), "INVALID_ARGUMENT", "start_line {bad}: {r}");
    }
}

/// The catalog of `--catalog 0.5` is 0.5.0's in every mode: the same tools
/// in the same order with the same annotations and input schemas (the
/// descriptions are ours).
#[test]
fn catalog_05_is_the_references() {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| k.as_str() != "description")
                    .map(|(k, x)| (k.clone(), strip(x)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            _ => v.clone(),
        }
    }
    let reference = reference();
    let ws = workspace();
    let ours_v03 = Client::start(command(ws.path(), &[]).arg("--stdio")).tools();
    assert_eq!(ours_v03.len(), 18);
    assert!(ours_v03.iter().all(|t| t["name"] != "apply_changes"));
    for mode in ["safe", "trusted", "dangerous"] {
        let ours = Client::ours(ws.path(), mode).tools();
        let names: Vec<&str> = ours.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            names.len(),
            if mode == "dangerous" { 19 } else { 18 },
            "{mode}: {names:?}"
        );
        assert!(names.contains(&"apply_changes"));
        assert_eq!(names.contains(&"request_permissions"), mode == "dangerous");
        let Some(bin) = &reference else { continue };
        let theirs = Client::reference(bin, ws.path(), mode).tools();
        let their_names: Vec<&str> = theirs.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, their_names, "{mode}: tool names and order");
        for (o, t) in ours.iter().zip(&theirs) {
            let n = &o["name"];
            assert_eq!(
                o["annotations"], t["annotations"],
                "{mode} {n}: annotations"
            );
            let (mut ours, mut theirs) = (strip(&o["inputSchema"]), strip(&t["inputSchema"]));
            // The one listed difference (docs/conformance.md): the
            // permissions a refusal can name are our gates'.
            if n == "request_permissions" {
                for s in [&mut ours, &mut theirs] {
                    s["properties"]["permission"]["enum"] = Value::Null;
                }
            }
            assert_eq!(ours, theirs, "{mode} {n}: inputSchema");
        }
    }
}

/// A retry with the same key replays the recorded answer without applying
/// anything again; other arguments under the key are refused; a failed or
/// dry-run call leaves the key free; calls with one key sent together run
/// once.
#[test]
fn idempotency_keys_replay_refuse_and_run_once() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
    let mut c = Client::ours(ws.path(), "safe");
    let create = json!({"changes": [{"action": "create", "path": "n.txt", "content": "n\n"}], "idempotency_key": "k1"});
    let first = c.call("apply_changes", create.clone());
    assert_eq!(outcome(&first), "ok");
    assert!(sc(&first).get("idempotent_replay").is_none());
    std::fs::remove_file(ws.path().join("n.txt")).unwrap();
    let again = c.call("apply_changes", create);
    assert_eq!(sc(&again)["idempotent_replay"], true);
    assert_eq!(sc(&again)["affected_files"], sc(&first)["affected_files"]);
    // Nothing ran: the file removed since is still gone.
    assert!(!ws.path().join("n.txt").exists());
    let other = c.call(
        "apply_changes",
        json!({"changes": [{"action": "create", "path": "m.txt", "content": "m\n"}], "idempotency_key": "k1"}),
    );
    assert_eq!(outcome(&other), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(sc(&other)["error"]["details"]["idempotency_key"], "k1");
    // A failure leaves its key free.
    let fail = json!({"changes": [{"action": "create", "path": "a.txt", "content": "x"}], "idempotency_key": "k2"});
    assert_eq!(
        outcome(&c.call("apply_changes", fail.clone())),
        "PATCH_FAILED"
    );
    std::fs::remove_file(ws.path().join("a.txt")).unwrap();
    let ok = c.call("apply_changes", fail);
    assert_eq!(outcome(&ok), "ok");
    assert!(sc(&ok).get("idempotent_replay").is_none());
    // apply_patch takes a key too.
    let patch = json!({"patch": "*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch\n", "idempotency_key": "k3"});
    assert_eq!(outcome(&c.call("apply_patch", patch.clone())), "ok");
    let replay = c.call("apply_patch", patch);
    assert_eq!(
        (outcome(&replay), &sc(&replay)["idempotent_replay"]),
        ("ok".into(), &json!(true))
    );
    // The key is refused on tools that do not take one.
    assert_eq!(
        outcome(&c.call(
            "read_file",
            json!({"path": "p.txt", "idempotency_key": "k4"})
        )),
        "INVALID_ARGUMENT"
    );
    // Eight calls with one key sent at once: one creates, seven replay.
    for i in 0..8 {
        c.server.send(&call(
            100 + i,
            "apply_changes",
            json!({"changes": [{"action": "create", "path": "once.txt", "content": "once\n"}], "idempotency_key": "k5"}),
        ));
    }
    let answers: Vec<Value> = (0..8).map(|_| c.server.recv()).collect();
    let replays = answers
        .iter()
        .filter(|a| sc(a)["idempotent_replay"] == true)
        .count();
    assert!(answers.iter().all(|a| outcome(a) == "ok"), "{answers:?}");
    assert_eq!(replays, 7, "{answers:?}");
}

/// The default catalog is the v0.3 contract's: no revision, no
/// `apply_changes`, no key.
#[test]
fn the_default_catalog_has_no_edit_layer() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
    let mut c = Client::start(command(ws.path(), &[]).arg("--stdio"));
    let r = c.call("read_file", json!({"path": "a.txt"}));
    assert!(sc(&r).get("revision").is_none());
    assert_eq!(r["result"]["content"][0]["text"], FIVE);
    assert_eq!(
        outcome(&c.call("apply_changes", json!({"changes": []}))),
        "RPC_ERROR"
    );
    assert_eq!(
        outcome(&c.call("apply_patch", json!({"patch": "x", "idempotency_key": "k"}))),
        "INVALID_ARGUMENT"
    );
}

/// `git_diff` of catalog 0.5 shows untracked files as added (read with gix
/// through the workspace boundary, never the git CLI), unless
/// `include_untracked` is false; ignored files stay out.
#[test]
fn git_diff_shows_untracked_files_in_catalog_05() {
    let ws = workspace();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(ws.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    std::fs::write(ws.path().join("tracked.txt"), FIVE).unwrap();
    std::fs::write(ws.path().join(".gitignore"), "ignored.log\n").unwrap();
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "initial"]);
    std::fs::write(
        ws.path().join("tracked.txt"),
        "one\nTWO\nthree\nfour\nfive\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("sub/untracked.txt"), "new file\n").unwrap();
    std::fs::write(ws.path().join("ignored.log"), "noise\n").unwrap();
    let mut c = Client::ours(ws.path(), "safe");
    let with = c.call("git_diff", json!({}));
    let d = sc(&with)["diff"].as_str().unwrap().to_owned();
    assert!(d.contains("diff --git a/tracked.txt b/tracked.txt"), "{d}");
    assert!(
        d.contains("diff --git a/sub/untracked.txt b/sub/untracked.txt\nnew file mode 100644\nindex 0000000..fa49b07\n--- /dev/null\n+++ b/sub/untracked.txt\n@@ -0,0 +1 @@\n+new file\n"),
        "{d}"
    );
    assert!(!d.contains("ignored.log"), "{d}");
    assert_eq!(sc(&with)["include_untracked"], true);
    // An untracked file larger than the answer is listed, unread.
    std::fs::write(ws.path().join("big.txt"), "x".repeat(20_000)).unwrap();
    let cut = c.call("git_diff", json!({"max_bytes": 1000}));
    assert_eq!(sc(&cut)["truncated"], true, "{cut}");
    assert!(
        !sc(&cut)["diff"].as_str().unwrap().contains("xxxx"),
        "{cut}"
    );
    let text = cut["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("big.txt"), "{text}");
    std::fs::remove_file(ws.path().join("big.txt")).unwrap();
    // A tracked file grown past 32 MiB is listed, not read into memory.
    std::fs::OpenOptions::new()
        .write(true)
        .open(ws.path().join("tracked.txt"))
        .unwrap()
        .set_len(40 << 20)
        .unwrap();
    let huge = c.call("git_diff", json!({"include_untracked": false}));
    assert_eq!(outcome(&huge), "ok", "{huge:.600}");
    assert_eq!(sc(&huge)["truncated"], true);
    let text = huge["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("tracked.txt") && text.len() < 4096,
        "{text:.600}"
    );
    // A link swapped in for a tracked file is not opened, and the rest of
    // the diff stands (it failed whole before).
    std::fs::remove_file(ws.path().join("tracked.txt")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", ws.path().join("tracked.txt")).unwrap();
    let linked = c.call("git_diff", json!({}));
    assert_eq!(outcome(&linked), "ok", "{linked:.600}");
    assert!(
        sc(&linked)["diff"]
            .as_str()
            .unwrap()
            .contains("sub/untracked.txt")
    );
    std::fs::remove_file(ws.path().join("tracked.txt")).unwrap();
    std::fs::write(
        ws.path().join("tracked.txt"),
        "one\nTWO\nthree\nfour\nfive\n",
    )
    .unwrap();
    let without = c.call("git_diff", json!({"include_untracked": false}));
    assert!(!sc(&without)["diff"].as_str().unwrap().contains("untracked"));
    // The contract's catalog has no such property, and shows tracked files only.
    let mut v03 = Client::start(command(ws.path(), &[]).arg("--stdio"));
    assert_eq!(
        outcome(&v03.call("git_diff", json!({"include_untracked": true}))),
        "INVALID_ARGUMENT"
    );
    assert!(
        !sc(&v03.call("git_diff", json!({})))["diff"]
            .as_str()
            .unwrap()
            .contains("untracked")
    );
    if let Some(bin) = reference() {
        let mut r = Client::reference(&bin, ws.path(), "safe");
        for args in [json!({}), json!({"include_untracked": false})] {
            let ours = c.call("git_diff", args.clone());
            let theirs = r.call("git_diff", args.clone());
            assert_eq!(
                sc(&ours)["diff"],
                sc(&theirs)["diff"],
                "git_diff {args} beside the reference 0.5.0"
            );
        }
    }
}

/// The repeat-failure breaker: the third identical call of one that failed
/// twice the same deterministic way is refused, until that call succeeds, a
/// mutation changes the workspace or a command is seen finished.
#[test]
fn the_breaker_refuses_the_third_identical_failure() {
    let stale = "0".repeat(64);
    let stale_edit = json!(["apply_changes", {"changes": [{"action": "edit", "path": "a.txt", "revision": stale, "edits": [{"op": "delete", "start_line": 1}]}]}]);
    let cases = vec![
        json!({"name": "a missing file, until a command finishes", "files": {"a.txt": FIVE},
            "steps": [rd("m.txt"), rd("m.txt"), rd("m.txt"), ["write", {"m.txt": "now\n"}], rd("m.txt"),
                ["exec_command", {"cmd": "true"}], rd("m.txt")],
            "expect": ["NOT_FOUND", "NOT_FOUND", "REPEATED_CALL_BLOCKED", "ok", "REPEATED_CALL_BLOCKED", "ok", "ok"],
            "after": {"m.txt": "now\n"}}),
        json!({"name": "a stale revision, until a write lands (a dry run is none)", "files": {"a.txt": FIVE},
            "steps": [stale_edit, stale_edit, stale_edit,
                ["apply_changes", {"dry_run": true, "changes": [{"action": "create", "path": "n.txt", "content": "n\n"}]}],
                stale_edit,
                ac(json!([{"action": "create", "path": "n.txt", "content": "n\n"}])),
                stale_edit,
                // Member order and the idempotency key do not make a call another.
                ["apply_changes", {"idempotency_key": "other", "changes": [{"edits": [{"start_line": 1, "op": "delete"}], "revision": stale, "path": "a.txt", "action": "edit"}]}],
                stale_edit],
            "expect": ["REVISION_MISMATCH", "REVISION_MISMATCH", "REPEATED_CALL_BLOCKED", "ok", "REPEATED_CALL_BLOCKED",
                "ok", "REVISION_MISMATCH", "REVISION_MISMATCH", "REPEATED_CALL_BLOCKED"],
            "after": {"a.txt": FIVE, "n.txt": "n\n"}}),
        json!({"name": "a success of the same call clears its count", "files": {},
            "steps": [rd("late.txt"), ["write", {"late.txt": "x\n"}], rd("late.txt"), ["write_bytes", {"late.txt": []}],
                ["exec_command", {"cmd": "rm late.txt"}], rd("late.txt"), rd("late.txt"), rd("late.txt")],
            "expect": ["NOT_FOUND", "ok", "ok", "ok", "ok", "NOT_FOUND", "NOT_FOUND", "REPEATED_CALL_BLOCKED"],
            "after": {"late.txt": null}}),
    ];
    let reference = reference();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let ours = run(&case, &|ws| Client::ours(ws, "trusted"));
        let expect: Vec<&str> = case["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ours.outcomes, expect, "{name}: {:?}", ours.answers);
        assert_eq!(Value::Object(ours.after.clone()), case["after"], "{name}");
        let blocked = ours
            .answers
            .iter()
            .find(|a| outcome(a) == "REPEATED_CALL_BLOCKED")
            .unwrap();
        let d = &sc(blocked)["error"]["details"];
        assert_eq!(
            (d["attempts"].as_u64(), d["error_code"].is_string()),
            (Some(2), true),
            "{d}"
        );
        let second = &ours.answers[1];
        if outcome(second) != "ok" {
            assert_eq!(
                sc(second)["error"]["details"]["consecutive_identical_failures"],
                2,
                "{name}"
            );
        }
        if let Some(bin) = &reference {
            let theirs = run(&case, &|ws| Client::reference(bin, ws, "trusted"));
            assert_eq!(
                ours.outcomes, theirs.outcomes,
                "{name}: beside the reference 0.5.0"
            );
        }
    }
    // server_info reports it; the contract's catalog has none.
    let ws = workspace();
    let mut c = Client::ours(ws.path(), "safe");
    let info = c.call("server_info", json!({}));
    assert_eq!(sc(&info)["repeat_failure_breaker"]["limit"], 2, "{info}");
    let mut v03 = Client::start(command(ws.path(), &[]).arg("--stdio"));
    for _ in 0..3 {
        assert_eq!(
            outcome(&v03.call("read_file", json!({"path": "m.txt"}))),
            "NOT_FOUND"
        );
    }
}

/// Catalog 0.5's command results say how the command ended in one word.
#[test]
fn command_results_carry_the_operation_outcome() {
    let ws = workspace();
    let mut c = Client::ours(ws.path(), "trusted");
    let word = |a: &Value| sc(a)["operation_outcome"].as_str().map(str::to_owned);
    assert_eq!(
        word(&c.call("exec_command", json!({"cmd": "echo hi"}))).as_deref(),
        Some("exited_0")
    );
    assert_eq!(
        word(&c.call("exec_command", json!({"cmd": "false"}))).as_deref(),
        Some("exited_nonzero")
    );
    let running = c.call(
        "exec_command",
        json!({"cmd": "sleep 30", "yield_time_ms": 0}),
    );
    assert_eq!(word(&running).as_deref(), Some("running"), "{running}");
    let id = sc(&running)["command_id"].as_str().unwrap().to_owned();
    let killed = c.call("kill_command", json!({"command_id": id, "signal": "KILL"}));
    assert_eq!(word(&killed).as_deref(), Some("signal"), "{killed}");
    let timeout = c.call(
        "exec_command",
        json!({"cmd": "sleep 30", "timeout_ms": 200, "yield_time_ms": 5000}),
    );
    assert_eq!(word(&timeout).as_deref(), Some("timeout"), "{timeout}");
    let mut v03 = Client::start(command(ws.path(), &[]).arg("--stdio"));
    assert!(
        sc(&v03.call("exec_command", json!({"cmd": "true"})))
            .get("operation_outcome")
            .is_none()
    );
    if let Some(bin) = reference() {
        let mut r = Client::reference(&bin, ws.path(), "trusted");
        for cmd in ["echo hi", "false"] {
            let (o, t) = (
                c.call("exec_command", json!({"cmd": cmd})),
                r.call("exec_command", json!({"cmd": cmd})),
            );
            assert_eq!(word(&o), word(&t), "{cmd} beside the reference 0.5.0");
        }
    }
}

fn ap(patch: &str) -> Value {
    json!(["apply_patch", {"patch": format!("*** Begin Patch\n{patch}*** End Patch\n")}])
}

/// `apply_patch` of catalog 0.5: each file's evidence (revision, lines,
/// changed ranges, the loosest match), hunks already in the file skipped,
/// a patch sent twice answered as already applied, a whitespace-blind match
/// that indents added lines as the file indents the hunk.
#[test]
fn apply_patch_reports_evidence_and_skips_what_is_applied() {
    let update = "*** Update File: a.txt\n@@\n one\n-two\n+TWO\n three\n";
    let py = "def greet(name):\n    msg = 'hello ' + name\n    print(msg)\n    return msg\n";
    let cases = vec![
        json!({"name": "an update, then the same patch again", "files": {"a.txt": FIVE},
            "steps": [ap(update), ap(update), rd("a.txt")],
            "expect": ["ok", "ok", "ok"], "after": {"a.txt": "one\nTWO\nthree\nfour\nfive\n"}}),
        json!({"name": "one hunk applied, one not", "files": {"a.txt": "line 1\nLINE 2\nline 3\nline 4\nline 5\n"},
            "steps": [ap("*** Update File: a.txt\n@@\n line 1\n-line 2\n+LINE 2\n line 3\n@@\n line 4\n-line 5\n+LINE 5\n")],
            "expect": ["ok"], "after": {"a.txt": "line 1\nLINE 2\nline 3\nline 4\nLINE 5\n"}}),
        json!({"name": "add, delete, move", "files": {"a.txt": FIVE, "b.txt": "b\n"},
            "steps": [ap("*** Add File: d/new.txt\n+hello\n+world\n*** Delete File: b.txt\n*** Update File: a.txt\n*** Move to: m/a2.txt\n@@\n one\n-two\n+TWO\n three\n")],
            "expect": ["ok"], "after": {"d/new.txt": "hello\nworld\n", "b.txt": null, "a.txt": null, "m/a2.txt": "one\nTWO\nthree\nfour\nfive\n"}}),
        json!({"name": "trailing whitespace", "files": {"a.txt": "one  \ntwo\t\nthree \n"},
            "steps": [ap(update)], "expect": ["ok"], "after": {"a.txt": "one  \nTWO\nthree \n"}}),
        json!({"name": "a hunk indented less than the file", "files": {"m.py": py},
            "steps": [ap("*** Update File: m.py\n@@\n   msg = 'hello ' + name\n-  print(msg)\n+  if msg:\n+      print(msg)\n   return msg\n")],
            "expect": ["ok"], "after": {"m.py": "def greet(name):\n    msg = 'hello ' + name\n    if msg:\n        print(msg)\n    return msg\n"}}),
        json!({"name": "lines shifted unevenly are not found", "files": {"m.py": py},
            "steps": [ap("*** Update File: m.py\n@@\n  msg = 'hello ' + name\n-print(msg)\n+  print(msg)\n")],
            "expect": ["PATCH_CONTEXT_NOT_FOUND"], "after": {"m.py": py}}),
    ];
    let reference = reference();
    let files_of = |a: &Value| json!({"already_applied": sc(a)["already_applied"], "summary": sc(a)["summary"], "affected_files": sc(a)["affected_files"]});
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let ours = run(&case, &|ws| Client::ours(ws, "safe"));
        let expect: Vec<&str> = case["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ours.outcomes, expect, "{name}: {:?}", ours.answers);
        assert_eq!(Value::Object(ours.after.clone()), case["after"], "{name}");
        for a in ours
            .answers
            .iter()
            .filter(|a| outcome(a) == "ok" && sc(a).get("affected_files").is_some())
        {
            assert_eq!(sc(a)["revision_algorithm"], "sha256", "{name}");
            for f in sc(a)["affected_files"].as_array().unwrap() {
                if f["operation"] != "delete" {
                    assert!(
                        f["revision"].is_string() && f["changed_ranges"].is_array(),
                        "{name}: {f}"
                    );
                }
            }
        }
        if let Some(bin) = &reference {
            let theirs = run(&case, &|ws| Client::reference(bin, ws, "safe"));
            assert_eq!(
                ours.outcomes, theirs.outcomes,
                "{name}: beside the reference 0.5.0"
            );
            assert_eq!(
                ours.after, theirs.after,
                "{name}: bytes beside the reference 0.5.0"
            );
            for (o, t) in ours.answers.iter().zip(&theirs.answers) {
                if outcome(o) == "ok" && sc(o).get("affected_files").is_some() {
                    assert_eq!(
                        files_of(o),
                        files_of(t),
                        "{name}: evidence beside the reference 0.5.0"
                    );
                }
            }
        }
    }
    // The same patch sent twice says so.
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
    let mut c = Client::ours(ws.path(), "safe");
    let (_, again) = (
        c.call("apply_patch", ap(update)[1].clone()),
        c.call("apply_patch", ap(update)[1].clone()),
    );
    assert_eq!(
        (
            sc(&again)["already_applied"].as_bool(),
            sc(&again)["summary"].as_str()
        ),
        (Some(true), Some("= a.txt"))
    );
    // The contract's catalog keeps its verdict: the context is not there
    // (a conflict, when the same server made the earlier change).
    let mut v03 = Client::start(command(ws.path(), &[]).arg("--stdio"));
    assert_eq!(
        outcome(&v03.call("apply_patch", ap(update)[1].clone())),
        "PATCH_CONTEXT_NOT_FOUND"
    );
}

/// `--workspace-mutation structured-only`: commands see the workspace
/// read-only in both sandbox tiers (but for `--write-path` directories);
/// only the mutators write it; the report says whether the kernel holds
/// commands to it.
#[test]
fn structured_only_leaves_writing_to_the_mutators() {
    for tier in ["landlock", "namespace"] {
        let ws = workspace();
        std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
        let mut c = Client::start(
            command(
                ws.path(),
                &[
                    "--catalog",
                    "0.5",
                    "--sandbox",
                    tier,
                    "--workspace-mutation",
                    "structured-only",
                    "--write-path",
                    "out",
                ],
            )
            .arg("--stdio"),
        );
        let env = c.call("check_exec_environment", json!({}));
        let policy = &sc(&env)["workspace_mutation_policy"];
        if env.get("error").is_some() || policy.is_null() || sc(&env)["sandbox"]["tier"] != tier {
            assert!(
                tier != "namespace" || std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
                "the namespace tier is required here: {env}"
            );
            eprintln!("NOTE: no {tier} tier here; structured-only checks nothing in it: {env}");
            continue;
        }
        assert_eq!(policy["mode"], "structured-only", "{policy}");
        assert_eq!(policy["write_paths"], json!(["out"]));
        assert_eq!(
            policy["structured_write_tools"],
            json!(["apply_changes", "apply_patch"])
        );
        if policy["enforced"] != true {
            assert!(
                std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
                "{tier}: not enforced on a CI host: {policy}"
            );
            eprintln!("NOTE: {tier}: structured-only is not enforced here: {policy}");
            continue;
        }
        let run = |c: &mut Client, cmd: &str| {
            let r = c.call("exec_command", json!({"cmd": cmd, "yield_time_ms": 20000}));
            sc(&r)["exit_code"].as_i64()
        };
        for cmd in [
            "echo x > made.txt",
            ": > a.txt",
            "echo x >> a.txt",
            "mv a.txt b.txt",
            "rm a.txt",
            "mkdir d",
            "ln -s /etc/passwd link",
            "printf '[core]\\n\\tfsmonitor = x\\n' >> .git/config 2>/dev/null || mkdir -p .git/hooks",
        ] {
            assert_ne!(
                run(&mut c, cmd),
                Some(0),
                "{tier}: `{cmd}` wrote the workspace"
            );
        }
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            FIVE,
            "{tier}"
        );
        for gone in ["made.txt", "b.txt", "d", "link", ".git"] {
            assert!(!ws.path().join(gone).exists(), "{tier}: {gone} exists");
        }
        // The write path is made for commands and writable by them.
        assert_eq!(
            run(&mut c, "echo x > out/made.txt && cat out/made.txt"),
            Some(0),
            "{tier}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("out/made.txt")).unwrap(),
            "x\n"
        );
        // The mutators write.
        let r = c.call(
            "apply_changes",
            json!({"changes": [{"action": "create", "path": "new.txt", "content": "n\n"}]}),
        );
        assert_eq!(outcome(&r), "ok", "{r}");
        let r = c.call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: p.txt\n+p\n*** End Patch\n"}),
        );
        assert_eq!(outcome(&r), "ok", "{r}");
        assert!(ws.path().join("new.txt").exists() && ws.path().join("p.txt").exists());
        // Reading stays open.
        assert_eq!(
            run(&mut c, "cat a.txt new.txt > /dev/null"),
            Some(0),
            "{tier}"
        );
    }
    // Settings that would defeat it are refused at start-up.
    let ws = workspace();
    for args in [
        &["--write-path", "out"][..],
        &[
            "--workspace-mutation",
            "structured-only",
            "--write-path",
            ".",
        ][..],
        &[
            "--workspace-mutation",
            "structured-only",
            "--write-path",
            ".git/hooks",
        ][..],
        &[
            "--workspace-mutation",
            "structured-only",
            "--write-path",
            ".vscode",
        ][..],
        &[
            "--workspace-mutation",
            "structured-only",
            "--write-path",
            "AGENTS.md",
        ][..],
    ] {
        let out = command(ws.path(), args)
            .arg("--stdio")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A command that could not write (read-only workspace, no write path)
    // leaves the breaker's counts: the failure still holds.
    let mut c = Client::start(
        command(
            ws.path(),
            &[
                "--catalog",
                "0.5",
                "--workspace-mutation",
                "structured-only",
            ],
        )
        .arg("--stdio"),
    );
    let env = c.call("check_exec_environment", json!({}));
    if sc(&env)["workspace_mutation_policy"]["enforced"] == true {
        for want in ["NOT_FOUND", "NOT_FOUND"] {
            assert_eq!(
                outcome(&c.call("read_file", json!({"path": "m.txt"}))),
                want
            );
        }
        assert_eq!(
            outcome(&c.call("exec_command", json!({"cmd": "true"}))),
            "ok"
        );
        assert_eq!(
            outcome(&c.call("read_file", json!({"path": "m.txt"}))),
            "REPEATED_CALL_BLOCKED"
        );
    }
    // The default is unrestricted, reported in catalog 0.5.
    let mut c = Client::ours(ws.path(), "safe");
    let info = c.call("server_info", json!({}));
    assert_eq!(
        sc(&info)["workspace_mutation_policy"]["mode"],
        "unrestricted",
        "{info}"
    );
}

/// From the review of the edit layer: a directory made into a git
/// directory a file at a time (HEAD, an executable `objects` and `refs`,
/// a config whose fsmonitor git would run) is refused in safe mode, over
/// several calls and within one.
#[test]
fn safe_mode_refuses_to_complete_a_git_directory() {
    use std::os::unix::fs::PermissionsExt;
    let ws = workspace();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    for f in ["build.sh", "run.sh"] {
        std::fs::write(ws.path().join(f), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(ws.path().join(f), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let mut c = Client::ours(ws.path(), "safe");
    let read = c.call("read_file", json!({"path": "build.sh"}));
    let rev = sc(&read)["revision"].as_str().unwrap().to_owned();
    let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = \"touch pwned; false\"\n";
    // Within one call.
    let r = c.call(
        "apply_changes",
        json!({"changes": [
        {"action": "create", "path": "src/HEAD", "content": "ref: refs/heads/main\n"},
        {"action": "copy", "path": "build.sh", "destination": "src/objects", "revision": rev},
        {"action": "copy", "path": "run.sh", "destination": "src/refs", "revision": rev},
        {"action": "create", "path": "src/config", "content": config}]}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    assert_eq!(
        sc(&r)["error"]["details"]["permission"],
        "write_git_dir",
        "{r}"
    );
    assert!(!ws.path().join("src/HEAD").exists());
    // Over several calls: the one that would complete it is refused.
    let r = c.call(
        "apply_changes",
        json!({"changes": [
        {"action": "create", "path": "src/HEAD", "content": "ref: refs/heads/main\n"},
        {"action": "copy", "path": "build.sh", "destination": "src/objects", "revision": rev},
        {"action": "create", "path": "src/config", "content": config}]}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    let r = c.call(
        "apply_changes",
        json!({"changes": [
        {"action": "copy", "path": "build.sh", "destination": "src/refs", "revision": rev}]}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    assert_eq!(
        sc(&r)["error"]["details"]["permission"],
        "write_git_dir",
        "{r}"
    );
    let r = c.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: src/refs\n+x\n*** End Patch\n"}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    assert!(!ws.path().join("src/refs").exists());
    // Directories made on the way count too.
    let r = c.call(
        "apply_changes",
        json!({"changes": [
        {"action": "create", "path": "lib/HEAD", "content": "ref: refs/heads/main\n"},
        {"action": "create", "path": "lib/objects/keep", "content": ""},
        {"action": "create", "path": "lib/refs/keep", "content": ""}]}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    let r = c.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: lib/objects/keep\n+x\n*** End Patch\n"}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    let r = c.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: lib/refs/heads/main\n+x\n*** End Patch\n"}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    assert!(!ws.path().join("lib/refs").exists());
    // One directory named three ways through links a command made (the
    // second review): still one directory.
    std::fs::create_dir(ws.path().join("pkg")).unwrap();
    std::os::unix::fs::symlink("pkg", ws.path().join("al")).unwrap();
    std::os::unix::fs::symlink(".", ws.path().join("pkg/self")).unwrap();
    let read = c.call("read_file", json!({"path": "run.sh"}));
    let rev2 = sc(&read)["revision"]
        .as_str()
        .unwrap_or_else(|| panic!("{read}"))
        .to_owned();
    let r = c.call(
        "apply_changes",
        json!({"changes": [
        {"action": "create", "path": "pkg/HEAD", "content": "ref: refs/heads/main\n"},
        {"action": "copy", "path": "build.sh", "destination": "al/objects", "revision": rev},
        {"action": "copy", "path": "run.sh", "destination": "pkg/self/refs", "revision": rev2}]}),
    );
    assert_eq!(outcome(&r), "PERMISSION_REQUIRED", "{r}");
    assert!(!ws.path().join("pkg/objects").exists());
}

/// From the review of the edit layer: a file rewritten in place while it
/// is read never yields a revision paired with content from elsewhere in
/// it (the retry read from where the last attempt stopped).
#[test]
fn a_revision_always_names_the_content_it_comes_with() {
    let ws = workspace();
    let body: String = (0..1000).map(|i| format!("line {i}\n")).collect();
    let path = ws.path().join("g.txt");
    std::fs::write(&path, &body).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, path, body) = (stop.clone(), path.clone(), body.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_at(body.as_bytes(), 0).unwrap();
            }
        })
    };
    let mut c = Client::ours(ws.path(), "safe");
    let expected = {
        use std::io::Write as _;
        let mut h = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        h.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        String::from_utf8(h.wait_with_output().unwrap().stdout).unwrap()[..64].to_owned()
    };
    let mut with_revision = 0;
    for _ in 0..200 {
        let r = c.call(
            "read_file",
            json!({"path": "g.txt", "max_bytes": 1_000_000}),
        );
        let s = sc(&r);
        if let Some(rev) = s["revision"].as_str() {
            with_revision += 1;
            assert_eq!(rev, expected);
            assert_eq!(s["content"], body.as_str(), "a revision with other content");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("{with_revision} of 200 reads under rewriting came with a revision");
}

/// A write path whose parent a link points out of the workspace is made
/// nowhere and granted nothing (it was made through the link before).
#[test]
fn a_write_path_is_never_made_through_a_link() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let mut c = Client::start(
        command(
            ws.path(),
            &[
                "--workspace-mutation",
                "structured-only",
                "--write-path",
                "link/out",
            ],
        )
        .arg("--stdio"),
    );
    let r = c.call(
        "exec_command",
        json!({"cmd": "true", "yield_time_ms": 20000}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    assert!(
        !outside.path().join("out").exists(),
        "made through the link"
    );
    let env = c.call("check_exec_environment", json!({"detail": "full"}));
    let writable = sc(&env)["landlock"]["writable"].to_string();
    assert!(!writable.contains("out"), "{writable}");
}

/// The differences from 0.5.0 we keep (docs/conformance.md), pinned: each
/// is ours on purpose.
#[test]
fn the_differences_kept_from_0_5() {
    let ws = workspace();
    std::fs::write(ws.path().join("cr.txt"), "a\rb\nc\n").unwrap();
    std::fs::write(ws.path().join("a.txt"), FIVE).unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let mut c = Client::ours(ws.path(), "safe");
    // A lone CR is a character of its line, for read_file and the edits.
    let r = c.call("read_file", json!({"path": "cr.txt"}));
    assert_eq!(sc(&r)["total_lines"], 2);
    let rev = sc(&r)["revision"].clone();
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "edit", "path": "cr.txt", "revision": rev, "edits": [{"op": "replace", "start_line": 2, "content": "C"}]}]}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("cr.txt")).unwrap(),
        "a\rb\nC\n"
    );
    // A `..` that stays inside resolves; a directory is IS_DIRECTORY.
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "create", "path": "sub/../n.txt", "content": "n\n"}]}),
    );
    assert_eq!(outcome(&r), "ok", "{r}");
    let r = c.call(
        "apply_changes",
        json!({"changes": [{"action": "write", "path": "sub", "content": "x"}]}),
    );
    assert_eq!(outcome(&r), "IS_DIRECTORY", "{r}");
    // Add File never overwrites.
    let r = c.call(
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n"}),
    );
    assert_eq!(outcome(&r), "PATCH_FAILED", "{r}");
    // Hunks skipped as already applied add and remove nothing.
    let p = json!({"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n three\n*** End Patch\n"});
    assert_eq!(outcome(&c.call("apply_patch", p.clone())), "ok");
    let again = c.call("apply_patch", p);
    assert_eq!(
        (
            sc(&again)["additions"].as_u64(),
            sc(&again)["removals"].as_u64()
        ),
        (Some(0), Some(0))
    );
}
