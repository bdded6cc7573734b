//! Integration tests of the patch engine on real temp directories.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    reason = "test code: a failed unwrap is a failed test"
)]

mod suite;
