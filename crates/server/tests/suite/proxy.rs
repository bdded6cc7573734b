//! Behind a reverse proxy (issue 20, item 3): with
//! `CODING_TOOLS_MCP_TRUST_PROXY_HEADERS`, `X-Forwarded-Proto`, `-Host` and
//! `-Prefix` (or `Forwarded`) shape the canonical URL of the server card and
//! the `401` challenge, and the Origin check accepts the public origin; with
//! OAuth (built in or external) the public URL must be configured
//! (`CODING_TOOLS_MCP_SERVER_URL`) and headers never choose the issuer or
//! the token audience; without the flag, forged headers change nothing. The
//! same with nginx in front: `cargo xtask proxy`.

use serde_json::json;

use super::harness::*;
use super::oauth::{mint, now, start};

const TRUST: (&str, &str) = ("CODING_TOOLS_MCP_TRUST_PROXY_HEADERS", "1");
/// The public URL an OAuth server behind a trusted proxy must be given.
const URL: (&str, &str) = ("CODING_TOOLS_MCP_SERVER_URL", PUBLIC);
const PRM: &str = "/.well-known/oauth-protected-resource";
const ASM: &str = "/.well-known/oauth-authorization-server";
const CARD: &str = "/.well-known/mcp.json";
const PUBLIC: &str = "https://proxy.example:8443/w/alpha";

/// What nginx in front of the server sends for `PUBLIC`.
const ALPHA: [(&str, &str); 3] = [
    ("X-Forwarded-Host", "proxy.example:8443"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Prefix", "/w/alpha"),
];

/// Every way a client could claim another name, all at once.
const FORGED: [(&str, &str); 4] = [
    ("X-Forwarded-Host", "evil.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Prefix", "/evil"),
    ("Forwarded", "host=evil.example;proto=https"),
];

fn with_token(token: &str, extra: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    h.push(("Authorization".into(), format!("Bearer {token}")));
    h
}

fn post_call(s: &HttpServer, headers: &[(String, String)]) -> HttpResponse {
    let h: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.post(&call(1, "server_info", json!({"detail": "full"})), &h)
}

#[test]
fn forged_forwarded_headers_are_ignored_without_the_flag() {
    let s = start(&[]);
    let own = format!("http://{}", s.addr);
    let prm = s.raw_request("GET", PRM, &FORGED, None).json();
    assert_eq!(prm["resource"], format!("{own}/mcp"));
    let asm = s.raw_request("GET", ASM, &FORGED, None).json();
    assert_eq!(asm["issuer"], own);
    let card = s.raw_request("GET", CARD, &FORGED, None).json();
    assert_eq!(card["transport"]["url"], format!("{own}/mcp"));
    assert_eq!(card["auth"]["tokenUrl"], format!("{own}/oauth/token"));
    let challenge = s.raw_request("POST", "/mcp", &FORGED, None);
    assert_eq!(challenge.status, 401);
    assert_eq!(
        challenge.header("www-authenticate"),
        Some(
            format!("Bearer realm=\"coding-tools-mcp\", resource_metadata=\"{own}{PRM}\"").as_str()
        )
    );
    // A token minted for the forged name is not this server's.
    let forged = mint("https://evil.example/evil/mcp", now() + 600);
    let mut h = with_token(&forged, &FORGED);
    assert_eq!(post_call(&s, &h).status, 401);
    // The forged public origin is no origin of this server either.
    h = with_token(&mint(&format!("{own}/mcp"), now() + 600), &FORGED);
    h.push(("Origin".into(), "https://evil.example".into()));
    assert_eq!(post_call(&s, &h).status, 403);
}

#[test]
fn trusted_proxy_headers_shape_metadata_challenge_and_card() {
    let s = start(&[TRUST, URL]);
    let prm = s.raw_request("GET", PRM, &ALPHA, None).json();
    assert_eq!(prm["resource"], format!("{PUBLIC}/mcp"));
    assert_eq!(prm["authorization_servers"], json!([PUBLIC]));
    let asm = s.raw_request("GET", ASM, &ALPHA, None).json();
    assert_eq!(asm["issuer"], PUBLIC);
    for (key, path) in [
        ("authorization_endpoint", "/oauth/authorize"),
        ("token_endpoint", "/oauth/token"),
        ("registration_endpoint", "/oauth/register"),
    ] {
        assert_eq!(asm[key], format!("{PUBLIC}{path}"), "{key}");
    }
    let card = s.raw_request("GET", CARD, &ALPHA, None).json();
    assert_eq!(card["transport"]["url"], format!("{PUBLIC}/mcp"));
    assert_eq!(card["transport"]["endpoint"], "/mcp");
    assert_eq!(
        card["auth"]["authorizationUrl"],
        format!("{PUBLIC}/oauth/authorize")
    );
    assert_eq!(
        card["auth"]["oauth"]["protected_resource_metadata"],
        format!("{PUBLIC}{PRM}")
    );
    let challenge = s.raw_request("POST", "/mcp", &ALPHA, None);
    assert_eq!(challenge.status, 401);
    assert!(
        challenge
            .header("www-authenticate")
            .is_some_and(|c| c.contains(&format!("resource_metadata=\"{PUBLIC}{PRM}\""))),
        "{:?}",
        challenge.header("www-authenticate")
    );
    // The sign-in page posts back relative to itself, so through the prefix.
    let reg = s.raw_request(
        "POST",
        "/oauth/register",
        &[("Content-Type", "application/json")],
        Some(br#"{"redirect_uris":["http://127.0.0.1:9/cb"],"token_endpoint_auth_method":"none"}"#),
    );
    let id = reg.json()["client_id"].as_str().unwrap().to_owned();
    let page = s.raw_request(
        "GET",
        &format!("/oauth/authorize?response_type=code&client_id={id}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256&state=s"),
        &ALPHA,
        None,
    );
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("action=\"authorize\""), "{html}");
}

/// Behind a trusted proxy the OAuth server is given its public URL
/// (`CODING_TOOLS_MCP_SERVER_URL`, required at start): the token audience
/// is that URL, whatever a request's forwarded headers name, so a client
/// cannot have tokens minted for another backend of the same proxy.
#[test]
fn token_audience_is_the_configured_public_url() {
    let s = start(&[TRUST, URL]);
    let far = now() + 600;
    let alpha = mint(&format!("{PUBLIC}/mcp"), far);
    assert_eq!(post_call(&s, &with_token(&alpha, &ALPHA)).status, 200);
    // The same proxy's other route is another resource: its tokens are
    // refused here, whichever prefix the headers claim.
    let beta = [
        ("X-Forwarded-Host", "proxy.example:8443"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Prefix", "/w/beta"),
    ];
    let beta_token = mint("https://proxy.example:8443/w/beta/mcp", far);
    assert_eq!(post_call(&s, &with_token(&beta_token, &ALPHA)).status, 401);
    assert_eq!(post_call(&s, &with_token(&beta_token, &beta)).status, 401);
    // The metadata names the configured URL whatever the prefix claims.
    let asm = s.raw_request("GET", ASM, &beta, None).json();
    assert_eq!(asm["issuer"], PUBLIC, "{asm}");
    // A token for the bound socket is not this public server's.
    let direct = mint(&format!("http://{}/mcp", s.addr), far);
    assert_eq!(post_call(&s, &with_token(&direct, &ALPHA)).status, 401);
}

#[test]
fn origin_is_checked_against_the_public_origin() {
    let s = start(&[TRUST, URL]);
    let token = mint(&format!("{PUBLIC}/mcp"), now() + 600);
    let with_origin = |origin: &str, fwd: &[(&'static str, &'static str)]| {
        let mut h = with_token(&token, fwd);
        h.push(("Origin".into(), origin.into()));
        post_call(&s, &h).status
    };
    assert_eq!(with_origin("https://proxy.example:8443", &ALPHA), 200);
    for foreign in [
        "https://evil.example",
        "http://proxy.example:8443",
        "https://proxy.example",
        "https://proxy.example:8443.evil.example",
    ] {
        assert_eq!(with_origin(foreign, &ALPHA), 403, "{foreign}");
    }
    // Loopback origins stay allowed.
    assert_eq!(with_origin("http://localhost:3000", &ALPHA), 200);
    // Without the flag the same request is a foreign origin.
    let off = start(&[]);
    let mut h = with_token(
        &mint(&format!("http://{}/mcp", off.addr), now() + 600),
        &ALPHA,
    );
    h.push(("Origin".into(), "https://proxy.example:8443".into()));
    assert_eq!(post_call(&off, &h).status, 403);
}

/// A server behind a trusted proxy without OAuth (its card names the
/// public URL the headers give): the client-facing hop wins, and malformed
/// values are refused.
#[test]
fn first_hop_wins_and_malformed_values_are_refused() {
    let ws = workspace();
    let mut cmd = command(ws.path(), &["--port", "0"]);
    cmd.env(TRUST.0, TRUST.1);
    let s = HttpServer::start_with(&mut cmd);
    let issuer = |h: &[(&str, &str)]| {
        let card = s.raw_request("GET", CARD, h, None).json();
        let url = card["transport"]["url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        url.trim_end_matches("/mcp").to_owned()
    };
    // Several hops, in one line or several: the client-facing one.
    assert_eq!(
        issuer(&[
            ("X-Forwarded-Host", "public.example, inner.example"),
            ("X-Forwarded-Proto", "https, http"),
            ("X-Forwarded-Prefix", "/w/alpha, /inner"),
        ]),
        "https://public.example/w/alpha"
    );
    assert_eq!(
        issuer(&[
            ("X-Forwarded-Host", "public.example"),
            ("X-Forwarded-Host", "inner.example"),
        ]),
        "https://public.example"
    );
    // RFC 7239 Forwarded stands in; an unknown scheme is inferred.
    assert_eq!(
        issuer(&[(
            "Forwarded",
            "for=1.2.3.4;host=\"f.example\";proto=http, host=x"
        )]),
        "http://f.example"
    );
    assert_eq!(
        issuer(&[
            ("X-Forwarded-Host", "localhost:9"),
            ("X-Forwarded-Proto", "gopher")
        ]),
        "http://localhost:9"
    );
    // Only a prefix: the Host the proxy passed on (here the server's own).
    assert_eq!(
        issuer(&[("X-Forwarded-Prefix", "/w/beta/")]),
        format!("http://{}/w/beta", s.addr)
    );
    for bad in [
        [("X-Forwarded-Host", "evil.example/path")],
        [("X-Forwarded-Host", "user@evil.example")],
        [("X-Forwarded-Host", "a\"b=c;d<e>")],
        [("X-Forwarded-Prefix", "/w/../admin")],
        [("X-Forwarded-Prefix", "w/alpha")],
        [("X-Forwarded-Prefix", "/w\"x")],
        [("X-Forwarded-Prefix", "//evil.example")],
    ] {
        let r = s.raw_request("GET", CARD, &bad, None);
        assert_eq!(r.status, 400, "{bad:?}");
        assert_eq!(
            r.json()["error"]["data"]["reason"],
            "forwarded_header_malformed"
        );
    }
}

/// Trusting the proxy's headers does not trust the client's `Host`: a page
/// that rebinds its own domain to this address sends that domain as `Host`
/// (which it cannot change) and may add forwarded headers (which it can).
#[test]
fn a_foreign_host_is_refused_even_behind_a_trusted_proxy() {
    let ws = workspace();
    let s = HttpServer::start_with(command(ws.path(), &["--port", "0"]).env(TRUST.0, TRUST.1));
    let body = call(1, "exec_command", json!({"cmd": "id"})).to_string();
    for extra in [
        "",
        "X-Forwarded-Proto: http\r\n",
        "X-Forwarded-Host: evil.example\r\n",
        "Forwarded: host=evil.example;proto=http\r\n",
    ] {
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://evil.example\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let r = s.client.raw(req.as_bytes());
        assert_eq!(
            r.status,
            403,
            "{extra:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// With an external issuer, the token audience must not come from request
/// headers: behind a trusted proxy the public URL has to be configured.
#[test]
fn an_external_issuer_behind_a_trusted_proxy_needs_the_server_url() {
    let ws = workspace();
    let out = command(
        ws.path(),
        &["--port", "0", "--oauth-issuer", "http://127.0.0.1:9"],
    )
    .env(TRUST.0, TRUST.1)
    .env_remove("CODING_TOOLS_MCP_SERVER_URL")
    .stdin(std::process::Stdio::null())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CODING_TOOLS_MCP_SERVER_URL"),
        "{out:?}"
    );
}

/// The same for the built-in authorization server (`--oauth-mode`): its
/// issuer and the audience of the tokens it mints would otherwise follow a
/// client's `X-Forwarded-Host`/`X-Forwarded-Prefix`.
#[test]
fn oauth_mode_behind_a_trusted_proxy_needs_the_server_url() {
    let ws = workspace();
    let out = command(ws.path(), &["--port", "0", "--oauth-mode"])
        .env(TRUST.0, TRUST.1)
        .env("CODING_TOOLS_MCP_OAUTH_PASSWORD", "a-password-for-the-test")
        .env_remove("CODING_TOOLS_MCP_SERVER_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--oauth-mode") && err.contains("CODING_TOOLS_MCP_SERVER_URL"),
        "{out:?}"
    );
}

/// A public URL that is no http(s) URL is refused at start, not ignored
/// (ignored, forwarded headers chose the issuer and audience again: found
/// by the review of the OAuth refusal above).
#[test]
fn a_public_url_that_is_no_url_is_refused_at_start() {
    let ws = workspace();
    for url in ["mcp.example.com", "ftp://mcp.example.com", "https://"] {
        let out = command(ws.path(), &["--port", "0", "--oauth-mode"])
            .env(TRUST.0, TRUST.1)
            .env("CODING_TOOLS_MCP_OAUTH_PASSWORD", "a-password-for-the-test")
            .env("CODING_TOOLS_MCP_SERVER_URL", url)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not an http(s)"),
            "{url}: {out:?}"
        );
    }
}
