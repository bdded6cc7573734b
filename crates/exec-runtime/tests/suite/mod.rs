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
        .map_err(|e| e.to_string());
    let cfg = ExecConfig {
        gates: Gates::for_mode(mode, false),
        inherit: EnvInherit::Core,
        env_policy: EnvPolicy::default(),
        budget,
        allow_roots: Vec::new(),
        sandbox: SandboxConfig::default(),
    };
    let rt = ExecRuntime::new(cfg, workspace, dirs);
    Fixture { ws, base, rt }
}

pub fn req(cmd: &str) -> ExecRequest {
    ExecRequest {
        cmd: cmd.into(),
        workdir: ".".into(),
        timeout: Duration::from_secs(60),
        ..Default::default()
    }
}

pub async fn run(f: &Fixture, r: ExecRequest, wait: Duration) -> Snapshot {
    f.rt.exec(r, wait, std::future::pending(), 1 << 20)
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
