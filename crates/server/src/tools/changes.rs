//! The `apply_changes` adapter (catalog 0.5) and the idempotency keys of
//! both mutators.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ctm_patch_engine::{
    Action, ApplyOptions, Change, ChangeOperation, ChangedFile, ChangesError, ChangesReport, Claim,
    EditOp, LineEdit, PatchEngine, REVISION_ALGORITHM, Requested,
};
use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::catalog::ApplyChangesArgs;
use crate::envelope::{ErrorCode, FIX_ARGUMENTS, ToolError, ToolSuccess};
use crate::errors::{join_error, patch_error};
use crate::output::tool_result;
use crate::server::Server;

tool_result! {
    /// A range of the new file that differs from the old one.
    pub struct ChangedLines {
        start_line: usize,
        end_line: usize,
        added_lines: usize,
        removed_lines: usize,
    }
}

tool_result! {
    /// One file's evidence after a change: what it now is.
    pub struct ChangeEntry {
        path: String,
        /// The source of a move or copy.
        #[serde(skip_serializing_if = "Option::is_none")]
        old_path: Option<String>,
        operation: &'static str,
        /// Of the new bytes; absent for a delete.
        #[serde(skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
        total_lines: usize,
        changed_ranges: Vec<ChangedLines>,
    }
}

tool_result! {
    /// What `apply_changes` answers when the changes apply (or would).
    pub struct ApplyChangesResult {
        dry_run: bool,
        clean: bool,
        already_applied: bool,
        revision_algorithm: &'static str,
        summary: String,
        affected_files: Vec<ChangeEntry>,
        additions: usize,
        removals: usize,
        warnings: Vec<String>,
    }
}

/// Why an entry of `changes` cannot be read.
fn bad(message: String, details: Value) -> ToolError {
    let mut e = ToolError::new(ErrorCode::InvalidArgument, message, details, FIX_ARGUMENTS);
    if let Value::Object(d) = &mut e.details {
        d.entry("reason").or_insert(json!("invalid_change"));
    }
    e
}

/// The members each object of `changes` may have.
const CHANGE_MEMBERS: [&str; 6] = [
    "action",
    "path",
    "revision",
    "content",
    "destination",
    "edits",
];
const EDIT_MEMBERS: [&str; 5] = ["op", "start_line", "end_line", "line", "content"];

fn unknown_members(at: &str, m: &Map<String, Value>, known: &[&str]) -> Result<(), ToolError> {
    let unknown: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(bad(
        format!("{at} has unknown member(s): {}", unknown.join(", ")),
        json!({"reason": "unknown_argument", "at": at, "unknown": unknown, "accepted": known}),
    ))
}

/// A string member: absent (or null) is `None`.
fn string_member<'v>(
    at: &str,
    m: &'v Map<String, Value>,
    name: &str,
    non_empty: bool,
) -> Result<Option<&'v str>, ToolError> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if non_empty && s.is_empty() => Err(bad(
            format!("{at}.{name} must not be empty"),
            json!({"reason": "too_short", "argument": format!("{at}.{name}")}),
        )),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(
            format!("{at}.{name} must be a string"),
            json!({"reason": "wrong_type", "argument": format!("{at}.{name}"), "expected": "a string"}),
        )),
    }
}

fn refuse_member(
    at: &str,
    m: &Map<String, Value>,
    name: &str,
    what: &str,
    hint: &str,
) -> Result<(), ToolError> {
    if m.get(name).is_none_or(Value::is_null) {
        return Ok(());
    }
    Err(bad(
        format!("{at}.{name} is not accepted for {what}{hint}"),
        json!({"reason": "not_accepted", "argument": format!("{at}.{name}"), "for": what}),
    ))
}

/// An integer member (integral floats accepted, as everywhere).
fn int_member(at: &str, m: &Map<String, Value>, name: &str) -> Result<Option<usize>, ToolError> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = crate::args::integral(&format!("{at}.{name}"), v)?;
            Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
        }
    }
}

fn missing(at: &str, name: &str, what: &str) -> ToolError {
    bad(
        format!("{at}.{name} is required for {what}"),
        json!({"reason": "missing_argument", "argument": format!("{at}.{name}")}),
    )
}

fn required<T>(at: &str, name: &str, what: &str, v: Option<T>) -> Result<T, ToolError> {
    v.ok_or_else(|| missing(at, name, what))
}

/// Reads `changes` into the engine's changes, refusing whatever an entry
/// cannot take before any path is looked at.
pub fn read_changes(changes: &[Value]) -> Result<Vec<Change>, ToolError> {
    changes
        .iter()
        .enumerate()
        .map(|(i, v)| read_change(&format!("changes[{i}]"), v))
        .collect()
}

fn read_change(at: &str, v: &Value) -> Result<Change, ToolError> {
    let Value::Object(m) = v else {
        return Err(bad(
            format!("{at} must be an object"),
            json!({"reason": "wrong_type", "argument": at, "expected": "an object"}),
        ));
    };
    unknown_members(at, m, &CHANGE_MEMBERS)?;
    let action = string_member(at, m, "action", false)?;
    let names = ["create", "write", "edit", "delete", "move", "copy"];
    let Some(action) = action.filter(|a| names.contains(a)) else {
        return Err(bad(
            format!("{at}.action must be one of {}", names.join(", ")),
            json!({"reason": "not_allowed", "argument": format!("{at}.action"), "allowed": names}),
        ));
    };
    let path = required(at, "path", action, string_member(at, m, "path", true)?)?.to_owned();
    let revision = string_member(at, m, "revision", true)?.map(str::to_owned);
    let content = string_member(at, m, "content", false)?.map(str::to_owned);
    let destination = string_member(at, m, "destination", true)?.map(str::to_owned);
    let action = match action {
        "create" | "write" => {
            refuse_member(at, m, "edits", action, "")?;
            refuse_member(at, m, "destination", action, "")?;
            let content = required(at, "content", action, content)?;
            if action == "create" {
                refuse_member(
                    at,
                    m,
                    "revision",
                    action,
                    ": a file that does not exist yet has no revision",
                )?;
                Action::Create { content }
            } else {
                Action::Write { content, revision }
            }
        }
        "edit" => {
            refuse_member(at, m, "content", action, " (each edit has its own content)")?;
            refuse_member(at, m, "destination", action, "")?;
            let edits = match m.get("edits") {
                Some(Value::Array(a))
                    if !a.is_empty() && a.len() <= ctm_patch_engine::MAX_EDITS =>
                {
                    a
                }
                Some(Value::Array(a)) => {
                    return Err(bad(
                        format!(
                            "{at}.edits holds {} entries; 1 to {} are accepted",
                            a.len(),
                            ctm_patch_engine::MAX_EDITS
                        ),
                        json!({"reason": "out_of_range", "argument": format!("{at}.edits"), "max_edits": ctm_patch_engine::MAX_EDITS, "received": a.len()}),
                    ));
                }
                None | Some(Value::Null) => {
                    return Err(missing(at, "edits", action));
                }
                Some(_) => {
                    return Err(bad(
                        format!("{at}.edits must be an array of edits"),
                        json!({"reason": "wrong_type", "argument": format!("{at}.edits"), "expected": "an array"}),
                    ));
                }
            };
            let edits = edits
                .iter()
                .enumerate()
                .map(|(k, e)| read_edit(&format!("{at}.edits[{k}]"), e))
                .collect::<Result<Vec<_>, _>>()?;
            Action::Edit { revision, edits }
        }
        "delete" => {
            for f in ["content", "edits", "destination"] {
                refuse_member(at, m, f, action, "")?;
            }
            Action::Delete { revision }
        }
        _ => {
            refuse_member(at, m, "content", action, "")?;
            refuse_member(at, m, "edits", action, "")?;
            let destination = required(at, "destination", action, destination)?;
            if action == "move" {
                Action::Move {
                    destination,
                    revision,
                }
            } else {
                Action::Copy {
                    destination,
                    revision,
                }
            }
        }
    };
    Ok(Change { path, action })
}

fn read_edit(at: &str, v: &Value) -> Result<LineEdit, ToolError> {
    let Value::Object(m) = v else {
        return Err(bad(
            format!("{at} must be an object"),
            json!({"reason": "wrong_type", "argument": at, "expected": "an object"}),
        ));
    };
    unknown_members(at, m, &EDIT_MEMBERS)?;
    let names = ["replace", "delete", "insert_after", "insert_before"];
    let Some(op) = string_member(at, m, "op", false)?.and_then(EditOp::from_name) else {
        return Err(bad(
            format!("{at}.op must be one of {}", names.join(", ")),
            json!({"reason": "not_allowed", "argument": format!("{at}.op"), "allowed": names}),
        ));
    };
    let what = op.as_str();
    let content = string_member(at, m, "content", false)?;
    let content = match op {
        EditOp::Delete => {
            refuse_member(at, m, "content", what, "")?;
            ""
        }
        _ => required(at, "content", what, content)?,
    };
    let shape = |r: Result<LineEdit, ctm_patch_engine::EditShapeError>| {
        r.map_err(|e| {
            bad(
                format!("{at}: {e}"),
                json!({"reason": "out_of_range", "argument": at}),
            )
        })
    };
    match op {
        EditOp::Replace | EditOp::Delete => {
            refuse_member(at, m, "line", what, "")?;
            let start = required(at, "start_line", what, int_member(at, m, "start_line")?)?;
            let end = int_member(at, m, "end_line")?.unwrap_or(start);
            shape(if op == EditOp::Replace {
                LineEdit::replace(start, end, content)
            } else {
                LineEdit::delete(start, end)
            })
        }
        EditOp::InsertAfter | EditOp::InsertBefore => {
            refuse_member(at, m, "start_line", what, "")?;
            refuse_member(at, m, "end_line", what, "")?;
            let line = required(at, "line", what, int_member(at, m, "line")?)?;
            if op == EditOp::InsertAfter {
                Ok(LineEdit::insert_after(line, content))
            } else {
                shape(LineEdit::insert_before(line, content))
            }
        }
    }
}

fn next_read(path: &str) -> Value {
    json!({"tool": "read_file", "arguments": {"path": path}})
}

/// The verdict of a refused or failed `apply_changes`.
pub fn changes_error(e: ChangesError) -> ToolError {
    let msg = e.to_string();
    match e {
        ChangesError::Empty => ToolError::new(
            ErrorCode::PatchFailed,
            msg,
            json!({"reason": "no_changes"}),
            "Give at least one change.",
        ),
        ChangesError::TooManyChanges { given } => bad(
            msg,
            json!({"reason": "too_many", "max_changes": ctm_patch_engine::MAX_CHANGES, "received": given}),
        ),
        ChangesError::EditCount { index, given } => bad(
            msg,
            json!({"reason": "out_of_range", "change_index": index, "max_edits": ctm_patch_engine::MAX_EDITS, "received": given}),
        ),
        ChangesError::DuplicatePath {
            path,
            change_indexes,
        } => bad(
            msg,
            json!({"reason": "duplicate_path", "path": path, "change_indexes": change_indexes}),
        ),
        ChangesError::RevisionRequired {
            path,
            current_revision,
            ..
        } => ToolError::new(
            ErrorCode::RevisionRequired,
            msg,
            json!({
                "path": path,
                "current_revision": current_revision,
                "revision_algorithm": REVISION_ALGORITHM,
                "next_action": next_read(&path),
            }),
            "Read the file, then send the change with the revision read_file reported.",
        ),
        ChangesError::RevisionMismatch {
            path,
            expected_revision,
            current_revision: Some(current),
            total_lines,
        } => ToolError::new(
            ErrorCode::RevisionMismatch,
            msg,
            json!({
                "path": path,
                "expected_revision": expected_revision,
                "current_revision": current,
                "revision_algorithm": REVISION_ALGORITHM,
                "total_lines": total_lines,
                "next_action": next_read(&path),
            }),
            "Read the file again and rebuild the change against its current lines and revision.",
        ),
        ChangesError::RevisionMismatch {
            path,
            expected_revision,
            current_revision: None,
            ..
        } => ToolError::new(
            ErrorCode::RevisionMismatch,
            msg,
            json!({"path": path, "expected_revision": expected_revision, "exists": false}),
            "To create the file, send the write without a revision (or use action create).",
        ),
        ChangesError::PastEnd {
            path,
            total_lines,
            edit_index,
            operation,
            requested,
        } => {
            let requested = match requested {
                Requested::Span {
                    start_line,
                    end_line,
                } => json!({"start_line": start_line, "end_line": end_line}),
                Requested::Line(line) => json!({"line": line}),
            };
            let mut e = ToolError::new(
                ErrorCode::InvalidArgument,
                msg,
                json!({
                    "path": path,
                    "total_lines": total_lines,
                    "edit_index": edit_index,
                    "operation": operation.as_str(),
                    "requested": requested,
                }),
                "Read the file again and use the line numbers it reports.",
            );
            e.retryable = true;
            e
        }
        ChangesError::EditsOverlap { path, edit_indexes } => {
            let hint = "Merge the overlapping edits into one edit.";
            ToolError::new(
                ErrorCode::PatchHunksOverlap,
                msg,
                json!({"path": path, "edit_indexes": edit_indexes, "retry_hint": hint}),
                hint,
            )
        }
        ChangesError::Exists { action, path } => ToolError::new(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "already_exists", "action": action}),
            if action == "create" {
                "Nothing was written: use action write (with the file's revision) to replace it."
            } else {
                "Nothing was written: pick a destination that does not exist, or delete it first."
            },
        ),
        ChangesError::Patch(e) => patch_error(e),
        // A variant added to the engine: its message stands.
        _ => ToolError::new(
            ErrorCode::PatchFailed,
            msg,
            json!({}),
            "Nothing was written.",
        ),
    }
}

fn entry(f: &ChangedFile) -> ChangeEntry {
    ChangeEntry {
        path: f.path.clone(),
        old_path: f.old_path.clone(),
        operation: f.operation.as_str(),
        revision: f.revision.clone(),
        total_lines: f.total_lines,
        changed_ranges: f.changed_ranges.iter().map(ChangedLines::of).collect(),
    }
}

impl ChangedLines {
    /// The engine's range, as answered.
    pub fn of(r: &ctm_patch_engine::ChangedRange) -> Self {
        Self {
            start_line: r.start_line,
            end_line: r.end_line,
            added_lines: r.added_lines,
            removed_lines: r.removed_lines,
        }
    }
}

fn summary_line(f: &ChangedFile) -> String {
    let mark = match f.operation {
        ChangeOperation::Create => "A",
        ChangeOperation::Write | ChangeOperation::Edit => "M",
        ChangeOperation::Delete => "D",
        ChangeOperation::Unchanged => "=",
        ChangeOperation::Move => "R",
        ChangeOperation::Copy => "C",
    };
    match &f.old_path {
        Some(from) => format!("{mark} {from} -> {}", f.path),
        None => format!("{mark} {}", f.path),
    }
}

/// `changed lines 2-4, 9 removed before line 7`, or nothing.
pub fn ranges_text(ranges: &[ChangedLines]) -> String {
    if ranges.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = ranges
        .iter()
        .map(|r| {
            if r.added_lines == 0 {
                format!("{} removed before line {}", r.removed_lines, r.start_line)
            } else {
                format!("{}-{}", r.start_line, r.end_line)
            }
        })
        .collect();
    format!("changed lines {}", parts.join(", "))
}

/// One line per file: what it is now, for the next edit.
fn evidence_line(f: &ChangedFile) -> Option<String> {
    let revision = f.revision.as_deref()?;
    let e = entry(f);
    let changed = match ranges_text(&e.changed_ranges) {
        t if t.is_empty() => "unchanged".to_owned(),
        t => t,
    };
    Some(format!(
        "{}: revision={revision} total_lines={} {changed}",
        f.path, f.total_lines
    ))
}

fn render(report: &ChangesReport) -> ToolSuccess {
    let additions: usize = report.files.iter().map(|f| f.additions).sum();
    let removals: usize = report.files.iter().map(|f| f.removals).sum();
    let summary: Vec<String> = report.files.iter().map(summary_line).collect();
    let n = report.files.len();
    let head = if report.already_applied() {
        format!("Nothing to change: the {n} file(s) already hold what was asked.")
    } else if report.dry_run {
        format!("Dry run, nothing written: would change {n} file(s) (+{additions} -{removals}).")
    } else {
        format!("Changed {n} file(s) (+{additions} -{removals}).")
    };
    let mut text = format!("{head}\n{}", summary.join("\n"));
    for line in report.files.iter().filter_map(evidence_line) {
        text.push('\n');
        text.push_str(&line);
    }
    let mut warnings = Vec::new();
    let flagged: Vec<&str> = report
        .files
        .iter()
        .filter(|f| f.operation != ChangeOperation::Unchanged)
        .flat_map(|f| std::iter::once(f.path.as_str()).chain(f.old_path.as_deref()))
        .filter(|p| super::patch::loaded_without_asking(p))
        .collect();
    if !flagged.is_empty() {
        let w = super::patch::loaded_warning(&flagged);
        text.push('\n');
        text.push_str(&w);
        warnings.push(w);
    }
    let result = ApplyChangesResult {
        dry_run: report.dry_run,
        clean: true,
        already_applied: report.already_applied(),
        revision_algorithm: REVISION_ALGORITHM,
        summary: summary.join("\n"),
        affected_files: report.files.iter().map(entry).collect(),
        additions,
        removals,
        warnings,
    };
    ToolSuccess::new(text, &result)
}

/// `apply_changes`: read the changes, then apply them (all or none) on the
/// patch engine's commit path.
pub async fn apply_changes(
    server: &Server,
    args: ApplyChangesArgs,
    raw: &Map<String, Value>,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let ApplyChangesArgs {
        changes,
        dry_run,
        idempotency_key,
    } = args;
    let engine: Arc<PatchEngine> = server.patch.clone();
    let opts = apply_options(ctx, dry_run);
    keyed(
        server,
        "apply_changes",
        idempotency_key.as_deref(),
        raw,
        dry_run,
        ctx,
        async move {
            let changes = read_changes(&changes)?;
            let report = tokio::task::spawn_blocking(move || engine.apply_changes(&changes, &opts))
                .await
                .map_err(|e| join_error(&e))?
                .map_err(changes_error)?;
            Ok(render(&report))
        },
    )
    .await
}

/// The options of a mutation: a dry run or not, stopped between files
/// once the request is cancelled or its wait budget has passed.
pub fn apply_options(ctx: &RequestContext, dry_run: bool) -> ApplyOptions {
    let cancel = ctx.cancel.clone();
    let deadline = Instant::now() + Duration::from_secs(ctx.wait_budget.effective_secs.max(1));
    ApplyOptions::default()
        .with_dry_run(dry_run)
        .with_deadline(deadline)
        .with_cancelled(move || cancel.is_cancelled())
}

/// The fingerprint of a keyed call: every argument but the key, members
/// in sorted order at every level, hashed.
pub fn fingerprint(raw: &Map<String, Value>) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut rest = raw.clone();
    rest.remove("idempotency_key");
    let mut text = String::new();
    canonical(&Value::Object(rest), &mut text);
    ctm_patch_engine::revision(text.as_bytes())
}

/// Runs `call` under `key` when one is given: a retry with the same
/// arguments replays the recorded answer (nothing runs), other arguments
/// are refused, and calls with one key in flight together run once. Only
/// a successful write is recorded.
pub async fn keyed(
    server: &Server,
    tool: &'static str,
    key: Option<&str>,
    raw: &Map<String, Value>,
    dry_run: bool,
    ctx: &RequestContext,
    call: impl std::future::Future<Output = Result<ToolSuccess, ToolError>>,
) -> Result<ToolSuccess, ToolError> {
    let Some(key) = key else {
        return call.await;
    };
    let print = fingerprint(raw);
    let store = &server.idempotency;
    let ticket = loop {
        // Never blocks: a call holding the key is waited for here, between
        // polls, so no runtime thread sleeps on it.
        match store.claim(tool, key, &print, &|| true) {
            Claim::Run(t) => break t,
            Claim::Replay(mut recorded) => {
                recorded
                    .structured
                    .insert("idempotent_replay".into(), Value::Bool(true));
                recorded.text = format!(
                    "Replayed the recorded result of idempotency_key {key:?}; nothing was applied again.\n{}",
                    recorded.text
                );
                return Ok(recorded);
            }
            Claim::Reused => {
                let hint =
                    "Send the original arguments to replay that call, or a new idempotency_key.";
                return Err(ToolError::new(
                    ErrorCode::IdempotencyKeyReused,
                    format!(
                        "idempotency_key {key:?} was used by a different {tool} call; a key names one call"
                    ),
                    json!({"tool": tool, "idempotency_key": key, "retry_hint": hint}),
                    hint,
                ));
            }
            Claim::Stopped => {
                if ctx.cancel.is_cancelled() {
                    return Err(ToolError::new(
                        ErrorCode::PatchFailed,
                        "the call was cancelled while another call with its idempotency_key ran; nothing was applied",
                        json!({"reason": "cancelled"}),
                        "Call again with the same key to get that call's result.",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let out = call.await;
    match &out {
        Ok(success) if !dry_run => {
            let bytes = success.text.len()
                + serde_json::to_string(&success.structured).map_or(0, |j| j.len());
            ticket.record(success.clone(), bytes);
        }
        _ => drop(ticket),
    }
    out
}
