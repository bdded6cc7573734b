//! The `apply_patch` adapter.

use std::sync::Arc;

use ctm_patch_engine::{FileChange, Operation, PatchEngine, PatchFailure, PatchReport, Unplanned};
use ctm_protocol_eras::RequestContext;
use serde_json::{Value, json};

use crate::catalog::ApplyPatchArgs;
use crate::envelope::{ToolError, ToolSuccess};
use crate::errors::{join_error, patch_error};
use crate::output::tool_result;

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

tool_result! {
    /// Where one hunk matched.
    pub struct PatchHunk {
        index: usize,
        matched_with: &'static str,
        start_line: usize,
    }
}

tool_result! {
    /// One operation of the patch. A success lists every file with all its
    /// fields; a failure's `files` (the same property of the schema) also
    /// lists the operations it could not plan, which carry only
    /// `operation`, `path`, `destination`, `planned` and a null
    /// `would_change`: hence the counts, digests and hunks are `Option`.
    /// `would_change` answers a dry run, `changed` a write.
    pub struct PatchFile {
        operation: &'static str,
        path: String,
        /// A move's new path.
        #[serde(skip_serializing_if = "Option::is_none")]
        destination: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        additions: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        removals: Option<usize>,
        /// Absent for an unplanned operation; null for a deleted file.
        #[serde(skip_serializing_if = "Option::is_none")]
        new_sha256: Option<Option<String>>,
        /// Where each hunk matched, only when one matched other than
        /// exactly (the evidence that the file's own text was kept).
        #[serde(skip_serializing_if = "Option::is_none")]
        hunks: Option<Vec<PatchHunk>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        would_change: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        changed: Option<bool>,
    }
}

impl PatchFile {
    /// A planned operation, as a dry run (`would_change`) or a write
    /// (`changed`) reports it.
    fn of(f: &FileChange, dry_run: bool) -> Self {
        Self {
            operation: f.operation.as_str(),
            path: f.path.clone(),
            destination: f.destination.clone(),
            additions: Some(f.lines_added),
            removals: Some(f.lines_removed),
            new_sha256: Some(f.new_sha256.clone()),
            hunks: f
                .hunks
                .iter()
                .any(|h| h.matched_with != ctm_patch_engine::Tier::Exact)
                .then(|| {
                    f.hunks
                        .iter()
                        .map(|h| PatchHunk {
                            index: h.index,
                            matched_with: h.matched_with.as_str(),
                            start_line: h.start_line,
                        })
                        .collect()
                }),
            would_change: dry_run.then_some(f.would_change),
            changed: (!dry_run).then_some(f.would_change),
        }
    }
}

tool_result! {
    /// The reference's `affected_files` entry: a move is named by its
    /// destination, with the source as `old_path`. Catalog 0.5 adds the
    /// evidence of each file: its revision, lines, changed ranges and the
    /// loosest match its hunks needed.
    pub struct AffectedFile {
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        old_path: Option<String>,
        operation: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        total_lines: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        changed_ranges: Option<Vec<super::changes::ChangedLines>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        match_quality: Option<&'static str>,
    }
}

/// Catalog 0.5's name of a match tier.
fn quality(t: ctm_patch_engine::Tier) -> &'static str {
    match t {
        ctm_patch_engine::Tier::Exact => "exact",
        ctm_patch_engine::Tier::TrailingWhitespace => "trailing_ws",
        ctm_patch_engine::Tier::SurroundingWhitespace => "indent",
        other => other.as_str(),
    }
}

/// Every hunk of an update was already in the file.
fn all_skipped(f: &FileChange) -> bool {
    f.operation == Operation::Update
        && !f.hunks.is_empty()
        && f.hunks.iter().all(|h| h.already_applied)
}

impl AffectedFile {
    fn of(f: &FileChange) -> Self {
        let (path, old_path) = match (&f.operation, &f.destination) {
            (Operation::Move, Some(dest)) => (dest.clone(), Some(f.path.clone())),
            _ => (f.path.clone(), None),
        };
        let evidence = f.total_lines.is_some();
        let operation = if evidence && all_skipped(f) {
            "unchanged"
        } else {
            f.operation.as_str()
        };
        let matched = matches!(f.operation, Operation::Update | Operation::Move) && evidence;
        Self {
            path,
            old_path,
            operation,
            revision: f.new_sha256.clone().filter(|_| evidence),
            total_lines: f.total_lines,
            changed_ranges: (evidence && f.operation != Operation::Delete).then(|| {
                f.changed_ranges
                    .iter()
                    .map(super::changes::ChangedLines::of)
                    .collect()
            }),
            match_quality: matched.then(|| {
                f.hunks
                    .iter()
                    .filter(|h| !h.already_applied)
                    .map(|h| h.matched_with)
                    .max()
                    .map_or("exact", quality)
            }),
        }
    }

    /// The source of a move, listed as deleted (catalog 0.5).
    fn moved_away(f: &FileChange) -> Option<Self> {
        (f.operation == Operation::Move && f.total_lines.is_some()).then(|| Self {
            path: f.path.clone(),
            old_path: None,
            operation: "delete",
            revision: None,
            total_lines: Some(0),
            changed_ranges: None,
            match_quality: None,
        })
    }
}

tool_result! {
    /// What `apply_patch` answers when the patch applies (or would).
    pub struct ApplyPatchResult {
        dry_run: bool,
        applied: bool,
        clean: bool,
        /// Catalog 0.5: every operation was already in place.
        #[serde(skip_serializing_if = "Option::is_none")]
        already_applied: Option<bool>,
        /// Catalog 0.5: the digest behind each file's `revision`.
        #[serde(skip_serializing_if = "Option::is_none")]
        revision_algorithm: Option<&'static str>,
        additions: usize,
        removals: usize,
        summary: String,
        affected_files: Vec<AffectedFile>,
        files: Vec<PatchFile>,
        warnings: Vec<String>,
    }
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
    // Evidence was asked for (catalog 0.5).
    let evidence = report.files.iter().any(|f| f.total_lines.is_some());
    let added: usize = report.files.iter().map(|f| f.lines_added).sum();
    let removed: usize = report.files.iter().map(|f| f.lines_removed).sum();
    let summary: Vec<String> = report
        .files
        .iter()
        .map(|f| {
            if evidence && all_skipped(f) {
                format!("= {}", f.path)
            } else {
                summary_line(f)
            }
        })
        .collect();
    let already_applied = evidence
        && report
            .files
            .iter()
            .all(|f| all_skipped(f) || (f.operation == Operation::Update && !f.would_change));
    let fuzzy: Vec<String> = report
        .files
        .iter()
        .flat_map(|f| {
            f.hunks
                .iter()
                .filter(|h| h.matched_with != ctm_patch_engine::Tier::Exact && !h.already_applied)
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
    let head = if already_applied {
        format!(
            "Nothing to change: already in {} file(s).",
            report.files.len()
        )
    } else if evidence && !report.dry_run {
        // Catalog 0.5: the evidence lines below say the rest.
        format!(
            "Patched {} file(s) (+{added} -{removed}).",
            report.files.len()
        )
    } else if report.dry_run {
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
    let mut warnings = fuzzy;
    if evidence {
        for f in &report.files {
            let a = AffectedFile::of(f);
            if let Some(line) = evidence_line(&a) {
                text.push('\n');
                text.push_str(&line);
            }
            let skipped: Vec<String> = f
                .hunks
                .iter()
                .filter(|h| h.already_applied)
                .map(|h| h.index.to_string())
                .collect();
            if !skipped.is_empty() {
                let w = format!(
                    "{}: skipped hunk(s) {} (already in)",
                    f.path,
                    skipped.join(", ")
                );
                text.push('\n');
                text.push_str(&w);
                warnings.push(w);
            }
        }
    }
    // The audited path may change what commands of safe mode may not; the
    // change is made (the call shows it whole) and flagged for the host.
    let flagged: Vec<&str> = report
        .files
        .iter()
        .flat_map(|f| std::iter::once(f.path.as_str()).chain(f.destination.as_deref()))
        .filter(|p| loaded_without_asking(p))
        .collect();
    if !flagged.is_empty() {
        let w = loaded_warning(&flagged);
        text.push('\n');
        text.push_str(&w);
        warnings.push(w);
    }
    let result = ApplyPatchResult {
        dry_run: report.dry_run,
        applied: report.applied,
        clean: true,
        already_applied: evidence.then_some(already_applied),
        revision_algorithm: evidence.then_some(ctm_patch_engine::REVISION_ALGORITHM),
        additions: added,
        removals: removed,
        summary: summary.join("\n"),
        affected_files: report
            .files
            .iter()
            .flat_map(|f| std::iter::once(AffectedFile::of(f)).chain(AffectedFile::moved_away(f)))
            .collect(),
        files: report
            .files
            .iter()
            .map(|f| PatchFile::of(f, report.dry_run))
            .collect(),
        warnings,
    };
    ToolSuccess::new(text, &result)
}

/// Catalog 0.5's line of evidence for a file: its revision, lines, the
/// ranges that changed, and a match that was not exact.
fn evidence_line(a: &AffectedFile) -> Option<String> {
    let revision = a.revision.as_deref()?;
    let mut line = format!(
        "{}: revision={revision} total_lines={}",
        a.path,
        a.total_lines.unwrap_or(0)
    );
    let ranges = super::changes::ranges_text(a.changed_ranges.as_deref().unwrap_or(&[]));
    if !ranges.is_empty() {
        line.push(' ');
        line.push_str(&ranges);
    }
    if let Some(q) = a.match_quality.filter(|q| *q != "exact") {
        line.push_str(&format!(" match_quality={q}"));
    }
    Some(line)
}

/// The warning of a change to files IDEs and agents load without asking.
pub(crate) fn loaded_warning(flagged: &[&str]) -> String {
    format!(
        "{} {} loaded or run by IDEs and agents without asking (commands may not write {} in safe mode): show this change to the user",
        flagged.join(", "),
        if flagged.len() == 1 { "is" } else { "are" },
        if flagged.len() == 1 { "it" } else { "them" }
    )
}

/// A workspace path inside one of the never-writable entries of safe mode
/// (`.vscode/tasks.json`, `.mcp.json`, `.husky/pre-commit`, ...).
pub(crate) fn loaded_without_asking(path: &str) -> bool {
    let first = path
        .trim_start_matches("./")
        .split('/')
        .next()
        .unwrap_or_default();
    ctm_exec_runtime::NEVER_WRITABLE.contains(&first)
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
            let mut v = crate::output::to_map(&PatchFile::of(c, true));
            v.insert("planned".into(), json!(true));
            Value::Object(v)
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
///
/// In catalog 0.5 an `idempotency_key` (in `raw`, the validated map)
/// makes a retry replay the recorded answer.
pub async fn apply_patch(
    server: &crate::server::Server,
    args: ApplyPatchArgs,
    raw: &serde_json::Map<String, Value>,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let ApplyPatchArgs { patch, dry_run } = args;
    let engine: Arc<PatchEngine> = server.patch.clone();
    // Catalog 0.5: a hunk already in the file is skipped, and each file's
    // evidence is reported.
    let v05 = server.served().version == crate::catalog::CatalogVersion::V05;
    let opts = super::changes::apply_options(ctx, dry_run)
        .with_skip_applied(v05)
        .with_evidence(v05);
    let key = raw.get("idempotency_key").and_then(Value::as_str);
    super::changes::keyed(server, "apply_patch", key, raw, dry_run, ctx, async move {
        let report = tokio::task::spawn_blocking(move || engine.apply_detailed(&patch, &opts))
            .await
            .map_err(|e| join_error(&e))?
            .map_err(|f| failure(f, dry_run))?;
        Ok(render(&report))
    })
    .await
}
