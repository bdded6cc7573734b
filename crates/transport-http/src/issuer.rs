//! Resource-server mode: an external authorization server issues the access
//! tokens (`--oauth-issuer`), and this server only verifies them.
//!
//! The issuer's metadata (RFC 8414 `/.well-known/oauth-authorization-server`,
//! then OIDC `/.well-known/openid-configuration`) names its `jwks_uri`; the
//! key set fetched from there is cached. A token naming a `kid` the cache
//! lacks makes one refresh, but refreshes of any cause draw on one small
//! bucket ([`REFRESH_BURST`], then one per [`REFRESH_EVERY`]), so a flood of
//! invented `kid`s costs the issuer almost nothing. Keys older than
//! [`MAX_KEY_AGE`] are fetched again on use (a failed fetch keeps them).
//!
//! Every fetch is a plain GET with no redirects followed, answered within
//! [`FETCH_TIMEOUT`] with at most [`MAX_DOCUMENT_BYTES`]. Only `https` URLs
//! are fetched, or `http` ones on a loopback host: a key set read over
//! plain HTTP from elsewhere could be swapped on the way, and then anyone
//! could mint tokens. The metadata's `issuer` must equal the configured one
//! exactly (RFC 8414 §3.3).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctm_auth::{IssuerRules, KeySet, TokenBucket, TokenRejection};
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Longest wait for one metadata or key-set fetch, answer included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest metadata or key-set document read.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// Refreshes allowed at once ...
pub const REFRESH_BURST: u32 = 3;
/// ... and then one per this long.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// Keys older than this are fetched again when next used.
pub const MAX_KEY_AGE: Duration = Duration::from_secs(3600);

/// Whether `url` may be fetched: `https`, or `http` on a loopback host
/// (`127.0.0.0/8`, `[::1]`, `localhost`); no userinfo, no fragment.
pub fn check_fetch_url(url: &str) -> Result<Uri, String> {
    if url.contains('#') {
        return Err(format!("{url}: a URL with a fragment"));
    }
    let uri: Uri = url
        .parse()
        .map_err(|_| format!("{url}: not an absolute URL"))?;
    let authority = uri.authority().ok_or_else(|| format!("{url}: no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!("{url}: userinfo is not allowed"));
    }
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback_host(authority.host()) => Ok(uri),
        Some("http") => Err(format!(
            "{url}: plain http is allowed only on a loopback host; use https"
        )),
        _ => Err(format!("{url}: not an http(s) URL")),
    }
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The metadata URLs of `issuer`, in the order tried: RFC 8414 (the
/// well-known segment between host and path), then OIDC discovery (appended).
pub fn discovery_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let (scheme, rest) = trimmed.split_once("://").unwrap_or(("https", trimmed));
    let (host, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    vec![
        format!("{scheme}://{host}/.well-known/oauth-authorization-server{path}"),
        format!("{trimmed}/.well-known/openid-configuration"),
    ]
}

/// The `jwks_uri` of a metadata document that belongs to `issuer`.
fn jwks_uri_of(doc: &[u8], issuer: &str) -> Result<String, String> {
    let v: Value = serde_json::from_slice(doc).map_err(|_| "metadata is not JSON".to_owned())?;
    let named = v.get("issuer").and_then(Value::as_str).unwrap_or_default();
    if named != issuer {
        return Err(format!(
            "metadata names the issuer {named:?}, not {issuer:?} (RFC 8414 §3.3)"
        ));
    }
    let jwks = v
        .get("jwks_uri")
        .and_then(Value::as_str)
        .ok_or("metadata has no jwks_uri")?;
    check_fetch_url(jwks)?;
    Ok(jwks.to_owned())
}

/// A GET client: TLS (native roots) when the issuer is https, plain
/// (loopback only) when it is not.
enum Fetcher {
    Plain(Client<HttpConnector, Empty<Bytes>>),
    Tls(Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>),
}

impl Fetcher {
    fn new(tls: bool) -> Result<Self, String> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(FETCH_TIMEOUT));
        http.enforce_http(!tls);
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_idle_timeout(Duration::from_secs(30));
        if !tls {
            return Ok(Self::Plain(builder.build(http)));
        }
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| format!("cannot load the system's root certificates for https: {e}"))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self::Tls(builder.build(https)))
    }

    async fn get(&self, url: &str) -> Result<Bytes, String> {
        let uri = check_fetch_url(url)?;
        if matches!(self, Self::Plain(_)) && uri.scheme_str() == Some("https") {
            return Err(format!(
                "{url}: an https URL from an http issuer (configure an https issuer)"
            ));
        }
        let req = Request::get(uri)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                // This crate's own name and version: they move on their own.
                concat!("ctm-transport-http/", env!("CARGO_PKG_VERSION")),
            )
            .body(Empty::new())
            .map_err(|e| format!("{url}: {e}"))?;
        let work = async {
            let resp = match self {
                Self::Plain(c) => c.request(req).await,
                Self::Tls(c) => c.request(req).await,
            }
            .map_err(|e| format!("{url}: {e}"))?;
            if resp.status() != http::StatusCode::OK {
                return Err(format!(
                    "{url}: HTTP {} (redirects are not followed)",
                    resp.status()
                ));
            }
            let body = Limited::new(resp.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map_err(|e| format!("{url}: {e} (at most {MAX_DOCUMENT_BYTES} bytes)"))?;
            Ok(body.to_bytes())
        };
        tokio::time::timeout(FETCH_TIMEOUT, work)
            .await
            .map_err(|_| format!("{url}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?
    }
}

/// Why the keys were not refreshed.
#[derive(Debug, thiserror::Error)]
enum RefreshError {
    /// Too many refreshes lately; the next is allowed after this long.
    #[error("key refresh skipped: the refresh budget is spent (next in {} s)", .0.as_secs() + 1)]
    BudgetSpent(Duration),
    /// A fetch or the document failed.
    #[error("{0}")]
    Failed(String),
}

/// What a refresh remembers between attempts.
struct RefreshState {
    jwks_uri: Option<String>,
    bucket: TokenBucket,
}

struct Cached {
    keys: Arc<KeySet>,
    at: Instant,
}

/// An external authorization server whose JWT access tokens this server
/// accepts.
pub struct ExternalIssuer {
    rules: IssuerRules,
    fetcher: Fetcher,
    cached: RwLock<Option<Cached>>,
    /// Bumped by every successful refresh: a request that waited for a
    /// refresh in progress does not start another.
    generation: AtomicU64,
    refresh: tokio::sync::Mutex<RefreshState>,
}

impl std::fmt::Debug for ExternalIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalIssuer")
            .field("issuer", &self.rules.issuer)
            .finish()
    }
}

impl ExternalIssuer {
    /// An issuer from its identifier and an optional scope every token must
    /// grant. Refuses URLs [`check_fetch_url`] refuses, and URLs with a
    /// query. Needs no runtime; nothing is fetched yet.
    pub fn new(issuer: &str, required_scope: Option<String>) -> Result<Self, String> {
        let uri = check_fetch_url(issuer).map_err(|e| format!("--oauth-issuer {e}"))?;
        if uri.query().is_some() {
            return Err(format!("--oauth-issuer {issuer}: an issuer has no query"));
        }
        if let Some(s) = &required_scope
            && (s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\'))
        {
            return Err(
                "--oauth-required-scope must be one scope token (visible ASCII, no quotes)".into(),
            );
        }
        Ok(Self {
            rules: IssuerRules {
                issuer: issuer.to_owned(),
                required_scope,
            },
            fetcher: Fetcher::new(uri.scheme_str() == Some("https"))?,
            cached: RwLock::new(None),
            generation: AtomicU64::new(0),
            refresh: tokio::sync::Mutex::new(RefreshState {
                jwks_uri: None,
                bucket: TokenBucket::full(REFRESH_BURST, REFRESH_EVERY, Instant::now()),
            }),
        })
    }

    /// The issuer identifier.
    pub fn issuer(&self) -> &str {
        &self.rules.issuer
    }

    /// The scope every token must grant, if any.
    pub fn required_scope(&self) -> Option<&str> {
        self.rules.required_scope.as_deref()
    }

    /// RFC 9728 metadata of the protected resource `resource`.
    pub fn resource_metadata(&self, resource: &str) -> Value {
        let mut doc = json!({
            "resource": resource,
            "authorization_servers": [self.rules.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "coding-tools-mcp",
        });
        if let Some(s) = &self.rules.required_scope {
            doc["scopes_supported"] = json!([s]);
        }
        doc
    }

    fn current(&self) -> (Option<(Arc<KeySet>, Instant)>, u64) {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = self
            .cached
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| (c.keys.clone(), c.at));
        (cached, generation)
    }

    /// Verifies an access token for `resource` (this server's canonical
    /// resource URL, which `aud` must contain).
    pub async fn verify(&self, token: &str, resource: &str) -> Result<(), TokenRejection> {
        // Everything a key is not needed for first: a malformed token, alg
        // none or HS256 never causes a fetch.
        let kid = self.rules.token_kid(token)?;
        let (cached, seen) = self.current();
        let keys = match cached {
            Some((keys, at)) if keys.has_kid(&kid) => {
                if at.elapsed() >= MAX_KEY_AGE {
                    self.refresh_if_idle(seen).await;
                    self.current().0.map_or(keys, |(k, _)| k)
                } else {
                    keys
                }
            }
            _ => {
                self.refresh_after(seen).await;
                self.current()
                    .0
                    .map(|(k, _)| k)
                    .ok_or(TokenRejection::KeysUnavailable)?
            }
        };
        self.rules
            .verify(token, resource, &keys, ctm_auth::unix_now())
    }

    /// Fetches the keys now (start-up), within the refresh budget, unless a
    /// request already did.
    pub async fn prefetch(&self) -> Result<usize, String> {
        let mut state = self.refresh.lock().await;
        if let (Some((keys, _)), _) = self.current() {
            return Ok(keys.len());
        }
        self.refresh_locked(&mut state)
            .await
            .map_err(|e| e.to_string())
    }

    /// A refresh unless one finished since `seen`; waits for one in progress.
    async fn refresh_after(&self, seen: u64) {
        let mut state = self.refresh.lock().await;
        if self.generation.load(Ordering::Acquire) != seen {
            return;
        }
        match self.refresh_locked(&mut state).await {
            Ok(_) => {}
            // Invented kids must not flood the log either.
            Err(e @ RefreshError::BudgetSpent(_)) => {
                tracing::debug!("oauth issuer {}: {e}", self.rules.issuer);
            }
            Err(e) => tracing::warn!("oauth issuer {}: {e}", self.rules.issuer),
        }
    }

    /// A refresh of stale keys, unless another request is refreshing.
    async fn refresh_if_idle(&self, seen: u64) {
        let Ok(mut state) = self.refresh.try_lock() else {
            return;
        };
        if self.generation.load(Ordering::Acquire) != seen {
            return;
        }
        match self.refresh_locked(&mut state).await {
            Ok(_) | Err(RefreshError::BudgetSpent(_)) => {}
            Err(e) => tracing::warn!(
                "oauth issuer {}: {e}; keeping the keys fetched before",
                self.rules.issuer
            ),
        }
    }

    async fn refresh_locked(&self, state: &mut RefreshState) -> Result<usize, RefreshError> {
        if let Err(wait) = state.bucket.take(Instant::now()) {
            return Err(RefreshError::BudgetSpent(wait));
        }
        let jwks_uri = match state.jwks_uri.clone() {
            Some(u) => u,
            None => {
                let u = self.discover().await.map_err(RefreshError::Failed)?;
                state.jwks_uri = Some(u.clone());
                u
            }
        };
        let fetched = match self.fetcher.get(&jwks_uri).await {
            Ok(b) => b,
            Err(e) => {
                // The issuer may have moved its keys: discover again next time.
                state.jwks_uri = None;
                return Err(RefreshError::Failed(e));
            }
        };
        let keys = KeySet::parse(&fetched)
            .map_err(|e| RefreshError::Failed(format!("{jwks_uri}: {e}")))?;
        let n = keys.len();
        *self.cached.write().unwrap_or_else(|e| e.into_inner()) = Some(Cached {
            keys: Arc::new(keys),
            at: Instant::now(),
        });
        self.generation.fetch_add(1, Ordering::AcqRel);
        tracing::info!(
            "oauth issuer {}: {n} verification key(s) from {jwks_uri}",
            self.rules.issuer
        );
        Ok(n)
    }

    async fn discover(&self) -> Result<String, String> {
        let mut errors = Vec::new();
        for url in discovery_urls(&self.rules.issuer) {
            match self.fetcher.get(&url).await {
                Ok(doc) => match jwks_uri_of(&doc, &self.rules.issuer) {
                    Ok(u) => return Ok(u),
                    Err(e) => errors.push(format!("{url}: {e}")),
                },
                Err(e) => errors.push(e),
            }
        }
        Err(format!("no usable metadata: {}", errors.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetchable_urls() {
        for ok in [
            "https://login.example.com",
            "https://login.example.com/realms/x",
            "http://127.0.0.1:8080",
            "http://127.9.9.9/x",
            "http://[::1]:9/",
            "http://localhost:3000/oidc",
        ] {
            assert!(check_fetch_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://login.example.com",
            "http://10.0.0.1",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example",
            "https://user@login.example.com",
            "http://127.0.0.1@evil.example",
            "https://login.example.com/#x",
            "ftp://login.example.com",
            "/relative",
            "",
        ] {
            assert!(check_fetch_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn discovery_order_and_path_insertion() {
        assert_eq!(
            discovery_urls("https://a.example/tenant/1"),
            vec![
                "https://a.example/.well-known/oauth-authorization-server/tenant/1",
                "https://a.example/tenant/1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            discovery_urls("http://127.0.0.1:9"),
            vec![
                "http://127.0.0.1:9/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn metadata_must_name_the_issuer() {
        let doc = br#"{"issuer":"https://a.example","jwks_uri":"https://a.example/jwks"}"#;
        assert_eq!(
            jwks_uri_of(doc, "https://a.example").unwrap(),
            "https://a.example/jwks"
        );
        assert!(jwks_uri_of(doc, "https://a.example/").is_err());
        assert!(jwks_uri_of(doc, "https://b.example").is_err());
        let plain = br#"{"issuer":"https://a.example","jwks_uri":"http://a.example/jwks"}"#;
        assert!(jwks_uri_of(plain, "https://a.example").is_err());
        assert!(jwks_uri_of(b"{}", "https://a.example").is_err());
    }

    #[test]
    fn issuer_configuration() {
        assert!(ExternalIssuer::new("http://127.0.0.1:9", None).is_ok());
        assert!(ExternalIssuer::new("http://idp.example", None).is_err());
        assert!(ExternalIssuer::new("http://127.0.0.1:9/?x=1", None).is_err());
        assert!(ExternalIssuer::new("http://127.0.0.1:9", Some("mcp".into())).is_ok());
        for bad in ["", "a b", "a\"b"] {
            assert!(
                ExternalIssuer::new("http://127.0.0.1:9", Some(bad.into())).is_err(),
                "{bad}"
            );
        }
    }
}
