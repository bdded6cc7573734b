//! Path escapes, named after the advisories they regress. No byte from
//! outside the workspace may ever be returned.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::harness::*;

const SECRET: &str = "TOP-SECRET-OUTSIDE";

/// `<tmp>/ws` (the workspace) next to `<tmp>/ws_evil` (outside, same prefix).
fn layout() -> (tempfile::TempDir, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let ws = t.path().join("ws");
    std::fs::create_dir_all(ws.join("real")).unwrap();
    std::fs::write(ws.join("real/data.txt"), "inside\n").unwrap();
    std::fs::create_dir_all(t.path().join("ws_evil")).unwrap();
    std::fs::write(t.path().join("ws_evil/data.txt"), format!("{SECRET}\n")).unwrap();
    (t, ws)
}

fn error_code(s: &mut StdioServer, tool: &str, args: Value) -> String {
    let r = s.request(&call(1, tool, args));
    assert!(!r.to_string().contains(SECRET), "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    r["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap()
        .to_owned()
}

// See: CVE-2025-53110 — a string-prefix containment check let `ws_evil` pass as inside `ws`.
#[test]
fn cve_2025_53110_prefix_sibling() {
    let (_t, ws) = layout();
    let mut s = StdioServer::start(&ws, &[]);
    for tool in ["read_file", "list_dir", "list_files", "view_image"] {
        let code = error_code(&mut s, tool, json!({"path": "../ws_evil/data.txt"}));
        assert_eq!(code, "PATH_OUTSIDE_WORKSPACE", "{tool}");
    }
    assert_eq!(
        error_code(
            &mut s,
            "search_text",
            json!({"query": "SECRET", "path": "../ws_evil"})
        ),
        "PATH_OUTSIDE_WORKSPACE"
    );
}

// See: CVE-2025-53109 — symlinks inside the workspace pointing outside were followed.
#[test]
fn cve_2025_53109_symlink_out_file_and_directory() {
    let (t, ws) = layout();
    symlink(t.path().join("ws_evil/data.txt"), ws.join("file_link")).unwrap();
    symlink(t.path().join("ws_evil"), ws.join("dir_link")).unwrap();
    symlink("../ws_evil", ws.join("rel_dir_link")).unwrap();
    let mut s = StdioServer::start(&ws, &[]);
    for args in [
        json!({"path": "file_link"}),
        json!({"path": "dir_link/data.txt"}),
        json!({"path": "rel_dir_link/data.txt"}),
    ] {
        assert_eq!(
            error_code(&mut s, "read_file", args.clone()),
            "SYMLINK_ESCAPE",
            "{args}"
        );
        assert_eq!(
            error_code(&mut s, "view_image", args.clone()),
            "SYMLINK_ESCAPE",
            "{args}"
        );
    }
    assert_eq!(
        error_code(&mut s, "list_dir", json!({"path": "dir_link"})),
        "SYMLINK_ESCAPE"
    );
    assert_eq!(
        error_code(&mut s, "list_files", json!({"path": "dir_link"})),
        "SYMLINK_ESCAPE"
    );
    assert_eq!(
        error_code(
            &mut s,
            "search_text",
            json!({"query": "x", "path": "dir_link"})
        ),
        "SYMLINK_ESCAPE"
    );
    // Searching and listing the root never follows the links out.
    let r = s.request(&call(2, "search_text", json!({"query": SECRET})));
    assert!(
        !r.to_string().contains(&format!("{SECRET}\\n"))
            && r["result"]["structuredContent"]["matches"] == json!([]),
        "{r}"
    );
    let r = s.request(&call(
        3,
        "list_dir",
        json!({"recursive": true, "max_depth": 5}),
    ));
    assert!(!r.to_string().contains("dir_link/data.txt"), "{r}");
}

#[test]
fn dotdot_absolute_nul_home_and_drive_forms() {
    let (_t, ws) = layout();
    let mut s = StdioServer::start(&ws, &[]);
    let cases = [
        ("../ws_evil/data.txt", "PATH_OUTSIDE_WORKSPACE"),
        ("real/../../ws_evil/data.txt", "PATH_OUTSIDE_WORKSPACE"),
        ("/etc/passwd", "ABSOLUTE_PATH_DENIED"),
        ("~/.ssh/id_rsa", "ABSOLUTE_PATH_DENIED"),
        ("C:\\Windows\\win.ini", "ABSOLUTE_PATH_DENIED"),
        ("\\\\server\\share\\x", "ABSOLUTE_PATH_DENIED"),
        ("real/data.txt\u{0}.png", "INVALID_ARGUMENT"),
    ];
    for (path, code) in cases {
        for tool in ["read_file", "list_dir", "list_files", "view_image"] {
            assert_eq!(
                error_code(&mut s, tool, json!({"path": path})),
                code,
                "{tool} {path:?}"
            );
        }
        assert_eq!(
            error_code(&mut s, "search_text", json!({"query": "x", "path": path})),
            code,
            "{path:?}"
        );
    }
}

#[test]
fn symlink_loop_terminates() {
    let (_t, ws) = layout();
    symlink("loop_b", ws.join("loop_a")).unwrap();
    symlink("loop_a", ws.join("loop_b")).unwrap();
    symlink(".", ws.join("real/self")).unwrap();
    let mut s = StdioServer::start(&ws, &[]);
    let r = s.request(&call(1, "read_file", json!({"path": "loop_a"})));
    assert_eq!(
        r["result"]["structuredContent"]["error"]["details"]["reason"],
        "symlink_loop"
    );
    let r = s.request(&call(
        2,
        "list_dir",
        json!({"recursive": true, "max_depth": 20}),
    ));
    assert_eq!(r["result"]["isError"], false);
    // list_files lists regular files (like `rg --files`); list_dir shows the links.
    let r = s.request(&call(3, "list_files", json!({})));
    assert_eq!(
        r["result"]["structuredContent"]["files"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{r}"
    );
    let r = s.request(&call(4, "search_text", json!({"query": "inside"})));
    assert_eq!(
        r["result"]["structuredContent"]["matches"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{r}"
    );
}

/// A thread flips `flip` between a real directory and a symlink to the
/// outside while 1,000 operations run on paths through it — reads, searches,
/// listings, patches that create files in it and commands that run in it and
/// write a file where they stand: none may return a byte from outside, and
/// nothing may be created outside.
#[test]
fn race_directory_symlink_flip_never_leaks() {
    let (t, ws) = layout();
    let flip = ws.join("flip");
    let real = ws.join("flip_real");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("data.txt"), "inside\n").unwrap();
    std::fs::rename(&real, &flip).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, flip, real, evil) = (
            stop.clone(),
            flip.clone(),
            real.clone(),
            t.path().join("ws_evil"),
        );
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // directory → symlink
                let _ = std::fs::rename(&flip, &real);
                let _ = symlink(&evil, &flip);
                // symlink → directory
                let _ = std::fs::remove_file(&flip);
                let _ = std::fs::rename(&real, &flip);
                flips += 1;
            }
            flips
        })
    };
    // A name only the outside has: no listing may ever show it.
    std::fs::create_dir_all(t.path().join("ws_evil/OUTSIDE-ONLY-DIR")).unwrap();
    std::fs::write(t.path().join("ws_evil/OUTSIDE-ONLY-DIR/f.txt"), "x\n").unwrap();
    let outside_before = snapshot(&t.path().join("ws_evil"));
    let mut s = StdioServer::start(&ws, &["--permission-mode", "trusted"]);
    let n = 1000;
    let mut batch = String::new();
    for i in 0..n {
        let msg = match i % 6 {
            0 | 1 => call(i, "read_file", json!({"path": "flip/data.txt"})),
            2 => call(i, "search_text", json!({"query": "E", "path": "flip"})),
            3 if i % 12 == 3 => call(i, "list_files", json!({"path": "flip"})),
            3 => call(
                i,
                "list_dir",
                json!({"path": "flip", "recursive": true, "max_depth": 3}),
            ),
            4 => call(
                i,
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Add File: flip/new_{i}.txt\n+x\n*** End Patch\n")}),
            ),
            _ => call(
                i,
                "exec_command",
                json!({"cmd": format!("echo x > made_{i}.txt"), "workdir": "flip"}),
            ),
        };
        batch.push_str(&msg.to_string());
        batch.push('\n');
    }
    s.send_raw(batch.trim_end());
    let (mut inside_reads, mut inside_listings) = (0, 0);
    for _ in 0..n {
        let r = s.recv();
        let text = r.to_string();
        assert!(!text.contains(SECRET), "leaked: {text}");
        // Walks are confined by Landlock; a kernel without it is the documented gap.
        if ctm_exec_runtime::landlock_support().available {
            assert!(!text.contains("OUTSIDE-ONLY"), "listed outside: {text}");
        }
        if r["result"]["structuredContent"]["content"] == "inside\n" {
            inside_reads += 1;
        }
        if r["result"]["isError"] == false && text.contains("flip/data.txt") {
            inside_listings += 1;
        }
        // A listed entry's size is its own ("inside\n"), or unknown (null) when
        // its directory was swapped away before it was examined; never that of
        // the same-named file outside.
        if let Some(entries) = r["result"]["structuredContent"]["entries"].as_array() {
            for e in entries.iter().filter(|e| e["path"] == "flip/data.txt") {
                let size = &e["size_bytes"];
                assert!(*size == 7 || size.is_null(), "size from outside: {e}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    // Commands have ended (each answered exited); nothing landed outside.
    assert_eq!(
        snapshot(&t.path().join("ws_evil")),
        outside_before,
        "created or changed outside"
    );
    let created_inside = snapshot(&ws)
        .iter()
        .filter(|(p, _)| p.contains("/new_") || p.contains("/made_"))
        .count();
    // The race was real: some operations saw the directory.
    assert!(
        inside_reads + inside_listings + created_inside > 0,
        "no operation ever reached the directory; flips={flips}"
    );
    eprintln!(
        "{n} operations, {flips} flips, {inside_reads} reads and {inside_listings} listings inside, {created_inside} files created inside, 0 outside"
    );
}

/// `file_link` and `dir_link` pointing outside, and the loop `loop_a` <-> `loop_b`.
fn escape_links(t: &std::path::Path, ws: &std::path::Path) {
    symlink(t.join("ws_evil/data.txt"), ws.join("file_link")).unwrap();
    symlink(t.join("ws_evil"), ws.join("dir_link")).unwrap();
    symlink("loop_b", ws.join("loop_a")).unwrap();
    symlink("loop_a", ws.join("loop_b")).unwrap();
}

/// The tools that open `path` to read it, with their arguments.
fn reading_tools(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": path})),
        ("list_dir", json!({"path": path})),
        ("list_files", json!({"path": path})),
        ("search_text", json!({"query": "x", "path": path})),
        ("view_image", json!({"path": path})),
    ]
}

/// Runs git in `dir` with a fixed identity; fails the test if git fails.
fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "git {args:?}");
}

/// Every file and its bytes under `dir` (the outside world, to compare).
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        let name = p.to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.push((name, std::fs::read(&p).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

/// One corpus against every tool that takes a path: each refuses each
/// escape with the same code (history filters included: a link's name is
/// judged like any path), and nothing outside the root is read, written or
/// created.
#[test]
fn every_path_tool_refuses_the_escape_corpus() {
    let (t, ws) = layout();
    escape_links(t.path(), &ws);
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "real"]);
    git(&ws, &["commit", "-qm", "init"]);
    let outside_before = snapshot(&t.path().join("ws_evil"));
    let corpus = [
        "../ws_evil/data.txt",
        "real/../../ws_evil/data.txt",
        "/etc/passwd",
        "~/.ssh/id_rsa",
        "C:\\Windows\\win.ini",
        "\\\\server\\share\\x",
        "real/data.txt\u{0}.png",
        "file_link",
        "dir_link/data.txt",
        "dir_link/new.txt",
        "loop_a/x",
    ];
    let mut s = StdioServer::start(&ws, &["--permission-mode", "trusted"]);
    let (mut tried, mut escapes_refused) = (0, 0);
    for path in corpus {
        let mut tools = reading_tools(path);
        tools.extend([
            (
                "exec_command",
                json!({"cmd": "echo hi > made.txt", "workdir": path}),
            ),
            ("git_log", json!({"path": path})),
            ("git_diff", json!({"path": path})),
            ("git_show", json!({"path": path})),
            ("git_blame", json!({"path": path})),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: {path}\n@@\n-{SECRET}\n+changed\n*** End Patch\n")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch\n")}),
            ),
            (
                "apply_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: real/data.txt\n*** Move to: {path}\n@@\n-inside\n+moved\n*** End Patch\n")}),
            ),
        ]);
        let mut codes = Vec::new();
        for (tool, args) in tools {
            tried += 1;
            let r = s.request(&call(1, tool, args.clone()));
            assert!(
                !r.to_string().contains(SECRET),
                "{tool} {path:?} leaked: {r}"
            );
            let code = r["result"]["structuredContent"]["error"]["code"]
                .as_str()
                .unwrap_or("ACCEPTED")
                .to_owned();
            codes.push((tool, code));
        }
        eprintln!("{path:?}: {codes:?}");
        // One resolver decides: every tool refuses, and with the same code.
        let first = &codes[0].1;
        for (tool, code) in &codes {
            assert_ne!(code, "ACCEPTED", "{tool} {path:?}");
            assert_eq!(
                code, first,
                "{path:?}: read_file says {first}, {tool} {code}"
            );
            escapes_refused += 1;
        }
    }
    assert_eq!(
        snapshot(&t.path().join("ws_evil")),
        outside_before,
        "outside changed"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("real/data.txt")).unwrap(),
        "inside\n"
    );
    assert!(!ws.join("made.txt").exists() && !t.path().join("made.txt").exists());
    eprintln!("{tried} calls, {escapes_refused} escapes refused, 0 leaked or written");
}

/// A `.git` file whose `gitdir:` points outside: no git tool reads that
/// repository, and the refusal says why.
#[test]
fn dot_git_file_pointing_outside_is_refused_by_every_git_tool() {
    let (t, ws) = layout();
    let outside = t.path().join("ws_evil");
    git(&outside, &["init", "-q"]);
    git(&outside, &["add", "data.txt"]);
    git(&outside, &["commit", "-qm", SECRET]);
    std::fs::write(
        ws.join(".git"),
        format!("gitdir: {}\n", outside.join(".git").display()),
    )
    .unwrap();
    let mut s = StdioServer::start(&ws, &[]);
    for (tool, args) in [
        ("git_status", json!({})),
        ("git_log", json!({})),
        ("git_diff", json!({})),
        ("git_show", json!({"rev": "HEAD"})),
        ("git_blame", json!({"path": "data.txt"})),
    ] {
        let r = s.request(&call(1, tool, args));
        assert!(!r.to_string().contains(SECRET), "{tool} leaked: {r}");
        let error = &r["result"]["structuredContent"]["error"];
        assert_eq!(error["category"], "security", "{tool}: {r}");
    }
}

/// The boundary verdict of a path: the code (and reason) of a refusal for
/// leaving the workspace, or "inside" when the tool got past the boundary
/// (whatever it then said).
fn verdict(r: &Value) -> String {
    let error = &r["result"]["structuredContent"]["error"];
    let code = error["code"].as_str().unwrap_or("");
    let reason = error["details"]["reason"].as_str().unwrap_or("");
    match (code, reason) {
        ("ABSOLUTE_PATH_DENIED" | "PATH_OUTSIDE_WORKSPACE" | "SYMLINK_ESCAPE", _) => code.into(),
        ("INVALID_ARGUMENT", "symlink_loop" | "invalid_path") => format!("{code}/{reason}"),
        _ => "inside".into(),
    }
}

/// Property: a path accepted by one tool is accepted by all. Paths are drawn
/// (seeded, reproducible) from components that mix lexical escapes, links
/// out, links in, a loop, missing names and absolute forms; every tool that
/// takes a path must give the same boundary verdict for each.
#[test]
fn one_resolver_every_tool_gives_the_same_verdict() {
    let (t, ws) = layout();
    escape_links(t.path(), &ws);
    symlink("../ws_evil", ws.join("rel_link")).unwrap();
    symlink("real", ws.join("in_link")).unwrap();
    symlink(ws.join("real/data.txt"), ws.join("abs_in_file_link")).unwrap();
    symlink("/nonexistent/outside", ws.join("dangling_out")).unwrap();
    symlink("real/none", ws.join("dangling_in")).unwrap();
    git(&ws, &["init", "-q"]);
    let parts = [
        "..",
        ".",
        "real",
        "data.txt",
        "file_link",
        "dir_link",
        "rel_link",
        "in_link",
        "abs_in_file_link",
        "loop_a",
        "dangling_out",
        "dangling_in",
        "missing",
        "ws_evil",
        "~",
        "C:",
        "\\\\srv",
        "a\u{0}b",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % n as u64).unwrap()
    };
    let mut paths: Vec<String> = Vec::new();
    for _ in 0..160 {
        let len = 1 + next(4);
        let mut p: Vec<&str> = (0..len).map(|_| parts[next(parts.len())]).collect();
        if next(8) == 0 {
            p.insert(0, "");
        }
        paths.push(p.join("/"));
    }
    let outside_before = snapshot(&t.path().join("ws_evil"));
    let mut s = StdioServer::start(&ws, &["--permission-mode", "trusted"]);
    let mut verdicts = std::collections::BTreeMap::<String, usize>::new();
    let mut calls = 0;
    for path in &paths {
        let mut tools = reading_tools(path);
        tools.extend([
            ("exec_command", json!({"cmd": "true", "workdir": path})),
            ("git_log", json!({"path": path})),
            ("git_diff", json!({"path": path})),
            ("git_blame", json!({"path": path})),
            (
                "apply_patch",
                json!({"dry_run": true, "patch": format!("*** Begin Patch\n*** Add File: {path}/new.txt\n+x\n*** End Patch\n")}),
            ),
            (
                "apply_patch",
                json!({"dry_run": true, "patch": format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch\n")}),
            ),
        ]);
        let mut seen: Vec<(&str, String)> = Vec::new();
        for (tool, args) in tools {
            let r = s.request(&call(1, tool, args));
            assert!(
                !r.to_string().contains(SECRET),
                "{tool} {path:?} leaked: {r}"
            );
            seen.push((tool, verdict(&r)));
            calls += 1;
        }
        let first = &seen[0].1;
        for (tool, v) in &seen {
            assert_eq!(
                v, first,
                "{path:?}: read_file says {first}, {tool} says {v}"
            );
        }
        *verdicts.entry(first.clone()).or_default() += 1;
    }
    assert_eq!(snapshot(&t.path().join("ws_evil")), outside_before);
    eprintln!(
        "{} paths x 11 tool forms = {calls} calls; verdicts: {verdicts:?}",
        paths.len()
    );
    // The draw covered both sides of the boundary.
    assert!(
        verdicts.get("inside").copied().unwrap_or(0) > 10,
        "{verdicts:?}"
    );
    assert!(
        verdicts.get("SYMLINK_ESCAPE").copied().unwrap_or(0) > 5,
        "{verdicts:?}"
    );
}

/// A non-loopback IPv4 address of this host, if it has one.
fn host_address() -> Option<String> {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .map(str::to_owned)
}

/// Two real local accounts, made for this test and removed after.
struct Accounts(Vec<String>);

impl Accounts {
    fn make(n: usize) -> Option<Self> {
        let mut made = Self(Vec::new());
        for i in 0..n {
            let name = format!("ctm{}u{i}", std::process::id() % 100_000);
            let ok = std::process::Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .arg(&name)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return None;
            }
            made.0.push(name);
        }
        Some(made)
    }

    fn uid(&self, i: usize) -> u32 {
        let out = std::process::Command::new("id")
            .args(["-u", &self.0[i]])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    fn as_user(&self, i: usize, program: &str) -> std::process::Command {
        let uid = self.uid(i);
        let mut c = std::process::Command::new("setpriv");
        c.args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".into(),
            "--".into(),
            program.into(),
        ]);
        c
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = std::process::Command::new("userdel").arg(name).status();
        }
    }
}

/// Over HTTP without a token, only the server's own user's loopback
/// clients are served; another local account is refused `403`
/// (`other_user`) before anything runs, unless the operator allows it with
/// `--allow-other-users` (issue 33, item 1: `nobody` ran commands as the
/// developer). Run with two accounts the test makes: one runs the server,
/// the other is the intruder.
#[test]
fn another_local_account_cannot_drive_an_unauthenticated_server() {
    use std::os::unix::fs::PermissionsExt;
    if !super::sandbox::is_root() {
        eprintln!(
            "NOTE: not root: the accounts of this test cannot be made; nothing is checked here"
        );
        return;
    }
    let Some(users) = Accounts::make(2) else {
        eprintln!("NOTE: useradd failed here; nothing is checked");
        return;
    };
    // The binary and a workspace where the server's account can reach them.
    let dir = tempfile::Builder::new()
        .prefix("ctm-peers-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("coding-tools-mcp");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let owner = users.uid(0);
    std::os::unix::fs::chown(&ws, Some(owner), Some(owner)).unwrap();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "exec_command", "arguments": {"cmd": "echo ran >> planted_by_other_user.txt"}}});
    let post_as = |user: usize, url: &str, extra: &[&str]| -> (u16, String) {
        let out = users
            .as_user(user, "curl")
            .args(extra)
            .args([
                "-s",
                "-m",
                "10",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
            ])
            .args(["-H", "Content-Type: application/json"])
            .args(["-H", "Accept: application/json, text/event-stream"])
            .args(["-d", &ping.to_string()])
            .arg(format!("{url}/mcp"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or((&text, "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    };
    for allow in [false, true] {
        let mut cmd = users.as_user(0, bin.to_str().unwrap());
        cmd.arg("--workspace")
            .arg(&ws)
            .args(["--port", "0", "--permission-mode", "trusted"]);
        if allow {
            cmd.arg("--allow-other-users");
        }
        for (k, _) in std::env::vars() {
            if k.starts_with("CODING_TOOLS_MCP_") {
                cmd.env_remove(k);
            }
        }
        let s = HttpServer::start_with(&mut cmd);
        let url = format!("http://{}", s.addr);
        let planted = ws.join("planted_by_other_user.txt");
        let _ = std::fs::remove_file(&planted);
        // The intruder binds a non-loopback address of this host before
        // connecting to 127.0.0.1 (the connection still arrives on
        // loopback): refused all the same (review finding F1).
        if !allow && let Some(own_ip) = host_address() {
            let (code, body) = post_as(1, &url, &["--interface", &own_ip]);
            assert_eq!(code, 403, "from {own_ip}: {body}");
            assert!(
                !planted.exists(),
                "from {own_ip}: another account's command ran"
            );
        }
        let (code, body) = post_as(1, &url, &[]);
        if allow {
            assert_eq!(code, 200, "{body}");
            assert!(planted.exists(), "allowed, the other account's command ran");
        } else {
            assert_eq!(code, 403, "{body}");
            assert!(body.contains("other_user"), "{body}");
            assert!(!planted.exists(), "another account's command ran");
        }
        // The server's own user is served either way.
        let (code, body) = post_as(0, &url, &[]);
        assert_eq!(code, 200, "{body}");
        drop(s);
    }
    // A server of root's (the test's user): an intruder that sends its
    // request and closes at once, with more bytes queued behind it, left a
    // closed socket whose table entry names no owner (uid 0): none of its
    // commands may run (review finding F2: 137 of 300 ran).
    let own = tempfile::tempdir().unwrap();
    std::fs::set_permissions(own.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = HttpServer::start(own.path(), &["--permission-mode", "trusted"]);
    let port = s.addr.rsplit(':').next().unwrap().to_owned();
    let flood = format!(
        "import socket, json\n\
         body = json.dumps({{'jsonrpc': '2.0', 'id': 1, 'method': 'tools/call', 'params': {{'name': 'exec_command', 'arguments': {{'cmd': 'touch pwned'}}}}}}).encode()\n\
         req = b'POST /mcp HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\nContent-Type: application/json\\r\\nAccept: application/json, text/event-stream\\r\\nContent-Length: ' + str(len(body)).encode() + b'\\r\\n\\r\\n' + body + b'POST'\n\
         for _ in range(3):\n\
         \x20   socks = []\n\
         \x20   for _ in range(100):\n\
         \x20       c = socket.create_connection(('127.0.0.1', {port}))\n\
         \x20       c.sendall(req)\n\
         \x20       socks.append(c)\n\
         \x20   for c in socks:\n\
         \x20       c.close()\n"
    );
    let ok = users
        .as_user(1, "/usr/bin/python3")
        .arg("-c")
        .arg(&flood)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let ran: Vec<_> = std::fs::read_dir(own.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("pwned"))
        .collect();
    assert!(
        ran.is_empty(),
        "{} of 300 commands of another account ran",
        ran.len()
    );
    drop(s);
    // What server_info says, for a server of the test's own user.
    let own = tempfile::tempdir().unwrap();
    for (args, said) in [
        (&[][..], "this user's loopback clients only"),
        (
            &["--allow-other-users"][..],
            "any local account (--allow-other-users)",
        ),
    ] {
        let s = HttpServer::start(own.path(), args);
        let r = s
            .post(&call(2, "server_info", json!({"detail": "full"})), &[])
            .json();
        assert_eq!(
            r["result"]["structuredContent"]["auth"]["local_users"], said,
            "{r}"
        );
    }
}

/// A caller may not hand a command variables that make programs run code
/// (review finding F6: `GIT_CONFIG_PARAMETERS` with `core.fsmonitor` ran a
/// program under safe mode's gates, which refuse the same written out).
#[test]
fn variables_that_steer_programs_are_refused_from_callers() {
    let (_t, ws) = layout();
    let mut s = StdioServer::start(&ws, &[]);
    for (k, v) in [
        (
            "GIT_CONFIG_PARAMETERS",
            "'core.fsmonitor'='touch steered; false'",
        ),
        ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
        ("GIT_SSH_COMMAND", "touch steered"),
        ("JAVA_TOOL_OPTIONS", "-javaagent:/tmp/a.jar"),
        ("LESSOPEN", "|touch steered %s"),
    ] {
        let r = s.request(&call(
            1,
            "exec_command",
            json!({"cmd": "git status", "env": {k: v}}),
        ));
        let sc = &r["result"]["structuredContent"];
        assert_eq!(sc["error"]["code"], "PERMISSION_REQUIRED", "{k}: {r}");
        assert!(r.to_string().contains("sensitive_env"), "{k}: {r}");
    }
    assert!(!ws.join("steered").exists());
}

/// Issue 31, item 6: every gate reads the command line once, the way the
/// shell does. Each of these ran before (a quote or a `<<` inside quotes
/// made a gate read the line differently from the shell: the substitution
/// ran, the path gate skipped the next line, a redirection hid the
/// command's name, a shell read its program from a pipe); each is refused
/// now with the permission it needs.
/// Where the shell reads text as data or a comment, nothing is refused.
#[test]
fn every_gate_reads_the_command_line_as_the_shell_does() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let refused = [
        ("echo \"it's $(id -u)\"", "shell_expansion"),
        ("echo \\' $(id -u)", "shell_expansion"),
        ("echo \"<<X\"\ncat /etc/shadow", "filesystem_escape"),
        ("echo '<<X'\ntouch /usr/lib/planted", "filesystem_escape"),
        ("cat \"<<\" /etc/shadow", "filesystem_escape"),
        (">/dev/null nc 127.0.0.1 9", "network"),
        ("if nc 127.0.0.1 9; then :; fi", "network"),
        ("cat <<EOF\n$(id -u)\nEOF", "shell_expansion"),
        // A program read from a pipe or a here-document is inline code.
        ("echo 'id -u' | sh", "inline_script"),
        ("sh <<'EOF'\nrm -rf ~/x\nEOF", "inline_script"),
        ("python3 <<EOF\nprint(1)\nEOF", "inline_script"),
        // From the attacker review of the lexer: a carriage return is no
        // blank, `$'` no quote to dash, a grouped shell reads its
        // here-document as a program.
        ("true \r#; echo X$(id -u)X", "shell_expansion"),
        (
            "echo $'\\' ; echo X$(id -u)X ; echo '\\'",
            "shell_expansion",
        ),
        ("(sh) <<'EOF'\nrm -rf victim\nEOF", "inline_script"),
    ];
    // The call's `stdin` feeds the shell as a pipe would.
    let r = s.request(&call(
        40,
        "exec_command",
        json!({"cmd": "sh", "stdin": "id -u\n"}),
    ));
    assert_eq!(
        r["result"]["structuredContent"]["permission_request"]["permission"], "inline_script",
        "{r}"
    );
    for (i, (cmd, permission)) in refused.into_iter().enumerate() {
        let r = s.request(&call(i as i64 + 1, "exec_command", json!({"cmd": cmd})));
        let v = &r["result"]["structuredContent"];
        assert_eq!(v["error"]["code"], "PERMISSION_REQUIRED", "{cmd:?}: {r}");
        assert_eq!(
            v["permission_request"]["permission"], permission,
            "{cmd:?}: {r}"
        );
    }
    let allowed = [
        ("echo ok # $(id -u)", "ok\n"),
        (
            "cat <<'EOF'\n$(id -u) stays text\nEOF",
            "$(id -u) stays text\n",
        ),
        ("echo '$(id -u)'", "$(id -u)\n"),
        ("echo \"a<<b\"", "a<<b\n"),
    ];
    for (i, (cmd, out)) in allowed.into_iter().enumerate() {
        let r = s.request(&call(i as i64 + 50, "exec_command", json!({"cmd": cmd})));
        let v = &r["result"]["structuredContent"];
        assert_eq!(v["exit_code"], 0, "{cmd:?}: {r}");
        assert_eq!(v["stdout"], out, "{cmd:?}: {r}");
    }
}
