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
                "{}{} {}",
                e["index_status"].as_str().unwrap(),
                e["worktree_status"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        xy.contains(&" M a.txt".to_owned()) && xy.contains(&"?? new.txt".to_owned()),
        "{xy:?}"
    );
    assert_eq!(v["branch"], "main");
    let v = sc(&s.request(&call(2, "git_diff", json!({}))));
    assert_eq!(v["diff"], git(d, &["diff"]));
    let v = sc(&s.request(&call(3, "git_log", json!({"max_count": 1}))));
    assert_eq!(
        (v["commits"][0]["subject"].clone(), v["truncated"].clone()),
        (json!("second"), json!(true))
    );
    assert_eq!(v["next_action"]["arguments"]["skip"], 1);
    let v = sc(&s.request(&call(4, "git_show", json!({"rev": "HEAD"}))));
    let diff = git(d, &["show", "--format=", "HEAD"]);
    assert!(
        v["content"]
            .as_str()
            .unwrap()
            .ends_with(diff.trim_start_matches('\n')),
        "{v}"
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
    // An end before the start is the caller's mistake, not a server fault
    // (gix panicked on the empty range: INTERNAL_ERROR, retryable).
    let v = sc(&s.request(&call(
        10,
        "git_blame",
        json!({"path": "a.txt", "start_line": 3, "end_line": 2}),
    )));
    assert_eq!(
        (v["error"]["code"].clone(), v["error"]["retryable"].clone()),
        (json!("INVALID_ARGUMENT"), json!(false)),
        "{v}"
    );
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

/// A repository with history on two files, for the field and continuation tests.
fn history(d: &Path) {
    git(d, &["init", "-q", "-b", "main"]);
    for i in 1..=3 {
        let f: String = (1..=i).map(|k| format!("f{k}\n")).collect();
        std::fs::write(d.join("f.txt"), f).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", &format!("f{i}")]);
        std::fs::write(d.join("other.txt"), format!("o{i}\n")).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", &format!("o{i}")]);
    }
}

/// Calls a result's next_action exactly as given.
fn follow(s: &mut StdioServer, v: &Value) -> Value {
    let next = &v["next_action"];
    assert!(next.is_object(), "no next_action: {v}");
    sc(&s.request(&call(
        9,
        next["tool"].as_str().unwrap(),
        next["arguments"].clone(),
    )))
}

/// git_status codes entries as `git status --porcelain` does, in its order,
/// an untracked directory collapsed to `dir/`, a staged rename with its
/// original_path; no upstream is "" with 0 ahead/behind, as the reference.
#[test]
fn git_status_is_porcelain() {
    let ws = workspace();
    let d = ws.path();
    git(d, &["init", "-q", "-b", "main"]);
    std::fs::write(d.join("a.txt"), "one\n").unwrap();
    std::fs::write(d.join("b.txt"), "bee\n").unwrap();
    std::fs::write(d.join("c.txt"), "sea\n").unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "first"]);
    std::fs::write(d.join("a.txt"), "two\n").unwrap();
    std::fs::write(d.join("b.txt"), "bee2\n").unwrap();
    git(d, &["add", "b.txt"]);
    std::fs::write(d.join("b.txt"), "bee3\n").unwrap();
    std::fs::remove_file(d.join("c.txt")).unwrap();
    std::fs::write(d.join("staged.txt"), "s\n").unwrap();
    git(d, &["add", "staged.txt"]);
    std::fs::create_dir_all(d.join("newdir/sub")).unwrap();
    std::fs::write(d.join("newdir/sub/n.txt"), "n\n").unwrap();
    std::fs::write(d.join("newdir/m.txt"), "m\n").unwrap();
    std::fs::write(d.join("top.txt"), "t\n").unwrap();
    let mut s = StdioServer::start(d, &[]);
    let v = sc(&s.request(&call(1, "git_status", json!({}))));
    let ours: Vec<String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}{} {}",
                e["index_status"].as_str().unwrap(),
                e["worktree_status"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    let theirs: Vec<String> = git(d, &["status", "--porcelain"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(ours, theirs);
    assert!(theirs.contains(&"?? newdir/".to_owned()), "{theirs:?}");
    // No `xy`: it only joined the two status letters (issue 32).
    assert!(
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e.get("xy").is_none())
    );
    assert_eq!(
        (
            v["is_repo"].clone(),
            v["upstream"].clone(),
            v["ahead"].clone(),
            v["behind"].clone()
        ),
        (json!(true), json!(""), json!(0), json!(0))
    );
    // A staged rename: "R  old -> new", with the reference's original_path.
    git(d, &["add", "-A"]);
    git(d, &["commit", "-qm", "second"]);
    git(d, &["mv", "top.txt", "moved.txt"]);
    let v = sc(&s.request(&call(2, "git_status", json!({}))));
    let e = &v["entries"][0];
    assert_eq!(
        (
            e["index_status"].clone(),
            e["path"].clone(),
            e["original_path"].clone()
        ),
        (json!("R"), json!("moved.txt"), json!("top.txt")),
        "{v}"
    );
}

/// git_log and git_blame fields carry the reference's names (our extra
/// fields stay); git_diff is one flat diff with per-file status words.
#[test]
fn git_result_fields_are_the_references() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    std::fs::write(d.join("f.txt"), "f1\nf2\nf3\nf4\n").unwrap();
    let mut s = StdioServer::start(d, &[]);
    let v = sc(&s.request(&call(1, "git_log", json!({"max_count": 1}))));
    let c = &v["commits"][0];
    assert_eq!(c["hash"], git(d, &["rev-parse", "HEAD"]).trim());
    assert_eq!(
        c["short_hash"],
        git(d, &["rev-parse", "--short", "HEAD"]).trim()
    );
    assert_eq!(
        c["author_date"],
        git(d, &["log", "-1", "--date=iso-strict", "--format=%ad"]).trim()
    );
    assert_eq!(
        (c["author_name"].clone(), c["author_email"].clone()),
        (json!("Ada"), json!("ada@example.com"))
    );
    assert_eq!(
        (
            v["is_repo"].clone(),
            v["path"].clone(),
            v["max_count"].clone(),
            v["truncated"].clone()
        ),
        (json!(true), json!("."), json!(1), json!(true))
    );
    let v = sc(&s.request(&call(2, "git_blame", json!({"path": "f.txt"}))));
    assert_eq!(v["lines"][0]["author_mail"], "ada@example.com");
    assert_eq!(
        (
            v["rev"].clone(),
            v["start_line"].clone(),
            v["end_line"].clone(),
            v["truncated"].clone()
        ),
        // end_line is the last line of the range asked for
        // (start_line + max_lines - 1), as the reference reports it.
        (Value::Null, json!(1), json!(200), json!(false))
    );
    let v = sc(&s.request(&call(3, "git_diff", json!({}))));
    assert_eq!(v["diff"], git(d, &["diff"]));
    assert_eq!(
        (
            v["files"][0]["path"].clone(),
            v["files"][0]["status"].clone()
        ),
        (json!("f.txt"), json!("modified"))
    );
    let v = sc(&s.request(&call(4, "git_show", json!({"rev": "HEAD"}))));
    assert!(
        v["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!("commit {}", git(d, &["rev-parse", "HEAD"]).trim())),
        "{v}"
    );
}

/// Every continuation keeps the arguments that select the data: git_log's
/// path, git_show's rev (with a structured next_action), git_blame's rev in
/// its text as in its next_action.
#[test]
fn git_continuations_keep_what_selects_the_data() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    let mut s = StdioServer::start(d, &[]);
    // git_log: the second page of f.txt's history is still f.txt's.
    let v = sc(&s.request(&call(
        1,
        "git_log",
        json!({"path": "f.txt", "max_count": 1}),
    )));
    assert_eq!(v["commits"][0]["subject"], "f3");
    assert_eq!(v["next_action"]["arguments"]["path"], "f.txt");
    let v = follow(&mut s, &v);
    assert_eq!(v["commits"][0]["subject"], "f2", "{v}");
    // git_show: the files left out of HEAD~2's diff, still of HEAD~2.
    std::fs::write(d.join("f.txt"), "g\n").unwrap();
    std::fs::write(d.join("other.txt"), "p\n").unwrap();
    git(d, &["commit", "-qam", "both"]);
    git(d, &["commit", "-q", "--allow-empty", "-m", "later"]);
    let r = s.request(&call(
        2,
        "git_show",
        json!({"rev": "HEAD~1", "max_bytes": 150}),
    ));
    let v = sc(&r);
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(r#"git_show(rev="HEAD~1", paths=["other.txt"]"#),
        "{text}"
    );
    assert_eq!(v["next_action"]["arguments"]["rev"], "HEAD~1", "{v}");
    let v = follow(&mut s, &v);
    assert_eq!(
        v["commit"]["hash"],
        git(d, &["rev-parse", "HEAD~1"]).trim(),
        "{v}"
    );
    assert_eq!(v["files"][0]["path"], "other.txt");
    assert!(v["content"].as_str().unwrap().contains("+p"), "{v}");
    // git_blame: the text's continuation names the revision too.
    let r = s.request(&call(
        3,
        "git_blame",
        json!({"path": "f.txt", "rev": "HEAD~2", "max_lines": 1}),
    ));
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(r#"rev="HEAD~2""#), "{text}");
    let v = follow(&mut s, &sc(&r));
    assert_eq!(
        (
            v["lines"][0]["line"].clone(),
            v["lines"][0]["content"].clone()
        ),
        (json!(2), json!("f2"))
    );
}

/// git_blame of an explicit range returned whole: not truncated, no
/// next_action (the old one started after its own end_line); a shorter
/// max_lines pages inside the range; end_line is the range's, as in the
/// reference.
#[test]
fn git_blame_of_a_whole_range_has_no_continuation() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    let mut s = StdioServer::start(d, &[]);
    let r = s.request(&call(
        1,
        "git_blame",
        json!({"path": "f.txt", "start_line": 2, "end_line": 3}),
    ));
    let v = sc(&r);
    assert_eq!(
        (
            v["truncated"].clone(),
            v["warnings"].clone(),
            v["start_line"].clone(),
            v["end_line"].clone()
        ),
        (json!(false), json!([]), json!(2), json!(3)),
        "{v}"
    );
    assert!(v.get("next_action").is_none(), "{v}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains("[more:"), "{text}");
    assert_eq!(v["lines"].as_array().unwrap().len(), 2);
    let v = sc(&s.request(&call(
        2,
        "git_blame",
        json!({"path": "f.txt", "start_line": 1, "end_line": 3, "max_lines": 2}),
    )));
    assert_eq!(
        (v["truncated"].clone(), v["end_line"].clone()),
        (json!(true), json!(2))
    );
    assert_eq!(
        v["next_action"]["arguments"],
        json!({"path": "f.txt", "start_line": 3, "end_line": 3, "max_lines": 2})
    );
    let v = follow(&mut s, &v);
    assert_eq!(
        (v["lines"][0]["content"].clone(), v["truncated"].clone()),
        (json!("f3"), json!(false))
    );
}

/// Codes and categories of the reference where the contract is silent:
/// a path that is not there is NOT_FOUND (git_status, git_log, git_blame),
/// a directory to blame IS_DIRECTORY, an untracked file or an unknown
/// revision GIT_ERROR of category runtime. git_log's continuation names
/// the default path "." as the reference's does.
#[test]
fn git_errors_and_defaults_are_the_references() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    std::fs::write(d.join("untracked.txt"), "u\n").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/x.txt"), "x\n").unwrap();
    let mut s = StdioServer::start(d, &[]);
    let mut error = |args: (&str, Value)| {
        let r = s.request(&call(1, args.0, args.1.clone()));
        assert_eq!(r["result"]["isError"], true, "{args:?}: {r}");
        let e = &r["result"]["structuredContent"]["error"];
        (e["code"].clone(), e["category"].clone())
    };
    for (tool, args) in [
        ("git_status", json!({"path": "nope"})),
        ("git_log", json!({"path": "nope"})),
        ("git_blame", json!({"path": "nope"})),
    ] {
        assert_eq!(
            error((tool, args)),
            (json!("NOT_FOUND"), json!("not_found")),
            "{tool}"
        );
    }
    assert_eq!(
        error(("git_blame", json!({"path": "sub"}))),
        (json!("IS_DIRECTORY"), json!("validation"))
    );
    for (tool, args) in [
        ("git_blame", json!({"path": "untracked.txt"})),
        ("git_log", json!({"ref": "nosuchref"})),
        ("git_show", json!({"rev": "nosuch"})),
    ] {
        assert_eq!(
            error((tool, args)),
            (json!("GIT_ERROR"), json!("runtime")),
            "{tool}"
        );
    }
    // A deleted file's history is still served (the reference refuses it).
    git(d, &["rm", "-q", "other.txt"]);
    let v = sc(&s.request(&call(2, "git_log", json!({"path": "other.txt"}))));
    assert_eq!(v["commits"].as_array().unwrap().len(), 3, "{v}");
    let v = sc(&s.request(&call(3, "git_log", json!({"max_count": 1}))));
    assert_eq!(
        v["next_action"]["arguments"],
        json!({"path": ".", "ref": "HEAD", "max_count": 1, "skip": 1})
    );
}

/// git_diff's file `status` words are the reference's (a rename is
/// `modified`; our `change` says `renamed`), and `output_lines` counts the
/// empty piece after the final newline, as the reference does.
#[test]
fn git_diff_status_words_and_line_count() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    git(d, &["mv", "other.txt", "moved.txt"]);
    std::fs::write(d.join("f.txt"), "changed\n").unwrap();
    let mut s = StdioServer::start(d, &[]);
    let v = sc(&s.request(&call(
        1,
        "git_diff",
        json!({"staged": true, "unstaged": false}),
    )));
    let moved = &v["files"][0];
    assert_eq!(
        (
            moved["path"].clone(),
            moved["status"].clone(),
            moved["change"].clone(),
            moved["old_path"].clone()
        ),
        (
            json!("moved.txt"),
            json!("modified"),
            json!("renamed"),
            json!("other.txt")
        ),
        "{v}"
    );
    let v = sc(&s.request(&call(2, "git_diff", json!({}))));
    let diff = v["diff"].as_str().unwrap();
    assert!(diff.ends_with('\n'));
    assert_eq!(v["output_lines"], diff.split('\n').count(), "{v}");
}

#[test]
fn a_fifo_git_reads_never_hangs_a_call_or_the_exit() {
    let ws = workspace();
    git(ws.path(), &["init", "-q", "-b", "main"]);
    git(ws.path(), &["add", "AGENTS.md"]);
    git(ws.path(), &["commit", "-q", "-m", "one"]);
    let head = git(ws.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    let mkfifo = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
    };
    // Someone other than a command (they cannot) made the branch a FIFO.
    let branch = ws.path().join(".git/refs/heads/main");
    mkfifo(&branch);
    let mut s = StdioServer::start(ws.path(), &["--max-wait-secs", "1"]);
    let r = s.request(&call(1, "git_status", json!({})));
    let e = &sc(&r)["error"];
    assert_eq!(e["details"]["reason"], "special_file", "{r}");
    assert_eq!(e["details"]["path"], "refs/heads/main");
    std::fs::remove_file(&branch).unwrap();
    std::fs::write(&branch, format!("{head}\n")).unwrap();
    let exclude = ws.path().join(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    std::fs::write(&exclude, "").unwrap();
    mkfifo(&exclude);
    let r = s.request(&call(2, "git_status", json!({})));
    assert_eq!(sc(&r)["error"]["details"]["path"], "info/exclude", "{r}");
    std::fs::remove_file(&exclude).unwrap();
    // A FIFO no check looks at (a .gitignore git_status reads): the call
    // gives up at its deadline instead of waiting for ever, and the server
    // still serves and exits.
    let ignore = ws.path().join(".gitignore");
    std::fs::write(&ignore, "").unwrap();
    mkfifo(&ignore);
    let r = s.request(&call(2, "git_status", json!({})));
    let e = &sc(&r)["error"];
    assert_eq!(e["details"]["reason"], "timed_out", "{r}");
    let r = s.request(&call(3, "list_files", json!({})));
    assert_eq!(sc(&r)["ok"], true, "the server still serves");
    s.close_stdin();
    assert!(s.wait().success());
}

/// The repository handle is kept between calls and each call looks at the
/// pack directory once: history repacked by `git gc` between two calls (the
/// loose objects gone, the old pack replaced) is read from the new pack.
#[test]
fn history_repacked_between_calls_is_found() {
    let ws = workspace();
    let d = ws.path();
    history(d);
    let mut s = StdioServer::start(d, &[]);
    let log = |s: &mut StdioServer, id| {
        let v = sc(&s.request(&call(id, "git_log", json!({"max_count": 50}))));
        assert_eq!(v["ok"], true, "{v}");
        v["commits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["subject"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(log(&mut s, 1).len(), 6);
    git(d, &["gc", "-q", "--prune=now"]);
    assert_eq!(log(&mut s, 2).len(), 6);
    std::fs::write(d.join("f.txt"), "after the pack\n").unwrap();
    git(d, &["commit", "-qam", "loose"]);
    assert_eq!(log(&mut s, 3)[0], "loose");
    git(d, &["gc", "-q", "--prune=now"]);
    assert!(
        !d.join(".git/objects")
            .read_dir()
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.file_name().len() == 2),
        "gc left loose objects"
    );
    let subjects = log(&mut s, 4);
    assert_eq!(subjects.len(), 7, "{subjects:?}");
    assert_eq!(subjects[0], "loose");
    let v = sc(&s.request(&call(5, "git_blame", json!({"path": "f.txt"}))));
    assert_eq!(v["lines"][0]["summary"], "loose", "{v}");
    let v = sc(&s.request(&call(6, "git_show", json!({"rev": "HEAD~1"}))));
    assert_eq!(v["ok"], true, "{v}");
}
