//! Which `Host` values the server answers, and its canonical base URL.
//!
//! A request is served only when it names this server (DNS-rebinding
//! protection, security case S10): its `Host` (or the authority of an
//! absolute-form target) must be
//!
//! - a loopback name (`localhost`, `127.0.0.1`, `[::1]`) when the connection
//!   arrived on a loopback address,
//! - the IP address the connection arrived on, or the address the server is
//!   bound to (`0.0.0.0` included, as the start-up line prints it),
//! - or the host of the configured `CODING_TOOLS_MCP_SERVER_URL`;
//!
//! with no port or the bound port (the configured URL's own port too, for
//! its host). A request without `Host` (HTTP/1.0) is served.
//! With `CODING_TOOLS_MCP_TRUST_PROXY_HEADERS`, a request carrying any
//! forwarded header (see [`crate::forwarded`]) is judged by the proxy's view
//! instead: the public host is `X-Forwarded-Host` (or `Forwarded: host=`, or
//! the `Host` the proxy passed on), the scheme `X-Forwarded-Proto` (`http`
//! for a loopback host and `https` otherwise when it is absent or neither),
//! and `X-Forwarded-Prefix` the path the proxy mounts the server under. When
//! a server URL is also configured, a forwarded host must name that URL's
//! host and the URL wins whole.
//!
//! The canonical base URL (OAuth issuer and resource, the server card's
//! URLs) is the configured URL; else, with trusted proxy headers present,
//! `proto://host[:port]/prefix`; else `http://<name>:<bound port>` with the
//! name the accepted `Host` used (one of this server's own names; the port
//! always comes from the socket) or the connection's address. A `Host`
//! naming another server is refused before any of this. Tokens are bound to
//! [`token_audience`]: the canonical URL when it was configured or
//! forwarded, else the bound socket.

use std::net::{IpAddr, SocketAddr};

use crate::forwarded::{Forwarded, parse_prefix};

/// `host[:port]`, the host lowercased (IPv6 in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

impl Authority {
    /// Parses `host[:port]` or `[v6][:port]`; `None` for anything else
    /// (userinfo, paths, whitespace, an empty host, a bad port, a host that
    /// is not a DNS name or an address).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.is_empty()
            || s.bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"/\\@?#,".contains(&b))
        {
            return None;
        }
        let (host, port) = if let Some(v6) = s.strip_prefix('[') {
            let (h, after) = v6.split_once(']')?;
            h.parse::<std::net::Ipv6Addr>().ok()?;
            (format!("[{h}]"), after)
        } else {
            match s.split_once(':') {
                Some((h, _)) => (h.to_owned(), &s[h.len()..]),
                None => (s.to_owned(), ""),
            }
        };
        let port = match port {
            "" => None,
            p => {
                let digits = p.strip_prefix(':')?;
                if digits.is_empty()
                    || digits.len() > 5
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                Some(digits.parse::<u16>().ok()?)
            }
        };
        if host.is_empty() || host == "[]" {
            return None;
        }
        // A DNS name or an IPv4 address: letters, digits, `-`, `.`, `_`, at
        // most 253 bytes. Anything else (quotes, `<`, `;`, `=`) would be
        // echoed into metadata URLs and the `WWW-Authenticate` header.
        if !host.starts_with('[')
            && (host.len() > 253
                || !host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)))
        {
            return None;
        }
        Some(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// The parts of `CODING_TOOLS_MCP_SERVER_URL` the checks need.
#[derive(Debug, Clone)]
pub struct Configured {
    /// The URL without a trailing slash.
    pub base: String,
    pub authority: Authority,
    /// The port the URL names, or its scheme's default.
    pub port: u16,
}

impl Configured {
    /// `None` when the URL is not `http(s)://host[:port][/path]`.
    pub fn parse(url: &str) -> Option<Self> {
        let base = url.trim().trim_end_matches('/').to_owned();
        let (scheme, rest) = base.split_once("://")?;
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = Authority::parse(rest.split('/').next().unwrap_or(""))?;
        let port = authority.port.unwrap_or(default);
        Some(Self {
            base,
            authority,
            port,
        })
    }
}

/// An IP literal as a URL host.
pub fn ip_host(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    }
}

/// What the server knows about where a request arrived.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// The listener's address (`0.0.0.0:port` for a wildcard bind).
    pub bound: SocketAddr,
    /// The connection's local address.
    pub local: SocketAddr,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRefusal {
    /// The host does not name this server.
    Foreign,
    /// A trusted forwarded header (named) is not a usable value.
    Malformed(&'static str),
}

/// The canonical base URL of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// `scheme://host[:port][/path]`, without a trailing slash.
    pub base: String,
    /// Whether the name is the operator's (a configured URL) or a trusted
    /// proxy's, rather than one of the server's own addresses.
    pub named: bool,
}

impl Canonical {
    fn own(base: String) -> Self {
        Self { base, named: false }
    }

    fn named(base: String) -> Self {
        Self { base, named: true }
    }
}

/// Checks `host` (the request's `Host` or target authority) and, with
/// trusted proxy headers, the proxy's view `forwarded`; returns the
/// canonical base URL.
pub fn canonical_base(
    configured: Option<&Configured>,
    arrival: Arrival,
    host: Option<&str>,
    forwarded: Option<&Forwarded>,
) -> Result<Canonical, HostRefusal> {
    // On a loopback connection the `Host` must still name this server,
    // trusted proxy or not: a browser page that has rebound its own domain
    // to 127.0.0.1 cannot change `Host`, but it can add forwarded headers,
    // which would otherwise choose the name checked (DNS rebinding). A proxy
    // on this machine sends the upstream's loopback name. A proxy elsewhere
    // may name the backend as it likes (a service name); a non-loopback
    // bind requires authentication anyway.
    if forwarded.is_some()
        && arrival.local.ip().to_canonical().is_loopback()
        && let Some(h) = host
        && !names_this_server(h, arrival, configured)
    {
        return Err(HostRefusal::Foreign);
    }
    match (forwarded, configured) {
        (Some(f), None) => {
            if let Some(public) = f.host.as_deref().or(host) {
                return proxied_base(f, public).map(Canonical::named);
            }
        }
        (Some(Forwarded { host: Some(fh), .. }), Some(c)) => {
            let a = Authority::parse(fh).ok_or(HostRefusal::Malformed("X-Forwarded-Host"))?;
            return if c.authority.host == a.host {
                Ok(Canonical::named(c.base.clone()))
            } else {
                Err(HostRefusal::Foreign)
            };
        }
        _ => {}
    }
    let port = arrival.bound.port();
    let Some(host) = host else {
        return Ok(match configured {
            Some(c) => Canonical::named(c.base.clone()),
            None => Canonical::own(format!("http://{}:{port}", ip_host(arrival.local.ip()))),
        });
    };
    let a = Authority::parse(host).ok_or(HostRefusal::Foreign)?;
    if let Some(c) = configured {
        if names_configured(&a, arrival, c) || names_own_address(&a, arrival) {
            return Ok(Canonical::named(c.base.clone()));
        }
        return Err(HostRefusal::Foreign);
    }
    if names_own_address(&a, arrival) {
        Ok(Canonical::own(format!("http://{}:{port}", a.host)))
    } else {
        Err(HostRefusal::Foreign)
    }
}

/// Whether `host` (a `Host` value) is one of this server's own names: a
/// loopback name on a loopback connection, the address it arrived on or is
/// bound to (with its port), or the configured URL's host.
fn names_this_server(host: &str, arrival: Arrival, configured: Option<&Configured>) -> bool {
    let Some(a) = Authority::parse(host) else {
        return false;
    };
    names_own_address(&a, arrival) || configured.is_some_and(|c| names_configured(&a, arrival, c))
}

/// A loopback name on a loopback connection, or the address the request
/// arrived on or the server is bound to; with the bound port or none.
fn names_own_address(a: &Authority, arrival: Arrival) -> bool {
    let local_ip = arrival.local.ip().to_canonical();
    let own_name = (local_ip.is_loopback()
        && matches!(a.host.as_str(), "localhost" | "127.0.0.1" | "[::1]"))
        || a.host == ip_host(local_ip)
        || a.host == ip_host(arrival.bound.ip());
    own_name && a.port.is_none_or(|p| p == arrival.bound.port())
}

/// The configured URL's host, with its port, the bound port or none.
fn names_configured(a: &Authority, arrival: Arrival, c: &Configured) -> bool {
    a.host == c.authority.host
        && a.port
            .is_none_or(|p| p == arrival.bound.port() || p == c.port)
}

/// `proto://host[:port]/prefix` from a trusted proxy's view, `public` being
/// the host it names.
fn proxied_base(f: &Forwarded, public: &str) -> Result<String, HostRefusal> {
    let a = Authority::parse(public).ok_or(HostRefusal::Malformed("X-Forwarded-Host"))?;
    let prefix = match f.prefix.as_deref() {
        Some(p) => parse_prefix(p).ok_or(HostRefusal::Malformed("X-Forwarded-Prefix"))?,
        None => String::new(),
    };
    // As the Python original: a scheme that is neither is inferred, and
    // only a loopback name is assumed to be plain HTTP.
    let proto = match f.proto.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("https") => "https",
        Some("http") => "http",
        _ if is_loopback_name(&a.host) => "http",
        _ => "https",
    };
    let port = a.port.map(|p| format!(":{p}")).unwrap_or_default();
    Ok(format!("{proto}://{}{port}{prefix}", a.host))
}

/// `localhost`, an IPv4 loopback address or `[::1]`.
fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `(scheme, host, port)` of an `http(s)` URL or origin, lowercased, the
/// port defaulted from the scheme: what two origins must share to be one.
fn origin_parts(url: &str, path_allowed: bool) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path_allowed && !path.is_empty() {
        return None;
    }
    let c = Configured::parse(&format!("{scheme}://{authority}"))?;
    Some((scheme.to_ascii_lowercase(), c.authority.host, c.port))
}

/// Whether `origin` (an `Origin` header) is the origin of the public base
/// URL `base`: a page served by the site the server is published under.
pub fn is_public_origin(origin: &str, base: &str) -> bool {
    match (origin_parts(origin, false), origin_parts(base, true)) {
        (Some(o), Some(b)) => o == b,
        _ => false,
    }
}

/// The audience access tokens are minted for and checked against: the
/// resource URL of `base` when the name is the configured URL's or a trusted
/// proxy's (`named`); else the resource URL of the bound socket. Two servers
/// on one port bound to different addresses (`127.0.0.1:P`, `[::1]:P`)
/// then never accept each other's tokens, even through the shared name
/// `localhost:P`, while every name of one server is one audience.
pub fn token_audience(base: &str, named: bool, arrival: Arrival) -> String {
    if named {
        return format!("{}/mcp", base.trim_end_matches('/'));
    }
    format!(
        "http://{}:{}/mcp",
        ip_host(arrival.bound.ip()),
        arrival.bound.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(bound: &str, local: &str) -> Arrival {
        Arrival {
            bound: bound.parse().unwrap(),
            local: local.parse().unwrap(),
        }
    }

    #[test]
    fn authorities() {
        assert_eq!(
            Authority::parse("LocalHost:80"),
            Some(Authority {
                host: "localhost".into(),
                port: Some(80)
            })
        );
        assert_eq!(Authority::parse("[::1]").unwrap().host, "[::1]");
        for bad in [
            "", "a b", "x@y", "x/y", "x:", "x:abc", "x:99999", "[::1", "[zz]", ":80", "a,b",
        ] {
            assert_eq!(Authority::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn loopback_bind() {
        let at = arrival("127.0.0.1:8000", "127.0.0.1:8000");
        for ok in [
            "localhost:8000",
            "127.0.0.1:8000",
            "[::1]:8000",
            "localhost",
            "127.0.0.1",
        ] {
            let base = canonical_base(None, at, Some(ok), None).unwrap().base;
            assert!(base.ends_with(":8000"), "{ok} {base}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8000",
            "localhost:9000",
            "127.0.0.1:9000",
            "localhost.attacker.example:8000",
            "10.0.0.1:8000",
        ] {
            assert_eq!(
                canonical_base(None, at, Some(bad), None),
                Err(HostRefusal::Foreign),
                "{bad}"
            );
        }
        assert_eq!(
            canonical_base(None, at, None, None).unwrap().base,
            "http://127.0.0.1:8000"
        );
    }

    #[test]
    fn wildcard_bind_and_configured_url() {
        let lan = arrival("0.0.0.0:8000", "192.168.1.5:8000");
        assert_eq!(
            canonical_base(None, lan, Some("192.168.1.5:8000"), None)
                .unwrap()
                .base,
            "http://192.168.1.5:8000"
        );
        assert!(canonical_base(None, lan, Some("0.0.0.0:8000"), None).is_ok());
        // Loopback names only over loopback.
        assert!(canonical_base(None, lan, Some("localhost:8000"), None).is_err());
        assert!(canonical_base(None, lan, Some("devbox:8000"), None).is_err());
        let c = Configured::parse("https://MCP.example.com/").unwrap();
        assert_eq!(c.port, 443);
        for ok in [
            "mcp.example.com",
            "mcp.example.com:443",
            "mcp.example.com:8000",
            "192.168.1.5:8000",
        ] {
            assert_eq!(
                canonical_base(Some(&c), lan, Some(ok), None).unwrap().base,
                "https://MCP.example.com",
                "{ok}"
            );
        }
        assert!(canonical_base(Some(&c), lan, Some("other.example.com"), None).is_err());
        assert!(canonical_base(Some(&c), lan, Some("mcp.example.com:9"), None).is_err());
    }

    fn proxy(host: Option<&str>, proto: Option<&str>, prefix: Option<&str>) -> Forwarded {
        Forwarded {
            host: host.map(str::to_owned),
            proto: proto.map(str::to_owned),
            prefix: prefix.map(str::to_owned),
        }
    }

    #[test]
    fn trusted_proxy_headers() {
        // A proxy elsewhere reaches the backend by a name of its own.
        let at = arrival("0.0.0.0:8000", "10.0.0.5:8000");
        let base = |host: Option<&str>, f: &Forwarded| canonical_base(None, at, host, Some(f));
        let f = proxy(Some("MCP.example.com"), Some("HTTPS"), None);
        assert_eq!(
            base(Some("backend:8000"), &f),
            Ok(Canonical::named("https://mcp.example.com".into()))
        );
        let f = proxy(
            Some("mcp.example.com:8443"),
            Some("https"),
            Some("/w/alpha/"),
        );
        assert_eq!(
            base(None, &f).unwrap().base,
            "https://mcp.example.com:8443/w/alpha"
        );
        // No forwarded host: the Host the proxy passed on names the server.
        let f = proxy(None, Some("http"), Some("/w/beta"));
        assert_eq!(
            base(Some("public.example"), &f).unwrap().base,
            "http://public.example/w/beta"
        );
        // A missing or unknown scheme is inferred from the host.
        for (host, want) in [
            ("mcp.example.com", "https://mcp.example.com"),
            ("127.0.0.1:9000", "http://127.0.0.1:9000"),
            ("localhost", "http://localhost"),
            ("[::1]:1", "http://[::1]:1"),
        ] {
            for proto in [None, Some("ftp"), Some("")] {
                assert_eq!(
                    base(None, &proxy(Some(host), proto, None)).unwrap().base,
                    want
                );
            }
        }
        // On loopback the Host must be this server's, whatever the proxy
        // headers say (a page rebinding its domain to 127.0.0.1).
        let lo = arrival("127.0.0.1:8000", "127.0.0.1:8000");
        for f in [
            proxy(None, Some("http"), None),
            proxy(Some("evil.example"), None, None),
        ] {
            assert_eq!(
                canonical_base(None, lo, Some("evil.example"), Some(&f)),
                Err(HostRefusal::Foreign)
            );
        }
        assert_eq!(
            canonical_base(
                None,
                lo,
                Some("127.0.0.1:8000"),
                Some(&proxy(Some("mcp.example.com"), Some("https"), None))
            )
            .unwrap()
            .base,
            "https://mcp.example.com"
        );
        // Malformed values are refused, not guessed around.
        assert_eq!(
            base(None, &proxy(Some("a@b"), None, None)),
            Err(HostRefusal::Malformed("X-Forwarded-Host"))
        );
        assert_eq!(
            base(None, &proxy(Some("a"), None, Some("/x/../y"))),
            Err(HostRefusal::Malformed("X-Forwarded-Prefix"))
        );
        // A configured URL wins whole; a forwarded host must be its host.
        let c = Configured::parse("https://mcp.example.com/w/x").unwrap();
        let with = |f: &Forwarded| canonical_base(Some(&c), lo, Some("127.0.0.1:8000"), Some(f));
        let f = proxy(Some("mcp.example.com"), Some("http"), Some("/other"));
        assert_eq!(with(&f).unwrap().base, "https://mcp.example.com/w/x");
        assert_eq!(
            with(&proxy(Some("evil.example"), None, None)),
            Err(HostRefusal::Foreign)
        );
        // Without a forwarded host the usual Host check applies.
        assert!(with(&proxy(None, Some("https"), None)).unwrap().named);
        assert_eq!(
            canonical_base(
                Some(&c),
                lo,
                Some("evil.example"),
                Some(&proxy(None, Some("https"), None))
            ),
            Err(HostRefusal::Foreign)
        );
    }

    #[test]
    fn public_origins() {
        let base = "https://MCP.example.com/w/alpha";
        for ok in [
            "https://mcp.example.com",
            "https://mcp.example.com:443",
            "HTTPS://mcp.example.com/",
        ] {
            assert!(is_public_origin(ok, base), "{ok}");
        }
        for bad in [
            "http://mcp.example.com",
            "https://mcp.example.com:8443",
            "https://evil.example",
            "https://mcp.example.com.evil.example",
            "https://mcp.example.com/w/alpha",
            "null",
            "",
        ] {
            assert!(!is_public_origin(bad, base), "{bad}");
        }
        assert!(is_public_origin("http://h:8080", "http://h:8080"));
        assert!(!is_public_origin("http://h", "http://h:8080"));
    }

    #[test]
    fn audiences() {
        let v4 = arrival("127.0.0.1:8000", "127.0.0.1:8000");
        let v6 = arrival("[::1]:8000", "[::1]:8000");
        let via_localhost = token_audience("http://localhost:8000", false, v4);
        assert_eq!(via_localhost, "http://127.0.0.1:8000/mcp");
        assert_eq!(
            token_audience("http://127.0.0.1:8000", false, v4),
            via_localhost
        );
        assert_eq!(
            token_audience("http://localhost:8000", false, v6),
            "http://[::1]:8000/mcp"
        );
        let wild = arrival("0.0.0.0:8000", "192.168.1.5:8000");
        assert_eq!(
            token_audience("http://192.168.1.5:8000", false, wild),
            "http://0.0.0.0:8000/mcp"
        );
        assert_eq!(
            token_audience("https://mcp.example.com/", true, v4),
            "https://mcp.example.com/mcp"
        );
    }
}
