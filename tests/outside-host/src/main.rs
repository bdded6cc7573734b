//! A host outside the coding-tools-mcp workspace: applies a patch with
//! `ctm-patch-engine` and runs commands with `ctm-exec-runtime`, both as
//! packaged, and checks what they did. Exits non-zero on any surprise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctm_exec_runtime::{
    ExecConfig, ExecError, ExecRequest, ExecRuntime, PermissionMode, RuntimeDirs, Status,
    WaitOptions,
};
use ctm_patch_engine::{ApplyOptions, PatchEngine};
use ctm_workspace_fs::Workspace;

type Failure = Box<dyn std::error::Error>;

const PATCH: &str = "*** Begin Patch
*** Update File: app.py
@@ def main():
-    return 1
+    return 2
*** Add File: notes.txt
+patched from outside
*** End Patch
";

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Failure> {
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "ctm-outside-host-{}",
        std::process::id()
    )));
    let dir = scratch.0.join("project");
    std::fs::create_dir_all(&dir)?;
    patch(&dir)?;
    exec(&dir, &scratch.0).await?;
    println!("outside host: all checks passed");
    Ok(())
}

fn patch(dir: &Path) -> Result<(), Failure> {
    std::fs::write(dir.join("app.py"), "def main():\n    return 1\n")?;
    let engine = PatchEngine::new(Workspace::open(dir)?);
    let dry = engine.apply(PATCH, &ApplyOptions::default().with_dry_run(true))?;
    check(!dry.applied, "a dry run writes nothing")?;
    let report = engine.apply(PATCH, &ApplyOptions::default())?;
    check(report.applied && report.files.len() == 2, "both files applied")?;
    let app = std::fs::read_to_string(dir.join("app.py"))?;
    check(app == "def main():\n    return 2\n", "app.py patched")?;
    let stale = engine.apply(PATCH, &ApplyOptions::default());
    check(stale.is_err(), "the same patch again is refused")?;
    for f in &report.files {
        println!(
            "patch-engine: {} {} +{} -{}",
            f.operation.as_str(),
            f.path,
            f.lines_added,
            f.lines_removed
        );
    }
    Ok(())
}

async fn exec(dir: &Path, scratch: &Path) -> Result<(), Failure> {
    let config = ExecConfig::for_mode(PermissionMode::Trusted);
    let runtime_base = scratch.join("runtime");
    std::fs::create_dir_all(&runtime_base)?;
    let dirs = RuntimeDirs::create_in(&runtime_base)
        .map(Arc::new)
        .map_err(Arc::new);
    let runtime = ExecRuntime::builder(config).build(Workspace::open(dir)?, dirs);
    let wait = WaitOptions::default().with_wait(Duration::from_secs(30));
    let request = ExecRequest::new("echo hi; cat notes.txt").with_timeout(Duration::from_secs(60));
    let snap = runtime.exec(request, wait, std::future::pending()).await?;
    println!(
        "exec-runtime: {} exit={:?} stdout={:?}",
        snap.status.as_str(),
        snap.exit_code,
        snap.stdout.text
    );
    check(
        snap.status == Status::Exited && snap.exit_code == Some(0),
        "the command exited 0",
    )?;
    check(
        snap.stdout.text == "hi\npatched from outside\n",
        "the command's output",
    )?;
    // This host left out the `pty` feature: a terminal is refused, precisely.
    let tty = ExecRequest::new("tty").with_tty(true);
    match runtime.exec(tty, wait, std::future::pending()).await {
        Err(e @ ExecError::TtyUnavailable) => println!("exec-runtime without pty: {e}"),
        other => return Err(format!("a tty request without `pty`: {other:?}").into()),
    }
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(format!("outside host: {what}: failed").into())
    }
}
