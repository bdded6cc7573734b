//! `cargo xtask clients`: what real clients hand their model of our tools,
//! watched with a scripted model on loopback (issue "Fitted to the clients
//! people use"). Claude Code (the npm package, its Linux x64 binary) is
//! installed under `target/claude-code` once; `tests/clients/claude_code.py`
//! plays the Anthropic Messages API, runs `claude -p` with our debug binary
//! as its only MCP server and checks what the model was given. Nothing
//! leaves the machine.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::{build_server, phase, root, run_cmd, target_dir};

/// The Claude Code release the checks are pinned to.
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.332";

pub fn run(_args: &[String]) -> Result<()> {
    let claude = claude_code()?;
    let binary = build_server(false)?;
    let python = crate::ci::python_venv()?;
    phase(
        "Claude Code with a scripted model: which tools are loaded, what each result hands the model",
    );
    let report = target_dir().join("clients-claude-code.json");
    run_cmd(
        Command::new(python)
            .arg(root().join("tests/clients/claude_code.py"))
            .arg(&claude)
            .arg(&binary)
            .arg(&report),
    )
}

/// The Claude Code binary, installed from the npm registry into
/// `target/claude-code` when missing.
fn claude_code() -> Result<PathBuf> {
    let dir = target_dir().join("claude-code");
    let bin = dir.join("node_modules/@anthropic-ai/claude-code-linux-x64/claude");
    let marker = dir.join(format!(".installed-{}", CLAUDE_CODE.replace('/', "_")));
    if marker.exists() && bin.exists() {
        return Ok(bin);
    }
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        bail!("the Claude Code checks run on x86_64 Linux only");
    }
    std::fs::create_dir_all(&dir)?;
    phase(&format!(
        "installing {CLAUDE_CODE} into target/claude-code (npm, from the npm registry; once)"
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
            .arg(CLAUDE_CODE),
    )?;
    if !bin.exists() {
        bail!("npm installed no Claude Code binary at {}", bin.display());
    }
    std::fs::write(&marker, b"")?;
    Ok(bin)
}
