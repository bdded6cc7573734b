//! Tool adapters: decode arguments, call one capability, render one envelope.

mod decode_slots;
mod exec;
mod files;
mod git;
mod patch;
mod request_permissions;
mod server_info;

pub use decode_slots::{MAX_CONCURRENT_DECODES, new_slots as new_decode_slots};

use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value};

use crate::args::Args;
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
    let ws = &server.workspace;
    let a = Args::new(spec, args);
    match spec.tool {
        Tool::ServerInfo => Ok(server_info::run(server)),
        Tool::RequestPermissions => request_permissions::run(server, a.map()),
        Tool::ReadFile => files::read_file(ws, &a).await,
        Tool::ListDir => files::list_dir(ws, &a).await,
        Tool::ListFiles => files::list_files(ws, &a).await,
        Tool::SearchText => files::search_text(ws, &a).await,
        Tool::ViewImage => files::view_image(ws, &server.image_decodes, &a, ctx).await,
        Tool::ApplyPatch => patch::apply_patch(&server.patch, &a, ctx).await,
        Tool::ExecCommand => exec::exec_command(server, &a, ctx).await,
        Tool::WriteStdin => exec::write_stdin(server, &a, ctx).await,
        Tool::KillCommand => exec::kill_command(server, &a, ctx).await,
        Tool::ReadOutput => exec::read_output(server, &a).await,
        Tool::CheckExecEnvironment => Ok(exec::check_exec_environment(server)),
        Tool::GitStatus => git::git_status(server, &a).await,
        Tool::GitDiff => git::git_diff(server, &a).await,
        Tool::GitLog => git::git_log(server, &a).await,
        Tool::GitShow => git::git_show(server, &a).await,
        Tool::GitBlame => git::git_blame(server, &a).await,
    }
}
