//! Adapters of the file tools: decode, call `ctm-workspace-fs` on a blocking
//! thread, render.

use base64::Engine as _;
use ctm_workspace_fs::{
    Entry, FilesRequest, FsError, Globs, ImageRequest, ImageWarning, ListRequest, ReadRequest,
    SearchRequest, SortKey, TruncatedBy, WalkWarning, Workspace, WorkspacePath,
};
use serde_json::{Map, Value, json};

use crate::catalog::{
    FilesSort, LIST_DIR_MAX_ENTRIES, LIST_FILES_MAX_RESULTS, ListDirArgs, ListFilesArgs, ListSort,
    ReadFileArgs, SEARCH_MAX_RESULTS, SearchTextArgs, ViewImageArgs,
};
use crate::envelope::{ToolError, ToolSuccess};
use crate::errors::{fs_error, join_error};
pub use crate::output::NextCall;
use crate::output::{call_text, tool_result};
use crate::timestamp;

/// Runs `f` with a resolved path on a blocking thread.
async fn blocking<T: Send + 'static>(
    ws: &Workspace,
    path: &str,
    f: impl FnOnce(&Workspace, &WorkspacePath) -> Result<T, FsError> + Send + 'static,
) -> Result<T, ToolError> {
    let ws = ws.clone();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let p = ws.resolve_lexically(&path)?;
        f(&ws, &p)
    })
    .await
    .map_err(|e| join_error(&e))?
    .map_err(fs_error)
}

tool_result! {
    /// What `read_file` answers.
    pub struct ReadFileResult {
        path: String,
        encoding: &'static str,
        start_line: u64,
        end_line: u64,
        bytes_read: usize,
        output_lines: u64,
        output_bytes: usize,
        total_lines: u64,
        /// Only when `total_lines` is a lower bound.
        total_lines_exact: bool [skip_if "crate::output::is_true"],
        total_bytes: u64,
        max_bytes: usize,
        truncated: bool,
        truncated_by: Option<&'static str>,
        first_line_exceeds_limit: bool,
        next_start_line: Option<u64>,
        /// Catalog 0.5: the SHA-256 of all of the file's bytes, the token
        /// `apply_changes` takes.
        #[serde(skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        revision_algorithm: Option<&'static str>,
        warnings: Vec<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<NextCall>,
        content: String,
    }
}

tool_result! {
    /// One `list_dir` entry.
    pub struct DirEntry {
        name: String,
        path: String,
        r#type: &'static str,
        size_bytes: Option<u64>,
        modified: Option<String>,
        is_hidden: bool,
        is_ignored: bool,
    }
}

tool_result! {
    /// `max_entries` as a `list_dir` answer reports it.
    pub struct EntryLimit {
        max_entries: usize,
    }
}

tool_result! {
    /// What `list_dir` answers.
    pub struct ListDirResult {
        path: String,
        truncated: bool,
        /// Only when it cut the listing.
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<EntryLimit>,
        warnings: Vec<String>,
        entries: Vec<DirEntry>,
    }
}

tool_result! {
    /// One `list_files` result.
    pub struct FileEntry {
        path: String,
        r#type: &'static str,
        size_bytes: Option<u64>,
        modified: Option<String>,
    }
}

tool_result! {
    /// `max_results` as an answer reports it.
    pub struct ResultLimit {
        max_results: usize,
    }
}

tool_result! {
    /// What `list_files` answers.
    pub struct ListFilesResult {
        path: String,
        truncated: bool,
        /// Only when it cut the list.
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<ResultLimit>,
        warnings: Vec<String>,
        files: Vec<FileEntry>,
    }
}

tool_result! {
    /// One `search_text` match.
    pub struct SearchMatch {
        path: String,
        line: u64,
        column: u64,
        preview: String,
        preview_truncated: bool [skip_if "std::ops::Not::not"],
        before: Vec<String>,
        after: Vec<String>,
    }
}

tool_result! {
    /// What `search_text` answers.
    pub struct SearchTextResult {
        query: String,
        total_matches: u64,
        /// Only when `total_matches` is a lower bound.
        total_matches_exact: bool [skip_if "crate::output::is_true"],
        truncated: bool,
        /// Only when it cut the matches.
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<ResultLimit>,
        files_searched: u64,
        binary_files_skipped: u64 [skip_if "crate::output::is_zero"],
        warnings: Vec<String>,
        matches: Vec<SearchMatch>,
    }
}

tool_result! {
    /// The image file as it is on disk.
    pub struct ImageOriginal {
        bytes: u64,
        width: u32,
        height: u32,
        mime_type: &'static str,
    }
}

tool_result! {
    /// What `view_image` answers besides the image block.
    pub struct ViewImageResult {
        path: String,
        mime_type: &'static str,
        bytes: usize,
        width: u32,
        height: u32,
        resized: bool,
        original: ImageOriginal,
        warnings: Vec<String>,
    }
}

///
/// With `revision` (catalog 0.5) the answer also names the revision of the
/// whole file, in `revision` and on the text's first line.
pub async fn read_file(
    ws: &Workspace,
    args: ReadFileArgs,
    revision: bool,
) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let mut req = ReadRequest::default();
    req.revision = revision;
    req.start_line = args.start_line;
    req.end_line = args.end_line;
    req.max_lines = args.max_lines;
    req.max_bytes = args.max_bytes;
    // A continuation stays inside the range asked for: to `end_line`, or
    // `max_lines` from the start; `max_lines` beside an `end_line` is the
    // page size, and stays too.
    let range_end = req.end_line.or_else(|| {
        req.max_lines
            .map(|n| req.start_line.saturating_add(n.saturating_sub(1)))
    });
    let page = req.max_lines.filter(|_| req.end_line.is_some());
    let max_bytes = req.max_bytes;
    let r = blocking(ws, &path, move |ws, p| {
        ctm_workspace_fs::read_file(ws, p, &req)
    })
    .await?;
    let lines_returned = (r.end_line + 1).saturating_sub(r.start_line);
    let truncated = r.truncated_by.is_some();
    let next_action = r.next_start_line.map(|n| {
        let mut a = Map::new();
        a.insert("path".into(), json!(path));
        a.insert("start_line".into(), json!(n));
        if let Some(e) = range_end {
            a.insert("end_line".into(), json!(e));
        }
        if let Some(n) = page {
            a.insert("max_lines".into(), json!(n));
        }
        a.insert("max_bytes".into(), json!(max_bytes));
        NextCall {
            tool: "read_file",
            arguments: a,
        }
    });
    // Room for the continuation line: pushing it must not copy the page.
    let mut text = String::with_capacity(r.content.len() + 512);
    text.push_str(&r.content);
    if let Some(next) = &next_action {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let why = match r.truncated_by {
            Some(t) => format!(" (stopped by {})", t.as_str()),
            None => String::new(),
        };
        let call = call_text(next.tool, &next.arguments);
        text.push_str(&format!(
            "[lines {}-{} of {}{}{why}; continue with {call}]",
            r.start_line,
            r.end_line,
            if r.total_lines_exact { "" } else { "at least " },
            r.total_lines
        ));
    } else if r.content.is_empty() {
        text = format!(
            "[no lines: {path} has {} lines; start_line was {}]",
            r.total_lines, r.start_line
        );
    }
    if r.first_line_exceeds_limit {
        text.push_str(&format!(
            "\n[warning: line {} is longer than max_bytes ({max_bytes}); only its first {} bytes are shown. Raise max_bytes (up to {}) or use search_text to find within it.]",
            r.end_line,
            r.content.len(),
            crate::catalog::READ_MAX_BYTES,
        ));
    }
    if r.start_line > r.total_lines.max(1) && r.total_lines > 0 {
        text.push_str(&format!(
            "\n[warning: start_line {} is past the end of the file ({} lines)]",
            r.start_line, r.total_lines
        ));
    }
    // The reference's words; our sentences are in the text.
    let mut warnings = Vec::new();
    if truncated {
        warnings.push("content truncated");
    }
    if r.first_line_exceeds_limit {
        warnings.push("first selected line exceeds max_bytes");
    }
    // Past the end, the reference reports the file's last line as `end_line`.
    let end_line = if lines_returned == 0 && r.start_line > r.total_lines {
        r.total_lines
    } else {
        r.end_line
    };
    let result = ReadFileResult {
        path,
        encoding: "utf-8",
        start_line: r.start_line,
        end_line,
        bytes_read: r.content.len(),
        output_lines: output_lines(&r.content, truncated, lines_returned),
        output_bytes: r.content.len(),
        total_lines: r.total_lines,
        total_lines_exact: r.total_lines_exact,
        total_bytes: r.total_bytes,
        max_bytes,
        truncated,
        truncated_by: r.truncated_by.map(truncated_by),
        first_line_exceeds_limit: r.first_line_exceeds_limit,
        next_start_line: r.next_start_line,
        revision: r.revision.clone(),
        revision_algorithm: r
            .revision
            .as_ref()
            .map(|_| ctm_patch_engine::REVISION_ALGORITHM),
        warnings,
        next_action,
        // Moved in below, after the rest is serialized: a page is not
        // copied a second time.
        content: String::new(),
    };
    // The revision leads the text: most hosts show the model only the text.
    let text = match (revision, &r.revision) {
        (false, _) => text,
        (true, Some(rev)) => format!(
            "[lines {}-{end_line} of {} revision={rev}]\n{text}",
            r.start_line, r.total_lines
        ),
        (true, None) => format!(
            "[no revision: the file is larger than {} bytes or kept changing while it was read; apply_changes cannot edit it]\n{text}",
            ctm_workspace_fs::MAX_REVISION_BYTES
        ),
    };
    let mut success = ToolSuccess::new(text, &result);
    // Replaces the empty value in place (the field order stays).
    success
        .structured
        .insert("content".into(), Value::String(r.content));
    Ok(success)
}

/// The reference's `output_lines`: the pieces of the content split at
/// `\n` (so a final newline counts one more), or the lines kept when cut.
fn output_lines(content: &str, truncated: bool, lines_returned: u64) -> u64 {
    if truncated {
        lines_returned
    } else {
        content.split('\n').count() as u64
    }
}

/// The reference's words for the limit that cut a read: `lines` or `bytes`.
fn truncated_by(t: TruncatedBy) -> &'static str {
    match t {
        TruncatedBy::MaxLines => "lines",
        TruncatedBy::MaxBytes => "bytes",
    }
}

fn list_sort(s: ListSort) -> SortKey {
    match s {
        ListSort::Name => SortKey::Name,
        ListSort::Type => SortKey::Type,
        ListSort::Modified => SortKey::Modified,
    }
}

fn files_sort(s: FilesSort) -> SortKey {
    match s {
        FilesSort::Path => SortKey::Name,
        FilesSort::Modified => SortKey::Modified,
    }
}

fn dir_entry(e: Entry) -> DirEntry {
    DirEntry {
        r#type: e.kind.as_str(),
        modified: e.modified.map(timestamp::utc),
        name: e.name,
        path: e.path,
        size_bytes: e.size_bytes,
        is_hidden: e.is_hidden,
        is_ignored: e.is_ignored,
    }
}

pub async fn list_dir(ws: &Workspace, args: ListDirArgs) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let mut req = ListRequest::default();
    req.recursive = args.recursive;
    req.max_depth = args.max_depth;
    req.max_entries = args.max_entries;
    req.include_hidden = args.include_hidden;
    req.include_ignored = args.include_ignored;
    req.sort = list_sort(args.sort);
    let max = req.max_entries;
    let l = blocking(ws, &path, move |ws, p| {
        ctm_workspace_fs::list_dir(ws, p, &req)
    })
    .await?;
    let mut text: String = l
        .entries
        .iter()
        .map(|e| match e.kind.as_str() {
            "directory" => format!("{}/\n", e.path),
            "file" => match e.size_bytes {
                Some(n) => format!("{} ({n} bytes)\n", e.path),
                None => format!("{} (size unknown)\n", e.path),
            },
            other => format!("{} [{other}]\n", e.path),
        })
        .collect();
    if l.entries.is_empty() {
        text =
            format!("{path} is empty (hidden and ignored entries are left out unless asked for)\n");
    }
    if l.truncated {
        text.push_str(&format!(
            "[truncated: showing the first {max} entries; raise max_entries (up to {LIST_DIR_MAX_ENTRIES}) or list a subdirectory]\n"
        ));
    }
    let mut warnings = walk_warnings(&l.warnings);
    if l.truncated {
        warnings.insert(0, "entry limit reached".to_owned());
    }
    let result = ListDirResult {
        path,
        truncated: l.truncated,
        limit: l.truncated.then_some(EntryLimit { max_entries: max }),
        warnings,
        entries: l.entries.into_iter().map(dir_entry).collect(),
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

fn globs(include: Vec<String>, exclude: Vec<String>) -> Result<Globs, ToolError> {
    Globs::new(&include, &exclude).map_err(fs_error)
}

pub async fn list_files(ws: &Workspace, args: ListFilesArgs) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let mut include = args.patterns;
    include.extend(args.glob);
    let mut req = FilesRequest::default();
    req.globs = globs(include, args.exclude_patterns)?;
    req.include_hidden = args.include_hidden;
    req.include_ignored = args.include_ignored;
    req.max_results = args.max_results;
    req.sort = files_sort(args.sort);
    let max = req.max_results;
    let l = blocking(ws, &path, move |ws, p| {
        ctm_workspace_fs::list_files(ws, p, &req)
    })
    .await?;
    let mut text = String::with_capacity(l.entries.iter().map(|e| e.path.len() + 1).sum());
    for e in &l.entries {
        text.push_str(&e.path);
        text.push('\n');
    }
    if l.entries.is_empty() {
        text = "No files matched.\n".into();
    }
    if l.truncated {
        text.push_str(&format!(
            "[truncated: showing the first {max} files; raise max_results (up to {LIST_FILES_MAX_RESULTS}), narrow patterns, or list a subdirectory]\n"
        ));
    }
    let mut warnings = walk_warnings(&l.warnings);
    if l.truncated {
        warnings.insert(0, "result limit reached".to_owned());
    }
    let result = ListFilesResult {
        path,
        truncated: l.truncated,
        limit: l.truncated.then_some(ResultLimit { max_results: max }),
        warnings,
        files: l
            .entries
            .into_iter()
            .map(|e| FileEntry {
                r#type: e.kind.as_str(),
                modified: e.modified.map(timestamp::utc),
                path: e.path,
                size_bytes: e.size_bytes,
            })
            .collect(),
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

pub async fn search_text(ws: &Workspace, args: SearchTextArgs) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let query = args.query;
    let mut include = args.include_globs;
    include.extend(args.glob);
    let mut req = SearchRequest::new(query.clone());
    req.regex = args.regex;
    req.case_sensitive = args.case_sensitive;
    req.globs = globs(include, args.exclude_globs)?;
    req.context_lines = args.context_lines;
    req.max_results = args.max_results;
    req.max_preview_bytes = args.max_preview_bytes;
    let max = req.max_results;
    let o = blocking(ws, &path, move |ws, p| {
        ctm_workspace_fs::search_text(ws, p, &req)
    })
    .await?;
    let mut text = String::new();
    for m in &o.matches {
        for b in &m.before {
            text.push_str(&format!("  {b}\n"));
        }
        text.push_str(&format!(
            "{}:{}:{}: {}\n",
            m.path, m.line, m.column, m.preview
        ));
        for a in &m.after {
            text.push_str(&format!("  {a}\n"));
        }
    }
    if o.matches.is_empty() {
        text = format!(
            "No matches for {query:?} in {} files searched.\n",
            o.files_searched
        );
    }
    if o.truncated {
        let total = if o.total_exact {
            format!("{}", o.total_matches)
        } else {
            format!("at least {}", o.total_matches)
        };
        text.push_str(&format!(
            "[showing {} of {total} matches (max_results={max}); narrow the query, path or globs, or raise max_results (up to {SEARCH_MAX_RESULTS})]\n",
            o.matches.len()
        ));
    }
    let mut warnings = walk_warnings(&o.warnings);
    if o.truncated {
        warnings.insert(0, "result limit reached".to_owned());
    }
    let result = SearchTextResult {
        query,
        total_matches: o.total_matches as u64,
        total_matches_exact: o.total_exact,
        truncated: o.truncated,
        limit: o.truncated.then_some(ResultLimit { max_results: max }),
        files_searched: o.files_searched as u64,
        binary_files_skipped: o.binary_files_skipped as u64,
        warnings,
        matches: o
            .matches
            .into_iter()
            .map(|m| SearchMatch {
                path: m.path,
                line: m.line,
                column: m.column,
                preview: m.preview,
                preview_truncated: m.preview_truncated,
                before: m.before,
                after: m.after,
            })
            .collect(),
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

/// At most [`super::decode_slots::MAX_CONCURRENT_DECODES`] calls read and
/// decode at once; the others wait within their wait budget.
pub async fn view_image(
    ws: &Workspace,
    slots: &std::sync::Arc<tokio::sync::Semaphore>,
    args: ViewImageArgs,
    ctx: &ctm_protocol_eras::RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let mut req = ImageRequest::default();
    req.max_bytes = args.max_bytes;
    req.max_width = args.max_width;
    req.max_height = args.max_height;
    req.auto_resize = args.auto_resize;
    let wait = std::time::Duration::from_secs(ctx.wait_budget.effective_secs);
    let permit = super::decode_slots::acquire(slots, wait, &ctx.cancel).await?;
    let o = blocking(ws, &path, move |ws, p| {
        // Held until the decode ends, even if this call is abandoned.
        let _slot = permit;
        ctm_workspace_fs::view_image(ws, p, &req)
    })
    .await?;
    let data = base64::engine::general_purpose::STANDARD.encode(&o.data);
    let text = if o.resized {
        format!(
            "{path}: {} {}x{} (resized from {}x{}, {} bytes on disk)",
            o.media_type, o.width, o.height, o.original_width, o.original_height, o.original_bytes
        )
    } else {
        format!(
            "{path}: {} {}x{}, {} bytes",
            o.media_type, o.width, o.height, o.original_bytes
        )
    };
    // The reference's names; `original` describes the file on disk.
    let result = ViewImageResult {
        path,
        mime_type: o.media_type,
        bytes: o.data.len(),
        width: o.width,
        height: o.height,
        resized: o.resized,
        original: ImageOriginal {
            bytes: o.original_bytes,
            width: o.original_width,
            height: o.original_height,
            mime_type: o.original_media_type,
        },
        warnings: o.warnings.iter().map(image_warning).collect(),
    };
    let mut success = ToolSuccess::new(text, &result);
    success.extra_content = vec![json!({"type": "image", "data": data, "mimeType": o.media_type})];
    Ok(success)
}

/// The words of a walk's warnings, in order.
fn walk_warnings(warnings: &[WalkWarning]) -> Vec<String> {
    warnings
        .iter()
        .map(|w| match w {
            WalkWarning::Walk(message) => message.clone(),
            WalkWarning::Refused(e) => e.to_string(),
            WalkWarning::Search { path, error } => format!("{path}: {error}"),
            WalkWarning::SortStopped { by, scanned } => format!(
                "sorting by {} stopped after {scanned} entries; list a smaller directory",
                if *by == SortKey::Type {
                    "type"
                } else {
                    "modified"
                }
            ),
            other => format!("{other:?}"),
        })
        .collect()
}

/// The words of what resizing changed.
fn image_warning(w: &ImageWarning) -> String {
    match w {
        ImageWarning::FirstFrameOnly => {
            "animated GIFs are shown as their first frame when resized".to_owned()
        }
        ImageWarning::Reencoded { from, to } => format!("re-encoded from {from} to {to}"),
        other => format!("{other:?}"),
    }
}
