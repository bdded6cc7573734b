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

/// A tool failure: an `isError: true` result, never a JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    pub code: &'static str,
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
    pub fn invalid_argument(message: String, details: Value) -> Self {
        Self {
            code: "INVALID_ARGUMENT",
            message,
            category: Category::Validation,
            retryable: false,
            details,
            recovery:
                "Fix the arguments to match the tool's inputSchema (tools/list), then call again."
                    .into(),
            extra: Map::new(),
        }
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
                    "code": e.code,
                    "message": e.message,
                    "category": e.category.as_str(),
                    "retryable": e.retryable,
                    "details": details,
                    "recovery": e.recovery,
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
/// what to do — so a client that forwards only `content` still knows.
pub fn error_text(e: &ToolError) -> String {
    let verdict = if e.retryable {
        "Retryable: yes."
    } else {
        "Retryable: no. Do not repeat this call unchanged."
    };
    format!(
        "{}: {}\nCategory: {}. {verdict}\nRetry: {}",
        e.code,
        e.message,
        e.category.as_str(),
        e.recovery
    )
}

fn cap_text(mut text: String) -> String {
    if text.len() <= EMERGENCY_TEXT_CEILING {
        return text;
    }
    let total = text.len();
    let mut cut = EMERGENCY_TEXT_CEILING - 256;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
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
        let e = ToolError {
            code: "COMMAND_NOT_FOUND",
            message: "Command not found; stdin access denied.".into(),
            category: Category::NotFound,
            retryable: false,
            details: json!({"command_id": "x"}),
            recovery: "This command_id has expired or never existed.".into(),
            extra: Map::new(),
        };
        let r = render(Err(e), RenderOptions::default());
        assert_eq!(r["isError"], true);
        assert_eq!(r["structuredContent"]["ok"], false);
        assert_eq!(r["structuredContent"]["error"]["category"], "not_found");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("COMMAND_NOT_FOUND: Command not found; stdin access denied.\nCategory: not_found. Retryable: no. Do not repeat this call unchanged.\nRetry: "));
        assert_eq!(r["content"].as_array().unwrap().len(), 1);
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
