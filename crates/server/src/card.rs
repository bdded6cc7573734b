//! The server card served at `/.well-known/mcp.json`.

use ctm_protocol_eras::{SERVER_NAME, SERVER_TITLE, SERVER_VERSION, all_versions_newest_first};
use serde_json::{Value, json};

use crate::server::Server;
use crate::tools::real_annotations;

/// The card: identity, versions newest first, transport, auth, and the real annotations.
pub fn server_card(server: &Server) -> Value {
    let tools: Vec<&str> = server.tools().map(|t| t.name).collect();
    let (ro, rw): (Vec<_>, Vec<_>) = server.tools().partition(|t| t.annotations.read_only);
    let names =
        |v: Vec<&crate::catalog::ToolSpec>| v.into_iter().map(|t| t.name).collect::<Vec<_>>();
    let auth = match (server.config.auth_token.is_some(), server.config.oauth_mode) {
        (false, false) => {
            json!({ "type": "none", "scheme": null, "header": null, "required": false })
        }
        (bearer, oauth) => json!({
            "type": if oauth { "oauth2" } else { "bearer" },
            "scheme": "Bearer",
            "header": "Authorization",
            "required": true,
            "static_token": bearer,
            "oauth": oauth.then(|| json!({
                "protected_resource_metadata": "/.well-known/oauth-protected-resource",
                "authorization_server_metadata": "/.well-known/oauth-authorization-server",
                "registration_endpoint": "/oauth/register",
                "pkce": ["S256"],
            })),
        }),
    };
    json!({
        "name": SERVER_NAME,
        "title": SERVER_TITLE,
        "version": SERVER_VERSION,
        "description": "Workspace-confined coding tools: read, list, search, patch, run commands, git, images.",
        "supportedProtocolVersions": all_versions_newest_first(),
        "server": { "name": SERVER_NAME, "title": SERVER_TITLE, "version": SERVER_VERSION },
        "transport": { "type": "streamable_http", "endpoint": "/mcp", "methods": ["POST", "OPTIONS"] },
        "capabilities": { "tools": { "listChanged": false } },
        "auth": auth,
        "tools": {
            "count": tools.len(),
            "names": tools,
            "readOnlyHintTrue": names(ro),
            "readOnlyHintFalse": names(rw),
            "annotations": real_annotations(server),
            "annotationOverride": crate::tools::annotation_override_json(server),
        },
    })
}
