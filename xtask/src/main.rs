//! `cargo xtask`: the project's automation, in Rust rather than shell.
//!
//! * `ci` — everything CI runs: formatting, clippy, every test (the tidy
//!   test and the `docs/tools.md` drift check among them), cargo-deny, the
//!   official Python and TypeScript SDKs and the official conformance suite against the real binary (installed under
//!   `target/`), the contract vectors, the coding loop and a 10 s load run.
//! * `schema [--write]` — runs the test that renders `docs/tools.md` from the
//!   binary's `tools/list` and fails when the committed file differs (part
//!   of plain `cargo test`); `--write` rewrites the file.
//! * `bench [--runs N] [--peer CMD] [--only GROUP]` — every measured
//!   operation against its reference (cat, rg, git, a bare spawn) and, with
//!   `--peer`, against another server, as ratios measured in the same run.
//! * `conformance [--server-cmd 'CMD {ws}' | --url URL]` — the contract
//!   vectors of `tests/conformance/vectors.json` against any server.
//! * `loop` — the coding-loop harness: a whole agent loop through the real
//!   binary on a fixture project.
//! * `load [--secs N] [--clients N]` — N HTTP clients mixing every kind of
//!   tool against one server: requests, errors, p99, lost patches, peak RSS.
//! * `tokens [--peer CMD] [--peer05 CMD] [--budgets]` — the bytes the model reads (catalog,
//!   instructions, every result's content text and structuredContent) over
//!   one scripted coding session through the real binary, with information
//!   parity checked per call; with `--peer`, the same session against
//!   another server and the ratios; `--budgets` fails when our run
//!   exceeds the budgets of issue 19.
//! * `proxy` — the server behind nginx (installed with `apt-get` when
//!   missing): two backends on two routes with trusted forwarded headers,
//!   the official Python SDK client through the proxy in every era, and
//!   forged headers checked with and without the trust flag.
//! * `clients` — Claude Code (installed under `target/claude-code`) with a
//!   scripted model on loopback: which of our tools its model is given and
//!   what each result hands it (`tests/clients/claude_code.py`).
//! * `package` — `cargo package` of every publishable crate (each built
//!   from its `.crate` file), `cargo publish --dry-run`, `cargo install
//!   --locked --path crates/server` with its `--version`, and the outside host
//!   of `tests/outside-host` built and run against the packaged
//!   `ctm-patch-engine` and `ctm-exec-runtime`, with their packaged examples.
//! * `release-check` — cargo-semver-checks (installed under `target/tools`)
//!   of every publishable crate against the last release (`release/baseline`:
//!   its tag, or its commit in a clone without tags), and a deliberate break
//!   it must catch.
//! * `features` — each documented feature combination of `ctm-exec-runtime`
//!   and `ctm-workspace-fs` besides the defaults: clippy and tests.
//! * `fuzz [--secs N] [--only T1,T2]` — each cargo-fuzz target of `fuzz/` for
//!   N seconds; crashes are minimized into `fuzz/regressions/`.

#![expect(
    clippy::print_stdout,
    clippy::disallowed_methods,
    reason = "xtask is a developer tool: it prints reports, drives processes and reads files"
)]

mod bench;
mod ci;
mod clients;
mod conformance;
mod fuzz;
mod harness;
mod load;
mod peer;
mod proxy;
mod release;
mod schema;
mod tokens;
mod tokens_edit;

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        bail!(
            "usage: cargo xtask <ci | schema [--write] | bench [--runs N] [--peer CMD] | conformance [--server-cmd TEMPLATE | --url URL] | loop | load [--secs N] | tokens [--peer CMD] [--peer05 CMD] [--budgets] | fuzz [--secs N] [--only T] | proxy | metrics | clients | package | release-check | features>"
        );
    };
    match cmd.as_str() {
        "ci" => ci::run(rest),
        "schema" => schema::run(rest.iter().any(|a| a == "--write")),
        "bench" => bench::run(rest),
        "conformance" => conformance::run(rest),
        "loop" => harness::run(rest),
        "load" => load::run(rest),
        "fuzz" => fuzz::run(rest),
        "tokens" => tokens::run(rest),
        "proxy" => proxy::run(rest),
        "metrics" => ci::metrics(rest),
        "clients" => clients::run(rest),
        "package" => release::package(rest),
        "release-check" => release::release_check(rest),
        "features" => release::features(rest),
        other => bail!("unknown xtask command: {other}"),
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// Announces a phase before it starts, so a long silent one is not taken
/// for a hang.
pub fn phase(what: &str) {
    eprintln!("\nxtask: {what}");
}

/// Runs a command in the root, echoing it, and fails when it fails.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status = plain_output(cmd)
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// `cargo` with the same toolchain that runs xtask.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    plain_output(&mut c);
    c
}

/// Whether xtask's output goes to a person (a terminal) rather than a log.
pub fn to_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// When the output goes to a log, asks the tool for no colours (cargo and
/// cargo-deny read `CARGO_TERM_COLOR`; pip, npm and most others `NO_COLOR`).
pub fn plain_output(cmd: &mut Command) -> &mut Command {
    if !to_terminal() {
        cmd.env("NO_COLOR", "1").env("CARGO_TERM_COLOR", "never");
    }
    cmd
}

/// `text` without ANSI escape sequences (for tools that colour regardless).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
        } else if chars.next() == Some('[') {
            // A control sequence ends at its final byte, '@' to '~'.
            for f in chars.by_ref() {
                if ('@'..='~').contains(&f) {
                    break;
                }
            }
        }
    }
    out
}

/// Builds the server binary and returns its path.
pub fn build_server(release: bool) -> Result<PathBuf> {
    let mut c = cargo();
    c.args(["build", "--quiet", "-p", "coding-tools-mcp"]);
    if release {
        c.arg("--release");
    }
    run_cmd(&mut c)?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir().join(profile).join("coding-tools-mcp"))
}

/// The cargo target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}
