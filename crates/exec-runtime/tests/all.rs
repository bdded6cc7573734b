//! Integration tests of the exec runtime with real processes and PTYs.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: a failed unwrap is a failed test"
)]

mod suite;
