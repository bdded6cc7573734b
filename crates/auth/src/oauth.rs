//! The OAuth 2.1 authorization server: authorization code + PKCE S256,
//! RFC 7591 registration, RFC 8414 and RFC 9728 metadata, HMAC-signed access
//! tokens bound to this server's resource.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::digest::{SHA256, digest};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use crate::form;

/// An HTTP request, as much of it as the authorization server reads.
#[derive(Debug, Clone)]
pub struct AuthRequest<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The raw query string.
    pub query: &'a str,
    /// `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// `Content-Type` header, if any.
    pub content_type: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
    /// This server's canonical base URL (`http://host:port`).
    pub base_url: &'a str,
    /// What access tokens minted for this request are bound to (`aud`); the
    /// transport derives it (the resource URL, or one naming the bound
    /// socket when no server URL is configured).
    pub audience: &'a str,
    /// The client's address, when known (registrations are capped per address).
    pub client_ip: Option<IpAddr>,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers (name, value).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl AuthResponse {
    fn json(status: u16, v: &Value) -> Self {
        Self {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("cache-control".into(), "no-store".into()),
            ],
            body: serde_json::to_vec(v).unwrap_or_default(),
        }
    }

    fn error(status: u16, error: &str, description: &str) -> Self {
        Self::json(
            status,
            &json!({"error": error, "error_description": description}),
        )
    }

    fn html(status: u16, body: String) -> Self {
        Self {
            status,
            headers: vec![
                ("content-type".into(), "text/html; charset=utf-8".into()),
                ("cache-control".into(), "no-store".into()),
                ("x-frame-options".into(), "DENY".into()),
                (
                    "content-security-policy".into(),
                    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'".into(),
                ),
            ],
            body: body.into_bytes(),
        }
    }

    fn redirect(location: String) -> Self {
        Self {
            status: 302,
            headers: vec![
                ("location".into(), location),
                ("cache-control".into(), "no-store".into()),
            ],
            body: Vec::new(),
        }
    }
}

/// How a client authenticates at the token endpoint (RFC 7591).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// A public client: no secret.
    None,
    /// Secret in the form body.
    SecretPost,
    /// Secret in HTTP Basic.
    SecretBasic,
}

impl ClientAuth {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "client_secret_post" => Some(Self::SecretPost),
            "client_secret_basic" => Some(Self::SecretBasic),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SecretPost => "client_secret_post",
            Self::SecretBasic => "client_secret_basic",
        }
    }
}

#[derive(Debug, Clone)]
struct Client {
    secret_digest: Option<[u8; 32]>,
    redirect_uris: Vec<String>,
    /// The `client_name` it registered with, shown on the consent page.
    name: Option<String>,
    auth: ClientAuth,
    /// Dynamic registrations only: when, from where, and whether the client
    /// ever obtained a token. Pre-registered clients have `None`.
    dynamic: Option<Registration>,
}

#[derive(Debug, Clone, Copy)]
struct Registration {
    at: Instant,
    from: Option<IpAddr>,
    completed: bool,
    /// When its authorize page was last opened or submitted: a sign-in in
    /// progress, which eviction spares while others are left.
    touched: Option<Instant>,
}

/// How long an opened authorize page protects its registration from being
/// forgotten to make room.
const SIGN_IN_GRACE: Duration = Duration::from_secs(600);

impl Client {
    /// A dynamic client that never completed a flow within `ttl`.
    fn expired(&self, now: Instant, ttl: Duration) -> bool {
        self.dynamic
            .is_some_and(|r| !r.completed && now.duration_since(r.at) >= ttl)
    }
}

/// Most redirect URIs one registration may carry (as the reference).
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI, in bytes (as the reference).
pub const MAX_REDIRECT_URI_BYTES: usize = 2048;
/// Longest `client_name`, in characters (as the reference).
pub const MAX_CLIENT_NAME_CHARS: usize = 200;
/// Most unexpired authorization codes held at once.
pub const MAX_PENDING_CODES: usize = 1024;
/// Registrations one address (IPv6: one /64) may make at once ...
pub const REGISTRATION_BURST: u32 = 20;
/// ... and then one per this long.
pub const REGISTRATION_EVERY: Duration = Duration::from_secs(3);
/// Most addresses whose registration rate is tracked at once.
const MAX_RATE_TRACKED: usize = 4096;

#[derive(Debug, Clone)]
struct Code {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    resource: String,
    scope: String,
    expires: SystemTime,
}

/// Settings of the authorization server.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The password the authorize page asks for.
    pub password: String,
    /// HMAC key for access tokens (random per process unless configured).
    pub token_key: Vec<u8>,
    /// Access-token lifetime.
    pub token_ttl: Duration,
    /// Authorization-code lifetime.
    pub code_ttl: Duration,
    /// A pre-registered client: id, secret (None = public), redirect URIs.
    pub preregistered: Option<(String, Option<String>, Vec<String>)>,
    /// Most dynamically registered clients that never completed a flow
    /// held at once, of which one address (IPv6: one /64) holds at most a
    /// tenth (at least one). Beyond, the oldest unused registration is
    /// forgotten. Clients that completed a flow are not counted.
    pub max_clients: usize,
    /// How long a dynamically registered client that never obtained a
    /// token stays registered.
    pub unused_client_ttl: Duration,
}

/// Default of [`OAuthConfig::max_clients`].
pub const DEFAULT_MAX_CLIENTS: usize = 1000;
/// Default of [`OAuthConfig::unused_client_ttl`].
pub const DEFAULT_UNUSED_CLIENT_TTL: Duration = Duration::from_secs(3600);

/// Why a configuration is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthConfigError {
    /// The token secret is not 64 hex characters.
    #[error("CODING_TOOLS_MCP_OAUTH_TOKEN_SECRET must be 64 hex characters")]
    BadSecret,
    /// The system random source failed.
    #[error("the system random source failed")]
    Random,
}

/// Decodes a 64-hex-character secret into a 32-byte key.
pub fn parse_token_secret(hex: &str) -> Result<Vec<u8>, OAuthConfigError> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(OAuthConfigError::BadSecret);
    }
    (0..32)
        .map(|i| {
            u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| OAuthConfigError::BadSecret)
        })
        .collect()
}

/// Authorize passwords at least this long are checked before any backoff
/// (the generated one is 24 random bytes, 32 characters of base64url).
pub const STRONG_PASSWORD_CHARS: usize = 32;

/// Random bytes, base64url.
pub fn random_token(rng: &SystemRandom, bytes: usize) -> Result<String, OAuthConfigError> {
    let mut b = vec![0u8; bytes];
    rng.fill(&mut b).map_err(|_| OAuthConfigError::Random)?;
    Ok(B64.encode(b))
}

/// The authorization server of one process.
pub struct OAuthServer {
    cfg: OAuthConfig,
    key: hmac::Key,
    rng: SystemRandom,
    clients: Mutex<HashMap<String, Client>>,
    codes: Mutex<HashMap<String, Code>>,
    /// Registrations per address key (see [`REGISTRATION_BURST`]).
    registration_rate: Mutex<HashMap<Option<IpAddr>, crate::TokenBucket>>,
}

impl std::fmt::Debug for OAuthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OAuthServer([REDACTED])")
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, b).as_ref());
    out
}

fn ct_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Redirect URIs must be https, or http on a loopback host, without a
/// fragment, without userinfo (`http://127.0.0.1:80@evil.example/cb` names
/// evil.example), and without characters a browser reads differently
/// (backslashes, whitespace, controls). Loopback is the literal
/// `127.0.0.1` (any 127/8 address), `[::1]`, or the name `localhost` (which
/// desktop clients such as Claude Code use), with at most a numeric port.
pub fn redirect_uri_allowed(uri: &str) -> bool {
    if uri.contains('#')
        || uri.contains('\\')
        || uri.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return false;
    }
    let (https, rest) = match (uri.strip_prefix("https://"), uri.strip_prefix("http://")) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        _ => return false,
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return false;
    }
    if https {
        return true;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((h, after)) = v6.split_once(']') else {
            return false;
        };
        (format!("[{h}]"), after.strip_prefix(':'))
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    host == "localhost"
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `client_id` an authorize form (POST body) names, or `""`: what the
/// password backoff keys on besides the address.
pub fn authorize_client_id(body: &[u8]) -> String {
    form::parse(&String::from_utf8_lossy(body))
        .0
        .remove("client_id")
        .unwrap_or_default()
}

/// The resource this server protects, for a base URL.
pub fn resource_url(base_url: &str) -> String {
    format!("{}/mcp", base_url.trim_end_matches('/'))
}

/// The canonical resource a client's `resource` parameter names, if it names
/// this server: its `/mcp` endpoint (what our metadata advertises) or its
/// base URL (what the reference advertises), a trailing slash ignored.
fn canonical_resource(given: &str, base: &str) -> Option<String> {
    let given = given.trim_end_matches('/');
    let base = base.trim_end_matches('/');
    (given == base || given == resource_url(base)).then(|| resource_url(base))
}

/// Unused dynamic registrations whose origin passes `from`.
fn unused(clients: &HashMap<String, Client>, from: impl Fn(&Registration) -> bool) -> usize {
    clients
        .values()
        .filter_map(|c| c.dynamic)
        .filter(|r| !r.completed && from(r))
        .count()
}

/// The unused dynamic registration to forget among those whose origin
/// passes `from`: one with no sign-in in progress before one with, and
/// the newest first, so a flood replaces its own registrations rather
/// than the older one a client is signing in with.
fn eviction_victim(
    clients: &HashMap<String, Client>,
    from: impl Fn(&Registration) -> bool,
    now: Instant,
) -> Option<String> {
    let signing_in = |r: &Registration| {
        r.touched
            .is_some_and(|t| now.saturating_duration_since(t) < SIGN_IN_GRACE)
    };
    clients
        .iter()
        .filter_map(|(id, c)| c.dynamic.map(|r| (id, r)))
        .filter(|(_, r)| !r.completed && from(r))
        .min_by_key(|(_, r)| (signing_in(r), std::cmp::Reverse(r.at)))
        .map(|(id, _)| id.clone())
}

/// The address key holding the most unused registrations (ties: the one
/// that registered last).
fn busiest_holder(clients: &HashMap<String, Client>) -> Option<Option<IpAddr>> {
    let mut held: HashMap<Option<IpAddr>, (usize, Instant)> = HashMap::new();
    for r in clients.values().filter_map(|c| c.dynamic) {
        if !r.completed {
            let e = held.entry(r.from).or_insert((0, r.at));
            e.0 += 1;
            e.1 = e.1.max(r.at);
        }
    }
    held.into_iter()
        .max_by(|(_, (n1, t1)), (_, (n2, t2))| n1.cmp(n2).then(t1.cmp(t2)))
        .map(|(k, _)| k)
}

impl OAuthServer {
    /// A server with `cfg`.
    pub fn new(cfg: OAuthConfig) -> Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &cfg.token_key);
        let mut clients = HashMap::new();
        if let Some((id, secret, uris)) = &cfg.preregistered {
            clients.insert(
                id.clone(),
                Client {
                    secret_digest: secret.as_ref().map(|s| sha(s.as_bytes())),
                    redirect_uris: uris.clone(),
                    name: None,
                    // As the reference registers it: a secret travels in the form.
                    auth: if secret.is_some() {
                        ClientAuth::SecretPost
                    } else {
                        ClientAuth::None
                    },
                    dynamic: None,
                },
            );
        }
        Self {
            cfg,
            key,
            rng: SystemRandom::new(),
            clients: Mutex::new(clients),
            codes: Mutex::new(HashMap::new()),
            registration_rate: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one registration from the allowance of the address key
    /// `from`, or says how long until there is one.
    fn registration_allowed(&self, from: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let mut rate = self
            .registration_rate
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !rate.contains_key(&from) && rate.len() >= MAX_RATE_TRACKED {
            // A full bucket carries no state. Past those, forget the address
            // with the most allowance left (it registered least lately):
            // failing open here at worst shortens the life of unused
            // registrations; failing closed would lock new clients out.
            rate.retain(|_, b| !b.is_full(now));
            if rate.len() >= MAX_RATE_TRACKED
                && let Some(k) = rate
                    .iter_mut()
                    .map(|(k, b)| (*k, b.available(now)))
                    .max_by_key(|(_, n)| *n)
                    .map(|(k, _)| k)
            {
                rate.remove(&k);
            }
        }
        rate.entry(from)
            .or_insert_with(|| {
                crate::TokenBucket::full(REGISTRATION_BURST, REGISTRATION_EVERY, now)
            })
            .take(now)
    }

    /// Whether the authorize password is long enough (at least
    /// [`STRONG_PASSWORD_CHARS`], as the generated one is) to be checked
    /// before any backoff: guessing it online is hopeless, so a right one
    /// is never held back by other people's failures.
    pub fn password_is_strong(&self) -> bool {
        self.cfg.password.len() >= STRONG_PASSWORD_CHARS
    }

    /// Whether the form `body` of an authorize POST carries the password.
    pub fn authorize_password_matches(&self, body: &[u8]) -> bool {
        let (p, _) = form::parse(&String::from_utf8_lossy(body));
        let given = sha(p.get("password").map(String::as_bytes).unwrap_or_default());
        ct_eq(&given, &sha(self.cfg.password.as_bytes()))
    }

    /// Whether this request is for the authorization server (or its metadata).
    pub fn handles(path: &str) -> bool {
        path.starts_with("/oauth/") || path.starts_with("/.well-known/oauth-")
    }

    /// Serves one request to an OAuth endpoint.
    pub fn handle(&self, req: &AuthRequest<'_>) -> AuthResponse {
        let base = req.base_url.trim_end_matches('/');
        match (req.method, req.path) {
            (
                "GET",
                "/.well-known/oauth-protected-resource"
                | "/.well-known/oauth-protected-resource/mcp",
            ) => AuthResponse::json(200, &self.resource_metadata(base)),
            (
                "GET",
                "/.well-known/oauth-authorization-server" | "/.well-known/openid-configuration",
            ) => AuthResponse::json(200, &self.server_metadata(base)),
            ("POST", "/oauth/register") => self.register(req),
            ("GET", "/oauth/authorize") => self.authorize_page(req.query, base),
            ("POST", "/oauth/authorize") => self.authorize_submit(req, base),
            ("POST", "/oauth/token") => self.token(req, base),
            (_, p) if Self::handles(p) => {
                AuthResponse::error(405, "invalid_request", "method not allowed here")
            }
            _ => AuthResponse::error(404, "not_found", "no such endpoint"),
        }
    }

    /// RFC 9728 protected-resource metadata.
    pub fn resource_metadata(&self, base: &str) -> Value {
        json!({
            "resource": resource_url(base),
            "authorization_servers": [base],
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["mcp"],
            "resource_name": "coding-tools-mcp",
        })
    }

    /// RFC 8414 authorization-server metadata.
    pub fn server_metadata(&self, base: &str) -> Value {
        json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/oauth/authorize"),
            "token_endpoint": format!("{base}/oauth/token"),
            "registration_endpoint": format!("{base}/oauth/register"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
            "scopes_supported": ["mcp"],
            "authorization_response_iss_parameter_supported": true,
            "client_id_metadata_document_supported": false,
        })
    }

    fn register(&self, req: &AuthRequest<'_>) -> AuthResponse {
        let bad = |d: &str| AuthResponse::error(400, "invalid_client_metadata", d);
        let Ok(meta) = serde_json::from_slice::<Value>(req.body) else {
            return bad("the body must be a JSON object");
        };
        let Some(uris) = meta.get("redirect_uris").and_then(Value::as_array) else {
            return AuthResponse::error(400, "invalid_redirect_uri", "redirect_uris is required");
        };
        if uris.len() > MAX_REDIRECT_URIS
            || uris
                .iter()
                .any(|u| u.as_str().is_none_or(|u| u.len() > MAX_REDIRECT_URI_BYTES))
        {
            return AuthResponse::error(
                400,
                "invalid_redirect_uri",
                &format!(
                    "redirect_uris must hold 1 to {MAX_REDIRECT_URIS} strings of at most {MAX_REDIRECT_URI_BYTES} bytes"
                ),
            );
        }
        let uris: Vec<String> = uris
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if uris.is_empty() || !uris.iter().all(|u| redirect_uri_allowed(u)) {
            return AuthResponse::error(
                400,
                "invalid_redirect_uri",
                "redirect URIs must be https, or http on localhost/127.0.0.1/[::1], without fragments",
            );
        }
        let method = meta
            .get("token_endpoint_auth_method")
            .and_then(Value::as_str)
            .unwrap_or("client_secret_basic");
        let Some(auth) = ClientAuth::parse(method) else {
            return bad(
                "token_endpoint_auth_method must be none, client_secret_post or client_secret_basic",
            );
        };
        // As the reference: each list must be strings, is narrowed to what
        // this server supports, and must keep at least one value.
        for (field, supported) in [
            ("grant_types", "authorization_code"),
            ("response_types", "code"),
        ] {
            let Some(requested) = meta.get(field) else {
                continue;
            };
            let Some(items) = requested
                .as_array()
                .filter(|a| a.iter().all(Value::is_string))
            else {
                return bad(&format!("{field} must be an array of strings"));
            };
            if !items.iter().any(|v| v.as_str() == Some(supported)) {
                return bad(&format!(
                    "{field} must include {supported}, the only supported value"
                ));
            }
        }
        let client_name = match meta.get("client_name") {
            None | Some(Value::Null) => None,
            Some(Value::String(n)) if n.chars().count() <= MAX_CLIENT_NAME_CHARS => Some(n.clone()),
            Some(_) => {
                return bad(&format!(
                    "client_name must be a string of at most {MAX_CLIENT_NAME_CHARS} characters"
                ));
            }
        };
        let (Ok(id), Ok(secret)) = (random_token(&self.rng, 16), random_token(&self.rng, 32))
        else {
            return AuthResponse::error(500, "server_error", "no randomness");
        };
        let confidential = auth != ClientAuth::None;
        let now = Instant::now();
        let from = req.client_ip.map(crate::client_key);
        if let Err(wait) = self.registration_allowed(from, now) {
            let secs = crate::retry_after_secs(wait);
            let mut r = AuthResponse::error(
                429,
                "temporarily_unavailable",
                &format!(
                    "too many registrations from this address; at most {REGISTRATION_BURST} at once, then one every {} s",
                    REGISTRATION_EVERY.as_secs()
                ),
            );
            r.headers.push(("retry-after".into(), secs.to_string()));
            return r;
        }
        {
            let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            let ttl = self.cfg.unused_client_ttl;
            clients.retain(|_, c| !c.expired(now, ttl));
            let max = self.cfg.max_clients.max(1);
            // Make room by forgetting unused registrations: first one of
            // this address's beyond its share, then, when the table is
            // full, one of the address holding the most (see
            // `eviction_victim`: not a sign-in in progress while another
            // is left, newest first). A flood replaces its own
            // registrations; it never refuses a new client.
            if let Some(victim) = eviction_victim(&clients, |r| r.from == from, now)
                .filter(|_| unused(&clients, |r| r.from == from) >= (max / 10).max(1))
            {
                clients.remove(&victim);
            }
            if unused(&clients, |_| true) >= max
                && let Some(victim) = busiest_holder(&clients)
                    .and_then(|k| eviction_victim(&clients, |r| r.from == k, now))
            {
                clients.remove(&victim);
            }
            clients.insert(
                id.clone(),
                Client {
                    secret_digest: confidential.then(|| sha(secret.as_bytes())),
                    redirect_uris: uris.clone(),
                    name: client_name.clone(),
                    auth,
                    dynamic: Some(Registration {
                        at: now,
                        from,
                        completed: false,
                        touched: None,
                    }),
                },
            );
        }
        let mut out = json!({
            "client_id": id,
            "client_id_issued_at": now_secs(),
            "redirect_uris": uris,
            "token_endpoint_auth_method": auth.as_str(),
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
        });
        if confidential {
            out["client_secret"] = json!(secret);
            out["client_secret_expires_at"] = json!(0);
        }
        if let Some(name) = client_name {
            out["client_name"] = json!(name);
        }
        AuthResponse::json(201, &out)
    }

    /// Validates an authorize request; errors that must not redirect are pages.
    fn check_authorize(
        &self,
        p: &HashMap<String, String>,
        base: &str,
    ) -> Result<(String, String), AuthResponse> {
        let client_id = p.get("client_id").cloned().unwrap_or_default();
        let redirect_uri = p.get("redirect_uri").cloned().unwrap_or_default();
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let ttl = self.cfg.unused_client_ttl;
        let Some(client) = clients.get_mut(&client_id).filter(|c| !c.expired(now, ttl)) else {
            return Err(AuthResponse::html(
                400,
                "<p>Unknown client_id. Register the client first (POST /oauth/register).</p>"
                    .into(),
            ));
        };
        // Exact match, never a prefix: a mismatch is shown, never redirected to.
        if !client.redirect_uris.contains(&redirect_uri) {
            return Err(AuthResponse::html(
                400,
                "<p>redirect_uri does not exactly match a registered redirect URI.</p>".into(),
            ));
        }
        // A sign-in in progress: spared by eviction for a while.
        if let Some(r) = client.dynamic.as_mut() {
            r.touched = Some(now);
        }
        let redirect_err = |error: &str, desc: &str| {
            let mut loc = format!(
                "{redirect_uri}{}error={}&error_description={}",
                if redirect_uri.contains('?') { '&' } else { '?' },
                error,
                form::encode(desc)
            );
            if let Some(s) = p.get("state") {
                loc.push_str(&format!("&state={}", form::encode(s)));
            }
            loc.push_str(&format!("&iss={}", form::encode(base)));
            AuthResponse::redirect(loc)
        };
        if p.get("response_type").map(String::as_str) != Some("code") {
            return Err(redirect_err(
                "unsupported_response_type",
                "response_type must be code",
            ));
        }
        if p.get("code_challenge_method").map(String::as_str) != Some("S256") {
            return Err(redirect_err(
                "invalid_request",
                "PKCE with code_challenge_method=S256 is required (plain is refused)",
            ));
        }
        let challenge = p.get("code_challenge").cloned().unwrap_or_default();
        if challenge.len() != 43
            || !challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(redirect_err(
                "invalid_request",
                "code_challenge must be the base64url SHA-256 of the verifier",
            ));
        }
        let resource = p
            .get("resource")
            .cloned()
            .unwrap_or_else(|| resource_url(base));
        if canonical_resource(&resource, base).is_none() {
            return Err(redirect_err(
                "invalid_target",
                "resource must identify this server (its base URL or its /mcp endpoint)",
            ));
        }
        Ok((client_id, redirect_uri))
    }

    /// The password page. Its form posts to `authorize`, relative to the
    /// page, so it reaches this server through whatever path prefix a
    /// reverse proxy mounted it under (and stays within `form-action 'self'`).
    fn authorize_page(&self, query: &str, base: &str) -> AuthResponse {
        let (p, repeated) = form::parse(query);
        if !repeated.is_empty() {
            return AuthResponse::html(400, "<p>Repeated parameters are not allowed.</p>".into());
        }
        let (client_id, redirect_uri) = match self.check_authorize(&p, base) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let name = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&client_id)
            .and_then(|c| c.name.clone());
        let hidden: String = [
            "response_type",
            "client_id",
            "redirect_uri",
            "code_challenge",
            "code_challenge_method",
            "state",
            "resource",
            "scope",
        ]
        .iter()
        .filter_map(|k| {
            p.get(*k).map(|v| {
                format!(
                    "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                    html_escape(v)
                )
            })
        })
        .collect();
        AuthResponse::html(
            200,
            format!(
                "<!doctype html><meta charset=\"utf-8\"><title>Authorize coding-tools-mcp</title><body style=\"font-family:sans-serif;max-width:32em;margin:3em auto\"><h1>Authorize access</h1><p>Client {}<code>{}</code> asks to use the coding tools of this workspace (run commands, change files).</p><p>Redirect URI: <code>{}</code> — the authorization is sent there. Allow only if that is the application you are signing in to.</p><p>Enter the server's authorization password to allow it.</p><form method=\"post\" action=\"authorize\">{hidden}<input type=\"password\" name=\"password\" autofocus required> <button type=\"submit\">Allow</button></form>",
                name.map(|n| format!("<strong>{}</strong> ", html_escape(&n)))
                    .unwrap_or_default(),
                html_escape(&client_id),
                html_escape(&redirect_uri),
            ),
        )
    }

    fn authorize_submit(&self, req: &AuthRequest<'_>, base: &str) -> AuthResponse {
        let (p, _) = form::parse(&String::from_utf8_lossy(req.body));
        let (client_id, redirect_uri) = match self.check_authorize(&p, base) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let given = sha(p.get("password").map(String::as_bytes).unwrap_or_default());
        if !ct_eq(&given, &sha(self.cfg.password.as_bytes())) {
            return AuthResponse::html(401, "<p>Wrong password. Go back and try again.</p>".into());
        }
        let Ok(code) = random_token(&self.rng, 32) else {
            return AuthResponse::error(500, "server_error", "no randomness");
        };
        let resource = p
            .get("resource")
            .and_then(|r| canonical_resource(r, base))
            .unwrap_or_else(|| resource_url(base));
        let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        codes.retain(|_, c| c.expires > now);
        if codes.len() >= MAX_PENDING_CODES {
            return AuthResponse::error(
                503,
                "temporarily_unavailable",
                "too many authorization codes are pending; retry shortly",
            );
        }
        codes.insert(
            code.clone(),
            Code {
                client_id,
                redirect_uri: redirect_uri.clone(),
                challenge: p.get("code_challenge").cloned().unwrap_or_default(),
                resource,
                scope: p.get("scope").cloned().unwrap_or_else(|| "mcp".into()),
                expires: now + self.cfg.code_ttl,
            },
        );
        drop(codes);
        let mut loc = format!(
            "{redirect_uri}{}code={code}",
            if redirect_uri.contains('?') { '&' } else { '?' }
        );
        if let Some(s) = p.get("state") {
            loc.push_str(&format!("&state={}", form::encode(s)));
        }
        loc.push_str(&format!("&iss={}", form::encode(base)));
        AuthResponse::redirect(loc)
    }

    fn token(&self, req: &AuthRequest<'_>, base: &str) -> AuthResponse {
        if !req.content_type.is_some_and(|c| {
            c.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        }) {
            return AuthResponse::error(
                400,
                "invalid_request",
                "the token request must be application/x-www-form-urlencoded",
            );
        }
        let (p, repeated) = form::parse(&String::from_utf8_lossy(req.body));
        if !repeated.is_empty() {
            return AuthResponse::error(400, "invalid_request", "repeated parameters");
        }
        if p.get("grant_type").map(String::as_str) != Some("authorization_code") {
            return AuthResponse::error(
                400,
                "unsupported_grant_type",
                "only authorization_code is supported",
            );
        }
        // Client authentication, bound to the method the client registered.
        let basic = req.authorization.and_then(|h| {
            h.strip_prefix("Basic ")
                .or_else(|| h.strip_prefix("basic "))
        });
        let form_id = p.get("client_id");
        let (client_id, secret, method) = match basic {
            Some(b) => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
                    .and_then(|d| String::from_utf8(d).ok())
                    .unwrap_or_default();
                let (id, sec) = decoded.split_once(':').unwrap_or((&decoded, ""));
                (
                    form::decode(id),
                    Some(form::decode(sec)),
                    ClientAuth::SecretBasic,
                )
            }
            None => (
                form_id.cloned().unwrap_or_default(),
                p.get("client_secret").cloned(),
                if p.contains_key("client_secret") {
                    ClientAuth::SecretPost
                } else {
                    ClientAuth::None
                },
            ),
        };
        // RFC 6749 §5.2: 401 with a challenge when the client tried HTTP
        // authentication, else 400 (as the reference answers every case).
        let status = if basic.is_some() { 401 } else { 400 };
        let invalid_client = || {
            let mut r = AuthResponse::error(
                status,
                "invalid_client",
                "client authentication failed (unknown client, wrong secret, or not the method it registered)",
            );
            if status == 401 {
                r.headers.push((
                    "www-authenticate".into(),
                    "Basic realm=\"coding-tools-mcp\"".into(),
                ));
            }
            r
        };
        // A form client_id beside HTTP Basic must name the same client.
        if basic.is_some() && form_id.is_some_and(|f| *f != client_id) {
            return invalid_client();
        }
        {
            let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            let ttl = self.cfg.unused_client_ttl;
            let Some(client) = clients
                .get(&client_id)
                .filter(|c| !c.expired(Instant::now(), ttl))
            else {
                return invalid_client();
            };
            if client.auth != method {
                return invalid_client();
            }
            if let Some(want) = &client.secret_digest {
                let given = sha(secret.as_deref().unwrap_or("").as_bytes());
                if !ct_eq(&given, want) {
                    return invalid_client();
                }
            }
        }
        let grant = |d: &str| AuthResponse::error(400, "invalid_grant", d);
        // One-time: the code is removed whatever happens next.
        let Some(code) = p.get("code").and_then(|c| {
            self.codes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(c)
        }) else {
            return grant("unknown, used or expired authorization code");
        };
        if SystemTime::now() > code.expires {
            return grant("the authorization code expired");
        }
        if code.client_id != client_id {
            return grant("the code was issued to another client");
        }
        if p.get("redirect_uri") != Some(&code.redirect_uri) {
            return grant("redirect_uri does not match the authorization request");
        }
        let verifier = p.get("code_verifier").cloned().unwrap_or_default();
        if !(43..=128).contains(&verifier.len())
            || !verifier
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        {
            return grant("code_verifier must be 43-128 characters of [A-Za-z0-9-._~]");
        }
        if B64.encode(sha(verifier.as_bytes())) != code.challenge {
            return grant("PKCE verification failed");
        }
        if let Some(r) = p.get("resource")
            && canonical_resource(r, base).as_ref() != Some(&code.resource)
        {
            return AuthResponse::error(
                400,
                "invalid_target",
                "resource differs from the authorization request",
            );
        }
        if code.resource != resource_url(base) {
            return AuthResponse::error(
                400,
                "invalid_target",
                "the code was issued for another resource",
            );
        }
        if let Some(r) = self
            .clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&client_id)
            .and_then(|c| c.dynamic.as_mut())
        {
            r.completed = true;
        }
        let ttl = self.cfg.token_ttl.as_secs();
        let token = self.mint(req.audience, &client_id, &code.scope, now_secs() + ttl);
        AuthResponse::json(
            200,
            &json!({"access_token": token, "token_type": "Bearer", "expires_in": ttl, "scope": code.scope}),
        )
    }

    /// Signs an access token (`ctm1.<payload>.<hmac>`).
    pub fn mint(&self, audience: &str, client_id: &str, scope: &str, exp: u64) -> String {
        let payload = json!({"aud": audience, "sub": client_id, "scope": scope, "exp": exp, "iat": now_secs()});
        let body = format!(
            "ctm1.{}",
            B64.encode(serde_json::to_vec(&payload).unwrap_or_default())
        );
        let tag = hmac::sign(&self.key, body.as_bytes());
        format!("{body}.{}", B64.encode(tag.as_ref()))
    }

    /// Checks a bearer token: signature, expiry, and `audience` (what
    /// [`AuthRequest::audience`] was when it was minted).
    pub fn verify(&self, token: &str, audience: &str) -> Result<(), &'static str> {
        let (body, tag) = token.rsplit_once('.').ok_or("malformed token")?;
        let tag = B64.decode(tag).map_err(|_| "malformed token")?;
        hmac::verify(&self.key, body.as_bytes(), &tag).map_err(|_| "bad signature")?;
        let payload = body.strip_prefix("ctm1.").ok_or("malformed token")?;
        let claims: Value =
            serde_json::from_slice(&B64.decode(payload).map_err(|_| "malformed token")?)
                .map_err(|_| "malformed token")?;
        if claims["exp"].as_u64().is_none_or(|e| e <= now_secs()) {
            return Err("expired token");
        }
        if claims["aud"].as_str() != Some(audience) {
            return Err("token issued for another resource");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_redirects() {
        assert!(parse_token_secret(&"ab".repeat(32)).is_ok());
        assert!(parse_token_secret("abc").is_err());
        for ok in [
            "https://app.example/cb",
            "http://localhost:3000/cb",
            "http://127.0.0.1/cb",
            "http://[::1]:9/x",
        ] {
            assert!(redirect_uri_allowed(ok), "{ok}");
        }
        for bad in [
            "http://evil.example/cb",
            "javascript:alert(1)",
            "https://x/cb#frag",
            "http://localhost.evil.example/cb",
            "http://127.0.0.1:80@evil.example/cb",
            "http://[::1]@evil.example/cb",
            "https://user@app.example/cb",
            "http://127.0.0.1\\@evil.example/cb",
            "http://127.0.0.1:x/cb",
            "http://127.0.0.1 /cb",
        ] {
            assert!(!redirect_uri_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_bind_audience_and_expiry() {
        let s = OAuthServer::new(OAuthConfig {
            password: "p".into(),
            token_key: vec![7; 32],
            token_ttl: Duration::from_secs(60),
            code_ttl: Duration::from_secs(60),
            preregistered: None,
            max_clients: DEFAULT_MAX_CLIENTS,
            unused_client_ttl: DEFAULT_UNUSED_CLIENT_TTL,
        });
        let good = s.mint("http://h:1/mcp", "c", "mcp", now_secs() + 60);
        assert_eq!(s.verify(&good, "http://h:1/mcp"), Ok(()));
        assert_eq!(
            s.verify(&good, "http://other:1/mcp"),
            Err("token issued for another resource")
        );
        let old = s.mint("http://h:1/mcp", "c", "mcp", now_secs() - 1);
        assert_eq!(s.verify(&old, "http://h:1/mcp"), Err("expired token"));
        let mut tampered = good.clone();
        tampered.insert(10, 'x');
        assert!(s.verify(&tampered, "http://h:1/mcp").is_err());
    }

    fn server(max_clients: usize) -> OAuthServer {
        OAuthServer::new(OAuthConfig {
            password: "p".into(),
            token_key: vec![7; 32],
            token_ttl: Duration::from_secs(60),
            code_ttl: Duration::from_secs(60),
            preregistered: None,
            max_clients,
            unused_client_ttl: DEFAULT_UNUSED_CLIENT_TTL,
        })
    }

    fn register_from(s: &OAuthServer, ip: &str) -> AuthResponse {
        let body = json!({"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}).to_string();
        s.handle(&AuthRequest {
            method: "POST",
            path: "/oauth/register",
            query: "",
            authorization: None,
            content_type: Some("application/json"),
            body: body.as_bytes(),
            base_url: "http://h:1",
            audience: "http://h:1/mcp",
            client_ip: Some(ip.parse().unwrap()),
        })
    }

    fn held_from(s: &OAuthServer, ip: &str) -> Vec<String> {
        let key = Some(crate::client_key(ip.parse().unwrap()));
        let clients = s.clients.lock().unwrap();
        let mut held: Vec<(Instant, String)> = clients
            .iter()
            .filter_map(|(id, c)| c.dynamic.map(|r| (r, id)))
            .filter(|(r, _)| !r.completed && r.from == key)
            .map(|(r, id)| (r.at, id.clone()))
            .collect();
        held.sort();
        held.into_iter().map(|(_, id)| id).collect()
    }

    fn id(r: &AuthResponse) -> String {
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        v["client_id"].as_str().unwrap().to_owned()
    }

    /// See: attack review of issue 17, M3. A full table forgets the oldest
    /// unused registration of the busiest address instead of refusing, and
    /// an IPv6 /64 is one address.
    #[test]
    fn attack_m3_registration_flood_evicts_instead_of_refusing() {
        let s = server(20);
        // An IPv6 host rotating within its /64 holds the share of one address
        // (2): its newest registrations replace each other, the first stays
        // (attack review of this session, L2: a flood from a shared address
        // must not push out the older registration a client signs in with).
        let ids: Vec<String> = (1..=5)
            .map(|i| id(&register_from(&s, &format!("fd99::{i}"))))
            .collect();
        assert_eq!(
            held_from(&s, "fd99::abcd"),
            vec![ids[0].clone(), ids[4].clone()]
        );
        // Ten addresses fill the table (20 unused).
        for a in 1..=9 {
            for _ in 0..2 {
                id(&register_from(&s, &format!("10.0.0.{a}")));
            }
        }
        let victim = id(&register_from(&s, "10.0.1.1"));
        assert_eq!(held_from(&s, "10.0.1.1"), vec![victim.clone()]);
        // The flood goes on from the same addresses: only they lose registrations.
        for round in 0..3 {
            for a in 1..=9 {
                let newest = id(&register_from(&s, &format!("10.0.0.{a}")));
                assert!(
                    held_from(&s, &format!("10.0.0.{a}")).contains(&newest),
                    "{round}"
                );
            }
        }
        assert_eq!(held_from(&s, "10.0.1.1"), vec![victim.clone()]);
        assert_eq!(unused(&s.clients.lock().unwrap(), |_| true), 20);
        // Completed clients do not count against the cap.
        for c in s.clients.lock().unwrap().values_mut() {
            if let Some(r) = c.dynamic.as_mut() {
                r.completed = true;
            }
        }
        for _ in 0..2 {
            id(&register_from(&s, "10.0.2.1"));
        }
        let clients = s.clients.lock().unwrap();
        assert_eq!(unused(&clients, |_| true), 2);
        assert_eq!(clients.len(), 22);
    }

    /// See: target/attack-session3.md L2. A client that opened its
    /// authorize page keeps its registration while a flood from many
    /// addresses fills the table, and so does an older one from an address
    /// the flood shares.
    #[test]
    fn a_sign_in_in_progress_survives_a_registration_flood() {
        let s = server(20);
        let mine = id(&register_from(&s, "10.9.0.1"));
        let page = s.handle(&AuthRequest {
            method: "GET",
            path: "/oauth/authorize",
            query: &format!(
                "response_type=code&client_id={mine}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256"
            ),
            authorization: None,
            content_type: None,
            body: b"",
            base_url: "http://h:1",
            audience: "http://h:1/mcp",
            client_ip: Some("10.9.0.1".parse().unwrap()),
        });
        assert_eq!(page.status, 200, "{}", String::from_utf8_lossy(&page.body));
        // 1,001 addresses, one registration each.
        for a in 0..1001u32 {
            id(&register_from(
                &s,
                &format!("10.{}.{}.{}", 10 + a / 65536, (a / 256) % 256, a % 256),
            ));
        }
        assert_eq!(held_from(&s, "10.9.0.1"), vec![mine.clone()]);
        // An older registration from the flooding address itself stays too.
        let s = server(20);
        let older = id(&register_from(&s, "10.8.0.1"));
        for _ in 0..REGISTRATION_BURST - 1 {
            id(&register_from(&s, "10.8.0.1"));
        }
        assert!(held_from(&s, "10.8.0.1").contains(&older));
    }

    /// See: attack review of issue 17, M3. One address registers at most
    /// REGISTRATION_BURST at once; then 429 with Retry-After.
    #[test]
    fn attack_m3_registrations_are_rate_limited_per_address() {
        let s = server(1000);
        for _ in 0..REGISTRATION_BURST {
            id(&register_from(&s, "2001:db8::1"));
        }
        let r = register_from(&s, "2001:db8::2");
        assert_eq!(r.status, 429);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"], "temporarily_unavailable");
        let retry = r.headers.iter().find(|(k, _)| k == "retry-after").unwrap();
        let secs: u64 = retry.1.parse().unwrap();
        assert!((1..=REGISTRATION_EVERY.as_secs()).contains(&secs));
        // Another address is not affected.
        id(&register_from(&s, "2001:db8:0:1::1"));
    }
}
