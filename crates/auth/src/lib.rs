//! HTTP authentication of coding-tools-mcp, with no MCP types.
//!
//! Static bearer tokens ([`BearerToken`], `--auth-token`), compared in
//! constant time, and the OAuth 2.1 authorization server ([`OAuthServer`],
//! `--oauth-mode`): authorization code with PKCE S256 only, RFC 7591 dynamic
//! registration bound to the client's authentication method, RFC 8414 and
//! RFC 9728 metadata, one-time codes, and HMAC-signed access tokens bound to
//! this server's resource. It knows HTTP only as plain request/response
//! structs; the HTTP transport mounts it.
//!
//! In resource-server mode (`--oauth-issuer`) another server issues the
//! tokens: [`IssuerRules::verify`] checks its JWT access tokens (RFC 9068)
//! against a [`KeySet`] parsed from its JWKS, which the transport fetches.
//!
//! ```
//! let token = ctm_auth::BearerToken::new("s3cret-token").unwrap();
//! assert!(token.verify_header(b"Bearer s3cret-token"));
//! assert!(!token.verify_header(b"Bearer wrong"));
//! ```

#![deny(missing_docs)]

mod form;
mod jwt;
mod oauth;
mod rate;

pub use jwt::{
    IssuerRules, JwksError, KeySet, LEEWAY_SECS, MAX_KEYS, MAX_TOKEN_BYTES, TokenRejection,
    unix_now,
};
pub use oauth::{
    AuthRequest, AuthResponse, ClientAuth, DEFAULT_MAX_CLIENTS, DEFAULT_UNUSED_CLIENT_TTL,
    MAX_CLIENT_NAME_CHARS, MAX_PENDING_CODES, MAX_REDIRECT_URI_BYTES, MAX_REDIRECT_URIS,
    OAuthConfig, OAuthConfigError, OAuthServer, REGISTRATION_BURST, REGISTRATION_EVERY,
    STRONG_PASSWORD_CHARS, authorize_client_id, parse_token_secret, random_token,
    redirect_uri_allowed, resource_url,
};
pub use rate::{TokenBucket, client_key, retry_after_secs};
pub use ring::rand::SystemRandom;

use ring::digest::{SHA256, digest};

/// Why a configured credential is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The token is empty or contains whitespace or control characters.
    #[error("the bearer token must be non-empty visible ASCII without spaces")]
    MalformedToken,
}

/// A static bearer token. Only its SHA-256 digest is kept, so the secret is
/// not in memory longer than start-up and comparisons take the same time
/// whatever the input.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
    strong: bool,
}

/// A static token at least this long is treated as high-entropy (a
/// generated one has 43 characters): it is verified even while the
/// client's address backs off, as OAuth access tokens are.
pub const STRONG_TOKEN_CHARS: usize = 32;

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken([REDACTED])")
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, bytes).as_ref());
    out
}

impl BearerToken {
    /// A token operators pass with `--auth-token`.
    pub fn new(token: &str) -> Result<Self, AuthError> {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AuthError::MalformedToken);
        }
        Ok(Self {
            digest: sha256(token.as_bytes()),
            strong: token.len() >= STRONG_TOKEN_CHARS,
        })
    }

    /// Whether the token is long enough to be verified before any backoff
    /// (see [`STRONG_TOKEN_CHARS`]).
    pub fn is_strong(&self) -> bool {
        self.strong
    }

    /// Whether `presented` is the token.
    pub fn verify(&self, presented: &[u8]) -> bool {
        let other = sha256(presented);
        self.digest
            .iter()
            .zip(other.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Whether an `Authorization` header value carries the token
    /// (`Bearer <token>`, scheme case-insensitive).
    pub fn verify_header(&self, header: &[u8]) -> bool {
        bearer_credential(header).is_some_and(|t| self.verify(t))
    }
}

/// The SHA-256 digest of a presented credential, to remember one that
/// worked without keeping it.
pub fn credential_digest(bytes: &[u8]) -> [u8; 32] {
    sha256(bytes)
}

/// The credential of a `Bearer` authorization header.
pub fn bearer_credential(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at(header.iter().position(|b| *b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(BearerToken::new("").unwrap_err(), AuthError::MalformedToken);
        assert!(BearerToken::new("a b").is_err());
        let t = BearerToken::new("abc").unwrap();
        assert!(t.verify_header(b"bearer abc"));
        assert!(t.verify_header(b"Bearer   abc "));
        assert!(!t.verify_header(b"Basic abc"));
        assert!(!t.verify_header(b"Bearer abcd"));
        assert!(!t.verify_header(b"Bearer"));
        assert!(!t.verify_header(b""));
        assert_eq!(format!("{t:?}"), "BearerToken([REDACTED])");
        assert!(!t.is_strong());
        assert!(!BearerToken::new(&"x".repeat(31)).unwrap().is_strong());
        assert!(BearerToken::new(&"x".repeat(32)).unwrap().is_strong());
    }
}
