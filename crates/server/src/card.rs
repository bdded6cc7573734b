//! The server card served at `/.well-known/mcp.json`.
//!
//! Paths in it are relative to the server's root; [`at_base`] adds the
//! absolute URLs of the request's canonical base (the public URL behind a
//! trusted proxy, prefix included), so a client that read the card through
//! a proxy finds the endpoint through it too.

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
    let issuer = server.config.oauth_issuer.as_deref();
    let oauth_mode = server.config.oauth_mode || issuer.is_some();
    let auth = match (server.config.auth_token.is_some(), oauth_mode) {
        (false, false) => {
            json!({ "type": "none", "scheme": null, "header": null, "required": false })
        }
        (bearer, oauth) => json!({
            "type": if oauth { "oauth2" } else { "bearer" },
            "scheme": "Bearer",
            "header": "Authorization",
            "required": true,
            "static_token": bearer,
            "oauth": oauth.then(|| match issuer {
                // Resource-server mode: the authorization server is elsewhere.
                Some(issuer) => json!({
                    "protected_resource_metadata": "/.well-known/oauth-protected-resource",
                    "authorization_servers": [issuer],
                }),
                None => json!({
                    "protected_resource_metadata": "/.well-known/oauth-protected-resource",
                    "authorization_server_metadata": "/.well-known/oauth-authorization-server",
                    "registration_endpoint": "/oauth/register",
                    "pkce": ["S256"],
                }),
            }),
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

/// `card` as served under `base` (`scheme://host[:port][/prefix]`):
/// `transport.url` is the endpoint's absolute URL, and with OAuth the
/// metadata and endpoint URLs are absolute (`authorizationUrl` and
/// `tokenUrl`, as the Python original names them).
pub fn at_base(mut card: Value, base: &str) -> Value {
    let base = base.trim_end_matches('/');
    card["transport"]["url"] = json!(format!("{base}/mcp"));
    if let Some(oauth) = card["auth"]["oauth"].as_object_mut() {
        // Resource-server mode: the endpoints are the external issuer's.
        let built_in = !oauth.contains_key("authorization_servers");
        for key in [
            "protected_resource_metadata",
            "authorization_server_metadata",
            "registration_endpoint",
        ] {
            if let Some(path) = oauth.get(key).and_then(Value::as_str) {
                let url = format!("{base}{path}");
                oauth.insert(key.to_owned(), json!(url));
            }
        }
        if built_in {
            card["auth"]["authorizationUrl"] = json!(format!("{base}/oauth/authorize"));
            card["auth"]["tokenUrl"] = json!(format!("{base}/oauth/token"));
        }
    }
    card
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_base() {
        let card = json!({
            "transport": {"endpoint": "/mcp"},
            "auth": {"type": "oauth2", "oauth": {"registration_endpoint": "/oauth/register"}},
        });
        let c = at_base(card, "https://proxy.example/w/alpha/");
        assert_eq!(c["transport"]["url"], "https://proxy.example/w/alpha/mcp");
        assert_eq!(c["transport"]["endpoint"], "/mcp");
        assert_eq!(
            c["auth"]["oauth"]["registration_endpoint"],
            "https://proxy.example/w/alpha/oauth/register"
        );
        assert_eq!(
            c["auth"]["tokenUrl"],
            "https://proxy.example/w/alpha/oauth/token"
        );
        let plain = at_base(
            json!({"transport": {}, "auth": {"type": "none"}}),
            "http://h:1",
        );
        assert_eq!(plain["transport"]["url"], "http://h:1/mcp");
        assert!(plain["auth"].get("tokenUrl").is_none());
        let external = at_base(
            json!({"transport": {}, "auth": {"type": "oauth2", "oauth": {
                "protected_resource_metadata": "/.well-known/oauth-protected-resource",
                "authorization_servers": ["https://idp.example"],
            }}}),
            "http://h:1",
        );
        assert_eq!(
            external["auth"]["oauth"]["protected_resource_metadata"],
            "http://h:1/.well-known/oauth-protected-resource"
        );
        assert!(external["auth"].get("tokenUrl").is_none());
    }
}
