//! Integration tests of the patch engine on real temp directories.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed unwrap is a failed test"
)]

mod suite;
