//! The `apply_patch` adapter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctm_patch_engine::{
    ApplyOptions, FileChange, Operation, PatchEngine, PatchFailure, PatchReport, Unplanned,
};
use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::catalog::ApplyPatchArgs;
use crate::envelope::{ToolError, ToolSuccess};
use crate::errors::{join_error, patch_error};

fn summary_line(f: &FileChange) -> String {
    match f.operation {
        Operation::Add => format!("A {}", f.path),
        Operation::Update => format!("M {}", f.path),
        Operation::Delete => format!("D {}", f.path),
        Operation::Move => format!(
            "R {} -> {}",
            f.path,
            f.destination.as_deref().unwrap_or("?")
        ),
    }
}

fn file_json(f: &FileChange, dry_run: bool) -> Value {
    let hunks: Vec<Value> = f
        .hunks
        .iter()
        .map(|h| json!({"index": h.index, "matched_with": h.matched_with.as_str(), "start_line": h.start_line}))
        .collect();
    let mut v = json!({
        "operation": f.operation.as_str(),
        "path": f.path,
        "destination": f.destination,
        "additions": f.lines_added,
        "removals": f.lines_removed,
        "lines_added": f.lines_added,
        "lines_removed": f.lines_removed,
        "old_sha256": f.old_sha256,
        "new_sha256": f.new_sha256,
        "hunks": hunks,
    });
    if dry_run {
        v["would_change"] = json!(f.would_change);
    } else {
        v["changed"] = json!(f.would_change);
    }
    v
}

/// The reference's `affected_files` entry: a move is named by its
/// destination, with the source as `old_path`.
fn affected_json(f: &FileChange) -> Value {
    let mut v = match (&f.operation, &f.destination) {
        (Operation::Move, Some(dest)) => {
            json!({"path": dest, "old_path": f.path, "operation": "move"})
        }
        _ => json!({"path": f.path, "operation": f.operation.as_str()}),
    };
    v["additions"] = json!(f.lines_added);
    v["removals"] = json!(f.lines_removed);
    v
}

fn unplanned_json(u: &Unplanned) -> Value {
    json!({
        "operation": u.operation.as_str(),
        "path": u.path,
        "destination": u.destination,
        "planned": false,
        "would_change": null,
    })
}

fn render(report: &PatchReport) -> ToolSuccess {
    let added: usize = report.files.iter().map(|f| f.lines_added).sum();
    let removed: usize = report.files.iter().map(|f| f.lines_removed).sum();
    let summary: Vec<String> = report.files.iter().map(summary_line).collect();
    let fuzzy: Vec<String> = report
        .files
        .iter()
        .flat_map(|f| {
            f.hunks
                .iter()
                .filter(|h| h.matched_with != ctm_patch_engine::Tier::Exact)
                .map(move |h| {
                    format!(
                        "hunk {} of {} matched at line {} ({})",
                        h.index,
                        f.path,
                        h.start_line,
                        h.matched_with.as_str()
                    )
                })
        })
        .collect();
    let head = if report.dry_run {
        format!(
            "Dry run: the patch applies cleanly to {} file(s) (+{added} -{removed}); nothing was written.",
            report.files.len()
        )
    } else {
        format!(
            "Applied the patch to {} file(s) (+{added} -{removed}).",
            report.files.len()
        )
    };
    let mut text = format!("{head}\n{}", summary.join("\n"));
    if !fuzzy.is_empty() {
        text.push_str("\nNot exact (the file's own text was kept for context lines): ");
        text.push_str(&fuzzy.join("; "));
    }
    let files: Vec<Value> = report
        .files
        .iter()
        .map(|f| file_json(f, report.dry_run))
        .collect();
    let mut s = Map::new();
    s.insert("dry_run".into(), json!(report.dry_run));
    s.insert("applied".into(), json!(report.applied));
    s.insert("clean".into(), json!(true));
    s.insert("file_count".into(), json!(report.files.len()));
    s.insert("additions".into(), json!(added));
    s.insert("removals".into(), json!(removed));
    s.insert("lines_added".into(), json!(added));
    s.insert("lines_removed".into(), json!(removed));
    s.insert("summary".into(), json!(summary.join("\n")));
    s.insert(
        "affected_files".into(),
        Value::Array(report.files.iter().map(affected_json).collect()),
    );
    s.insert("files".into(), Value::Array(files));
    s.insert("warnings".into(), json!(fuzzy));
    ToolSuccess {
        text,
        structured: s,
        extra_content: Vec::new(),
    }
}

/// A refused or failed patch: the error, with the fix in `details.retry_hint`
/// (the reference's field), and what the patch would have done as far as it
/// was planned (client notes section 2): nothing was applied.
fn failure(f: PatchFailure, dry_run: bool) -> ToolError {
    let mut e = patch_error(f.error);
    if let Value::Object(d) = &mut e.details {
        d.entry("retry_hint")
            .or_insert_with(|| Value::String(e.recovery.clone()));
    }
    let mut files: Vec<Value> = f
        .planned
        .iter()
        .map(|c| {
            let mut v = file_json(c, true);
            v["planned"] = json!(true);
            v
        })
        .collect();
    files.extend(f.unplanned.iter().map(unplanned_json));
    e.extra.insert("dry_run".into(), json!(dry_run));
    e.extra.insert("applied".into(), json!(false));
    e.extra.insert("files".into(), Value::Array(files));
    e
}

/// Planning stops between files once the request is cancelled or its wait
/// budget has passed (a patch of many large files can take minutes).
pub async fn apply_patch(
    engine: &Arc<PatchEngine>,
    args: ApplyPatchArgs,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let ApplyPatchArgs { patch, dry_run } = args;
    let engine = engine.clone();
    let cancel = ctx.cancel.clone();
    let deadline = Instant::now() + Duration::from_secs(ctx.wait_budget.effective_secs.max(1));
    let report = tokio::task::spawn_blocking(move || {
        engine.apply_detailed(
            &patch,
            &ApplyOptions::default()
                .with_dry_run(dry_run)
                .with_deadline(deadline)
                .with_cancelled(move || cancel.is_cancelled()),
        )
    })
    .await
    .map_err(|e| join_error(&e))?
    .map_err(|f| failure(f, dry_run))?;
    Ok(render(&report))
}
