//! The protocol versions this server speaks.

/// Versions served per request through `_meta` (modern era), newest first.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];

/// Versions negotiated by `initialize` (handshake era), newest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

/// The version `initialize` answers with when the client asks for one we do not speak.
pub const NEWEST_HANDSHAKE_VERSION: &str = "2025-11-25";

/// Every version this server speaks, newest first (server card, `server_info`).
pub fn all_versions_newest_first() -> Vec<&'static str> {
    MODERN_VERSIONS
        .iter()
        .chain(HANDSHAKE_VERSIONS.iter())
        .copied()
        .collect()
}

/// Handshake negotiation: echo a handshake version we speak, else offer the newest.
///
/// `2026-07-28` is not negotiated at all: it is answered with the newest handshake version.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|r| HANDSHAKE_VERSIONS.iter().find(|v| **v == r).copied())
        .unwrap_or(NEWEST_HANDSHAKE_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_and_counter_offers_the_rest() {
        assert_eq!(negotiate(Some("2025-11-25")), "2025-11-25");
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(Some("")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
    }

    #[test]
    fn all_versions_are_newest_first() {
        assert_eq!(
            all_versions_newest_first(),
            vec!["2026-07-28", "2025-11-25", "2025-06-18"]
        );
    }
}
