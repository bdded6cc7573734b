//! Black-box tests: the real `coding-tools-mcp` binary, spoken to over stdio
//! and HTTP with a small in-repo client.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::type_complexity,
    reason = "test code: a failed unwrap is a failed test, and tests drive the binary as a process"
)]

mod suite;
