//! `cargo xtask ci`: what a fresh machine runs to check everything.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::{build_server, cargo, root, run_cmd, target_dir};

/// The official Python SDK version the client tests pin.
const PYTHON_SDK: &str = "mcp==2.3.0";

pub fn run(_args: &[String]) -> Result<()> {
    run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run_cmd(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run_cmd(cargo().args(["test", "--workspace", "--all-targets"]))?;
    run_cmd(cargo().args(["test", "--workspace", "--doc"]))?;
    crate::schema::run(false)?;
    let binary = build_server(false)?;
    let python = python_venv()?;
    let mut sdk = Command::new(&python);
    run_cmd(
        sdk.arg(root().join("tests/python/sdk_clients.py"))
            .arg(&binary),
    )?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}

/// Creates `target/py-venv` with the Python SDK, once.
fn python_venv() -> Result<PathBuf> {
    let venv = target_dir().join("py-venv");
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".installed-{PYTHON_SDK}"));
    if marker.exists() {
        return Ok(python);
    }
    let system = find_python()?;
    let mut mk = Command::new(&system);
    run_cmd(mk.args(["-m", "venv"]).arg(&venv))?;
    let mut pip = Command::new(&python);
    run_cmd(pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        PYTHON_SDK,
    ]))?;
    std::fs::write(&marker, b"")?;
    Ok(python)
}

fn find_python() -> Result<PathBuf> {
    for candidate in ["python3", "python"] {
        let ok = Command::new(candidate)
            .args(["-c", "import sys, venv; assert sys.version_info >= (3, 10)"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(Path::new(candidate).to_path_buf());
        }
    }
    bail!("Python 3.10+ with the venv module is needed for the SDK client tests")
}
