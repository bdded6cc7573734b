//! The exec runtime of coding-tools-mcp: a workspace-owned pool of commands,
//! with no MCP types.
//!
//! Commands belong to the [`ExecRuntime`] of the workspace, not to a request
//! or a client: any caller may poll, feed, page or kill one by its id, and no
//! transport event ends it. Each runs as `/bin/sh -c` in its own process
//! group (a session leader under a PTY), with a parent-death signal, an
//! environment built explicitly ([`build_env`]), `HOME`/`TMPDIR` in the
//! private [`RuntimeDirs`], and — in safe and trusted mode, where the kernel
//! offers it — Landlock confinement of writes to the workspace and the
//! runtime directory. An independent watchdog enforces the timeout; kills
//! signal the group, escalate to KILL and sweep survivors. stdout and stderr
//! are kept apart in [`RetainedStream`]s (a frozen head plus a rolling tail,
//! absolute offsets), so memory stays bounded whatever a command prints.
//!
//! The runtime changes nothing about the host process unless asked: a host
//! that wants the orphans of its commands re-parented to itself (and reaped
//! there) opts in with [`ExecRuntimeBuilder::subreaper`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use ctm_exec_runtime::*;
//! let ws = tempfile::tempdir().unwrap();
//! let base = tempfile::tempdir().unwrap();
//! let workspace = ctm_workspace_fs::Workspace::open(ws.path()).unwrap();
//! let dirs = RuntimeDirs::create_in(base.path()).map(std::sync::Arc::new).map_err(std::sync::Arc::new);
//! let cfg = ExecConfig::for_mode(PermissionMode::Trusted);
//! // A host that is a server of its own would also ask for `.subreaper(true)`.
//! let rt = ExecRuntime::builder(cfg).build(workspace, dirs);
//! let req = ExecRequest::new("echo hello; exit 3").with_timeout(Duration::from_secs(10));
//! let wait = WaitOptions::default().with_wait(Duration::from_secs(10));
//! let snap = rt.exec(req, wait, std::future::pending()).await.unwrap();
//! assert_eq!((snap.status, snap.exit_code, snap.stdout.text.as_str()), (Status::Exited, Some(3), "hello\n"));
//! let killed = rt.kill(&snap.command_id, KillOptions::default().with_signal(Signal::Int)).await.unwrap();
//! assert_eq!(killed.status, KillStatus::Exited);
//! # }
//! ```

#![deny(missing_docs)]

mod buffer;
mod env;
mod gitseal;
mod paths;
mod policy;
mod pool;
mod roots;
mod runtime_dirs;
mod shell;
mod signal;
mod supervisor;

// The sandbox's modules, under the names this crate has always used.
use ctm_sandbox::confine as sandbox;
use ctm_sandbox::{holder, namespace, seccomp};

pub use buffer::{RetainedStream, Slice};
pub use ctm_sandbox::BUILDER_FLAG;
pub use env::{
    EnvInherit, EnvPolicy, EnvSpec, NON_INTERACTIVE_DEFAULTS, build_env, credential_shaped,
    glob_matches, is_sensitive,
};
pub use gitseal::{NEVER_WRITABLE, SealReport};
pub use namespace::{
    ENTRY_FLAG, NamespaceSupport, SandboxConfig, TierChoice, distrust_for_programs,
    enter_if_requested, support as namespace_support,
};
pub use paths::{PathAccess, PathArg, Reach, path_arguments, privileged_executable};
pub use policy::{GateState, Gates, Permission, PermissionMode, Refusal, classify};
pub use pool::{
    DEFAULT_MAX_OUTPUT_BYTES, Delta, ExecConfig, ExecError, ExecRequest, ExecRuntime,
    ExecRuntimeBuilder, GitSealStatus, KillOptions, KillOutcome, KillStatus, OutputPage, PoolStats,
    Snapshot, Status, Stream, TierReport, WaitEnd, WaitOptions, WorkspaceWrites,
};
pub use roots::{
    SYSTEM_READ_ROOTS, Toolchains, discover as discover_toolchains, split_allow_roots,
};
pub use runtime_dirs::{RetentionBudget, RuntimeDirError, RuntimeDirs};
pub use sandbox::{DEVICES, LandlockSupport, support as landlock_support};
pub use seccomp::{REFUSED as SECCOMP_REFUSED, available as seccomp_available};
pub use shell::{CommandLine, Redirect, SimpleCommand};
pub use signal::Signal;
pub use supervisor::default_signal_dispositions;

/// Lowers the calling thread's scheduling priority to the least (nice 19;
/// what it starts inherits it): start-up work done beside serving — the
/// sandbox probes, sweeps, checks — then takes no CPU from the first
/// answers on a busy or small machine, and still runs when nothing else
/// does.
pub fn background_priority() {
    // SAFETY: setpriority on this thread's own id (Linux schedules threads).
    #[expect(unsafe_code, reason = "setpriority(2) of the calling thread")]
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}
