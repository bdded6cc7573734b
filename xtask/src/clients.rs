//! `cargo xtask clients`: what real clients hand their model of our tools,
//! watched with a scripted model on loopback (issue "Fitted to the clients
//! people use"). Claude Code, Gemini CLI and Codex (npm packages, pinned;
//! Claude Code's and Codex's Linux x64 binaries) are installed under
//! `target/clients` once; each script of `tests/clients/` plays its model
//! API, runs the client non-interactively with our debug binary as its only
//! MCP server and checks what the model was given. Nothing leaves the
//! machine (the Gemini and Codex scripts run in a network namespace with
//! loopback only where `unshare -rn` works).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::{build_server, phase, root, run_cmd, target_dir};

/// The client releases the checks are pinned to.
const CLIENT_PACKAGES: [&str; 3] = [
    "@anthropic-ai/claude-code@2.1.332",
    "@google/gemini-cli@0.61.0",
    "@openai/codex@0.171.0",
];

pub fn run(_args: &[String]) -> Result<()> {
    let dir = install()?;
    let binary = build_server(false)?;
    let python = crate::ci::python_venv()?;
    let clients: [(&str, &str, PathBuf); 3] = [
        (
            "Claude Code",
            "claude_code.py",
            dir.join("node_modules/@anthropic-ai/claude-code-linux-x64/claude"),
        ),
        (
            "Gemini CLI",
            "gemini_cli.py",
            dir.join("node_modules/.bin/gemini"),
        ),
        (
            "Codex",
            "codex.py",
            dir.join(
                "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
            ),
        ),
    ];
    for (name, script, client) in &clients {
        phase(&format!(
            "{name} with a scripted model: which tools its model is given, what each result hands it"
        ));
        let report = target_dir().join(format!("clients-{}.json", script.trim_end_matches(".py")));
        run_cmd(
            Command::new(&python)
                .arg(root().join("tests/clients").join(script))
                .arg(client)
                .arg(&binary)
                .arg(&report),
        )?;
    }
    for (name, script, client) in &clients {
        phase(&format!(
            "{name} again with --catalog 0.5 (issue 34): apply_changes offered, the read's revision reaches the model"
        ));
        let report = target_dir().join(format!(
            "clients-{}-catalog-0.5.json",
            script.trim_end_matches(".py")
        ));
        run_cmd(
            Command::new(&python)
                .arg(root().join("tests/clients").join(script))
                .arg(client)
                .arg(&binary)
                .arg(&report)
                .env("CTM_SERVER_ARGS", "--catalog 0.5"),
        )?;
    }
    Ok(())
}

/// The clients, installed from the npm registry into `target/clients`
/// when missing (install scripts are not run: the platform binaries come
/// as optional dependencies).
fn install() -> Result<PathBuf> {
    let dir = target_dir().join("clients");
    let marker = dir.join(format!(
        ".installed-{}",
        CLIENT_PACKAGES.join("+").replace('/', "_")
    ));
    if marker.exists() {
        return Ok(dir);
    }
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        bail!("the client checks run on x86_64 Linux only");
    }
    std::fs::create_dir_all(&dir)?;
    phase(&format!(
        "installing {} into target/clients (npm, from the npm registry; once)",
        CLIENT_PACKAGES.join(", ")
    ));
    run_cmd(
        Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--ignore-scripts",
                "--prefix",
            ])
            .arg(&dir)
            .args(CLIENT_PACKAGES),
    )?;
    for p in [
        "node_modules/@anthropic-ai/claude-code-linux-x64/claude",
        "node_modules/.bin/gemini",
        "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
    ] {
        if !Path::new(&dir.join(p)).exists() {
            bail!("npm installed no {p} in {}", dir.display());
        }
    }
    std::fs::write(&marker, b"")?;
    Ok(dir)
}
