//! Tool adapters: decode arguments, call one capability, render one envelope.

pub(crate) mod changes;
mod decode_slots;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod git;
pub(crate) mod patch;
pub(crate) mod request_permissions;
pub(crate) mod server_info;

pub use decode_slots::{MAX_CONCURRENT_DECODES, new_slots as new_decode_slots};

use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value};

use crate::args::ToolArgs;
use crate::catalog::{Tool, ToolSpec};
use crate::envelope::{ToolError, ToolSuccess};
use crate::server::Server;

pub use server_info::{annotation_override as annotation_override_json, real_annotations};

/// Runs one validated call.
pub async fn run(
    server: &Server,
    spec: &'static ToolSpec,
    args: Map<String, Value>,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let outcome = dispatch(server, spec, &args, ctx).await;
    // Catalog 0.5: a command's result names how it ended, in one word.
    if server.served().version == crate::catalog::CatalogVersion::V05
        && matches!(
            spec.tool,
            Tool::ExecCommand | Tool::WriteStdin | Tool::KillCommand
        )
        && let Ok(mut success) = outcome
    {
        if let Some(word) = operation_outcome(&success.structured) {
            success
                .structured
                .insert("operation_outcome".into(), Value::String(word.into()));
        }
        return Ok(success);
    }
    outcome
}

/// How a command result says its command ended: `exited_0`,
/// `exited_nonzero`, `signal`, `timeout` or `running` (the reference
/// 0.5.0's words).
fn operation_outcome(s: &Map<String, Value>) -> Option<&'static str> {
    s.get("command_id")?;
    Some(if s.get("timed_out") == Some(&Value::Bool(true)) {
        "timeout"
    } else if s.get("signal").is_some_and(|v| !v.is_null()) {
        "signal"
    } else {
        match s.get("exit_code").and_then(Value::as_i64) {
            Some(0) => "exited_0",
            Some(_) => "exited_nonzero",
            None => "running",
        }
    })
}

async fn dispatch(
    server: &Server,
    spec: &'static ToolSpec,
    a: &Map<String, Value>,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let ws = &server.workspace;
    fn typed<T: ToolArgs>(map: &Map<String, Value>) -> T {
        T::from_map(map)
    }
    match spec.tool {
        Tool::ServerInfo => Ok(server_info::run(server, &typed(a))),
        Tool::RequestPermissions => request_permissions::run(server, &typed(a), a),
        Tool::ReadFile => {
            let revision = server.served().version == crate::catalog::CatalogVersion::V05;
            files::read_file(ws, typed(a), revision).await
        }
        Tool::ListDir => files::list_dir(ws, typed(a)).await,
        Tool::ListFiles => files::list_files(ws, typed(a)).await,
        Tool::SearchText => files::search_text(ws, typed(a)).await,
        Tool::ViewImage => files::view_image(ws, &server.image_decodes, typed(a), ctx).await,
        Tool::ApplyPatch => patch::apply_patch(server, typed(a), a, ctx).await,
        Tool::ApplyChanges => changes::apply_changes(server, typed(a), a, ctx).await,
        Tool::ExecCommand => {
            let mut args: crate::catalog::ExecCommandArgs = typed(a);
            // The served catalog's default lifetime (catalog 0.5: 300 s).
            if !a.contains_key("timeout_ms")
                && let Some(d) = crate::catalog::int_default(spec, "timeout_ms")
            {
                args.timeout_ms = d;
            }
            exec::exec_command(server, &args, ctx).await
        }
        Tool::WriteStdin => exec::write_stdin(server, &typed(a), ctx).await,
        Tool::KillCommand => exec::kill_command(server, &typed(a), ctx).await,
        Tool::ReadOutput => exec::read_output(server, typed(a)).await,
        Tool::CheckExecEnvironment => Ok(exec::check_exec_environment(server, &typed(a))),
        Tool::GitStatus => git::git_status(server, typed(a)).await,
        Tool::GitDiff => {
            // Catalog 0.5's `include_untracked` (true unless given false).
            let untracked = a
                .get("include_untracked")
                .and_then(Value::as_bool)
                .or_else(|| crate::catalog::bool_default(spec, "include_untracked"));
            git::git_diff(server, typed(a), untracked).await
        }
        Tool::GitLog => git::git_log(server, typed(a)).await,
        Tool::GitShow => git::git_show(server, typed(a)).await,
        Tool::GitBlame => git::git_blame(server, typed(a)).await,
    }
}
