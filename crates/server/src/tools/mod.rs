//! Tool adapters: decode arguments, call one capability, render one envelope.

mod decode_slots;
mod exec;
mod files;
mod git;
mod patch;
mod request_permissions;
mod server_info;

pub use decode_slots::{MAX_CONCURRENT_DECODES, new_slots as new_decode_slots};
pub use files::rfc3339;

use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::catalog::ToolSpec;
use crate::envelope::{ErrorCode, ToolError, ToolSuccess};
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
    match spec.name {
        "server_info" => Ok(server_info::run(server)),
        "request_permissions" => request_permissions::run(server, a.map()),
        "read_file" => files::read_file(ws, &a).await,
        "list_dir" => files::list_dir(ws, &a).await,
        "list_files" => files::list_files(ws, &a).await,
        "search_text" => files::search_text(ws, &a).await,
        "view_image" => files::view_image(ws, &server.image_decodes, &a, ctx).await,
        "apply_patch" => patch::apply_patch(&server.patch, &a, ctx).await,
        "exec_command" => exec::exec_command(server, &a, ctx).await,
        "write_stdin" => exec::write_stdin(server, &a, ctx).await,
        "kill_command" => exec::kill_command(server, &a, ctx).await,
        "read_output" => exec::read_output(server, &a).await,
        "check_exec_environment" => Ok(exec::check_exec_environment(server)),
        "git_status" => git::git_status(server, &a).await,
        "git_diff" => git::git_diff(server, &a).await,
        "git_log" => git::git_log(server, &a).await,
        "git_show" => git::git_show(server, &a).await,
        "git_blame" => git::git_blame(server, &a).await,
        other => Err(no_adapter(other)),
    }
}

/// A catalog tool without an adapter: a server fault, never a user error.
fn no_adapter(tool: &str) -> ToolError {
    ToolError::new(
        ErrorCode::InternalError,
        format!("{tool} has no adapter in this server"),
        json!({ "tool": tool, "reason": "no_adapter" }),
        "This is a server defect; report it.",
    )
}
