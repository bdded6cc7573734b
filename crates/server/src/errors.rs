//! The one table from capability errors to the contract's error codes,
//! categories, retryability and recovery text.

use ctm_exec_runtime::ExecError;
use ctm_git_tools::GitError;
use ctm_patch_engine::{PatchError, PlanError, StopReason};
use ctm_workspace_fs::FsError;
use serde_json::json;

use crate::envelope::{Category, ErrorCode, ToolError};

/// A failure with its code's category and retryability.
fn err(code: ErrorCode, message: String, details: serde_json::Value, recovery: &str) -> ToolError {
    ToolError::new(code, message, details, recovery)
}

/// A failure whose category or retryability its site decides.
fn err_as(
    code: ErrorCode,
    category: Category,
    retryable: bool,
    message: String,
    details: serde_json::Value,
    recovery: &str,
) -> ToolError {
    err(code, message, details, recovery)
        .with_category(category)
        .with_retryable(retryable)
}

/// Maps a workspace error.
pub fn fs_error(e: FsError) -> ToolError {
    let msg = e.to_string();
    match e {
        FsError::Absolute(p) => err(
            ErrorCode::AbsolutePathDenied,
            msg,
            json!({"path": p}),
            "Pass a path relative to the workspace root, e.g. src/main.rs.",
        ),
        FsError::Outside(p) => err(
            ErrorCode::PathOutsideWorkspace,
            msg,
            json!({"path": p}),
            "Only paths inside the workspace are reachable; remove the leading ../ parts.",
        ),
        FsError::SymlinkEscape(p) => err(
            ErrorCode::SymlinkEscape,
            msg,
            json!({"path": p}),
            "The path goes through a symlink that leaves the workspace; use a path inside it.",
        ),
        FsError::SymlinkLoop(p) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"path": p, "reason": "symlink_loop"}),
            "The symlinks on this path form a loop; use another path.",
        ),
        FsError::InvalidPath(p) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "invalid_path", "problem": p}),
            "Pass a plain workspace-relative path.",
        ),
        FsError::NotFound(p) => err(
            ErrorCode::NotFound,
            msg,
            json!({"path": p}),
            "Find the path with list_files; paths are relative to the workspace root.",
        ),
        FsError::IsDirectory(p) => err(
            ErrorCode::IsDirectory,
            msg,
            json!({"path": p}),
            "This is a directory: list it with list_dir or list_files.",
        ),
        FsError::NotADirectory(p) => err(
            ErrorCode::NotADirectory,
            msg,
            json!({"path": p}),
            "This is a file: read it with read_file, or pass its directory.",
        ),
        FsError::NotRegular(p) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"path": p, "reason": "not_regular_file"}),
            "Only regular files can be read (not FIFOs, sockets or devices).",
        ),
        // As the reference says it: blocked by policy, not a failure to read.
        FsError::Binary(p) => err(
            ErrorCode::BinaryFile,
            format!("binary file read blocked for the text tool: {p}"),
            json!({"path": p, "reason": "binary_content"}),
            "Binary content is not returned as text; use view_image for images, or exec_command (e.g. file, xxd) to inspect it.",
        ),
        FsError::UnsupportedEncoding { path, offset, line } => err(
            ErrorCode::UnsupportedEncoding,
            msg,
            json!({"path": path, "offset": offset, "line": line, "supported": ["utf-8"]}),
            &format!(
                "Only UTF-8 text is returned; lines before {line} can still be read with end_line={}.",
                line.saturating_sub(1)
            ),
        ),
        FsError::InvalidPattern {
            kind,
            pattern,
            error,
        } => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": format!("invalid_{kind}"), "pattern": pattern, "error": error}),
            if kind == "regex" {
                "Fix the regular expression, or pass regex=false to search for the text literally."
            } else {
                "Fix the glob pattern (e.g. **/*.rs, src/*.py)."
            },
        ),
        FsError::InvalidArgument(m) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "inconsistent_arguments", "problem": m}),
            crate::envelope::FIX_INCONSISTENT_ARGUMENTS,
        ),
        // The reference's code for a file that is no image it shows.
        FsError::NotAnImage { path, reason } => err(
            ErrorCode::BinaryFile,
            msg,
            json!({"path": path, "reason": "not_an_image", "problem": reason, "supported": ["image/png", "image/jpeg", "image/gif", "image/webp"]}),
            "view_image shows PNG, JPEG, GIF and WebP files; read text files with read_file.",
        ),
        FsError::ImageTooLarge { path, reason } => err(
            ErrorCode::OutputTooLarge,
            msg,
            json!({"path": path, "problem": reason}),
            "Pass auto_resize=true, or raise max_bytes/max_width/max_height within their bounds.",
        ),
        FsError::ImageTooManyPixels {
            path,
            width,
            height,
            max,
        } => err(
            ErrorCode::OutputTooLarge,
            msg,
            json!({"path": path, "reason": "too_many_pixels", "width": width, "height": height, "max_pixels": max}),
            "view_image does not decode images this large, resized or not: shrink it with a command first (e.g. ImageMagick's convert -resize), then view the copy.",
        ),
        FsError::Root { path, source } => err(
            ErrorCode::InternalError,
            msg,
            json!({"root": path, "problem": source.to_string()}),
            "The workspace root is unusable; the operator must restart the server on an existing directory.",
        ),
        FsError::Io {
            path,
            source,
            transient,
        } => err_as(
            ErrorCode::InternalError,
            Category::Runtime,
            transient,
            msg,
            json!({"path": path, "os_error": source.to_string()}),
            if transient {
                "A transient file system error; call again."
            } else {
                "The file system refused this operation; check permissions or choose another path."
            },
        ),
        // A refusal this table does not know yet.
        _ => err(
            ErrorCode::InternalError,
            msg,
            json!({"reason": "unmapped_fs_error"}),
            "This is a server fault; report it.",
        ),
    }
}

/// A blocking task that did not finish (it panicked or was cancelled).
pub fn join_error(e: &tokio::task::JoinError) -> ToolError {
    err_as(
        ErrorCode::InternalError,
        Category::Internal,
        true,
        format!("the operation did not complete: {e}"),
        json!({"reason": "task_failed"}),
        "This is a server fault; call again, and report it if it repeats.",
    )
}

/// Maps a patch-engine error. Nothing was written for any of these but
/// `RollbackFailed`, which says what is left where.
pub fn patch_error(e: PatchError) -> ToolError {
    let msg = e.to_string();
    match e {
        // The verdict every tool gives a path with a NUL or a control
        // character in it.
        PatchError::Parse(p) if p.control_character => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "invalid_path", "problem": "control_character", "line": p.line}),
            "File names in a patch are plain text on one line: remove the control character (CR, LF, NUL, ...) from the path.",
        ),
        PatchError::Parse(p) => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"reason": "parse", "line": p.line}),
            &format!(
                "Fix line {} of the patch. The envelope is: *** Begin Patch / *** Update File: <path> / @@ / ' ', '-', '+' lines / *** End Patch.",
                p.line
            ),
        ),
        PatchError::Path(fs) => fs_error(fs),
        PatchError::Plan { path, error } => plan_error(path, *error, msg),
        PatchError::NotFound { path, operation } => err(
            ErrorCode::NotFound,
            msg,
            json!({"path": path, "operation": operation}),
            "Check the path with list_files; to create a file use '*** Add File:'.",
        ),
        PatchError::AlreadyExists { path, hint } => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "already_exists"}),
            &format!("Nothing was written: {hint}."),
        ),
        PatchError::IsDirectory(path) => err(
            ErrorCode::IsDirectory,
            msg,
            json!({"path": path}),
            "Patches change files; name a file inside the directory.",
        ),
        PatchError::NotRegular { path, what } => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "not_regular_file", "is": what}),
            "Patch the file a link points to by its own path; links are never written through.",
        ),
        PatchError::TooLarge {
            path,
            size,
            max_bytes,
        } => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "file_too_large", "size_bytes": size, "max_bytes": max_bytes, "setting": "--patch-max-file-bytes / CODING_TOOLS_MCP_PATCH_MAX_FILE_BYTES"}),
            "Nothing was written. apply_patch does not read files this large: make the edit with exec_command instead (e.g. sed -i, or a short script), or ask the operator to raise --patch-max-file-bytes.",
        ),
        PatchError::PatchTooLarge {
            path,
            needed_bytes,
            max_bytes,
        } => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "patch_too_large", "needed_bytes": needed_bytes, "max_bytes": max_bytes, "setting": "--patch-max-total-bytes / CODING_TOOLS_MCP_PATCH_MAX_TOTAL_BYTES"}),
            &format!(
                "Nothing was written. Split the patch into several apply_patch calls, each reading at most {max_bytes} bytes of files (a file counts every time a section names it; merge repeated sections of one file), or make the edit with exec_command; or ask the operator to raise --patch-max-total-bytes."
            ),
        ),
        PatchError::Stopped { reason } => {
            let (retryable, hint) = match reason {
                StopReason::Cancelled => (
                    true,
                    "Nothing was written: the request was cancelled. Send the patch again if it is still wanted.",
                ),
                StopReason::DeadlineExceeded => (
                    false,
                    "Nothing was written: planning took longer than this call may wait. Split the patch into smaller apply_patch calls (fewer or smaller files), or make the edit with exec_command.",
                ),
                StopReason::Busy => (
                    true,
                    "Nothing was written: another apply_patch held the workspace for this call's whole wait budget. Call again.",
                ),
            };
            err_as(
                ErrorCode::PatchFailed,
                Category::Runtime,
                retryable,
                msg,
                json!({"reason": reason.as_str()}),
                hint,
            )
        }
        PatchError::Encoding { path, offset } => err(
            ErrorCode::UnsupportedEncoding,
            msg,
            json!({"path": path, "offset": offset, "supported": ["utf-8"]}),
            "Only UTF-8 files can be patched.",
        ),
        PatchError::AfterDelete(path) => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path, "reason": "after_delete"}),
            "Remove the later operation on the deleted path, or the delete.",
        ),
        PatchError::GitDirProtected(path) => err(
            ErrorCode::PermissionRequired,
            msg,
            json!({"path": path, "permission": "write_git_dir", "permission_mode": "safe", "how_to_grant": "restart the server with --permission-mode trusted"}),
            "Safe mode never writes inside .git/; use git commands or ask the operator for trusted mode.",
        ),
        PatchError::NoChanges => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"reason": "no_operations"}),
            "Add at least one '*** Add File:', '*** Update File:' or '*** Delete File:' operation.",
        ),
        PatchError::Conflict { path, reason } => err(
            ErrorCode::PatchConflict,
            msg,
            json!({"path": path, "reason": reason}),
            if reason.contains("already made") {
                "Nothing was written: the file already has this change. Re-read it to confirm; do not send this patch again."
            } else {
                "Nothing was written. Re-read the file and resend the patch against its current content."
            },
        ),
        PatchError::Io {
            path,
            source,
            transient,
        } => err_as(
            ErrorCode::PatchFailed,
            Category::Runtime,
            transient,
            msg,
            json!({"path": path, "os_error": source.to_string(), "rolled_back": true}),
            if transient {
                "Nothing was changed (every file was restored); call again, or check the file system if it repeats."
            } else {
                "Nothing was changed (every file was restored). The file system refuses this write (permissions, an immutable or read-only file, or no space): repeating the patch cannot succeed until that changes."
            },
        ),
        PatchError::RollbackFailed {
            cause,
            errors,
            backups,
        } => {
            let backups: serde_json::Map<String, serde_json::Value> =
                backups.into_iter().map(|(p, b)| (p, json!(b))).collect();
            err(
                ErrorCode::PatchRollbackFailed,
                msg,
                json!({"cause": cause.to_string(), "rollback_errors": errors, "recovery_backups": backups}),
                "Some files could not be restored: recovery_backups maps each to its backup in the same directory; restore them before patching again.",
            )
        }
        // `PatchError` is `#[non_exhaustive]`; every variant of this
        // version is mapped above.
        _ => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"reason": "unmapped"}),
            "Nothing was written. Re-read the files and resend the patch.",
        ),
    }
}

fn plan_error(path: String, e: PlanError, msg: String) -> ToolError {
    match e {
        PlanError::ContextNotFound {
            index,
            patch_line,
            expected,
            closest,
        } => {
            let (hint, closest_json) = match &closest {
                Some(c) => (
                    format!(
                        "The closest place is line {} ({} of {} lines agree). Re-read {path} around line {} with read_file and resend the hunk with its current text.",
                        c.line,
                        c.matching_lines,
                        expected.len(),
                        c.line
                    ),
                    json!({
                        "line": c.line,
                        "matching_lines": c.matching_lines,
                        "expected_line": c.first_difference.as_ref().map(|d| &d.0),
                        "actual_line": c.first_difference.as_ref().map(|d| &d.1),
                    }),
                ),
                None => (
                    format!("No line of the hunk occurs in {path}; re-read it with read_file."),
                    serde_json::Value::Null,
                ),
            };
            let shown: Vec<&String> = expected.iter().take(20).collect();
            err(
                ErrorCode::PatchContextNotFound,
                msg,
                json!({"path": path, "hunk_index": index, "match_count": 0, "patch_line": patch_line, "expected_lines": shown, "closest": closest_json}),
                &hint,
            )
        }
        PlanError::AnchorNotFound {
            index,
            patch_line,
            anchor,
        } => err(
            ErrorCode::PatchContextNotFound,
            msg,
            json!({"path": path, "hunk_index": index, "match_count": 0, "patch_line": patch_line, "anchor": anchor}),
            "The @@ anchor line does not occur (after the previous hunk); copy it exactly from the file, or drop it.",
        ),
        PlanError::Ambiguous {
            index,
            patch_line,
            count,
            lines,
            tier,
        } => err(
            ErrorCode::PatchContextAmbiguous,
            format!("Patch context matched more than one location: {msg}"),
            json!({"path": path, "hunk_index": index, "patch_line": patch_line, "match_count": count, "lines": lines, "matched_with": tier.as_str()}),
            "Add context lines that occur only at the intended place, or an '@@ <line>' anchor (e.g. the enclosing function) before the hunk.",
        ),
        PlanError::Overlap { first, second } => err(
            ErrorCode::PatchHunksOverlap,
            msg,
            json!({"path": path, "hunk_indexes": [first, second]}),
            "Merge the two hunks into one, or make them cover separate lines.",
        ),
        // `PlanError` is `#[non_exhaustive]`; every variant of this version
        // is mapped above.
        _ => err(
            ErrorCode::PatchFailed,
            msg,
            json!({"path": path}),
            "Nothing was written. Re-read the file and resend the patch against its current content.",
        ),
    }
}

/// The request a permission refusal stands for (the reference's shape):
/// a client may retry once the operator has granted it.
fn permission_request(permission: &str) -> serde_json::Value {
    json!({"tool_name": "exec_command", "permission": permission, "status": "required", "retryable": true})
}

/// The reference's diagnostic for the gates a restart of the server
/// opens (its codes and field names; our advice).
fn permission_diagnostic(permission: &str, evidence: &str) -> Option<serde_json::Value> {
    let (code, fix, flag) = match permission {
        "network" => (
            "NETWORK_PERMISSION_REQUIRED",
            "The operator can allow network access by restarting the server with --allow-network (network only) or --permission-mode trusted.",
            Some("--permission-mode trusted"),
        ),
        "shell_expansion" => (
            "SHELL_EXPANSION_PERMISSION_REQUIRED",
            "Write the command without $(...), ${...} or backticks, or have the operator restart the server with --permission-mode trusted.",
            Some("--permission-mode trusted"),
        ),
        "inline_script" => (
            "INLINE_SCRIPT_PERMISSION_REQUIRED",
            "Put the code in a file with apply_patch and run the file, or have the operator restart the server with --permission-mode trusted.",
            Some("--permission-mode trusted"),
        ),
        "sensitive_env" => (
            "SECRET_ENV_REJECTED",
            "Leave secret-looking and loader variables (tokens, passwords, LD_PRELOAD, ...) out of env.",
            None,
        ),
        _ => return None,
    };
    let mut d =
        json!({"code": code, "severity": "error", "evidence": evidence, "suggested_fix": fix});
    if let Some(flag) = flag {
        d["suggested_server_flag"] = json!(flag);
    }
    Some(d)
}

/// A command that could not be started (`error`: why, without the prefix
/// of `msg`).
fn spawn_failed(msg: String, why: &str) -> ToolError {
    err_as(
        ErrorCode::InternalError,
        Category::Runtime,
        false,
        msg,
        json!({"reason": "spawn_failed", "error": why}),
        "The command could not be started; check that /bin/sh exists and the workdir is usable.",
    )
}

/// Maps an exec-runtime error. Launch and policy failures carry `status: "failed"`.
pub fn exec_error(e: ExecError, config: &crate::cli::Config) -> ToolError {
    let msg = e.to_string();
    let mut out = match e {
        ExecError::NotFound(id) => err(
            ErrorCode::CommandNotFound,
            "Command not found; stdin access denied.".into(),
            json!({"command_id": id}),
            "Start the command again with exec_command.",
        ),
        // `runtime`, as the reference: the command's state, not the
        // arguments, refuses the write.
        ExecError::Ended { id, how } => err(
            ErrorCode::CommandClosed,
            msg,
            json!({"command_id": id, "reason": "ended", "ended": how}),
            "The command has ended; read what it printed with read_output, or start it again with exec_command.",
        ),
        ExecError::Closed(id) => err(
            ErrorCode::CommandClosed,
            msg,
            json!({"command_id": id}),
            "Poll with empty chars instead; to type into a command, start it with exec_command(tty=true).",
        ),
        ExecError::LimitReached { active, max } => err(
            ErrorCode::CommandLimitReached,
            msg,
            json!({"active": active, "max_active_commands": max}),
            "Wait for a running command to finish, or stop one with kill_command, then call again.",
        ),
        ExecError::Permission(r) => {
            let grant = match r.permission.as_str() {
                "network" => "restart the server with --allow-network or --permission-mode trusted",
                "shell_expansion" | "inline_script" => {
                    "restart the server with --permission-mode trusted"
                }
                _ => "restart the server with --permission-mode dangerous",
            };
            let mut details = json!({
                "permission": r.permission.as_str(),
                "evidence": r.evidence,
                "permission_mode": config.permission_mode.as_str(),
                "how_to_grant": grant,
                "permission_request": permission_request(r.permission.as_str()),
            });
            if let Some(p) = &r.path {
                details["path"] = json!(p);
            }
            if let Some((interpreter, option)) = &r.inline {
                details["command"] = json!(interpreter);
                details["option"] = json!(option);
            }
            let recovery = match r.permission.as_str() {
                "filesystem_escape" => format!(
                    "{} is outside what commands may reach in {} mode: use a workspace path or $TMPDIR; the operator can add a read-only root with --exec-allow-root DIR.",
                    r.path.as_deref().unwrap_or("the path"),
                    config.permission_mode.as_str()
                ),
                "privileged_executable" => format!(
                    "{} is setuid/setgid, which commands may not run in {} mode; run an unprivileged tool instead.",
                    r.path.as_deref().unwrap_or("the executable"),
                    config.permission_mode.as_str()
                ),
                _ => {
                    let instead = match r.permission.as_str() {
                        "shell_expansion" => {
                            "write the command without $(...), ${...} or backticks"
                        }
                        "inline_script" => {
                            "put the code in a file with apply_patch and run the file"
                        }
                        _ => "do the work without it",
                    };
                    format!(
                        "The {} gate is closed in {} mode: {instead}, or ask the operator to {grant}.",
                        r.permission.as_str(),
                        config.permission_mode.as_str()
                    )
                }
            };
            let mut refusal = err(
                ErrorCode::PermissionRequired,
                msg.clone(),
                details,
                &recovery,
            );
            refusal.extra.insert(
                "permission_request".into(),
                permission_request(r.permission.as_str()),
            );
            if let Some(d) = permission_diagnostic(r.permission.as_str(), &msg) {
                refusal.extra.insert("diagnostics".into(), json!([d]));
            }
            refusal
        }
        ExecError::Workdir(fs) => fs_error(fs),
        ExecError::Spawn { source } => spawn_failed(msg, &source.to_string()),
        ExecError::ShuttingDown => spawn_failed(msg, "the server is shutting down"),
        ExecError::RuntimeDir(why) => err(
            ErrorCode::RuntimeDirUnwritable,
            msg,
            json!({"error": why.to_string()}),
            "The server could not create its private runtime directory (TMPDIR); the operator must fix it.",
        ),
        ExecError::Unrepresentable(why) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "unrepresentable", "detail": why}),
            "Remove the NUL byte (or the '=' in the variable name) and call again.",
        ),
        ExecError::InvalidRef(r) => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "invalid_output_ref", "output_ref": r}),
            "Use an output_ref from a command result, e.g. command:<id>:stdout.",
        ),
        // This binary builds the runtime with `pty`; a build without it
        // would answer so.
        ExecError::TtyUnavailable => err(
            ErrorCode::InvalidArgument,
            msg,
            json!({"reason": "tty_unavailable", "field": "tty"}),
            "Call again without tty: this build runs commands on pipes only.",
        ),
        // `ExecError` is `#[non_exhaustive]`; every variant of this version
        // is mapped above.
        _ => err_as(
            ErrorCode::InternalError,
            Category::Runtime,
            false,
            msg,
            json!({"reason": "unmapped"}),
            "This is a server fault; call again, and report it if it repeats.",
        ),
    };
    if matches!(
        out.code,
        ErrorCode::PermissionRequired
            | ErrorCode::RuntimeDirUnwritable
            | ErrorCode::InternalError
            | ErrorCode::NotFound
            | ErrorCode::NotADirectory
            | ErrorCode::PathOutsideWorkspace
            | ErrorCode::AbsolutePathDenied
            | ErrorCode::SymlinkEscape
            | ErrorCode::CommandLimitReached
    ) {
        out.extra.insert("status".into(), json!("failed"));
    }
    out
}

/// A git operation that did not finish within its deadline.
pub fn git_stuck(secs: u64) -> ToolError {
    err(
        ErrorCode::GitError,
        format!(
            "the git operation did not finish within {secs} s; a file in .git may never finish reading (a FIFO or a hung file system)"
        ),
        json!({"reason": "timed_out", "deadline_secs": secs}),
        "Look for FIFOs or devices (exec_command(cmd=\"find . ! -type f ! -type d ! -type l\")); the git tools cannot read the repository until they are gone.",
    )
}

/// Maps a git-tools error.
pub fn git_error(e: GitError) -> ToolError {
    let msg = e.to_string();
    match e {
        GitError::NotARepository => err_as(
            ErrorCode::GitError,
            Category::Validation,
            false,
            msg,
            json!({"reason": "not_a_repository"}),
            "Run git init (exec_command) or use the file tools; there is no repository here.",
        ),
        GitError::LinkOutside(target) => err_as(
            ErrorCode::GitError,
            Category::Security,
            false,
            msg,
            json!({"reason": "git_link_outside_workspace", "target": target}),
            "The workspace's .git points outside it; the git tools will not follow it.",
        ),
        // The reference's category: git's own refusal, not an argument check.
        GitError::UnknownRevision { rev, source } => err(
            ErrorCode::GitError,
            msg,
            json!({"reason": "unknown_revision", "rev": rev, "cause": source.to_string()}),
            "Use a branch, tag, commit id or expression such as HEAD~2 (git_log lists commits).",
        ),
        GitError::PathNotInRevision { path, rev } => err(
            ErrorCode::NotFound,
            msg,
            json!({"path": path, "rev": rev}),
            "Check the path at that revision with git_show(rev=..., paths=[...]) or git_log(path=...).",
        ),
        GitError::Binary(path) => err(
            ErrorCode::BinaryFile,
            msg,
            json!({"path": path}),
            "Binary files have no line-based view.",
        ),
        GitError::Path(fs) => fs_error(fs),
        GitError::SpecialFile(name) => err(
            ErrorCode::GitError,
            msg,
            json!({"reason": "special_file", "path": name}),
            "Replace that file in .git with a regular one (see it with exec_command(cmd=\"ls -la .git\")); until then only the file tools work.",
        ),
        GitError::Git(cause) => err(
            ErrorCode::GitError,
            msg,
            json!({"reason": "repository_error", "cause": cause.to_string()}),
            "The repository could not be read; check it with exec_command(cmd=\"git fsck\") if it repeats.",
        ),
        // A failure this table does not know yet.
        _ => err(
            ErrorCode::GitError,
            msg,
            json!({"reason": "repository_error"}),
            "The repository could not be read; check it with exec_command(cmd=\"git fsck\") if it repeats.",
        ),
    }
}
