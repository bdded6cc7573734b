//! Resource-server mode: JWT access tokens (RFC 9068) of an external
//! authorization server, verified against the keys of its JWKS.
//!
//! Pure: the transport fetches the JWKS and hands the bytes here. The JOSE
//! work (signature verification, key decoding) is `jsonwebtoken`'s; this
//! module decides which key may verify which token and checks the claims a
//! second time with strict types.
//!
//! What a token must be: three base64url parts; a header whose `alg` is
//! RS256, ES256 or EdDSA (never `none`, never HS*: an issuer's public key is
//! no shared secret), whose `typ` is `at+jwt` (RFC 9068 §4, so an ID token
//! of the same issuer is no access token), with a `kid` naming a key of the
//! issuer of that algorithm's type, and no `crit`; a valid signature; `iss`
//! equal to the issuer; `aud` naming this server's resource (RFC 8707);
//! `exp` ahead of now and `nbf` (when present) behind it, each within
//! [`LEEWAY_SECS`]; the required scope, when one is configured, in `scope`
//! or `scp`.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;

/// Longest access token looked at, in bytes; a longer one is refused unread.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Most verification keys kept from one JWKS; further ones are ignored.
pub const MAX_KEYS: usize = 32;
/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 60;
/// Smallest RSA modulus accepted (2048 bits) ...
const MIN_RSA_MODULUS_BYTES: usize = 256;
/// ... and largest (8192 bits: bigger ones only cost verification time).
const MAX_RSA_MODULUS_BYTES: usize = 1024;
/// Longest `kid` kept.
const MAX_KID_BYTES: usize = 256;

/// Why an access token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenRejection {
    /// Not a JWS of three base64url parts with JSON header and claims, too
    /// long, a `crit` header, or a claim of the wrong type.
    #[error("malformed token")]
    Malformed,
    /// `alg` is not RS256, ES256 or EdDSA (`none` and HS* included).
    #[error("unsupported alg (accepted: RS256, ES256, EdDSA)")]
    UnsupportedAlgorithm,
    /// `typ` is not `at+jwt` (RFC 9068).
    #[error("typ is not at+jwt (RFC 9068 access token)")]
    NotAnAccessToken,
    /// No key of the issuer has the token's `kid` (or it has none).
    #[error("no key of the issuer has this kid")]
    UnknownKey,
    /// The key named by `kid` is of another algorithm than `alg`.
    #[error("alg does not match the key's")]
    AlgorithmMismatch,
    /// The signature does not verify.
    #[error("bad signature")]
    BadSignature,
    /// `iss` is not the configured issuer.
    #[error("token of another issuer")]
    WrongIssuer,
    /// `aud` does not name this server's resource.
    #[error("token issued for another resource")]
    WrongAudience,
    /// `exp` has passed.
    #[error("expired token")]
    Expired,
    /// `nbf` is ahead.
    #[error("token not yet valid")]
    NotYetValid,
    /// The required scope is missing (403, not 401).
    #[error("the token lacks the required scope")]
    InsufficientScope,
    /// The issuer's keys could not be fetched, so nothing can be verified.
    #[error("the issuer's keys are unavailable")]
    KeysUnavailable,
}

impl TokenRejection {
    /// The text of `error_description` in the challenge.
    pub fn description(self) -> &'static str {
        match self {
            Self::Malformed => "malformed token",
            Self::UnsupportedAlgorithm => "unsupported alg (accepted: RS256, ES256, EdDSA)",
            Self::NotAnAccessToken => "typ is not at+jwt (RFC 9068 access token)",
            Self::UnknownKey => "no key of the issuer has this kid",
            Self::AlgorithmMismatch => "alg does not match the key's",
            Self::BadSignature => "bad signature",
            Self::WrongIssuer => "token of another issuer",
            Self::WrongAudience => "token issued for another resource",
            Self::Expired => "expired token",
            Self::NotYetValid => "token not yet valid",
            Self::InsufficientScope => "the token lacks the required scope",
            Self::KeysUnavailable => "the issuer's keys are unavailable",
        }
    }
}

/// Why a JWKS document is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Not a JSON object with a `keys` array.
    #[error("not a JWK set (a JSON object with a keys array)")]
    NotASet,
    /// No key of the set is usable (RS256/ES256/EdDSA public keys with a `kid`).
    #[error("no usable signing key (RSA >= 2048 bits, P-256 or Ed25519, with a kid)")]
    NoUsableKey,
}

struct VerificationKey {
    alg: Algorithm,
    key: DecodingKey,
}

/// The verification keys of one JWKS, by `kid`.
pub struct KeySet {
    keys: HashMap<String, VerificationKey>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.keys.keys().collect();
        kids.sort();
        f.debug_struct("KeySet").field("kids", &kids).finish()
    }
}

impl KeySet {
    /// Parses a JWKS (RFC 7517). Keys it cannot use are skipped: other key
    /// types or curves, an `alg` other than the one its type implies, `use`
    /// other than `sig`, `key_ops` without `verify`, no `kid`, a repeated
    /// `kid` (the first wins), RSA moduli outside 2048-8192 bits, and any
    /// key carrying private parameters (an issuer that publishes its private
    /// key has lost it). At most [`MAX_KEYS`] are kept.
    pub fn parse(bytes: &[u8]) -> Result<Self, JwksError> {
        let doc: Value = serde_json::from_slice(bytes).map_err(|_| JwksError::NotASet)?;
        let entries = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(JwksError::NotASet)?;
        let mut keys = HashMap::new();
        for jwk in entries {
            if keys.len() >= MAX_KEYS {
                break;
            }
            if let Some((kid, key)) = usable_key(jwk) {
                keys.entry(kid).or_insert(key);
            }
        }
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(Self { keys })
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set is empty (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.contains_key(kid)
    }
}

fn usable_key(jwk: &Value) -> Option<(String, VerificationKey)> {
    let text = |k: &str| jwk.get(k).and_then(Value::as_str);
    let kid = text("kid").filter(|k| !k.is_empty() && k.len() <= MAX_KID_BYTES)?;
    if text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    if let Some(ops) = jwk.get("key_ops")
        && !ops
            .as_array()
            .is_some_and(|o| o.iter().any(|x| x == "verify"))
    {
        return None;
    }
    // Private parameters of RSA, EC and OKP keys.
    if ["d", "p", "q", "dp", "dq", "qi", "oth"]
        .iter()
        .any(|p| jwk.get(p).is_some())
    {
        return None;
    }
    let (alg, key) = match (text("kty")?, text("crv")) {
        ("RSA", _) => {
            let n = B64.decode(text("n")?).ok()?;
            let modulus = n.strip_prefix(&[0]).unwrap_or(&n);
            if !(MIN_RSA_MODULUS_BYTES..=MAX_RSA_MODULUS_BYTES).contains(&modulus.len()) {
                return None;
            }
            (
                Algorithm::RS256,
                DecodingKey::from_rsa_components(text("n")?, text("e")?).ok()?,
            )
        }
        ("EC", Some("P-256")) => (
            Algorithm::ES256,
            DecodingKey::from_ec_components(text("x")?, text("y")?).ok()?,
        ),
        ("OKP", Some("Ed25519")) => (
            Algorithm::EdDSA,
            DecodingKey::from_ed_components(text("x")?).ok()?,
        ),
        _ => return None,
    };
    if let Some(declared) = text("alg")
        && declared != alg_name(alg)
    {
        return None;
    }
    Some((kid.to_owned(), VerificationKey { alg, key }))
}

fn alg_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::RS256 => "RS256",
        Algorithm::ES256 => "ES256",
        Algorithm::EdDSA => "EdDSA",
        _ => "",
    }
}

/// What tokens of an external issuer must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerRules {
    /// The issuer identifier, compared exactly with `iss`.
    pub issuer: String,
    /// A scope every token must grant (in `scope` or `scp`), if any.
    pub required_scope: Option<String>,
}

/// A string or an array of strings (`aud`, `scp`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn iter(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self {
            Self::One(s) => Box::new(std::iter::once(s.as_str())),
            Self::Many(v) => Box::new(v.iter().map(String::as_str)),
        }
    }
}

/// The claims checked, strictly typed: a string `exp`, an object `aud`, a
/// numeric `scope` are malformed tokens, not absent claims.
#[derive(Debug, Deserialize)]
struct Claims {
    iss: String,
    aud: OneOrMany,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<OneOrMany>,
}

/// The current Unix time in seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `kid` and `alg` of a token, after the checks that need no key
/// (length, shape, `alg`, `typ`, `crit`); a caller looks the `kid` up and
/// may refresh its keys when none has it.
fn checked_header(token: &str) -> Result<(String, Algorithm), TokenRejection> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenRejection::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenRejection::Malformed);
    };
    let header: Value = B64
        .decode(header)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(Value::is_object)
        .ok_or(TokenRejection::Malformed)?;
    // RFC 7515 §4.1.11: extensions we do not understand must not be ignored.
    if header.get("crit").is_some() {
        return Err(TokenRejection::Malformed);
    }
    let alg = match header.get("alg").and_then(Value::as_str) {
        Some("RS256") => Algorithm::RS256,
        Some("ES256") => Algorithm::ES256,
        Some("EdDSA") => Algorithm::EdDSA,
        _ => return Err(TokenRejection::UnsupportedAlgorithm),
    };
    let typ = header.get("typ").and_then(Value::as_str).unwrap_or("");
    if !typ.eq_ignore_ascii_case("at+jwt") && !typ.eq_ignore_ascii_case("application/at+jwt") {
        return Err(TokenRejection::NotAnAccessToken);
    }
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .ok_or(TokenRejection::UnknownKey)?;
    Ok((kid.to_owned(), alg))
}

impl IssuerRules {
    /// The `kid` a token names, when its header passes every check that
    /// needs no key: whether fetching the keys again could help it.
    pub fn token_kid(&self, token: &str) -> Result<String, TokenRejection> {
        checked_header(token).map(|(kid, _)| kid)
    }

    /// Verifies `token` for the resource `audience` with `keys` at `now`
    /// (Unix seconds).
    pub fn verify(
        &self,
        token: &str,
        audience: &str,
        keys: &KeySet,
        now: u64,
    ) -> Result<(), TokenRejection> {
        let (kid, alg) = checked_header(token)?;
        let key = keys.keys.get(&kid).ok_or(TokenRejection::UnknownKey)?;
        if key.alg != alg {
            return Err(TokenRejection::AlgorithmMismatch);
        }
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            match e.kind() {
                K::InvalidSignature => TokenRejection::BadSignature,
                K::InvalidAlgorithm | K::UnsupportedAlgorithm => TokenRejection::AlgorithmMismatch,
                K::ExpiredSignature => TokenRejection::Expired,
                K::ImmatureSignature => TokenRejection::NotYetValid,
                K::InvalidIssuer => TokenRejection::WrongIssuer,
                K::InvalidAudience => TokenRejection::WrongAudience,
                _ => TokenRejection::Malformed,
            }
        })?;
        // The same claims again, on our clock and our types.
        let claims = data.claims;
        if claims.iss != self.issuer {
            return Err(TokenRejection::WrongIssuer);
        }
        if !claims.aud.iter().any(|a| a == audience) {
            return Err(TokenRejection::WrongAudience);
        }
        if claims.exp.saturating_add(LEEWAY_SECS) <= now {
            return Err(TokenRejection::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now.saturating_add(LEEWAY_SECS))
        {
            return Err(TokenRejection::NotYetValid);
        }
        if let Some(required) = &self.required_scope {
            let in_scope = claims
                .scope
                .as_deref()
                .is_some_and(|s| s.split_ascii_whitespace().any(|x| x == required));
            let in_scp = claims.scp.as_ref().is_some_and(|s| {
                s.iter()
                    .any(|x| x.split_ascii_whitespace().any(|y| y == required))
            });
            if !in_scope && !in_scp {
                return Err(TokenRejection::InsufficientScope);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{
        ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _,
    };
    use serde_json::json;

    const ISS: &str = "https://issuer.example";
    const AUD: &str = "http://127.0.0.1:8000/mcp";

    struct Signer {
        ed: Ed25519KeyPair,
        ec: EcdsaKeyPair,
    }

    impl Signer {
        fn new() -> Self {
            let rng = SystemRandom::new();
            let ed =
                Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref())
                    .unwrap();
            let pk = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
            let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pk.as_ref(), &rng)
                .unwrap();
            Self { ed, ec }
        }

        fn jwks(&self) -> Value {
            let ec = self.ec.public_key().as_ref();
            json!({"keys": [
                {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "use": "sig", "x": B64.encode(self.ed.public_key().as_ref())},
                {"kty": "EC", "crv": "P-256", "kid": "ec", "alg": "ES256", "x": B64.encode(&ec[1..33]), "y": B64.encode(&ec[33..65])},
            ]})
        }

        fn sign(&self, header: &Value, claims: &Value) -> String {
            let input = format!(
                "{}.{}",
                B64.encode(header.to_string()),
                B64.encode(claims.to_string())
            );
            let sig = match header["alg"].as_str() {
                Some("ES256") => self
                    .ec
                    .sign(&SystemRandom::new(), input.as_bytes())
                    .unwrap()
                    .as_ref()
                    .to_vec(),
                _ => self.ed.sign(input.as_bytes()).as_ref().to_vec(),
            };
            format!("{input}.{}", B64.encode(sig))
        }
    }

    fn rules(scope: Option<&str>) -> IssuerRules {
        IssuerRules {
            issuer: ISS.into(),
            required_scope: scope.map(str::to_owned),
        }
    }

    fn claims() -> Value {
        let now = unix_now();
        json!({"iss": ISS, "aud": AUD, "exp": now + 300, "iat": now, "sub": "u", "scope": "openid mcp"})
    }

    fn ed_header() -> Value {
        json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ed"})
    }

    #[test]
    fn good_tokens_of_both_key_types() {
        let s = Signer::new();
        let keys = KeySet::parse(s.jwks().to_string().as_bytes()).unwrap();
        assert_eq!(keys.len(), 2);
        let r = rules(Some("mcp"));
        let now = unix_now();
        assert_eq!(
            r.verify(&s.sign(&ed_header(), &claims()), AUD, &keys, now),
            Ok(())
        );
        let es = json!({"alg": "ES256", "typ": "application/at+jwt", "kid": "ec"});
        assert_eq!(r.verify(&s.sign(&es, &claims()), AUD, &keys, now), Ok(()));
        // aud as an array, scope as scp.
        let mut c = claims();
        c["aud"] = json!(["https://other.example", AUD]);
        c.as_object_mut().unwrap().remove("scope");
        c["scp"] = json!(["mcp"]);
        assert_eq!(r.verify(&s.sign(&ed_header(), &c), AUD, &keys, now), Ok(()));
    }

    #[test]
    fn every_refusal() {
        let s = Signer::new();
        let keys = KeySet::parse(s.jwks().to_string().as_bytes()).unwrap();
        let r = rules(Some("mcp"));
        let now = unix_now();
        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = claims();
            f(&mut c);
            r.verify(&s.sign(&ed_header(), &c), AUD, &keys, now)
        };
        assert_eq!(
            with(&|c| c["iss"] = json!("https://evil.example")),
            Err(TokenRejection::WrongIssuer)
        );
        assert_eq!(
            with(&|c| c["aud"] = json!("http://127.0.0.1:8001/mcp")),
            Err(TokenRejection::WrongAudience)
        );
        assert_eq!(
            with(&|c| c["exp"] = json!(now - 61)),
            Err(TokenRejection::Expired)
        );
        assert_eq!(
            with(&|c| c["exp"] = json!(now - 30)),
            Ok(()),
            "within the leeway"
        );
        assert_eq!(
            with(&|c| c["nbf"] = json!(now + 600)),
            Err(TokenRejection::NotYetValid)
        );
        assert_eq!(
            with(&|c| c["scope"] = json!("openid")),
            Err(TokenRejection::InsufficientScope)
        );
        assert_eq!(
            with(&|c| c["scope"] = json!("mcpx")),
            Err(TokenRejection::InsufficientScope)
        );
        // Type confusion: a claim of the wrong type is no absent claim.
        assert_eq!(
            with(&|c| c["nbf"] = json!("9999999999")),
            Err(TokenRejection::Malformed)
        );
        assert_eq!(
            with(&|c| c["exp"] = json!("9999999999")),
            Err(TokenRejection::Malformed)
        );
        assert_eq!(
            with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
            Err(TokenRejection::Malformed)
        );
        assert_eq!(
            with(&|c| c["aud"] = json!({"x": AUD})),
            Err(TokenRejection::Malformed)
        );
        // No scope required: a token without one passes.
        let c = json!({"iss": ISS, "aud": AUD, "exp": now + 60});
        assert_eq!(
            rules(None).verify(&s.sign(&ed_header(), &c), AUD, &keys, now),
            Ok(())
        );
    }

    #[test]
    fn algorithm_and_key_confusion() {
        let s = Signer::new();
        let jwks = s.jwks();
        let keys = KeySet::parse(jwks.to_string().as_bytes()).unwrap();
        let r = rules(None);
        let now = unix_now();
        let body = B64.encode(claims().to_string());
        let head = |h: Value| B64.encode(h.to_string());
        // alg none, with or without a signature.
        for sig in ["", "AAAA"] {
            let t = format!(
                "{}.{body}.{sig}",
                head(json!({"alg": "none", "typ": "at+jwt", "kid": "ed"}))
            );
            assert_eq!(
                r.verify(&t, AUD, &keys, now),
                Err(TokenRejection::UnsupportedAlgorithm)
            );
        }
        // HS256 keyed with the public key's bytes (the classic confusion).
        let input = format!(
            "{}.{body}",
            head(json!({"alg": "HS256", "typ": "at+jwt", "kid": "ed"}))
        );
        let mac = ring::hmac::sign(
            &ring::hmac::Key::new(
                ring::hmac::HMAC_SHA256,
                jwks["keys"][0]["x"].as_str().unwrap().as_bytes(),
            ),
            input.as_bytes(),
        );
        let t = format!("{input}.{}", B64.encode(mac.as_ref()));
        assert_eq!(
            r.verify(&t, AUD, &keys, now),
            Err(TokenRejection::UnsupportedAlgorithm)
        );
        // ES256 header naming the Ed25519 key.
        let t = s.sign(
            &json!({"alg": "ES256", "typ": "at+jwt", "kid": "ed"}),
            &claims(),
        );
        assert_eq!(
            r.verify(&t, AUD, &keys, now),
            Err(TokenRejection::AlgorithmMismatch)
        );
        // Unknown or missing kid.
        let t = s.sign(
            &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "nope"}),
            &claims(),
        );
        assert_eq!(
            r.verify(&t, AUD, &keys, now),
            Err(TokenRejection::UnknownKey)
        );
        let t = s.sign(&json!({"alg": "EdDSA", "typ": "at+jwt"}), &claims());
        assert_eq!(
            r.verify(&t, AUD, &keys, now),
            Err(TokenRejection::UnknownKey)
        );
        // Not an access token, or a critical extension.
        for h in [
            json!({"alg": "EdDSA", "typ": "JWT", "kid": "ed"}),
            json!({"alg": "EdDSA", "kid": "ed"}),
        ] {
            assert_eq!(
                r.verify(&s.sign(&h, &claims()), AUD, &keys, now),
                Err(TokenRejection::NotAnAccessToken)
            );
        }
        let t = s.sign(
            &json!({"alg": "EdDSA", "typ": "at+jwt", "kid": "ed", "crit": ["exp"]}),
            &claims(),
        );
        assert_eq!(
            r.verify(&t, AUD, &keys, now),
            Err(TokenRejection::Malformed)
        );
        // Another signer's token under a known kid.
        let other = Signer::new().sign(&ed_header(), &claims());
        assert_eq!(
            r.verify(&other, AUD, &keys, now),
            Err(TokenRejection::BadSignature)
        );
        // Tampered claims.
        let good = s.sign(&ed_header(), &claims());
        let mut parts: Vec<&str> = good.split('.').collect();
        let mut c = claims();
        c["aud"] = json!(AUD);
        c["sub"] = json!("admin");
        let forged = B64.encode(c.to_string());
        parts[1] = &forged;
        assert_eq!(
            r.verify(&parts.join("."), AUD, &keys, now),
            Err(TokenRejection::BadSignature)
        );
        // Shapes.
        for bad in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.x.y",
            &"a".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert!(r.verify(bad, AUD, &keys, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn jwks_parsing_skips_what_it_cannot_use() {
        let s = Signer::new();
        let mut jwks = s.jwks();
        let ed = jwks["keys"][0].clone();
        let keys = jwks["keys"].as_array_mut().unwrap();
        let mut private = ed.clone();
        private["kid"] = json!("priv");
        private["d"] = json!("AAAA");
        let mut enc = ed.clone();
        enc["kid"] = json!("enc");
        enc["use"] = json!("enc");
        let mut wrong_alg = ed.clone();
        wrong_alg["kid"] = json!("hs");
        wrong_alg["alg"] = json!("HS256");
        let mut no_kid = ed.clone();
        no_kid.as_object_mut().unwrap().remove("kid");
        let small_rsa =
            json!({"kty": "RSA", "kid": "rsa1024", "n": B64.encode([0xffu8; 128]), "e": "AQAB"});
        let oct = json!({"kty": "oct", "kid": "oct", "k": "c2VjcmV0"});
        keys.extend([private, enc, wrong_alg, no_kid, small_rsa, oct]);
        let set = KeySet::parse(jwks.to_string().as_bytes()).unwrap();
        assert_eq!(set.len(), 2, "{set:?}");
        for kid in ["priv", "enc", "hs", "rsa1024", "oct"] {
            assert!(!set.has_kid(kid), "{kid}");
        }
        assert_eq!(KeySet::parse(b"{}").unwrap_err(), JwksError::NotASet);
        assert_eq!(KeySet::parse(b"[]").unwrap_err(), JwksError::NotASet);
        assert_eq!(
            KeySet::parse(br#"{"keys":[{"kty":"oct","kid":"a","k":"eA"}]}"#).unwrap_err(),
            JwksError::NoUsableKey
        );
        // At most MAX_KEYS.
        let many: Vec<Value> = (0..100)
            .map(|i| {
                let mut k = ed.clone();
                k["kid"] = json!(format!("k{i}"));
                k
            })
            .collect();
        let set = KeySet::parse(json!({ "keys": many }).to_string().as_bytes()).unwrap();
        assert_eq!(set.len(), MAX_KEYS);
    }
}
