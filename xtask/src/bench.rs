//! `cargo xtask bench`: numbers measured side by side in one run.
//!
//! Start-up to the first `tools/list` answer over stdio: spawn the server,
//! write one `tools/list` line, read the answer line. The reference is the
//! same round trip through `cat` (spawn, write a line, read it back): the
//! floor any stdio server pays. With `--peer 'CMD {ws}'`, another server runs
//! the same workload in alternation (A B A B) and B/A is reported.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::build_server;

const TOOLS_LIST: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}\n";

pub fn run(args: &[String]) -> Result<()> {
    let mut runs = 30usize;
    let mut peer: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs N")?.parse()?,
            "--peer" => peer = Some(it.next().context("--peer CMD")?.clone()),
            other => bail!("unknown bench argument: {other}"),
        }
    }
    let binary = build_server(true)?;
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
    let peer_cmd: Option<Vec<String>> = peer.map(|p| {
        p.replace("{ws}", &ws_arg)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    });
    // Warm the page cache once for each.
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
    let (am, ap) = stats(&mut a);
    let (rm, rp) = stats(&mut r);
    println!(
        "operation: start-up to first tools/list answer over stdio ({runs} runs each, alternating)"
    );
    println!("| subject | median ms | p90 ms | ratio to reference (median) |");
    println!("|---|---|---|---|");
    println!(
        "| coding-tools-mcp | {am:.2} | {ap:.2} | {:.2}x of cat |",
        am / rm
    );
    println!("| cat round trip (reference) | {rm:.2} | {rp:.2} | 1.00x |");
    if !b.is_empty() {
        let (bm, bp) = stats(&mut b);
        println!(
            "| peer | {bm:.2} | {bp:.2} | {:.2}x of cat; peer/ours = {:.2} |",
            bm / rm,
            bm / am
        );
    }
    Ok(())
}

fn round_trip(cmd: &[String], ws: &Path) -> Result<Duration> {
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
    stdin.write_all(TOOLS_LIST)?;
    stdin.flush()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let elapsed = started.elapsed();
    drop(stdin);
    child.wait()?;
    if !line.contains("\"id\":1") {
        bail!("{prog} did not answer tools/list: {line:.200}");
    }
    Ok(elapsed)
}

fn stats(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(samples[samples.len() / 2]);
    let p90 = ms(samples[(samples.len() * 9 / 10).min(samples.len() - 1)]);
    (median, p90)
}
