//! `cargo xtask load [--secs N] [--clients N]`: N clients over HTTP mixing
//! every kind of tool for a while against one server. Each client patches
//! its own counter file, so a lost or doubled patch shows as a wrong count.
//! Prints requests, errors, p50/p99 and the server's peak RSS; fails on any
//! error or lost update.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::build_server;
use crate::conformance::{http_post_raw, parse_response, start_http};

fn call(url: &str, tool: &str, args: Value) -> Result<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let headers = vec![(
        "Accept".to_owned(),
        "application/json, text/event-stream".to_owned(),
    )];
    let (status, answer) = parse_response(&http_post_raw(url, &body.to_string(), &headers)?)?;
    let answer = answer.context("no JSON answer")?;
    if status != 200 || answer["result"]["isError"] != false {
        bail!("{tool}: status {status}: {answer:.300}");
    }
    Ok(answer["result"]["structuredContent"].clone())
}

fn setup(ws: &Path, clients: usize) -> Result<()> {
    std::fs::create_dir_all(ws.join("src"))?;
    for i in 0..200 {
        std::fs::write(
            ws.join(format!("src/m{i:03}.rs")),
            format!("pub fn f{i}() -> u32 {{ {i} }}\n// needle {i}\n"),
        )?;
    }
    for c in 0..clients {
        std::fs::write(ws.join(format!("counter{c}.txt")), "count 0\n")?;
    }
    let git = |args: &[&str]| -> Result<()> {
        let ok = std::process::Command::new("git")
            .current_dir(ws)
            .args(["-c", "user.name=load", "-c", "user.email=load@example.com"])
            .args(args)
            .status()?
            .success();
        if !ok {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "load fixture"])
}

fn peak_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("no value")?
        .parse()?)
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut secs, mut clients) = (60u64, 16usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => secs = it.next().context("--secs N")?.parse()?,
            "--clients" => clients = it.next().context("--clients N")?.parse()?,
            other => bail!("unknown load argument: {other}"),
        }
    }
    let binary = build_server(false)?;
    let ws = tempfile::tempdir()?;
    setup(ws.path(), clients)?;
    let (mut server, url) = start_http(&binary, ws.path(), &["--permission-mode", "trusted"], &[])?;
    let pid = server.id();
    let until = Instant::now() + Duration::from_secs(secs);
    let result = std::thread::scope(|scope| -> Result<(Vec<Duration>, usize)> {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                let url = url.clone();
                scope.spawn(move || -> Result<(Vec<Duration>, usize)> {
                    let mut times = Vec::new();
                    let mut patches = 0usize;
                    let mut k = 0usize;
                    while Instant::now() < until {
                        let started = Instant::now();
                        match k % 7 {
                            0 => {
                                call(&url, "read_file", json!({"path": format!("src/m{:03}.rs", k % 200)}))?;
                            }
                            1 => {
                                let s = call(&url, "search_text", json!({"query": "needle 1", "max_results": 500}))?;
                                if s["match_count"].as_u64().unwrap_or(0) == 0 {
                                    bail!("search found nothing: {s}");
                                }
                            }
                            2 => {
                                call(&url, "list_files", json!({"path": "src"}))?;
                            }
                            3 => {
                                let patch = format!(
                                    "*** Begin Patch\n*** Update File: counter{c}.txt\n@@\n-count {patches}\n+count {}\n*** End Patch\n",
                                    patches + 1
                                );
                                call(&url, "apply_patch", json!({"patch": patch}))?;
                                patches += 1;
                            }
                            4 => {
                                let s = call(&url, "exec_command", json!({"cmd": format!("echo client{c}")}))?;
                                if s["stdout"] != format!("client{c}\n") {
                                    bail!("exec output: {s}");
                                }
                            }
                            5 => {
                                call(&url, "git_status", json!({}))?;
                            }
                            _ => {
                                call(&url, "git_log", json!({"max_count": 5}))?;
                            }
                        }
                        times.push(started.elapsed());
                        k += 1;
                    }
                    Ok((times, patches))
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut patches_total = 0;
        for (c, w) in workers.into_iter().enumerate() {
            let (times, patches) = w
                .join()
                .map_err(|_| anyhow::anyhow!("client {c} panicked"))??;
            let on_disk = std::fs::read_to_string(ws.path().join(format!("counter{c}.txt")))?;
            if on_disk != format!("count {patches}\n") {
                bail!("client {c}: {patches} patches applied but the file says {on_disk:?}");
            }
            patches_total += patches;
            all.extend(times);
        }
        Ok((all, patches_total))
    });
    let rss = peak_rss_kib(pid);
    let _ = server.kill();
    let _ = server.wait();
    let (mut times, patches) = result?;
    times.sort_unstable();
    let pct =
        |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    println!(
        "load: {clients} clients x {secs} s over HTTP: {} requests, 0 errors, {patches} patches none lost, p50 {:.2} ms, p99 {:.2} ms, server peak RSS {:.1} MiB",
        times.len(),
        pct(0.5),
        pct(0.99),
        rss? as f64 / 1024.0
    );
    Ok(())
}
