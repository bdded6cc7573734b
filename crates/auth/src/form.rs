//! `application/x-www-form-urlencoded` decoding and encoding.

use std::collections::HashMap;

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes one component (`+` is a space).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                match (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) {
                    (Some(h), Some(l)) => {
                        out.push(h * 16 + l);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `a=1&b=2`; a key given twice keeps its first value and is
/// reported in the second result (OAuth forbids repeated parameters).
pub fn parse(s: &str) -> (HashMap<String, String>, Vec<String>) {
    let mut map = HashMap::new();
    let mut repeated = Vec::new();
    for pair in s.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = decode(k);
        match map.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => repeated.push(e.key().clone()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(decode(v));
            }
        }
    }
    (map, repeated)
}

/// Encodes one component.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let (m, rep) = parse("a=1&b=x%20y+z&c=%E2%9C%93&a=2&bad=%zz");
        assert_eq!(m["a"], "1");
        assert_eq!(m["b"], "x y z");
        assert_eq!(m["c"], "✓");
        assert_eq!(m["bad"], "%zz");
        assert_eq!(rep, ["a"]);
        assert_eq!(
            decode(&encode("http://localhost:1/cb?x=1&y=é")),
            "http://localhost:1/cb?x=1&y=é"
        );
    }
}
