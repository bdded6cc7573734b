//! Embedding the patch engine in another host: apply a patch file to a
//! directory, all or nothing.
//!
//! ```sh
//! cargo run -p ctm-patch-engine --example apply -- DIR PATCH_FILE [--dry-run]
//! ```
//!
//! Exit status 0 when applied (or planned), 1 when refused: the refusal names
//! the file, the hunk and the closest text, and nothing is written.

#![expect(
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line host: it prints its report, and reads the patch file (outside the workspace) directly"
)]

use std::process::ExitCode;

use ctm_patch_engine::{ApplyOptions, PatchEngine};
use ctm_workspace_fs::Workspace;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(patch_file)) = (args.first(), args.get(1)) else {
        eprintln!("usage: apply DIR PATCH_FILE [--dry-run]");
        return ExitCode::from(2);
    };
    let dry_run = args.iter().any(|a| a == "--dry-run");
    let patch = match std::fs::read_to_string(patch_file) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot read {patch_file}: {e}");
            return ExitCode::from(2);
        }
    };
    let workspace = match Workspace::open(std::path::Path::new(dir)) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cannot open {dir}: {e}");
            return ExitCode::from(2);
        }
    };
    // Hooks and config live in .git/: a patch may not write there.
    let engine = PatchEngine::new(workspace).with_protected_git_dir(true);
    match engine.apply(&patch, &ApplyOptions::default().with_dry_run(dry_run)) {
        Ok(report) => {
            for f in &report.files {
                let to = f
                    .destination
                    .as_deref()
                    .map(|d| format!(" -> {d}"))
                    .unwrap_or_default();
                println!(
                    "{} {}{to}: +{} -{}{}",
                    f.operation.as_str(),
                    f.path,
                    f.lines_added,
                    f.lines_removed,
                    if f.would_change { "" } else { " (no change)" }
                );
            }
            println!(
                "{}",
                if report.applied {
                    "applied"
                } else {
                    "dry run: nothing written"
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("refused, nothing written: {e}");
            ExitCode::FAILURE
        }
    }
}
