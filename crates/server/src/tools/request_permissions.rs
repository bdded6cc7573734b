//! `request_permissions`: this server has no elicitation; it never escalates.

use serde_json::{Map, Value, json};

use crate::catalog::RequestPermissionsArgs;
use crate::cli::PermissionMode;
use crate::envelope::{ErrorCode, ToolError, ToolSuccess};
use crate::output::tool_result;
use crate::server::Server;

tool_result! {
    /// What `request_permissions` answers in dangerous mode, where every
    /// gate is already open. A refusal carries `status`, `grant_id` and
    /// `expires_at` too, with no grant: `grant_id` is null there.
    /// `expires_at` is always null: no grant has a lifetime.
    pub struct RequestPermissionsResult {
        status: &'static str,
        grant_id: Option<&'static str>,
        expires_at: Option<String>,
        granted: bool,
        policy: &'static str,
        permission_mode: &'static str,
        tool_name: String,
        permission: String,
        scope: &'static str,
        elicitation: &'static str,
        constraints: GrantConstraints,
        warnings: Vec<&'static str>,
    }
}

tool_result! {
    /// The reference's `constraints` of a grant: the mode that granted it,
    /// the workspace it stays inside, and the request as given.
    pub struct GrantConstraints {
        mode: &'static str,
        workspace: crate::output::WirePath,
        requested: Map<String, Value>,
    }
}

fn how_to_grant(permission: &str) -> &'static str {
    match permission {
        "network" => {
            "restart the server with --allow-network (network only) or --permission-mode trusted"
        }
        "shell_expansion" | "inline_script" => "restart the server with --permission-mode trusted",
        _ => "restart the server with --permission-mode dangerous",
    }
}

/// `requested` echoes the arguments as given.
pub fn run(
    server: &Server,
    args: &RequestPermissionsArgs,
    requested: &Map<String, Value>,
) -> Result<ToolSuccess, ToolError> {
    let tool = args.tool_name.as_str();
    let permission = args.permission.as_str();
    let scope = args.scope.as_str();
    let mode = server.config.permission_mode;
    if mode != PermissionMode::Dangerous {
        let grant = how_to_grant(permission);
        // The reference's top-level answer: nothing was granted.
        let mut extra = Map::new();
        extra.insert("status".into(), json!("unsupported"));
        extra.insert("grant_id".into(), Value::Null);
        extra.insert("expires_at".into(), Value::Null);
        return Err(ToolError::new(
            ErrorCode::ElicitationUnsupported,
            format!(
                "No user to ask for {permission} on {tool}: this server has no MCP elicitation, and {} mode never escalates.",
                mode.as_str()
            ),
            json!({
                "tool_name": tool,
                "permission": permission,
                "scope": scope,
                "permission_mode": mode.as_str(),
                "elicitation": "unsupported",
                "how_to_grant": grant,
                "requested": requested,
            }),
            format!(
                "Ask the operator to {grant}, or do without {permission}."
            ),
        )
        .with_extra(extra));
    }
    let result = RequestPermissionsResult {
        status: "granted",
        grant_id: Some("dangerously-skip-all-permissions"),
        expires_at: None,
        granted: true,
        policy: "auto_grant",
        permission_mode: "dangerous",
        tool_name: tool.to_owned(),
        permission: permission.to_owned(),
        scope,
        elicitation: "unsupported",
        constraints: GrantConstraints {
            mode: if server.config.dangerously_skip_all_permissions {
                "dangerously_skip_all_permissions"
            } else {
                "dangerous"
            },
            workspace: server.workspace.root().into(),
            requested: requested.clone(),
        },
        warnings: vec![
            "every permission gate is open in dangerous mode; permission-gated operations are auto-granted",
        ],
    };
    Ok(ToolSuccess::new(
        format!(
            "{permission} for {tool} needs no grant: the operator runs this server in dangerous mode, where every permission gate is open (auto-grant policy). Workspace path boundaries still apply."
        ),
        &result,
    ))
}
