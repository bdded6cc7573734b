//! `cargo xtask fuzz [--secs N] [--only T1,T2]`: runs each cargo-fuzz target
//! of `fuzz/` for N seconds (default 600) and reports executions and crashes.
//!
//! Toolchain choice: the project pins one stable toolchain and CI machines
//! have no other, so cargo-fuzz runs on it with `RUSTC_BOOTSTRAP=1`, which
//! lets stable rustc take the `-Z` flags cargo-fuzz passes (sanitizer
//! coverage and AddressSanitizer; the sanitizer runtimes ship with stable).
//!
//! The growing corpus lives in `target/fuzz/runs/corpus/<target>` (not committed);
//! the committed seeds in `fuzz/seeds/<target>` are read too. A crash is
//! minimized by libFuzzer (`-minimize_crash`) and copied to
//! `fuzz/regressions/<target>/`, which the `ctm-fuzz-checks` replay test runs
//! in every CI, and the command fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::ci::cargo_tool;
use crate::{root, target_dir};

const CARGO_FUZZ: &str = "0.13.2";

/// The targets, in `fuzz/Cargo.toml` order.
const TARGETS: &[&str] = &[
    "jsonrpc_eras",
    "patch_plan",
    "tool_arguments",
    "mcp_name",
    "shell_lexer",
];

pub fn run(args: &[String]) -> Result<()> {
    let mut secs: u64 = 600;
    let mut only: Option<Vec<String>> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--secs" => secs = it.next().context("--secs needs a number")?.parse()?,
            "--only" => {
                only = Some(
                    it.next()
                        .context("--only needs target names")?
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                );
            }
            other => bail!("unknown fuzz argument {other} (--secs N, --only T1,T2)"),
        }
    }
    let targets: Vec<&str> = match &only {
        None => TARGETS.to_vec(),
        Some(names) => {
            for n in names {
                if !TARGETS.contains(&n.as_str()) {
                    bail!("no fuzz target {n}; targets: {}", TARGETS.join(", "));
                }
            }
            TARGETS
                .iter()
                .copied()
                .filter(|t| names.iter().any(|n| n == t))
                .collect()
        }
    };
    let cargo_fuzz = cargo_tool("cargo-fuzz", CARGO_FUZZ)?;
    let build = target_dir().join("fuzz");
    let out = build.join("runs");
    // Build every target once, then run the binaries: editing the sources
    // during a long run does not start a second build.
    let status = fuzz_command(&cargo_fuzz, &build)
        .arg("build")
        .status()
        .context("cannot run cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed: {status}");
    }
    let bin_dir = build.join("x86_64-unknown-linux-gnu/release");
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for target in targets {
        let corpus = out.join("corpus").join(target);
        let artifacts = out.join("artifacts").join(target);
        std::fs::create_dir_all(&corpus)?;
        std::fs::create_dir_all(&artifacts)?;
        let seeds = root().join("fuzz/seeds").join(target);
        eprintln!("fuzzing {target} for {secs} s");
        let output = Command::new(bin_dir.join(target))
            .arg(&corpus)
            .arg(&seeds)
            .arg(format!("-max_total_time={secs}"))
            .arg("-print_final_stats=1")
            .arg("-max_len=65536")
            .arg("-timeout=10")
            .arg("-rss_limit_mb=4096")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .output()
            .with_context(|| format!("cannot run the {target} fuzzer"))?;
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        std::fs::write(out.join(format!("{target}.log")), log.as_bytes())?;
        let execs = stat(&log, "stat::number_of_executed_units:");
        let corpus_size = std::fs::read_dir(&corpus)?.count();
        let crashes = crash_files(&artifacts)?;
        if !output.status.success() || !crashes.is_empty() {
            for crash in &crashes {
                let kept = keep_regression(&bin_dir.join(target), target, crash)?;
                eprintln!("{target}: crash kept as {}", kept.display());
            }
            if crashes.is_empty() {
                eprintln!("{log}");
            }
            failed.push(target);
        }
        rows.push(format!(
            "| {target} | {secs} | {} | {corpus_size} | {} |",
            execs.map_or("?".to_owned(), |n| n.to_string()),
            crashes.len()
        ));
    }
    println!("| target | seconds | executions | corpus files | crashes |");
    println!("|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    if !failed.is_empty() {
        bail!(
            "fuzz findings in {} (logs in {}); fix them, then `cargo test -p ctm-fuzz-checks` replays them",
            failed.join(", "),
            out.display()
        );
    }
    Ok(())
}

fn fuzz_command(cargo_fuzz: &Path, build: &Path) -> Command {
    let mut cmd = Command::new(cargo_fuzz);
    cmd.arg("fuzz")
        .current_dir(root().join("fuzz"))
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_TARGET_DIR", build);
    cmd
}

fn stat(log: &str, key: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

fn crash_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if ["crash-", "oom-", "timeout-", "leak-"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Minimizes `crash` with libFuzzer (falling back to it as found) and
/// copies it into `fuzz/regressions/<target>/`.
fn keep_regression(fuzzer: &Path, target: &str, crash: &Path) -> Result<PathBuf> {
    let name = crash.file_name().unwrap_or_default().to_string_lossy();
    let minimized = crash.with_file_name(format!("minimized-from-{name}"));
    let _ = Command::new(fuzzer)
        .arg("-minimize_crash=1")
        .arg("-runs=2000")
        .arg(format!("-exact_artifact_path={}", minimized.display()))
        .arg(crash)
        .output();
    let source = if minimized.exists() {
        minimized
    } else {
        crash.to_path_buf()
    };
    let dir = root().join("fuzz/regressions").join(target);
    std::fs::create_dir_all(&dir)?;
    let kept = dir.join(name.as_ref());
    std::fs::copy(&source, &kept)?;
    std::fs::remove_file(crash)?;
    Ok(kept)
}
