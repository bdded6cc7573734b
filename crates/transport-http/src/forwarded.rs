//! What a trusted reverse proxy says about the public URL of a request.
//!
//! Read only with `CODING_TOOLS_MCP_TRUST_PROXY_HEADERS`: `X-Forwarded-Host`,
//! `X-Forwarded-Proto` and `X-Forwarded-Prefix`, with RFC 7239 `Forwarded`
//! (`host=`, `proto=`) standing in for the first two when they are absent.
//!
//! Each header may list several hops (`a, b`, or several header lines, which
//! HTTP joins the same way). The first value is taken: the hop nearest the
//! client, the name the client used, which is what a public URL is. The
//! Python original reads the same value. A proxy that appends to a header a
//! client sent instead of overwriting it lets that client choose the first
//! value, so the proxy must overwrite them (nginx's `proxy_set_header` does).

use http::HeaderMap;

/// Longest accepted `X-Forwarded-Prefix`.
const MAX_PREFIX_BYTES: usize = 256;

/// The proxy's view of one request, each header's first value as sent
/// (trimmed); validation is the caller's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarded {
    pub host: Option<String>,
    pub proto: Option<String>,
    pub prefix: Option<String>,
}

impl Forwarded {
    /// `None` when the request carries none of the headers (a direct
    /// request); a value that is not text reads as an empty one, which
    /// no check accepts.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let first = |name: &str| {
            headers
                .get(name)
                .map(|v| first_value(v.to_str().unwrap_or("\u{0}")).to_owned())
        };
        let rfc7239 = headers
            .get(http::header::FORWARDED)
            .map(|v| v.to_str().unwrap_or("\u{0}"));
        let param = |name: &str| rfc7239.and_then(|v| forwarded_param(v, name));
        let f = Self {
            host: first("x-forwarded-host").or_else(|| param("host")),
            proto: first("x-forwarded-proto").or_else(|| param("proto")),
            prefix: first("x-forwarded-prefix"),
        };
        (f != Self::default()).then_some(f)
    }
}

/// The first element of a comma-separated header value.
fn first_value(value: &str) -> &str {
    value.split(',').next().unwrap_or("").trim()
}

/// A parameter of the first element of an RFC 7239 `Forwarded` value,
/// unquoted.
fn forwarded_param(value: &str, name: &str) -> Option<String> {
    first_value(value).split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The path prefix a proxy mounts the server under, as a base URL suffix:
/// `""` for none or `/`, else `/seg[/seg…]` without a trailing slash.
/// `None` for anything that is not a plain absolute path: no query,
/// fragment, backslash, whitespace, quote, `..`/`.` segment, empty segment
/// or malformed percent-escape, so the prefix can only extend the URL's
/// path and cannot break out of a quoted header parameter.
pub fn parse_prefix(raw: &str) -> Option<String> {
    let p = raw.trim().trim_end_matches('/');
    if p.is_empty() {
        // Absent or `/`: mounted at the root.
        return Some(String::new());
    }
    if p.len() > MAX_PREFIX_BYTES || !p.starts_with('/') {
        return None;
    }
    let path_char = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+;=:@%".contains(&b);
    for segment in p[1..].split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        let bytes = segment.as_bytes();
        if !bytes.iter().all(|&b| path_char(b)) {
            return None;
        }
        for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'%') {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
        }
    }
    Some(p.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn direct_requests_have_no_forwarded_view() {
        assert_eq!(Forwarded::from_headers(&headers(&[("host", "a")])), None);
    }

    #[test]
    fn first_hop_wins() {
        let f = Forwarded::from_headers(&headers(&[
            ("x-forwarded-host", "public.example, inner.example"),
            ("x-forwarded-host", "third.example"),
            ("x-forwarded-proto", " https ,http"),
            ("x-forwarded-prefix", "/w/alpha, /other"),
        ]))
        .unwrap();
        assert_eq!(f.host.as_deref(), Some("public.example"));
        assert_eq!(f.proto.as_deref(), Some("https"));
        assert_eq!(f.prefix.as_deref(), Some("/w/alpha"));
    }

    #[test]
    fn rfc7239_stands_in() {
        let f = Forwarded::from_headers(&headers(&[(
            "forwarded",
            "for=10.0.0.1;Host=\"public.example:8443\";proto=https, host=inner",
        )]))
        .unwrap();
        assert_eq!(f.host.as_deref(), Some("public.example:8443"));
        assert_eq!(f.proto.as_deref(), Some("https"));
        // X-Forwarded-* take precedence.
        let f = Forwarded::from_headers(&headers(&[
            ("forwarded", "host=a;proto=https"),
            ("x-forwarded-host", "b"),
        ]))
        .unwrap();
        assert_eq!(
            (f.host.as_deref(), f.proto.as_deref()),
            (Some("b"), Some("https"))
        );
    }

    #[test]
    fn prefixes() {
        for (raw, want) in [
            ("/w/alpha", "/w/alpha"),
            ("/w/alpha/", "/w/alpha"),
            (" /a%20b ", "/a%20b"),
            ("/", ""),
            ("", ""),
            ("/~user/x;v=1", "/~user/x;v=1"),
        ] {
            assert_eq!(parse_prefix(raw).as_deref(), Some(want), "{raw:?}");
        }
        for bad in [
            "w/alpha",
            "//evil.example/x",
            "/a//b",
            "/a/../b",
            "/./a",
            "/a?b",
            "/a#b",
            "/a\\b",
            "/a b",
            "/a\"b",
            "/a%2",
            "/a%zz",
            "/a<b>",
            "http://evil.example/",
        ] {
            assert_eq!(parse_prefix(bad), None, "{bad:?}");
        }
        assert_eq!(parse_prefix(&format!("/{}", "a".repeat(300))), None);
    }
}
