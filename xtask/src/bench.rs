//! `cargo xtask bench`: numbers measured side by side in one run, always as
//! ratios against a reference measured in the same run.
//!
//! * start-up to the first `tools/list` answer over stdio, against `cat`
//!   echoing one line (the floor any stdio server pays), and with
//!   `--peer 'CMD {ws}'` against another server in alternation;
//! * on a generated tree of about 50,000 files (fixed seed, with a
//!   `.gitignore`d `build/`): `list_files` of the whole tree against
//!   `rg --files`, `search_text` for a literal and for a regex against `rg`,
//!   and `read_file` of a 5 MB file (paged by its continuations) against `cat`.
//!   Server operations are timed end to end: request written to answer read,
//!   on one running server.
//! * over HTTP: `tools/list` and `read_file` with 1, 4 and 16 clients, and
//!   the cost of `--metrics`: `read_file` on a server with it against one
//!   without, in alternating batches.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::peer::Peer;
use crate::{build_server, target_dir};

const TOOLS_LIST: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";
const TREE_FILES: usize = 49_000;
const TREE_SEED: u64 = 0x5eed_2026;

pub fn run(args: &[String]) -> Result<()> {
    let mut runs = 15usize;
    let mut peer: Option<String> = None;
    let mut only: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            "--peer" => peer = Some(it.next().context("--peer CMD")?.clone()),
            "--only" => {
                only = Some(
                    it.next()
                        .context("--only startup|files|read|patch|exec|git|http")?
                        .clone(),
                )
            }
            other => bail!("unknown bench argument: {other}"),
        }
    }
    let binary = build_server(true)?;
    println!(
        "# cargo xtask bench ({runs} runs per operation, medians; alternating with the reference)\n"
    );
    // Path lookups slow down as the kernel's dentry cache fills: on this
    // 2-core VM, with 1.9 million dentries (1.15 million negative, left by
    // earlier test runs) in a hash table of 131,072 buckets, list_files
    // and git took twice as long as on a fresh cache, and the tools that
    // stat every file more than rg and git do. Compare runs on similar
    // caches (`echo 2 > /proc/sys/vm/drop_caches` empties it).
    if let Ok(d) = std::fs::read_to_string("/proc/sys/fs/dentry-state") {
        let f: Vec<&str> = d.split_whitespace().collect();
        if let (Some(all), Some(negative)) = (f.first(), f.get(4)) {
            println!("dentry cache: {all} dentries, {negative} negative\n");
        }
    }
    println!("| operation | coding-tools-mcp ms | reference | reference ms | ratio |");
    println!("|---|---|---|---|---|");
    let want = |group: &str| only.as_deref().is_none_or(|o| o == group);
    if want("startup") {
        startup(&binary, runs, peer.as_deref())?;
    }
    if want("files") {
        file_tools(&binary, &generate_tree()?, runs, peer.as_deref())?;
    } else if want("read") {
        let tree = generate_tree()?;
        let mut client = Client::start(&binary, &tree)?;
        client.call("server_info", json!({}))?;
        let idle = status_kib(client.peer.child.id(), "VmRSS:")?;
        let mut other = peer
            .as_deref()
            .map(|p| Client::start_peer(p, &tree))
            .transpose()?;
        let stdio_ms = read_pages(&mut client, other.as_mut(), &tree, runs, idle)?;
        read_pages_http(&binary, &tree, runs, stdio_ms)?;
    }
    if want("patch") {
        apply_patch(&binary, runs, peer.as_deref())?;
    }
    if want("exec") {
        exec(&binary, runs, peer.as_deref())?;
    }
    if want("git") {
        git_tools(&binary, &generate_tree()?, runs, peer.as_deref())?;
    }
    if want("http") {
        http_latency(&binary, runs)?;
        metrics_overhead(&binary, runs)?;
    }
    Ok(())
}

/// `tools/list` and `read_file` latency over HTTP with 1, 4 and 16
/// concurrent clients (each request on a new connection), p50 and p99; the
/// reference is the same operation with one client, in the same run.
fn http_latency(binary: &Path, runs: usize) -> Result<()> {
    let ws = tempfile::tempdir()?;
    let body: String = (0..200)
        .map(|l| format!("line {l} of a small file\n"))
        .collect();
    std::fs::write(ws.path().join("small.txt"), body)?;
    let (mut server, url) = crate::conformance::start_http(binary, ws.path(), &[], &[])?;
    let headers = vec![(
        "Accept".to_owned(),
        "application/json, text/event-stream".to_owned(),
    )];
    let ops = [
        (
            "tools/list",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        (
            "read_file 200 lines",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "small.txt"}}}),
        ),
    ];
    let per_client = (runs * 10).max(50);
    let result = (|| -> Result<()> {
        for (name, request) in &ops {
            let body = request.to_string();
            let mut single_p50 = None;
            for clients in [1usize, 4, 16] {
                let samples = std::thread::scope(|scope| -> Result<Vec<Duration>> {
                    let workers: Vec<_> = (0..clients)
                        .map(|_| {
                            scope.spawn(|| -> Result<Vec<(Duration, Vec<u8>)>> {
                                let mut out = Vec::with_capacity(per_client);
                                for _ in 0..per_client {
                                    // Timed to the last byte; checked after
                                    // every client is done, so checking
                                    // costs no client CPU during the run.
                                    let started = Instant::now();
                                    let raw =
                                        crate::conformance::http_post_raw(&url, &body, &headers)?;
                                    out.push((started.elapsed(), raw));
                                }
                                Ok(out)
                            })
                        })
                        .collect();
                    let mut all = Vec::new();
                    for w in workers {
                        let answers =
                            w.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
                        for (took, raw) in answers {
                            let (status, answer) = crate::conformance::parse_response(&raw)?;
                            let ok = answer.as_ref().is_some_and(|a| {
                                a.get("result").is_some() && a["result"]["isError"] != true
                            });
                            if status != 200 || !ok {
                                bail!("{name}: status {status}, answer {answer:?}");
                            }
                            all.push(took);
                        }
                    }
                    Ok(all)
                })?;
                let mut samples = samples;
                samples.sort_unstable();
                let pct = |q: f64| {
                    samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64()
                        * 1000.0
                };
                let (p50, p99) = (pct(0.50), pct(0.99));
                let base = *single_p50.get_or_insert(p50);
                println!(
                    "| {name} over HTTP, {clients} client(s), p50 (p99 {p99:.2}) [{} requests] | {p50:.2} | 1 client p50 | {base:.2} | {:.2}x |",
                    samples.len(),
                    p50 / base
                );
            }
        }
        Ok(())
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// What `--metrics` costs a request: `read_file` over HTTP, one client,
/// on a server with metrics against the same server without, in
/// alternating batches (so drift of the machine hits both alike), each
/// request on a new connection; the p50 of each and their ratio. Two
/// sessions, the second starting the servers in the other order: two
/// servers without metrics differ by a few percent by start order alone.
fn metrics_overhead(binary: &Path, runs: usize) -> Result<()> {
    let ws = tempfile::tempdir()?;
    let body: String = (0..200)
        .map(|l| format!("line {l} of a small file\n"))
        .collect();
    std::fs::write(ws.path().join("small.txt"), body)?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for metrics_first in [false, true] {
        overhead_session(
            binary,
            ws.path(),
            runs,
            metrics_first,
            &mut without,
            &mut with,
        )?;
    }
    let p50 = |v: &mut Vec<Duration>| {
        v.sort_unstable();
        v[v.len() / 2].as_secs_f64() * 1000.0
    };
    let (p_with, p_without) = (p50(&mut with), p50(&mut without));
    println!(
        "| read_file over HTTP with --metrics, 1 client, p50 [{} requests each] | {p_with:.3} | without --metrics | {p_without:.3} | {:.3}x |",
        with.len(),
        p_with / p_without
    );
    Ok(())
}

/// One session of [`metrics_overhead`]: both servers started (the one with
/// metrics first or second), timed in alternating batches, then stopped.
fn overhead_session(
    binary: &Path,
    ws: &Path,
    runs: usize,
    metrics_first: bool,
    without: &mut Vec<Duration>,
    with: &mut Vec<Duration>,
) -> Result<()> {
    let flags: [&[&str]; 2] = if metrics_first {
        [&["--metrics"], &[]]
    } else {
        [&[], &["--metrics"]]
    };
    let mut servers = Vec::new();
    for extra in flags {
        match crate::conformance::start_http(binary, ws, extra, &[]) {
            Ok(s) => servers.push((s, !extra.is_empty())),
            Err(e) => {
                for ((mut child, _), _) in servers {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(e);
            }
        }
    }
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "small.txt"}}}).to_string();
    let batch = 25usize;
    let rounds = (runs * 20 / batch).max(4);
    let result = (|| -> Result<()> {
        let time_batch = |url: &str, into: &mut Vec<Duration>| -> Result<()> {
            for _ in 0..batch {
                let started = Instant::now();
                let raw = crate::conformance::http_post_raw(url, &request, &[])?;
                into.push(started.elapsed());
                let (status, answer) = crate::conformance::parse_response(&raw)?;
                if status != 200
                    || answer
                        .as_ref()
                        .is_none_or(|a| a["result"]["isError"] != false)
                {
                    bail!("read_file: status {status}, answer {answer:?}");
                }
            }
            Ok(())
        };
        let url = |metrics: bool| {
            servers
                .iter()
                .find(|(_, m)| *m == metrics)
                .map(|((_, url), _)| url.clone())
                .unwrap_or_default()
        };
        let (off_url, on_url) = (url(false), url(true));
        // Warm both (page cache, allocator, the first connection).
        time_batch(&off_url, &mut Vec::new())?;
        time_batch(&on_url, &mut Vec::new())?;
        for round in 0..rounds {
            // Alternate which goes first, so neither always follows the other.
            if round % 2 == 0 {
                time_batch(&off_url, without)?;
                time_batch(&on_url, with)?;
            } else {
                time_batch(&on_url, with)?;
                time_batch(&off_url, without)?;
            }
        }
        // The scrape a Prometheus would take: the calls were counted.
        let (status, scrape) =
            crate::conformance::http_get(&on_url.replace("/mcp", "/metrics"), &[])?;
        let counted = String::from_utf8_lossy(&scrape).lines().any(|l| {
            l.starts_with(
                "coding_tools_mcp_tool_calls_total{code=\"\",outcome=\"ok\",tool=\"read_file\"}",
            )
        });
        if status != 200 || !counted {
            bail!("GET /metrics: status {status}, read_file calls not counted");
        }
        Ok(())
    })();
    for ((mut child, _), _) in servers {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}

fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    c
}

/// The bench tree as a repository (made once): all files committed, a
/// 300-line file with a history, a few files modified in the work tree.
fn git_tools(binary: &Path, tree: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let marker = tree.join(".git/ctm-bench-ready");
    if !marker.exists() {
        eprintln!("committing the bench tree (once) ...");
        let run = |args: &[&str]| -> Result<()> {
            let st = git_cmd(tree).args(args).stdout(Stdio::null()).status()?;
            if !st.success() {
                bail!("git {args:?} failed");
            }
            Ok(())
        };
        run(&["init", "-q", "-b", "main"])?;
        run(&["add", "-A"])?;
        run(&["commit", "-qm", "bench tree"])?;
        for round in 0..6 {
            let body: String = (0..300)
                .map(|l| {
                    if l % 6 == round {
                        format!("line {l} round {round}\n")
                    } else {
                        format!("line {l}\n")
                    }
                })
                .collect();
            std::fs::write(tree.join("blame.txt"), body)?;
            run(&["add", "blame.txt"])?;
            run(&["commit", "-qm", &format!("blame round {round}")])?;
        }
        for i in 0..60 {
            run(&[
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                &format!("history {i}"),
            ])?;
        }
        std::fs::write(&marker, b"")?;
    }
    for i in 0..5 {
        let p = tree.join(format!("src/m0{i}/d000/f{i:05}.rs"));
        if let Ok(body) = std::fs::read_to_string(&p) {
            std::fs::write(&p, body.replacen("alpha", "ALPHA", 1))?;
        }
    }
    let mut client = Client::start(binary, tree)?;
    let ops: Vec<GitOp<'_>> = vec![
        (
            "git_status (49k files)",
            "git_status",
            json!({"max_entries": 10000}),
            vec!["status", "--porcelain=v2"],
        ),
        (
            "git_log 50",
            "git_log",
            json!({"max_count": 50}),
            vec!["log", "-n", "50", "--format=%H %s"],
        ),
        (
            "git_diff (5 modified files)",
            "git_diff",
            json!({}),
            vec!["diff"],
        ),
        (
            "git_blame 200 lines",
            "git_blame",
            json!({"path": "blame.txt", "end_line": 200}),
            vec!["blame", "--porcelain", "-L", "1,200", "--", "blame.txt"],
        ),
    ];
    let mut other = peer.map(|p| Client::start_peer(p, tree)).transpose()?;
    time_git_ops(&mut client, other.as_mut(), tree, ops, runs)?;
    drop(client);
    drop(other);
    deep_blame(binary, runs, peer)
}

/// `git_blame` of 200 lines of a file that every one of 157 commits
/// changed (a generated repository: fixed seed and dates), against
/// `git blame --porcelain -L 1,200`: the blame walks the whole history,
/// where the bench tree's file has 6 changes.
/// Twice: on the repository packed (as a clone has it) and with the loose
/// objects its commits made.
fn deep_blame(binary: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let loose = generate_blame_repo()?;
    let packed = target_dir().join("bench-blame-repo-packed");
    let marker = packed.join(format!(".git/ctm-bench-{BLAME_SEED:x}-{BLAME_COMMITS}"));
    if !marker.exists() {
        let _ = std::fs::remove_dir_all(&packed);
        let st = git_cmd(&target_dir())
            .args(["clone", "-q", "--no-local"])
            .arg(&loose)
            .arg(&packed)
            .status()?;
        if !st.success() {
            bail!("git clone of {} failed", loose.display());
        }
        std::fs::write(&marker, b"")?;
    }
    for (repo, how) in [(&packed, "packed"), (&loose, "loose objects")] {
        let mut client = Client::start(binary, repo)?;
        client.call("server_info", json!({}))?;
        let idle = status_kib(client.peer.child.id(), "VmRSS:")?;
        let mut other = peer.map(|p| Client::start_peer(p, repo)).transpose()?;
        let name =
            format!("git_blame 200 lines ({BLAME_COMMITS} commits touching the file, {how})");
        let ops = vec![(
            name.as_str(),
            "git_blame",
            json!({"path": "src/engine.rs", "end_line": 200}),
            vec!["blame", "--porcelain", "-L", "1,200", "--", "src/engine.rs"],
        )];
        time_git_ops(&mut client, other.as_mut(), repo, ops, runs)?;
        // A server started for this repository: its peak is the blame's
        // (issue 35: at most 64 MiB), and what stays is the caches' rest.
        let pid = client.peer.child.id();
        let peak = status_kib(pid, "VmHWM:")? as f64 / 1024.0;
        match git_peak_mib(repo)? {
            Some(git) => println!(
                "| peak server RSS during git_blame ({how}, target 64 MiB) | {peak:.1} MiB | `git blame` peak RSS | {git:.1} MiB | {:.2}x |",
                peak / git
            ),
            None => println!(
                "| peak server RSS during git_blame ({how}, target 64 MiB) | {peak:.1} MiB | (no /usr/bin/time for git's) | - | - |"
            ),
        }
        rss_after(&client, &format!("git_blame ({how})"), idle)?;
    }
    Ok(())
}

/// The peak RSS of `git blame` of the same lines in MiB, by GNU time's
/// `%M` (`None` where `/usr/bin/time` is not GNU time).
fn git_peak_mib(repo: &Path) -> Result<Option<f64>> {
    let out = Command::new("/usr/bin/time")
        .current_dir(repo)
        .args([
            "-f",
            "%M",
            "git",
            "blame",
            "--porcelain",
            "-L",
            "1,200",
            "--",
        ])
        .arg("src/engine.rs")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(Stdio::null())
        .output();
    let Ok(out) = out else { return Ok(None) };
    let kib = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.trim().parse::<f64>().ok());
    Ok(kib.map(|k| k / 1024.0))
}

type GitOp<'a> = (&'a str, &'a str, Value, Vec<&'a str>);

/// Each of `ops` on the server (after one untimed call) alternating with
/// its git command, `runs` times; one row each.
fn time_git_ops(
    client: &mut Client,
    mut other: Option<&mut Client>,
    tree: &Path,
    ops: Vec<GitOp<'_>>,
    runs: usize,
) -> Result<()> {
    for (name, tool, args, git_args) in ops {
        client.call(tool, args.clone())?;
        if let Some(o) = other.as_mut() {
            o.call(tool, args.clone())?;
        }
        let (mut a, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            a.push(client.call(tool, args.clone())?.0);
            r.push(timed_command(git_cmd(tree).args(&git_args))?.0);
            if let Some(o) = other.as_mut() {
                b.push(o.call(tool, args.clone())?.0);
            }
        }
        let floor = format!("`git {}`", git_args.join(" "));
        row(name, median(&mut a), &floor, median(&mut r));
        if !b.is_empty() {
            peer_row(name, median(&mut a), median(&mut b));
        }
    }
    Ok(())
}

const BLAME_COMMITS: usize = 157;
const BLAME_SEED: u64 = 0xb1a3_e157;

/// `target/bench-blame-repo`: 157 commits (fixed seed, author and dates),
/// each changing a few lines of the 300-line `src/engine.rs` (edits,
/// insertions, deletions) and one of 40 other files. Built once per seed.
fn generate_blame_repo() -> Result<PathBuf> {
    let root = target_dir().join("bench-blame-repo");
    let marker = root.join(format!(".git/ctm-bench-{BLAME_SEED:x}-{BLAME_COMMITS}"));
    if marker.exists() {
        return Ok(root);
    }
    let _ = std::fs::remove_dir_all(&root);
    eprintln!(
        "committing {BLAME_COMMITS} changes under {} ...",
        root.display()
    );
    std::fs::create_dir_all(root.join("src"))?;
    let mut rng = Rng(BLAME_SEED);
    let line = |rng: &mut Rng, tag: usize| {
        let n = 3 + rng.below(6);
        let words: Vec<&str> = (0..n)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        format!("    {} // {tag}", words.join(" "))
    };
    let mut engine: Vec<String> = (0..300).map(|_| line(&mut rng, 0)).collect();
    let mut others: Vec<Vec<String>> = (0..40)
        .map(|_| (0..50).map(|_| line(&mut rng, 0)).collect())
        .collect();
    let write = |rel: &str, lines: &[String]| -> Result<()> {
        let mut body = lines.join("\n");
        body.push('\n');
        std::fs::write(root.join(rel), body)?;
        Ok(())
    };
    let run = |args: &[&str], when: usize| -> Result<()> {
        let date = format!("{} +0000", 1_700_000_000 + when * 3_600);
        let st = git_cmd(&root)
            .args(args)
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    run(&["init", "-q", "-b", "main"], 0)?;
    for commit in 0..BLAME_COMMITS {
        if commit > 0 {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(engine.len() as u64) as usize;
                match rng.below(6) {
                    0 => engine.insert(at, line(&mut rng, commit)),
                    1 if engine.len() > 250 => {
                        engine.remove(at);
                    }
                    _ => engine[at] = line(&mut rng, commit),
                }
            }
            let other = rng.below(others.len() as u64) as usize;
            let at = rng.below(50) as usize;
            others[other][at] = line(&mut rng, commit);
        }
        write("src/engine.rs", &engine)?;
        for (i, o) in others.iter().enumerate() {
            write(&format!("src/mod{i:02}.rs"), o)?;
        }
        run(&["add", "-A"], commit)?;
        run(&["commit", "-qm", &format!("change {commit}")], commit)?;
    }
    std::fs::write(&marker, b"")?;
    Ok(root)
}

/// `exec_command true` round trip against spawning `/bin/true`; then the
/// server's peak RSS while a command prints 50 MB, against its idle RSS.
fn exec(binary: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let ws = tempfile::tempdir()?;
    let mut client = Client::start(binary, ws.path())?;
    let mut other = peer.map(|p| Client::start_peer(p, ws.path())).transpose()?;
    client.call("exec_command", json!({"cmd": "true"}))?;
    if let Some(o) = other.as_mut() {
        o.call("exec_command", json!({"cmd": "true"}))?;
    }
    // The default tier (namespace where the host allows it) and the
    // Landlock tier alone, against the same bare spawn.
    let tier = client.call("check_exec_environment", json!({}))?.1["sandbox"]["tier"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let mut landlock = Client::start_with(binary, ws.path(), &["--sandbox", "landlock"])?;
    landlock.call("exec_command", json!({"cmd": "true"}))?;
    // The namespace tier built by the system bwrap, where there is one.
    let mut bwrap = Client::start_with_env(
        binary,
        ws.path(),
        &[],
        &[("CODING_TOOLS_MCP_SANDBOX_BUILDER", "bwrap")],
    )?;
    let bwrap_tier =
        bwrap.call("check_exec_environment", json!({}))?.1["sandbox"]["tier"] == "namespace";
    // The namespace tier as it was before shared namespaces: a sandbox
    // built for each command (issue 31).
    let mut own = Client::start_with_env(
        binary,
        ws.path(),
        &[],
        &[("CODING_TOOLS_MCP_SANDBOX_PER_COMMAND", "1")],
    )?;
    let own_tier = tier == "namespace";
    let mut o_ = Vec::new();
    let mut w = Vec::new();
    let (mut a, mut r, mut b, mut l) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs * 2 {
        a.push(client.call("exec_command", json!({"cmd": "true"}))?.0);
        r.push(timed_command(&mut Command::new("/bin/true"))?.0);
        l.push(landlock.call("exec_command", json!({"cmd": "true"}))?.0);
        if bwrap_tier {
            w.push(bwrap.call("exec_command", json!({"cmd": "true"}))?.0);
        }
        if own_tier {
            o_.push(own.call("exec_command", json!({"cmd": "true"}))?.0);
        }
        if let Some(o) = other.as_mut() {
            b.push(o.call("exec_command", json!({"cmd": "true"}))?.0);
        }
    }
    let builder =
        client.call("check_exec_environment", json!({}))?.1["sandbox"]["namespace"]["builder"]
            .as_str()
            .map(|b| format!(", {b}"))
            .unwrap_or_default();
    let name = format!("exec_command `true` round trip ({tier} tier{builder}, the default)");
    let bare = median(&mut r);
    row(&name, median(&mut a), "spawn /bin/true", bare);
    row(
        "exec_command `true` round trip (landlock tier)",
        median(&mut l),
        "spawn /bin/true",
        bare,
    );
    if !b.is_empty() {
        peer_row(&name, median(&mut a), median(&mut b));
    }
    if !w.is_empty() {
        row(
            "exec_command `true` round trip (namespace tier, bwrap)",
            median(&mut w),
            "spawn /bin/true",
            bare,
        );
    }
    if !o_.is_empty() {
        row(
            "exec_command `true` round trip (namespace tier, a sandbox built per command)",
            median(&mut o_),
            "spawn /bin/true",
            bare,
        );
    }
    drop(own);
    drop(bwrap);
    drop(landlock);
    drop(other);
    exec_in_repository(binary, runs, peer)?;
    let pid = client.peer.child.id();
    let rss = |field: &str| status_kib(pid, field);
    let idle = rss("VmRSS:")?;
    let (d, s) = client.call("exec_command", json!({"cmd": "head -c 52428800 /dev/zero | tr '\\0' 'x'; echo END", "yield_time_ms": 30000, "timeout_ms": 120000}))?;
    let peak = rss("VmHWM:")?;
    println!(
        "| peak server RSS during a 50 MB flood ({:.0} ms, status {}) | {:.1} MiB | idle RSS before | {:.1} MiB | +{:.1} MiB |",
        d.as_secs_f64() * 1000.0,
        s["status"],
        peak as f64 / 1024.0,
        idle as f64 / 1024.0,
        (peak.saturating_sub(idle)) as f64 / 1024.0
    );
    Ok(())
}

/// Commands in a repository of 2,000 committed files, where safe mode's
/// git seal gives each command a copy-on-write `.git` (an overlay, and the
/// carry-back of what changed): `true`, `git status` (which rewrites the
/// index) and a one-file commit, against the same git commands run bare.
fn exec_in_repository(binary: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let ws = tempfile::tempdir()?;
    let git = |args: &[&str]| -> Result<()> {
        let ok = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@b"])
            .args(args)
            .current_dir(ws.path())
            .stdout(Stdio::null())
            .status()?
            .success();
        anyhow::ensure!(ok, "git {args:?}");
        Ok(())
    };
    git(&["init", "-q"])?;
    for d in 0..20 {
        let dir = ws.path().join(format!("d{d}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}.txt")), format!("{d} {f}\n"))?;
        }
    }
    git(&["add", "."])?;
    git(&["commit", "-qm", "base"])?;
    let mut client = Client::start(binary, ws.path())?;
    let mut other = peer.map(|p| Client::start_peer(p, ws.path())).transpose()?;
    let sealed = client.call("check_exec_environment", json!({}))?.1["sandbox"]["namespace"]
        ["git_seal"]["design"]
        .as_str()
        .unwrap_or("?")
        .to_owned();
    let commit = |n: usize| json!({"cmd": format!("echo {n} >> d0/f0.txt && git -c user.name=b -c user.email=b@b commit -qam c{n}")});
    let bare_commit = |n: usize| -> Result<Duration> {
        std::fs::write(ws.path().join("d0/f1.txt"), format!("{n}\n"))?;
        Ok(timed_command(
            Command::new("git")
                .args([
                    "-c",
                    "user.name=b",
                    "-c",
                    "user.email=b@b",
                    "commit",
                    "-qam",
                ])
                .arg(format!("b{n}"))
                .current_dir(ws.path()),
        )?
        .0)
    };
    for (label, args) in [
        ("`true`", json!({"cmd": "true"})),
        (
            "`git status --porcelain`",
            json!({"cmd": "git status --porcelain"}),
        ),
    ] {
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        client.call("exec_command", args.clone())?;
        for _ in 0..runs * 2 {
            a.push(client.call("exec_command", args.clone())?.0);
            if let Some(o) = other.as_mut() {
                b.push(o.call("exec_command", args.clone())?.0);
            }
            r.push(
                timed_command(
                    Command::new("git")
                        .args(["status", "--porcelain"])
                        .current_dir(ws.path()),
                )?
                .0,
            );
        }
        let name = format!("exec_command {label} in a 2,000-file repository (git seal: {sealed})");
        row(
            &name,
            median(&mut a),
            "bare git status --porcelain",
            median(&mut r),
        );
        if !b.is_empty() {
            peer_row(&name, median(&mut a), median(&mut b));
        }
    }
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..runs * 2 {
        a.push(client.call("exec_command", commit(n))?.0);
        if let Some(o) = other.as_mut() {
            b.push(o.call("exec_command", commit(n + 10_000))?.0);
        }
        r.push(bare_commit(n)?);
    }
    let name = format!("exec_command one-file `git commit -a` (git seal: {sealed})");
    row(&name, median(&mut a), "bare git commit -a", median(&mut r));
    if !b.is_empty() {
        peer_row(&name, median(&mut a), median(&mut b));
    }
    Ok(())
}

/// `apply_patch` of one line in 1 and in 20 files (200 lines each), forward
/// and back on alternate runs, alternating with `git apply` of the same
/// change to a copy of the files.
fn apply_patch(binary: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let ws = tempfile::tempdir()?;
    // The peer and `git apply` patch their own copies, so all alternate.
    let peer_ws = tempfile::tempdir()?;
    let git_ws = tempfile::tempdir()?;
    for i in 0..20 {
        let body: String = (0..200).map(|l| format!("file {i} line {l}\n")).collect();
        for dir in [&ws, &peer_ws, &git_ws] {
            std::fs::write(dir.path().join(format!("f{i:02}.txt")), &body)?;
        }
    }
    let mut other = peer
        .map(|p| Client::start_peer(p, peer_ws.path()))
        .transpose()?;
    let ours_patch = |n: usize, from: &str, to: &str| {
        let mut p = String::from("*** Begin Patch\n");
        for i in 0..n {
            p.push_str(&format!(
                "*** Update File: f{i:02}.txt\n@@\n file {i} line 99\n-file {i} line 100{from}\n+file {i} line 100{to}\n file {i} line 101\n"
            ));
        }
        p.push_str("*** End Patch\n");
        p
    };
    let git_diff = |n: usize, from: &str, to: &str| {
        let mut d = String::new();
        for i in 0..n {
            d.push_str(&format!(
                "--- a/f{i:02}.txt\n+++ b/f{i:02}.txt\n@@ -100,3 +100,3 @@\n file {i} line 99\n-file {i} line 100{from}\n+file {i} line 100{to}\n file {i} line 101\n"
            ));
        }
        d
    };
    let mut client = Client::start(binary, ws.path())?;
    for n in [1usize, 20] {
        let (mut a, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
        let forward = (ours_patch(n, "", " changed"), git_diff(n, "", " changed"));
        let back = (ours_patch(n, " changed", ""), git_diff(n, " changed", ""));
        for k in 0..runs * 2 {
            let (ours, diff) = if k % 2 == 0 { &forward } else { &back };
            let (d, _) = client.call("apply_patch", json!({"patch": ours}))?;
            a.push(d);
            let diff_path = git_ws.path().join(".bench.diff");
            std::fs::write(&diff_path, diff)?;
            let (d, _) = timed_command(
                Command::new("git")
                    .current_dir(git_ws.path())
                    .args(["apply", "--unsafe-paths"])
                    .arg(&diff_path),
            )?;
            r.push(d);
            if let Some(o) = other.as_mut() {
                b.push(o.call("apply_patch", json!({"patch": ours}))?.0);
            }
        }
        let name = format!("apply_patch, {n} file(s), one hunk each");
        row(&name, median(&mut a), "git apply", median(&mut r));
        if !b.is_empty() {
            peer_row(&name, median(&mut a), median(&mut b));
        }
    }
    drop(client);
    patch_memory(binary)
}

/// Peak server RSS for a dry-run update of one line of a 64 MiB file of
/// short lines (issue 17: the bound is 4x the file), with the size cap
/// raised to let it through, against the file's size.
fn patch_memory(binary: &Path) -> Result<()> {
    let ws = tempfile::tempdir()?;
    let lines = 32 * 1024 * 1024;
    let mut body = "x\n".repeat(lines);
    body.replace_range(0..2, "a\n");
    std::fs::write(ws.path().join("big.txt"), &body)?;
    let mut client =
        Client::start_with(binary, ws.path(), &["--patch-max-file-bytes", "100000000"])?;
    let patch = "*** Begin Patch\n*** Update File: big.txt\n@@\n-a\n+b\n x\n*** End Patch\n";
    let (d, s) = client.call("apply_patch", json!({"patch": patch, "dry_run": true}))?;
    let pid = client.peer.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .context("no VmHWM")?
        .parse()?;
    let file_mib = body.len() as f64 / (1024.0 * 1024.0);
    let peak_mib = peak_kib as f64 / 1024.0;
    println!(
        "| apply_patch dry run, one line of a {file_mib:.0} MiB file ({:.0} ms, ok {}) | peak RSS {peak_mib:.1} MiB | file size | {file_mib:.1} MiB | {:.2}x |",
        d.as_secs_f64() * 1000.0,
        s["ok"],
        peak_mib / file_mib
    );
    Ok(())
}

fn startup(binary: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("AGENTS.md"), "# Rules\nBench workspace.\n")?;
    let ws_arg = ws.path().to_string_lossy().into_owned();
    let ours = vec![
        binary.to_string_lossy().into_owned(),
        "--stdio".into(),
        "--workspace".into(),
        ws_arg.clone(),
    ];
    let cat = vec!["cat".to_owned()];
    let peer_cmd = peer
        .map(|p| crate::peer::template_words(p, ws.path()))
        .transpose()?;
    round_trip(&ours, ws.path())?;
    round_trip(&cat, ws.path())?;
    let (mut a, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        a.push(round_trip(&ours, ws.path())?);
        r.push(round_trip(&cat, ws.path())?);
        if let Some(p) = &peer_cmd {
            b.push(round_trip(p, ws.path())?);
        }
    }
    row(
        "start-up to first tools/list (stdio)",
        median(&mut a),
        "cat echo",
        median(&mut r),
    );
    if !b.is_empty() {
        row(
            "start-up to first tools/list (stdio)",
            median(&mut a),
            "peer server",
            median(&mut b),
        );
    }
    // The same on the 49,000-file tree, in each tier (issue 31: nothing
    // proportional to the workspace before the first answer), against the
    // empty workspace's start in the same run.
    let tree = generate_tree()?;
    let tree_arg = tree.to_string_lossy().into_owned();
    for (tier, extra) in [
        ("the default tier", None),
        ("landlock tier", Some("landlock")),
    ] {
        let mut cmd = vec![
            binary.to_string_lossy().into_owned(),
            "--stdio".into(),
            "--workspace".into(),
            tree_arg.clone(),
        ];
        if let Some(t) = extra {
            cmd.extend(["--sandbox".to_owned(), t.to_owned()]);
        }
        round_trip(&cmd, &tree)?;
        let mut t = Vec::new();
        for _ in 0..runs {
            t.push(round_trip(&cmd, &tree)?);
        }
        row(
            &format!("start-up to first tools/list (stdio), 49,000-file tree, {tier}"),
            median(&mut t),
            "same, empty workspace",
            median(&mut a),
        );
    }
    // What a real client asks first: `initialize`, whose instructions index
    // the workspace (built beside start-up when it is asked first).
    let init = [
        binary.to_string_lossy().into_owned(),
        "--stdio".into(),
        "--workspace".into(),
    ];
    let (mut e, mut t) = (Vec::new(), Vec::new());
    for (ws, out) in [(ws.path(), &mut e), (tree.as_path(), &mut t)] {
        let mut cmd = init.to_vec();
        cmd.push(ws.to_string_lossy().into_owned());
        round_trip_with(&cmd, ws, INITIALIZE)?;
        for _ in 0..runs {
            out.push(round_trip_with(&cmd, ws, INITIALIZE)?);
        }
    }
    row(
        "start-up to first initialize answer (stdio), 49,000-file tree, the default tier",
        median(&mut t),
        "same, empty workspace",
        median(&mut e),
    );
    Ok(())
}

const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"bench\",\"version\":\"1\"}}}\n";

/// A row against the `--peer` server: B/A, how many times longer the peer takes.
fn peer_row(op: &str, ours: f64, peer: f64) {
    println!(
        "| {op} | {ours:.2} | peer server (B/A) | {peer:.2} | B/A {:.2} |",
        peer / ours
    );
}

fn row(op: &str, ours: f64, reference: &str, theirs: f64) {
    println!(
        "| {op} | {ours:.2} | {reference} | {theirs:.2} | {:.2}x |",
        ours / theirs
    );
}

fn round_trip(cmd: &[String], ws: &Path) -> Result<Duration> {
    round_trip_with(cmd, ws, TOOLS_LIST)
}

/// Start to the answer of `request` (one line, id 1).
fn round_trip_with(cmd: &[String], ws: &Path, request: &[u8]) -> Result<Duration> {
    let (prog, args) = cmd.split_first().context("empty command")?;
    let started = Instant::now();
    let mut child = Command::new(prog)
        .args(args)
        .current_dir(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {prog}"))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(request)?;
    stdin.flush()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let elapsed = started.elapsed();
    drop(stdin);
    child.wait()?;
    if !line.contains("\"id\":1") {
        bail!("{prog} did not answer: {line:.200}");
    }
    Ok(elapsed)
}

fn median(samples: &mut [Duration]) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

/// A deterministic generator (xorshift64*), so every run builds the same tree.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "omega", "value", "result", "buffer", "index", "token",
    "parse", "render", "return", "struct", "impl", "match", "config", "thread", "socket", "vector",
];

/// `target/bench-tree`: ~50,000 source-like files, a `.gitignore`d `build/`
/// with 5,000 more, and a 5 MB `big.txt`. Built once per seed.
fn generate_tree() -> Result<PathBuf> {
    let root = target_dir().join("bench-tree");
    let marker = root.join(format!(".generated-{TREE_SEED:x}-{TREE_FILES}"));
    if marker.exists() {
        return Ok(root);
    }
    let _ = std::fs::remove_dir_all(&root);
    eprintln!("generating {TREE_FILES} files under {} ...", root.display());
    let mut rng = Rng(TREE_SEED);
    let write_file = |path: PathBuf, rng: &mut Rng| -> Result<()> {
        let lines = 20 + rng.below(120);
        let mut body = String::new();
        for _ in 0..lines {
            let n = 3 + rng.below(8);
            let words: Vec<&str> = (0..n)
                .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                .collect();
            body.push_str(&words.join(" "));
            match rng.below(400) {
                0 if rng.below(10) == 0 => body.push_str(" needle_value"),
                1 if rng.below(10) == 0 => body.push_str(&format!(
                    " compute_{}({})",
                    WORDS[rng.below(20) as usize],
                    rng.below(1000)
                )),
                _ => {}
            }
            body.push('\n');
        }
        std::fs::create_dir_all(path.parent().context("parent")?)?;
        std::fs::write(path, body)?;
        Ok(())
    };
    for i in 0..TREE_FILES {
        let path = root.join(format!(
            "src/m{:02}/d{:03}/f{i:05}.rs",
            i % 50,
            (i / 50) % 200
        ));
        write_file(path, &mut rng)?;
    }
    for i in 0..5_000 {
        write_file(
            root.join(format!("build/out{:02}/g{i:04}.rs", i % 20)),
            &mut rng,
        )?;
    }
    std::fs::write(root.join(".gitignore"), "build/\n")?;
    let mut big = String::new();
    let mut n = 0u64;
    while big.len() < 5 * 1024 * 1024 {
        n += 1;
        big.push_str(&format!(
            "{n:08} {} {} {}\n",
            WORDS[rng.below(20) as usize],
            WORDS[rng.below(20) as usize],
            "x".repeat(rng.below(60) as usize)
        ));
    }
    std::fs::write(root.join("big.txt"), big)?;
    std::fs::write(&marker, b"")?;
    Ok(root)
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .context("no such status field")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("no value")?
        .parse::<u64>()?)
}

/// The server's RSS one second after its last call, against its idle RSS
/// at start: what the work of a group leaves behind (issue 21: at most
/// 20 MiB one second after a large search).
fn rss_after(client: &Client, group: &str, idle_kib: u64) -> Result<()> {
    std::thread::sleep(Duration::from_secs(1));
    let after = status_kib(client.peer.child.id(), "VmRSS:")?;
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "| server RSS 1 s after {group} (target 20 MiB) | {:.1} MiB | idle RSS at start | {:.1} MiB | {:.2}x |",
        mib(after),
        mib(idle_kib),
        after as f64 / idle_kib.max(1) as f64
    );
    Ok(())
}

/// One running server on stdio.
struct Client {
    peer: Peer,
    id: u64,
    /// The last answer's bytes (kept: large answers reuse it).
    line: Vec<u8>,
}

impl Client {
    fn start(binary: &Path, ws: &Path) -> Result<Self> {
        Self::start_with(binary, ws, &[])
    }

    fn start_with(binary: &Path, ws: &Path, extra: &[&str]) -> Result<Self> {
        Self::start_with_env(binary, ws, extra, &[])
    }

    fn start_with_env(
        binary: &Path,
        ws: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut cmd = Command::new(binary);
        cmd.args(["--stdio", "--workspace"]).arg(ws).args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let peer = Peer::spawn(&mut cmd)?;
        Ok(Self {
            peer,
            id: 0,
            line: Vec::new(),
        })
    }

    /// The `--peer` server on `ws`, after the handshake (which any server
    /// of the handshake era needs before tools/call).
    fn start_peer(template: &str, ws: &Path) -> Result<Self> {
        let words = crate::peer::template_words(template, ws)?;
        let peer = Peer::spawn(Command::new(&words[0]).args(&words[1..]).current_dir(ws))?;
        let mut client = Self {
            peer,
            id: 1,
            line: Vec::new(),
        };
        client.peer.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#)?;
        client.peer.recv()?;
        client
            .peer
            .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(client)
    }

    fn call(&mut self, tool: &str, args: Value) -> Result<(Duration, Value)> {
        self.id += 1;
        let msg = json!({"jsonrpc":"2.0","id":self.id,"method":"tools/call","params":{"name":tool,"arguments":args}});
        let started = Instant::now();
        self.peer.send(&msg.to_string())?;
        // The clock stops when the answer is read; parsing it is the
        // client's work, not the server's.
        self.peer.recv_bytes(&mut self.line)?;
        let elapsed = started.elapsed();
        let v: Value = serde_json::from_slice(&self.line)
            .with_context(|| format!("not JSON: {:.400}", String::from_utf8_lossy(&self.line)))?;
        let result = v["result"].clone();
        if result["isError"] != json!(false) {
            bail!("{tool} failed: {v:.400}");
        }
        Ok((elapsed, result["structuredContent"].clone()))
    }
}

fn timed_command(cmd: &mut Command) -> Result<(Duration, usize)> {
    let started = Instant::now();
    let out = cmd.stderr(Stdio::null()).output()?;
    let elapsed = started.elapsed();
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    Ok((elapsed, out.stdout.iter().filter(|b| **b == b'\n').count()))
}

fn file_tools(binary: &Path, tree: &Path, runs: usize, peer: Option<&str>) -> Result<()> {
    let mut client = Client::start(binary, tree)?;
    client.call("server_info", json!({}))?;
    let idle = status_kib(client.peer.child.id(), "VmRSS:")?;
    let mut other = peer.map(|p| Client::start_peer(p, tree)).transpose()?;
    if Command::new("rg").arg("--version").output().is_err() {
        bail!("the files group's floor is ripgrep: install `rg` (Debian: apt-get install ripgrep)");
    }
    let rg = |args: &[&str]| {
        let mut c = Command::new("rg");
        c.current_dir(tree).arg("--no-require-git").args(args);
        c
    };
    // Warm caches for both sides.
    client.call("list_files", json!({"max_results": 50000}))?;
    timed_command(&mut rg(&["--files"]))?;

    type Op<'a> = (&'a str, Value, Vec<&'a str>);
    let ops: Vec<Op<'_>> = vec![
        (
            "list_files (whole tree)",
            json!({"max_results": 50000}),
            vec!["--files"],
        ),
        (
            "search_text literal",
            json!({"query": "needle_value", "case_sensitive": true, "max_results": 10000}),
            vec!["-n", "needle_value"],
        ),
        (
            "search_text regex",
            json!({"query": "compute_\\w+\\(\\d+\\)", "regex": true, "case_sensitive": true, "max_results": 10000}),
            vec!["-n", "compute_\\w+\\(\\d+\\)"],
        ),
    ];
    for (name, args, rg_args) in ops {
        let tool = if name.starts_with("list") {
            "list_files"
        } else {
            "search_text"
        };
        let (mut a, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
        let mut counts = (0usize, 0usize);
        for _ in 0..runs {
            if let Some(o) = other.as_mut() {
                b.push(o.call(tool, args.clone())?.0);
            }
            let (d, s) = client.call(tool, args.clone())?;
            a.push(d);
            // The list's length (the answers carry no count beside it).
            counts.0 = ["files", "entries", "matches"]
                .iter()
                .find_map(|k| s[*k].as_array())
                .map_or(0, Vec::len);
            let (d, n) = timed_command(&mut rg(&rg_args))?;
            r.push(d);
            counts.1 = n;
        }
        row(
            &format!("{name} [{} vs {} results]", counts.0, counts.1),
            median(&mut a),
            "rg",
            median(&mut r),
        );
        if !b.is_empty() {
            peer_row(name, median(&mut a), median(&mut b));
        }
    }
    let tree_mib = dir_bytes(tree)? as f64 / (1024.0 * 1024.0);
    rss_after(
        &client,
        &format!("list_files and search_text over the tree ({tree_mib:.0} MiB)"),
        idle,
    )?;
    let stdio_ms = read_pages(&mut client, other.as_mut(), tree, runs, idle)?;
    read_pages_http(binary, tree, runs, stdio_ms)
}

/// `read_file` of a 5 MB file, following continuations with 1 MiB pages,
/// against `cat`; then the RSS this leaves.
fn read_pages(
    client: &mut Client,
    mut other: Option<&mut Client>,
    tree: &Path,
    runs: usize,
    idle: u64,
) -> Result<f64> {
    let read_all = |c: &mut Client| -> Result<(Duration, usize)> {
        let mut total = Duration::ZERO;
        let mut start = 1u64;
        let mut pages = 0;
        loop {
            let (d, s) = c.call(
                "read_file",
                json!({"path": "big.txt", "start_line": start, "max_bytes": 1_048_576}),
            )?;
            total += d;
            pages += 1;
            match s["next_start_line"].as_u64() {
                Some(n) => start = n,
                None => break,
            }
        }
        Ok((total, pages))
    };
    let (mut a, mut r, mut b) = (Vec::new(), Vec::new(), Vec::new());
    let mut twice = Vec::new();
    let mut pages = (0, 0);
    let big = tree.join("big.txt");
    for _ in 0..runs {
        let (d, n) = read_all(client)?;
        a.push(d);
        pages.0 = n;
        let (d, _) = timed_command(Command::new("cat").arg(&big))?;
        r.push(d);
        let (d, _) = timed_command(Command::new("cat").arg(&big).arg(&big))?;
        twice.push(d);
        if let Some(o) = other.as_mut() {
            let (d, n) = read_all(o)?;
            b.push(d);
            pages.1 = n;
        }
    }
    let name = "read_file 5 MB (1 MiB pages, target 1.5x)";
    let ours = median(&mut a);
    row(name, ours, "cat", median(&mut r));
    // An answer carries each page twice (its text block and
    // `structuredContent.content`): the same bytes through a pipe.
    row(
        "read_file 5 MB, against its bytes: each page is in an answer twice",
        ours,
        "cat of the file twice",
        median(&mut twice),
    );
    if !b.is_empty() {
        peer_row(
            &format!("{name} [{} vs {} pages]", pages.0, pages.1),
            ours,
            median(&mut b),
        );
    }
    rss_after(client, "the reads", idle)?;
    Ok(ours)
}

/// The same paged read of the 5 MB file over HTTP from the same binary,
/// against the stdio median just measured (issue 35: stdio no slower than
/// HTTP). Each request on a new connection, timed to its last byte.
fn read_pages_http(binary: &Path, tree: &Path, runs: usize, stdio_ms: f64) -> Result<()> {
    let (mut server, url) = crate::conformance::start_http(binary, tree, &[], &[])?;
    let headers = vec![(
        "Accept".to_owned(),
        "application/json, text/event-stream".to_owned(),
    )];
    let read_all = || -> Result<Duration> {
        let mut total = Duration::ZERO;
        let mut start = 1u64;
        loop {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "big.txt", "start_line": start, "max_bytes": 1_048_576}}}).to_string();
            let started = Instant::now();
            let raw = crate::conformance::http_post_raw(&url, &body, &headers)?;
            total += started.elapsed();
            let (status, answer) = crate::conformance::parse_response(&raw)?;
            let answer = answer.context("no JSON answer")?;
            if status != 200 || answer["result"]["isError"] != json!(false) {
                bail!("read_file over HTTP: status {status}, {answer:.300}");
            }
            match answer["result"]["structuredContent"]["next_start_line"].as_u64() {
                Some(n) => start = n,
                None => break,
            }
        }
        Ok(total)
    };
    let result = (|| -> Result<()> {
        read_all()?;
        let mut h = Vec::new();
        for _ in 0..runs {
            h.push(read_all()?);
        }
        row(
            "read_file 5 MB (1 MiB pages) over stdio, against the same over HTTP (target 1.0x)",
            stdio_ms,
            "HTTP",
            median(&mut h),
        );
        Ok(())
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// Bytes of the regular files under `dir` (symbolic links not followed).
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += dir_bytes(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}
