//! `cargo xtask schema`: `docs/tools.md`, generated from the live catalog.
//!
//! The renderer and the drift check are the test
//! `crates/server/tests/suite/docs.rs`, so plain `cargo test` fails when the
//! file drifts; this runs that one test, and with `--write` lets it rewrite
//! the file.

use anyhow::Result;

use crate::{cargo, run_cmd};

pub fn run(write: bool) -> Result<()> {
    let mut test = cargo();
    test.args([
        "test",
        "--quiet",
        "-p",
        "coding-tools-mcp",
        "--test",
        "all",
        "--",
        "--exact",
        "suite::docs::docs_tools_md_matches_the_catalog",
    ]);
    if write {
        test.env("UPDATE_SNAPSHOTS", "1");
    }
    run_cmd(&mut test)?;
    eprintln!(
        "docs/tools.md {} the catalog",
        if write { "rewritten from" } else { "matches" }
    );
    Ok(())
}
