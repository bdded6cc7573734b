//! Tool adapters: decode arguments, call one capability, render one envelope.

mod request_permissions;
mod server_info;

use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::catalog::ToolSpec;
use crate::envelope::{Category, ToolError, ToolSuccess};
use crate::server::Server;

pub use server_info::{annotation_override as annotation_override_json, real_annotations};

/// Runs one validated call.
pub async fn run(
    server: &Server,
    spec: &ToolSpec,
    args: Map<String, Value>,
    _ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    match spec.name {
        "server_info" => Ok(server_info::run(server)),
        "request_permissions" => request_permissions::run(server, &args),
        other => Err(not_built(other)),
    }
}

/// The issue that brings each tool that this build does not serve yet.
fn arriving_with(tool: &str) -> (u32, &'static str) {
    match tool {
        "read_file" | "list_dir" | "list_files" | "search_text" | "view_image" => {
            (3, "the workspace boundary and the file tools")
        }
        "apply_patch" => (4, "the patch engine"),
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
    }
}
