mod features_off;
mod scenarios;

use std::sync::Arc;
use std::time::Duration;

use ctm_exec_runtime::*;

pub struct Fixture {
    pub ws: tempfile::TempDir,
    pub base: tempfile::TempDir,
    pub rt: ExecRuntime,
}

pub fn fixture(mode: PermissionMode) -> Fixture {
    fixture_with(mode, RetentionBudget::default())
}

pub fn fixture_with(mode: PermissionMode, budget: RetentionBudget) -> Fixture {
    let ws = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let workspace = ctm_workspace_fs::Workspace::open(ws.path()).unwrap();
    let dirs = RuntimeDirs::create_in(base.path())
        .map(Arc::new)
        .map_err(Arc::new);
    let cfg = ExecConfig {
        budget,
        ..ExecConfig::for_mode(mode)
    };
    // As the server runs it: orphans the supervisor did not reap are
    // re-parented to the test process.
    let rt = ExecRuntime::builder(cfg)
        .subreaper(true)
        .build(workspace, dirs);
    Fixture { ws, base, rt }
}

pub fn req(cmd: &str) -> ExecRequest {
    ExecRequest::new(cmd).with_timeout(Duration::from_secs(60))
}

/// Wait at most `wait`, answer with at most `max` bytes per stream.
pub fn wait_opts(wait: Duration, max: usize) -> WaitOptions {
    WaitOptions::default()
        .with_wait(wait)
        .with_max_output_bytes(max)
}

/// Send `signal`, wait `wait`, KILL, wait `kill_wait`.
pub fn kill_opts(signal: Signal, wait: Duration, kill_wait: Duration, max: usize) -> KillOptions {
    KillOptions::default()
        .with_signal(signal)
        .with_wait(wait)
        .with_kill_wait(kill_wait)
        .with_max_output_bytes(max)
}

pub async fn run(f: &Fixture, r: ExecRequest, wait: Duration) -> Snapshot {
    f.rt.exec(r, wait_opts(wait, 1 << 20), std::future::pending())
        .await
        .unwrap()
}

/// Whether any process of group `pgid` is alive (zombies excluded).
pub fn group_alive(pgid: &str) -> bool {
    group_size(pgid) > 0
}

/// Processes of group `pgid` that are not zombies.
pub fn group_size(pgid: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid pgrp ...
            let after = stat.rsplit_once(") ").map(|x| x.1).unwrap_or("");
            let fields: Vec<&str> = after.split_whitespace().collect();
            fields.len() > 2 && fields[2] == pgid && fields[0] != "Z"
        })
        .count()
}
