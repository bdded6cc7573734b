//! The tool result envelope (contract, "Result contract").

use serde_json::{Map, Value, json};

/// The emergency ceiling on one result's text, for entries that count-based
/// limits cannot bound.
pub const EMERGENCY_TEXT_CEILING: usize = 2_162_688;

/// Error categories of the contract (all seven).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Validation,
    Security,
    Permission,
    Runtime,
    NotFound,
    Conflict,
    Internal,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Validation => "validation",
            Self::Security => "security",
            Self::Permission => "permission",
            Self::Runtime => "runtime",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Internal => "internal",
        }
    }
}

/// Declares [`ErrorCode`] from one table: variant, wire name, default
/// category and default retryability.
macro_rules! error_codes {
    ($($variant:ident = ($wire:literal, $category:ident, $retryable:literal),)*) => {
        /// The contract's tool error codes ("Known tool error codes").
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(
            not(test),
            expect(
                dead_code,
                reason = "the contract names SANDBOX_UNAVAILABLE and TTY_UNSUPPORTED; nothing here raises them: without a kernel sandbox commands run under the gates alone (sandbox.tier none), as the reference falls back with a warning, and PTYs always open on Linux"
            )
        )]
        pub enum ErrorCode {
            $(
                #[doc = $wire]
                $variant,
            )*
        }

        impl ErrorCode {
            /// Every code, in the contract's order.
            #[cfg(test)]
            pub const ALL: &[ErrorCode] = &[$(Self::$variant),*];

            /// The name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)*
                }
            }

            /// The category a failure of this code has unless its site says
            /// otherwise (a git refusal for safety is `security`, a
            /// cancelled patch `runtime`).
            pub fn category(self) -> Category {
                match self {
                    $(Self::$variant => Category::$category,)*
                }
            }

            /// Whether calling again unchanged can succeed, unless the site
            /// knows better.
            pub fn retryable(self) -> bool {
                match self {
                    $(Self::$variant => $retryable,)*
                }
            }
        }
    };
}

error_codes! {
    AbsolutePathDenied = ("ABSOLUTE_PATH_DENIED", Security, false),
    BinaryFile = ("BINARY_FILE", Validation, false),
    CommandClosed = ("COMMAND_CLOSED", Runtime, false),
    CommandLimitReached = ("COMMAND_LIMIT_REACHED", Runtime, true),
    CommandNotFound = ("COMMAND_NOT_FOUND", NotFound, false),
    ElicitationUnsupported = ("ELICITATION_UNSUPPORTED", Permission, false),
    GitError = ("GIT_ERROR", Runtime, false),
    IdempotencyKeyReused = ("IDEMPOTENCY_KEY_REUSED", Validation, false),
    InternalError = ("INTERNAL_ERROR", Internal, false),
    InvalidArgument = ("INVALID_ARGUMENT", Validation, false),
    IsDirectory = ("IS_DIRECTORY", Validation, false),
    NotADirectory = ("NOT_A_DIRECTORY", Validation, false),
    NotFound = ("NOT_FOUND", NotFound, false),
    OutputTooLarge = ("OUTPUT_TOO_LARGE", Validation, false),
    PatchConflict = ("PATCH_CONFLICT", Conflict, true),
    PatchContextAmbiguous = ("PATCH_CONTEXT_AMBIGUOUS", Validation, true),
    PatchContextNotFound = ("PATCH_CONTEXT_NOT_FOUND", Validation, true),
    PatchFailed = ("PATCH_FAILED", Validation, false),
    PatchHunksOverlap = ("PATCH_HUNKS_OVERLAP", Validation, false),
    PatchRollbackFailed = ("PATCH_ROLLBACK_FAILED", Internal, false),
    PathOutsideWorkspace = ("PATH_OUTSIDE_WORKSPACE", Security, false),
    PermissionRequired = ("PERMISSION_REQUIRED", Permission, false),
    RepeatedCallBlocked = ("REPEATED_CALL_BLOCKED", Validation, false),
    RevisionMismatch = ("REVISION_MISMATCH", Conflict, true),
    RevisionRequired = ("REVISION_REQUIRED", Validation, true),
    RuntimeDirUnwritable = ("RUNTIME_DIR_UNWRITABLE", Runtime, false),
    SandboxUnavailable = ("SANDBOX_UNAVAILABLE", Runtime, false),
    SymlinkEscape = ("SYMLINK_ESCAPE", Security, false),
    TtyUnsupported = ("TTY_UNSUPPORTED", Validation, false),
    UnsupportedEncoding = ("UNSUPPORTED_ENCODING", Validation, false),
}

/// The advice of an argument refusal whose message already names what to
/// change: kept in `details.retry_hint`, left out of the text.
pub const FIX_ARGUMENTS: &str =
    "Fix the arguments to match the tool's inputSchema (tools/list), then call again.";

/// The advice of arguments that match the schema but not each other (an
/// `end_line` before `start_line`): in `details.retry_hint`, not the text.
pub const FIX_INCONSISTENT_ARGUMENTS: &str = "Fix the arguments and call again.";

/// A tool failure: an `isError: true` result, never a JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
    pub category: Category,
    pub retryable: bool,
    pub details: Value,
    /// What to do instead, for the model.
    pub recovery: String,
    /// Extra top-level fields of `structuredContent` (e.g. `status: "failed"`).
    pub extra: Map<String, Value>,
}

impl ToolError {
    /// A failure with the category and retryability [`ErrorCode`]'s table
    /// gives its code.
    pub fn new(
        code: ErrorCode,
        message: impl Into<String>,
        details: Value,
        recovery: impl Into<String>,
    ) -> Self {
        Self {
            code,
            message: message.into(),
            category: code.category(),
            retryable: code.retryable(),
            details,
            recovery: recovery.into(),
            extra: Map::new(),
        }
    }

    /// This failure under another category than its code's usual one.
    #[must_use]
    pub fn with_category(mut self, category: Category) -> Self {
        self.category = category;
        self
    }

    /// This failure with retryability decided at its site.
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Extra top-level fields of `structuredContent`.
    #[must_use]
    pub fn with_extra(mut self, extra: Map<String, Value>) -> Self {
        self.extra = extra;
        self
    }

    pub fn invalid_argument(message: String, details: Value) -> Self {
        Self::new(ErrorCode::InvalidArgument, message, details, FIX_ARGUMENTS)
    }
}

/// A tool success.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSuccess {
    /// Short model-facing text (never a JSON dump of the payload).
    pub text: String,
    /// The complete machine-readable result (`ok: true` is added).
    pub structured: Map<String, Value>,
    /// Content blocks before the text (the image of `view_image`, which
    /// the reference sends first).
    pub extra_content: Vec<Value>,
}

impl ToolSuccess {
    /// A success whose structured result is `result`.
    pub fn new(text: String, result: &impl serde::Serialize) -> Self {
        Self {
            text,
            structured: crate::output::to_map(result),
            extra_content: Vec::new(),
        }
    }
}

/// How results are rendered for this deployment.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// Append the structured JSON as a second text block (`--text-json`).
    pub text_json: bool,
}

/// Renders a tool outcome as a `CallToolResult`.
pub fn render(outcome: Result<ToolSuccess, ToolError>, opts: RenderOptions) -> Value {
    let (text, structured, extra, is_error) = match outcome {
        Ok(s) => {
            let mut structured = Map::new();
            structured.insert("ok".into(), json!(true));
            structured.extend(s.structured);
            (s.text, structured, s.extra_content, false)
        }
        Err(e) => {
            let text = error_text(&e);
            let mut structured = Map::new();
            structured.insert("ok".into(), json!(false));
            structured.extend(e.extra);
            let mut details = match e.details {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            // The reference implementation's clients read the advice here.
            details
                .entry("retry_hint")
                .or_insert_with(|| json!(e.recovery));
            structured.insert(
                "error".into(),
                json!({
                    "code": e.code.as_str(),
                    "message": e.message,
                    "category": e.category.as_str(),
                    "retryable": e.retryable,
                    "details": details,
                }),
            );
            (text, structured, Vec::new(), true)
        }
    };
    let mut content = extra;
    content.push(text_block(cap_text(text)));
    let structured = Value::Object(structured);
    if opts.text_json {
        let dump = serde_json::to_string(&structured).unwrap_or_default();
        content.push(text_block(cap_text(format!("structuredContent: {dump}"))));
    }
    // Built by hand: `json!` would deep-copy a large result.
    let mut result = Map::new();
    result.insert("content".into(), Value::Array(content));
    result.insert("structuredContent".into(), structured);
    result.insert("isError".into(), Value::Bool(is_error));
    Value::Object(result)
}

fn text_block(text: String) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), Value::String("text".into()));
    block.insert("text".into(), Value::String(text));
    Value::Object(block)
}

/// The failure text: code and message, then category and retryability, then
/// what to do — so a client that forwards only `content` still knows. The
/// `Retry:` line is left out when it would say nothing the message does not
/// (an argument refusal names the argument and the rule).
pub fn error_text(e: &ToolError) -> String {
    let verdict = if e.retryable {
        "Retryable: yes."
    } else {
        "Retryable: no. Do not repeat this call unchanged."
    };
    let mut text = format!(
        "{}: {}\nCategory: {}. {verdict}",
        e.code.as_str(),
        e.message,
        e.category.as_str(),
    );
    if !e.recovery.is_empty()
        && e.recovery != FIX_ARGUMENTS
        && e.recovery != FIX_INCONSISTENT_ARGUMENTS
    {
        text.push_str("\nRetry: ");
        text.push_str(&e.recovery);
    }
    text
}

fn cap_text(mut text: String) -> String {
    if text.len() <= EMERGENCY_TEXT_CEILING {
        return text;
    }
    let total = text.len();
    text.truncate(text.floor_char_boundary(EMERGENCY_TEXT_CEILING - 256));
    text.push_str(&format!(
        "\n[truncated by the {EMERGENCY_TEXT_CEILING}-byte safety ceiling: {total} bytes in all; structuredContent has the complete result or its continuation]"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_shape_and_text() {
        let e = ToolError::new(
            ErrorCode::CommandNotFound,
            "Command not found; stdin access denied.",
            json!({"command_id": "x"}),
            "This command_id has expired or never existed.",
        );
        let r = render(Err(e), RenderOptions::default());
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["ok"], false);
        assert_eq!(r["structuredContent"]["error"]["category"], "not_found");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("COMMAND_NOT_FOUND: Command not found; stdin access denied.\nCategory: not_found. Retryable: no. Do not repeat this call unchanged.\nRetry: "));
        assert_eq!(r["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn the_code_table_is_the_contracts_list() {
        // "Known tool error codes" of the contract, in its order.
        let contract = [
            "ABSOLUTE_PATH_DENIED",
            "BINARY_FILE",
            "COMMAND_CLOSED",
            "COMMAND_LIMIT_REACHED",
            "COMMAND_NOT_FOUND",
            "ELICITATION_UNSUPPORTED",
            "GIT_ERROR",
            "INTERNAL_ERROR",
            "INVALID_ARGUMENT",
            "IS_DIRECTORY",
            "NOT_A_DIRECTORY",
            "NOT_FOUND",
            "OUTPUT_TOO_LARGE",
            "PATCH_CONFLICT",
            "PATCH_CONTEXT_AMBIGUOUS",
            "PATCH_CONTEXT_NOT_FOUND",
            "PATCH_FAILED",
            "PATCH_HUNKS_OVERLAP",
            "PATCH_ROLLBACK_FAILED",
            "PATH_OUTSIDE_WORKSPACE",
            "PERMISSION_REQUIRED",
            "RUNTIME_DIR_UNWRITABLE",
            "SANDBOX_UNAVAILABLE",
            "SYMLINK_ESCAPE",
            "TTY_UNSUPPORTED",
            "UNSUPPORTED_ENCODING",
        ];
        // And the edit layer's, served by catalog 0.5 only.
        let edit_layer = [
            "IDEMPOTENCY_KEY_REUSED",
            "REPEATED_CALL_BLOCKED",
            "REVISION_MISMATCH",
            "REVISION_REQUIRED",
        ];
        let ours: Vec<&str> = ErrorCode::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|c| !edit_layer.contains(c))
            .collect();
        assert_eq!(ours, contract);
    }

    #[test]
    fn text_json_is_opt_in() {
        let ok = ToolSuccess {
            text: "hi".into(),
            ..Default::default()
        };
        let plain = render(Ok(ok.clone()), RenderOptions::default());
        assert_eq!(plain["content"].as_array().unwrap().len(), 1);
        let tj = render(Ok(ok), RenderOptions { text_json: true });
        assert_eq!(tj["content"][1]["text"], "structuredContent: {\"ok\":true}");
    }

    #[test]
    fn emergency_ceiling_cuts_at_a_char_boundary() {
        let s = "é".repeat(EMERGENCY_TEXT_CEILING);
        let out = cap_text(s);
        assert!(out.len() <= EMERGENCY_TEXT_CEILING);
        assert!(out.contains("safety ceiling"));
    }
}
