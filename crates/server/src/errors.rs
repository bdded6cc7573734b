//! The one table from capability errors to the contract's error codes,
//! categories, retryability and recovery text.

use ctm_workspace_fs::FsError;
use serde_json::json;

use crate::envelope::{Category, ToolError};

fn err(
    code: &'static str,
    category: Category,
    retryable: bool,
    message: String,
    details: serde_json::Value,
    recovery: &str,
) -> ToolError {
    ToolError {
        code,
        message,
        category,
        retryable,
        details,
        recovery: recovery.to_owned(),
    }
}

/// Maps a workspace error.
pub fn fs_error(e: FsError) -> ToolError {
    use Category::*;
    let msg = e.to_string();
    match e {
        FsError::Absolute(p) => err(
            "ABSOLUTE_PATH_DENIED",
            Security,
            false,
            msg,
            json!({"path": p}),
            "Pass a path relative to the workspace root, e.g. src/main.rs.",
        ),
        FsError::Outside(p) => err(
            "PATH_OUTSIDE_WORKSPACE",
            Security,
            false,
            msg,
            json!({"path": p}),
            "Only paths inside the workspace are reachable; remove the leading ../ parts.",
        ),
        FsError::SymlinkEscape(p) => err(
            "SYMLINK_ESCAPE",
            Security,
            false,
            msg,
            json!({"path": p}),
            "The path goes through a symlink that leaves the workspace; use a path inside it.",
        ),
        FsError::SymlinkLoop(p) => err(
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"path": p, "reason": "symlink_loop"}),
            "The symlinks on this path form a loop; use another path.",
        ),
        FsError::InvalidPath(p) => err(
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"reason": "invalid_path", "problem": p}),
            "Pass a plain workspace-relative path.",
        ),
        FsError::NotFound(p) => err(
            "NOT_FOUND",
            NotFound,
            false,
            msg,
            json!({"path": p}),
            "Check the path with list_dir or list_files (paths are relative to the workspace root).",
        ),
        FsError::IsDirectory(p) => err(
            "IS_DIRECTORY",
            Validation,
            false,
            msg,
            json!({"path": p}),
            "This is a directory: list it with list_dir or list_files.",
        ),
        FsError::NotADirectory(p) => err(
            "NOT_A_DIRECTORY",
            Validation,
            false,
            msg,
            json!({"path": p}),
            "This is a file: read it with read_file, or pass its directory.",
        ),
        FsError::NotRegular(p) => err(
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"path": p, "reason": "not_regular_file"}),
            "Only regular files can be read (not FIFOs, sockets or devices).",
        ),
        FsError::Binary(p) => err(
            "BINARY_FILE",
            Validation,
            false,
            msg,
            json!({"path": p}),
            "Binary content is not returned as text; use view_image for images.",
        ),
        FsError::UnsupportedEncoding { path, offset, line } => err(
            "UNSUPPORTED_ENCODING",
            Validation,
            false,
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
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"reason": format!("invalid_{kind}"), "pattern": pattern, "error": error}),
            if kind == "regex" {
                "Fix the regular expression, or pass regex=false to search for the text literally."
            } else {
                "Fix the glob pattern (e.g. **/*.rs, src/*.py)."
            },
        ),
        FsError::InvalidArgument(m) => err(
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"reason": "inconsistent_arguments", "problem": m}),
            "Fix the arguments and call again.",
        ),
        FsError::NotAnImage { path, reason } => err(
            "INVALID_ARGUMENT",
            Validation,
            false,
            msg,
            json!({"path": path, "reason": "not_an_image", "problem": reason, "supported": ["image/png", "image/jpeg", "image/gif", "image/webp"]}),
            "view_image shows PNG, JPEG, GIF and WebP files; read text files with read_file.",
        ),
        FsError::ImageTooLarge { path, reason } => err(
            "OUTPUT_TOO_LARGE",
            Validation,
            false,
            msg,
            json!({"path": path, "problem": reason}),
            "Pass auto_resize=true, or raise max_bytes/max_width/max_height within their bounds.",
        ),
        FsError::Root { path, reason } => err(
            "INTERNAL_ERROR",
            Internal,
            false,
            msg,
            json!({"root": path, "problem": reason}),
            "The workspace root is unusable; the operator must restart the server on an existing directory.",
        ),
        FsError::Io {
            path,
            message,
            transient,
        } => err(
            "INTERNAL_ERROR",
            Runtime,
            transient,
            msg,
            json!({"path": path, "os_error": message}),
            if transient {
                "A transient file system error; call again."
            } else {
                "The file system refused this operation; check permissions or choose another path."
            },
        ),
    }
}

/// A blocking task that did not finish (it panicked or was cancelled).
pub fn join_error(e: &tokio::task::JoinError) -> ToolError {
    err(
        "INTERNAL_ERROR",
        Category::Internal,
        true,
        format!("the operation did not complete: {e}"),
        json!({"reason": "task_failed"}),
        "This is a server fault; call again, and report it if it repeats.",
    )
}
