//! Tool adapters: decode arguments, call one capability, render one envelope.

mod exec;
mod files;
mod patch;
mod request_permissions;
mod server_info;

use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::catalog::ToolSpec;
use crate::envelope::{Category, ToolError, ToolSuccess};
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
        "view_image" => files::view_image(ws, &a).await,
        "apply_patch" => patch::apply_patch(&server.patch, &a).await,
        "exec_command" => exec::exec_command(server, &a, ctx).await,
        "write_stdin" => exec::write_stdin(server, &a, ctx).await,
        "kill_command" => exec::kill_command(server, &a, ctx).await,
        "read_output" => exec::read_output(server, &a).await,
        "check_exec_environment" => Ok(exec::check_exec_environment(server)),
        other => Err(not_built(other)),
    }
}

/// The issue that brings each tool that this build does not serve yet.
fn arriving_with(tool: &str) -> (u32, &'static str) {
    match tool {
        "git_status" | "git_diff" | "git_log" | "git_show" | "git_blame" => (5, "git tools on gix"),
        _ => (9, "the exec runtime"),
    }
}

fn not_built(tool: &str) -> ToolError {
    let (issue, what) = arriving_with(tool);
    ToolError {
        code: "INTERNAL_ERROR",
        message: format!("{tool} is not available in this build yet; it arrives with {what} (issue #{issue})."),
        category: Category::Internal,
        retryable: false,
        details: json!({ "tool": tool, "reason": "not_built", "issue": issue }),
        recovery: "This tool cannot succeed in this build; use another tool (server_info lists what works) or a newer build.".into(),
        extra: Map::new(),
    }
}
