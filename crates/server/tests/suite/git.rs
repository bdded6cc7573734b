//! The git tools through the real binary, on a repository made with git.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use super::harness::*;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn sc(r: &Value) -> Value {
    r["result"]["structuredContent"].clone()
}

#[test]
fn the_five_git_tools() {
    let ws = workspace();
    let d = ws.path();
    git(d, &["init", "-q", "-b", "main"]);
    std::fs::write(d.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "first"]);
    std::fs::write(d.join("a.txt"), "one\nTWO\nthree\n").unwrap();
    git(d, &["commit", "-qam", "second"]);
    std::fs::write(d.join("a.txt"), "one\nTWO\nthree\nfour\n").unwrap();
    std::fs::write(d.join("new.txt"), "n\n").unwrap();
    let mut s = StdioServer::start(d, &[]);
    let v = sc(&s.request(&call(1, "git_status", json!({}))));
    let xy: Vec<String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["xy"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        xy.contains(&".M a.txt".to_owned()) && xy.contains(&"?? new.txt".to_owned()),
        "{xy:?}"
    );
    assert_eq!(v["branch"], "main");
    let v = sc(&s.request(&call(2, "git_diff", json!({}))));
    assert_eq!(v["unstaged"]["diff"], git(d, &["diff"]));
    let v = sc(&s.request(&call(3, "git_log", json!({"max_count": 1}))));
    assert_eq!(
        (v["commits"][0]["subject"].clone(), v["has_more"].clone()),
        (json!("second"), json!(true))
    );
    assert_eq!(v["next_action"]["arguments"]["skip"], 1);
    let v = sc(&s.request(&call(4, "git_show", json!({"rev": "HEAD"}))));
    assert_eq!(
        v["diff"],
        git(d, &["show", "--format=", "HEAD"]).trim_start_matches('\n')
    );
    let v = sc(&s.request(&call(
        5,
        "git_show",
        json!({"rev": "HEAD~1", "path": "a.txt"}),
    )));
    assert_eq!(
        (v["kind"].clone(), v["content"].clone()),
        (json!("file"), json!("one\ntwo\nthree\n"))
    );
    let v = sc(&s.request(&call(
        6,
        "git_blame",
        json!({"path": "a.txt", "start_line": 2, "end_line": 2}),
    )));
    assert_eq!(v["lines"][0]["summary"], "second");
    assert_eq!(v["lines"][0]["content"], "TWO");
    // Option-shaped revisions are just unknown revisions; nothing is written.
    let v = sc(&s.request(&call(7, "git_log", json!({"ref": "--output=pwned.txt"}))));
    assert_eq!(
        (
            v["error"]["code"].clone(),
            v["error"]["details"]["reason"].clone()
        ),
        (json!("GIT_ERROR"), json!("unknown_revision"))
    );
    assert!(!d.join("pwned.txt").exists());
    let v = sc(&s.request(&call(
        8,
        "git_show",
        json!({"rev": "HEAD", "path": "../escape"}),
    )));
    assert_eq!(v["error"]["code"], "PATH_OUTSIDE_WORKSPACE");
    let v = sc(&s.request(&call(9, "git_blame", json!({"path": "missing.txt"}))));
    assert_eq!(v["error"]["code"], "NOT_FOUND");
}

#[test]
fn not_a_repository_is_a_precise_error() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let v = sc(&s.request(&call(1, "git_status", json!({}))));
    assert_eq!(
        (
            v["error"]["code"].clone(),
            v["error"]["details"]["reason"].clone()
        ),
        (json!("GIT_ERROR"), json!("not_a_repository"))
    );
}
