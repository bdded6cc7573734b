//! DNS-rebinding protection: which `Origin` values may reach the server.

/// True when `origin` is `scheme://host[:port]` with a loopback host
/// (`localhost`, `127.0.0.0/8`, `[::1]`).
pub fn is_loopback_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") || rest.contains('/') || rest.contains('@') {
        return false;
    }
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, port)) if port.is_empty() || valid_port(port) => return h == "::1",
            _ => return false,
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, port)) if valid_port(&format!(":{port}")) => h,
            Some(_) => return false,
            None => rest,
        }
    };
    let host = host.to_ascii_lowercase();
    if host == "localhost" {
        return true;
    }
    match host.parse::<std::net::Ipv4Addr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => false,
    }
}

fn valid_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://LOCALHOST:8443",
            "http://127.0.0.1:8000",
            "http://127.1.2.3",
            "http://[::1]:8000",
            "http://[::1]",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "http://evil.example:80@127.0.0.1",
            "ftp://localhost",
            "http://[::2]",
            "http://10.0.0.1:8000",
            "http://localhost:abc",
            "http://localhost/path",
            "",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }
}
