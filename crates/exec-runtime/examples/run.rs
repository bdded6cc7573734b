//! Embedding the exec runtime in another host: run one command in a
//! directory under the trusted-mode policy, poll it until it ends, and print
//! its output and exit code.
//!
//! ```sh
//! cargo run -p ctm-exec-runtime --example run -- DIR 'COMMAND'
//! ```
//!
//! The command runs as `/bin/sh -c` in its own process group, with the core
//! environment, a private `HOME`/`TMPDIR`, Landlock where the kernel offers
//! it, and a 60-second watchdog. The example exits with the command's code.
//! Each answer carries at most 1 MiB per stream; beyond that the middle is
//! marked as left out (a host pages it with `ExecRuntime::read_output`).

#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line host: it prints the command's output"
)]

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ctm_exec_runtime::{
    ExecConfig, ExecRequest, ExecRuntime, PermissionMode, RuntimeDirs, Status, WaitOptions,
};
use ctm_workspace_fs::Workspace;

const MAX_OUTPUT: usize = 1 << 20;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(cmd)) = (args.first(), args.get(1)) else {
        eprintln!("usage: run DIR 'COMMAND'");
        return ExitCode::from(2);
    };
    let root = std::path::Path::new(dir);
    let workspace = match Workspace::open(root) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cannot open {dir}: {e}");
            return ExitCode::from(2);
        }
    };
    let config = ExecConfig::for_mode(PermissionMode::Trusted);
    // Private HOME/TMPDIR for the commands, removed when the runtime drops.
    let dirs = RuntimeDirs::create(root, None)
        .map(Arc::new)
        .map_err(Arc::new);
    // This program runs nothing else: the orphans of its commands may be
    // re-parented to it (and reaped here).
    let runtime = ExecRuntime::builder(config)
        .subreaper(true)
        .build(workspace, dirs);
    let request = ExecRequest::new(cmd.as_str()).with_timeout(Duration::from_secs(60));
    let wait = WaitOptions::default()
        .with_wait(Duration::from_secs(2))
        .with_max_output_bytes(MAX_OUTPUT);
    let never = std::future::pending::<()>;
    let mut snap = match runtime.exec(request, wait, never()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("refused: {e}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        print!("{}", snap.stdout.text);
        eprint!("{}", snap.stderr.text);
        if snap.status != Status::Running {
            break;
        }
        // Still running: poll with no input; each answer carries only new output.
        snap = match runtime.poll(&snap.command_id, "", wait, never()).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("poll failed: {e}");
                return ExitCode::FAILURE;
            }
        };
    }
    let code = snap.exit_code.unwrap_or(128);
    eprintln!(
        "[{} exit={code}{}{}]",
        snap.status.as_str(),
        snap.signal
            .map(|s| format!(" signal={s}"))
            .unwrap_or_default(),
        if snap.timed_out { " timed out" } else { "" }
    );
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
