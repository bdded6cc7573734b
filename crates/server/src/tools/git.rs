//! Adapters of the git tools (gix, on blocking threads).

use crate::server::Server;
use ctm_git_tools::{
    BlameOptions, DiffOptions, DiffOutcome, GitError, GitRepo, LogOptions, StatusOptions,
    WorkingChanges, WorkingDiff,
};
use serde_json::{Map, json};

use ctm_workspace_fs::{FsError, Kind};

use crate::catalog::{
    GIT_CONTEXT_LINES, GIT_MAX_BYTES, GIT_MAX_BYTES_LIMIT, GIT_STATUS_MAX_ENTRIES, GitBlameArgs,
    GitDiffArgs, GitLogArgs, GitShowArgs, GitStatusArgs,
};
use crate::envelope::{ErrorCode, ToolError, ToolSuccess};
use crate::errors::{fs_error, git_error, git_stuck, join_error};
use crate::output::{NextCall, call_text, tool_result};
use crate::timestamp;

/// The least time a git operation gets before the call gives up on it (and
/// at least twice the deployment wait budget).
const GIT_DEADLINE_SECS: u64 = 10;

/// Runs `f` on the workspace's repository (opened once, run confined:
/// see [`ctm_git_tools::RepoCache`]) on a blocking thread.
async fn with_repo<T: Send + 'static>(
    server: &Server,
    f: impl FnOnce(&GitRepo) -> Result<T, GitError> + Send + 'static,
) -> Result<T, ToolError> {
    let cache = server.git.clone();
    let op = tokio::task::spawn_blocking(move || cache.with_repo(f));
    // A file in .git that never finishes reading (a FIFO made after the
    // check, a hung network file system) must not hold the call forever;
    // the thread is left to finish or hang on its own.
    let bound = std::time::Duration::from_secs(
        server
            .config
            .max_wait_secs
            .saturating_mul(2)
            .max(GIT_DEADLINE_SECS),
    );
    match tokio::time::timeout(bound, op).await {
        Ok(joined) => joined.map_err(|e| join_error(&e))?.map_err(git_error),
        Err(_) => Err(git_stuck(bound.as_secs())),
    }
}

/// What `path` is in the working tree; `None` when nothing is there.
async fn worktree_kind(server: &Server, path: &str) -> Result<Option<Kind>, ToolError> {
    let ws = server.workspace.clone();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let p = ws.resolve_lexically(&path)?;
        match ws.open_beneath(&p) {
            Ok((_, kind)) => Ok(Some(kind)),
            Err(FsError::NotFound(_) | FsError::NotADirectory(_)) => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
    .map_err(|e| join_error(&e))?
    .map_err(fs_error)
}

/// `NOT_FOUND` for a `path` that selected nothing because nothing is there,
/// in the working tree or in the history searched (the reference refuses
/// any path missing from the working tree; a deleted file's history is
/// still served here).
async fn refuse_missing(
    server: &Server,
    path: Option<&str>,
    found_nothing: bool,
) -> Result<(), ToolError> {
    match path {
        Some(p) if found_nothing && worktree_kind(server, p).await?.is_none() => {
            Err(fs_error(FsError::NotFound(p.to_owned())))
        }
        _ => Ok(()),
    }
}

tool_result! {
    /// One `git_status` entry.
    pub struct StatusChange {
        path: String,
        original_path: Option<String>,
        index_status: String,
        worktree_status: String,
    }
}

tool_result! {
    /// What `git_status` answers.
    pub struct GitStatusResult {
        is_repo: bool,
        branch: Option<String>,
        head: Option<String>,
        upstream: String,
        ahead: usize,
        behind: usize,
        truncated: bool,
        clean: bool,
        warnings: Vec<&'static str> [skip_if "Vec::is_empty"],
        entries: Vec<StatusChange>,
    }
}

/// A porcelain v1 status letter: an unchanged side is a space, as
/// `git status --porcelain` prints it.
fn porcelain(c: char) -> char {
    if c == '.' { ' ' } else { c }
}

pub async fn git_status(server: &Server, args: GitStatusArgs) -> Result<ToolSuccess, ToolError> {
    let path = Some(args.path).filter(|p| p != ".");
    let max = args.max_entries;
    let mut opts = StatusOptions::default()
        .include_untracked(args.include_untracked)
        .max_entries(max);
    opts.path = path.clone();
    let s = with_repo(server, move |r| r.status(&opts)).await?;
    refuse_missing(server, path.as_deref(), s.entries.is_empty()).await?;
    let xy = |e: &ctm_git_tools::StatusEntry| {
        format!("{}{}", porcelain(e.staged), porcelain(e.unstaged))
    };
    let mut text = format!(
        "## {}{}{}\n",
        s.branch.as_deref().unwrap_or("HEAD (detached)"),
        s.upstream
            .as_deref()
            .map(|u| format!("...{u}"))
            .unwrap_or_default(),
        s.ahead_behind
            .map(|(a, b)| format!(" [ahead {a}, behind {b}]"))
            .unwrap_or_default()
    );
    for e in &s.entries {
        match &e.orig_path {
            Some(o) => text.push_str(&format!("{} {} -> {}\n", xy(e), o, e.path)),
            None => text.push_str(&format!("{} {}\n", xy(e), e.path)),
        }
    }
    if s.entries.is_empty() {
        text.push_str("nothing to commit, working tree clean\n");
    }
    if s.truncated {
        text.push_str(&format!(
            "[truncated at max_entries={max}; raise it (up to {GIT_STATUS_MAX_ENTRIES}) or pass a narrower path]\n"
        ));
    }
    let entries = s
        .entries
        .iter()
        .map(|e| StatusChange {
            path: e.path.clone(),
            original_path: e.orig_path.clone(),
            index_status: porcelain(e.staged).to_string(),
            worktree_status: porcelain(e.unstaged).to_string(),
        })
        .collect();
    let result = GitStatusResult {
        is_repo: true,
        branch: s.branch,
        head: s.head,
        upstream: s.upstream.unwrap_or_default(),
        ahead: s.ahead_behind.map_or(0, |x| x.0),
        behind: s.ahead_behind.map_or(0, |x| x.1),
        truncated: s.truncated,
        clean: s.entries.is_empty(),
        warnings: if s.truncated {
            vec!["status entries truncated"]
        } else {
            Vec::new()
        },
        entries,
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

fn paths_of(paths: &[String], path: Option<&String>) -> Vec<String> {
    paths.iter().chain(path).cloned().collect()
}

/// The reference's word for a change: `added`, `deleted`, or `modified`
/// for everything else (a rename too).
fn status_word(c: char) -> &'static str {
    match c {
        'A' => "added",
        'D' => "deleted",
        _ => "modified",
    }
}

/// Our finer word for a change, kept beside the reference's `status`.
fn change_word(c: char) -> &'static str {
    match c {
        'R' => "renamed",
        'C' => "copied",
        'T' => "type_changed",
        _ => status_word(c),
    }
}

tool_result! {
    /// One changed file of a `git_diff` or `git_show` diff.
    pub struct ChangedFile {
        path: String,
        status: &'static str,
        /// Only when finer than `status`: `renamed`, `copied`,
        /// `type_changed`.
        #[serde(skip_serializing_if = "Option::is_none")]
        change: Option<&'static str>,
        binary: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        old_path: Option<String>,
        lines_added: usize,
        lines_removed: usize,
        /// Only when the diff left this file out.
        included: bool [skip_if "crate::output::is_true"],
        /// `unstaged` or `staged` in a `git_diff`; absent in a `git_show`.
        #[serde(skip_serializing_if = "Option::is_none")]
        stage: Option<&'static str>,
    }
}

fn diff_files(d: &DiffOutcome, stage: Option<&'static str>) -> Vec<ChangedFile> {
    d.files
        .iter()
        .map(|f| ChangedFile {
            path: f.path.clone(),
            status: status_word(f.status),
            change: Some(change_word(f.status)).filter(|w| *w != status_word(f.status)),
            binary: f.binary,
            old_path: f.old_path.clone(),
            lines_added: f.added,
            lines_removed: f.removed,
            included: f.included,
            stage,
        })
        .collect()
}

/// The reference's truncation fields of a text result, which each result
/// that has them lists in this order.
struct Truncation {
    truncated: bool,
    truncated_by: Option<&'static str>,
    output_lines: usize,
    output_bytes: usize,
    warnings: Vec<&'static str>,
}

fn truncation(text: &str, truncated: bool, warning: &'static str) -> Truncation {
    Truncation {
        truncated,
        truncated_by: truncated.then_some("bytes"),
        // The reference counts the pieces between newlines (a final
        // newline adds an empty one) unless the text was cut.
        output_lines: if truncated {
            text.lines().count()
        } else {
            text.split('\n').count()
        },
        output_bytes: text.len(),
        warnings: if truncated { vec![warning] } else { Vec::new() },
    }
}

tool_result! {
    /// What `git_diff` answers.
    pub struct GitDiffResult {
        is_repo: bool,
        truncated: bool,
        truncated_by: Option<&'static str>,
        output_lines: usize,
        output_bytes: usize,
        warnings: Vec<&'static str>,
        files: Vec<ChangedFile>,
        /// Catalog 0.5: whether untracked files were shown.
        #[serde(skip_serializing_if = "Option::is_none")]
        include_untracked: Option<bool>,
        diff: String,
    }
}

/// The model-facing hint of a cut diff; `call` renders the continuation
/// for the files left out.
fn omitted_hint(d: &DiffOutcome, tool: &str, call: impl Fn(&[String]) -> String) -> Option<String> {
    if !d.truncated {
        return None;
    }
    let left = d.omitted_paths();
    Some(if left.is_empty() {
        format!(
            "[truncated by max_bytes: the file is longer than the budget; raise max_bytes (up to {GIT_MAX_BYTES_LIMIT}) or lower context_lines in {tool}]"
        )
    } else {
        format!(
            "[truncated by max_bytes; files left out: {}. Continue with {} or raise max_bytes]",
            left.join(", "),
            call(&left)
        )
    })
}

///
/// `include_untracked` (catalog 0.5; `None` in the contract's catalog):
/// untracked files join the unstaged diff as added.
pub async fn git_diff(
    server: &Server,
    args: GitDiffArgs,
    include_untracked: Option<bool>,
) -> Result<ToolSuccess, ToolError> {
    let paths = paths_of(&args.paths, args.path.as_ref());
    let staged = args.staged;
    let unstaged = args.unstaged;
    let opts = diff_options(args.context_lines, args.max_bytes)
        .include_untracked(include_untracked == Some(true));
    let changes = match (unstaged, staged) {
        (true, true) => Some(WorkingChanges::Both),
        (true, false) => Some(WorkingChanges::Unstaged),
        (false, true) => Some(WorkingChanges::Staged),
        (false, false) => None,
    };
    // Unstaged first, as the reference concatenates them.
    let WorkingDiff {
        unstaged: u,
        staged: s,
        ..
    } = with_repo(server, move |r| match changes {
        Some(c) => r.diff_working(c, &paths, opts),
        None => Ok(WorkingDiff::default()),
    })
    .await?;
    let mut text = String::new();
    let mut diff = String::new();
    let mut files = Vec::new();
    for (name, d) in [("unstaged", &u), ("staged", &s)] {
        if let Some(d) = d {
            if s.is_some() && u.is_some() && !d.text.is_empty() {
                text.push_str(&format!("# {name} changes\n"));
            }
            text.push_str(&d.text);
            diff.push_str(&d.text);
            let call = |left: &[String]| {
                format!(
                    "git_diff(paths={left:?}{})",
                    if name == "staged" {
                        ", staged=true, unstaged=false"
                    } else {
                        ""
                    }
                )
            };
            if let Some(h) = omitted_hint(d, "git_diff", call) {
                text.push_str(&h);
                text.push('\n');
            }
            files.extend(diff_files(d, Some(name)));
        }
    }
    let truncated = [&s, &u]
        .iter()
        .any(|d| d.as_ref().is_some_and(|d| d.truncated));
    if text.is_empty() {
        text = "No differences.".into();
    }
    let t = truncation(&diff, truncated, "diff truncated");
    let result = GitDiffResult {
        is_repo: true,
        truncated: t.truncated,
        truncated_by: t.truncated_by,
        output_lines: t.output_lines,
        output_bytes: t.output_bytes,
        warnings: t.warnings,
        files,
        include_untracked,
        diff,
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

/// The context lines and byte budget of a diff.
fn diff_options(context_lines: u32, max_bytes: usize) -> DiffOptions {
    DiffOptions::default()
        .context_lines(context_lines)
        .max_bytes(max_bytes)
}

/// A date with the author's offset, as `git log --date=iso-strict`.
fn iso_strict(secs: i64, offset: i32) -> String {
    timestamp::rfc3339(secs, 0, offset)
}

tool_result! {
    /// A commit as `git_log` and `git_show` report it.
    pub struct Commit {
        hash: String,
        short_hash: String,
        author_name: String,
        author_email: String,
        author_date: String,
        /// The committer and the commit date, only when either differs
        /// from the author's.
        #[serde(skip_serializing_if = "Option::is_none")]
        committer: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        committer_date: Option<String>,
        subject: String,
        body: String [skip_if "String::is_empty"],
        parents: Vec<String>,
    }
}

fn commit(c: &ctm_git_tools::CommitInfo) -> Commit {
    Commit {
        hash: c.id.clone(),
        short_hash: c.short_id.clone(),
        author_name: c.author_name.clone(),
        author_email: c.author_email.clone(),
        author_date: iso_strict(c.author_time, c.author_offset),
        committer: (c.committer_name != c.author_name || c.committer_time != c.author_time)
            .then(|| c.committer_name.clone()),
        committer_date: (c.committer_name != c.author_name || c.committer_time != c.author_time)
            .then(|| iso_strict(c.committer_time, c.committer_offset)),
        subject: c.subject.clone(),
        body: c.body.clone(),
        parents: c.parents.clone(),
    }
}

tool_result! {
    /// What `git_log` answers.
    pub struct GitLogResult {
        is_repo: bool,
        r#ref: String,
        path: String,
        max_count: usize,
        skip: usize,
        truncated: bool,
        warnings: Vec<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<NextCall>,
        commits: Vec<Commit>,
    }
}

pub async fn git_log(server: &Server, args: GitLogArgs) -> Result<ToolSuccess, ToolError> {
    let rev = args.r#ref;
    let given_path = args.path;
    let path = given_path.clone().filter(|p| p != ".");
    let skip = args.skip;
    let max = args.max_count;
    let mut opts = LogOptions::default().skip(skip).max_count(max);
    opts.path = path.clone();
    let rev2 = rev.clone();
    let log = with_repo(server, move |r| r.log(&rev2, &opts)).await?;
    refuse_missing(server, path.as_deref(), log.commits.is_empty() && skip == 0).await?;
    let mut text: String = log
        .commits
        .iter()
        .map(|c| format!("{} {} ({})\n", c.short_id, c.subject, c.author_name))
        .collect();
    if log.commits.is_empty() {
        text = "No commits.\n".into();
    }
    let next_action = log.has_more.then(|| {
        let next = skip + log.commits.len();
        // Every argument that selects the commits carries over, the
        // default path (".") too, as the reference sends it.
        let mut a = Map::new();
        a.insert("path".into(), json!(given_path.as_deref().unwrap_or(".")));
        a.insert("ref".into(), json!(rev));
        a.insert("max_count".into(), json!(max));
        a.insert("skip".into(), json!(next));
        text.push_str(&format!("[more: {}]\n", call_text("git_log", &a)));
        NextCall {
            tool: "git_log",
            arguments: a,
        }
    });
    let result = GitLogResult {
        is_repo: true,
        r#ref: rev,
        path: path.unwrap_or_else(|| ".".to_owned()),
        max_count: max,
        skip,
        truncated: log.has_more,
        warnings: if log.has_more {
            vec!["commit limit reached"]
        } else {
            Vec::new()
        },
        next_action,
        commits: log.commits.iter().map(commit).collect(),
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

tool_result! {
    /// What `git_show` answers: a file at a revision (`kind: "file"`, with
    /// `path` and `total_bytes`) or a commit (`kind: "commit"`, with
    /// `commit`, and `diff_base` when the diff is included).
    pub struct GitShowResult {
        is_repo: bool,
        rev: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        kind: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        total_bytes: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        commit: Option<Commit>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<NextCall>,
        truncated: bool,
        truncated_by: Option<&'static str>,
        output_lines: usize,
        output_bytes: usize,
        warnings: Vec<&'static str>,
        files: Vec<ChangedFile>,
        #[serde(skip_serializing_if = "Option::is_none")]
        diff_base: Option<&'static str>,
        content: String,
    }
}

pub async fn git_show(server: &Server, args: GitShowArgs) -> Result<ToolSuccess, ToolError> {
    let rev = args.rev;
    let path = args.path;
    let given_path = path.clone();
    let paths = args.paths;
    let include_diff = args.include_diff;
    let opts = diff_options(
        args.context_lines.unwrap_or(GIT_CONTEXT_LINES),
        args.max_bytes.unwrap_or(GIT_MAX_BYTES),
    );
    let rev2 = rev.clone();
    enum Shown {
        File(ctm_git_tools::FileAtRevision),
        Commit(Box<(ctm_git_tools::CommitInfo, DiffOutcome)>),
    }
    let shown = with_repo(server, move |r| {
        if let Some(p) = &path {
            match r.show_file(&rev2, p, opts.max_bytes) {
                Ok(file) => return Ok(Shown::File(file)),
                Err(GitError::PathNotInRevision { .. }) if paths.is_empty() => {}
                Err(e) => return Err(e),
            }
        }
        let mut filters = paths;
        filters.extend(path);
        let (info, diff) = r.diff_commit(&rev2, &filters, opts)?;
        Ok(Shown::Commit(Box::new((info, diff))))
    })
    .await?;
    match shown {
        Shown::File(file) => {
            let total = file.total_bytes;
            let max = opts.max_bytes;
            let (content, truncated) = (file.content, file.truncated);
            let mut text = content.clone();
            if truncated {
                text.push_str(&format!("\n[truncated at max_bytes={max} of {total} bytes; raise max_bytes (up to {GIT_MAX_BYTES_LIMIT})]"));
            }
            let t = truncation(&content, truncated, "output truncated");
            let result = GitShowResult {
                is_repo: true,
                rev,
                path: given_path,
                kind: "file",
                total_bytes: Some(total),
                commit: None,
                next_action: None,
                truncated: t.truncated,
                truncated_by: t.truncated_by,
                output_lines: t.output_lines,
                output_bytes: t.output_bytes,
                warnings: t.warnings,
                files: Vec::new(),
                diff_base: None,
                content,
            };
            Ok(ToolSuccess::new(text, &result))
        }
        Shown::Commit(boxed) => {
            let (info, diff) = *boxed;
            let mut content = format!(
                "commit {}\nAuthor: {} <{}>\nDate:   {}\n\n    {}\n",
                info.id,
                info.author_name,
                info.author_email,
                iso_strict(info.author_time, info.author_offset),
                info.subject
            );
            if !info.body.is_empty() {
                content.push('\n');
                for l in info.body.lines() {
                    content.push_str(&format!("    {l}\n"));
                }
            }
            let mut text = String::new();
            let (next_action, t, files, diff_base);
            if include_diff {
                content.push('\n');
                content.push_str(&diff.text);
                let left = diff.omitted_paths();
                // The next page keeps what selects the data: the revision,
                // and the diff's shape.
                let mut a = Map::new();
                a.insert("rev".into(), json!(rev));
                a.insert("paths".into(), json!(left));
                if args.context_lines.is_some() {
                    a.insert("context_lines".into(), json!(opts.context_lines));
                }
                if args.max_bytes.is_some() {
                    a.insert("max_bytes".into(), json!(opts.max_bytes));
                }
                let hint = omitted_hint(&diff, "git_show", |_| call_text("git_show", &a));
                if info.parents.len() > 1 {
                    text.push_str("[merge commit: the diff is against the first parent]\n");
                }
                text.push_str(&content);
                if let Some(h) = hint {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&h);
                }
                next_action = (diff.truncated && !left.is_empty()).then(|| NextCall {
                    tool: "git_show",
                    arguments: a,
                });
                t = truncation(&content, diff.truncated, "output truncated");
                files = diff_files(&diff, None);
                diff_base = Some(if info.parents.is_empty() {
                    "empty tree (root commit)"
                } else {
                    "first parent"
                });
            } else {
                text = content.clone();
                next_action = None;
                t = truncation(&content, false, "output truncated");
                files = Vec::new();
                diff_base = None;
            }
            let result = GitShowResult {
                is_repo: true,
                rev,
                path: None,
                kind: "commit",
                total_bytes: None,
                commit: Some(commit(&info)),
                next_action,
                truncated: t.truncated,
                truncated_by: t.truncated_by,
                output_lines: t.output_lines,
                output_bytes: t.output_bytes,
                warnings: t.warnings,
                files,
                diff_base,
                content,
            };
            Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
        }
    }
}

tool_result! {
    /// One `git_blame` line.
    pub struct BlamedLine {
        line: u32,
        original_line: u32,
        commit: String,
        author: String,
        author_mail: String,
        author_time: i64,
        summary: String,
        content: String,
    }
}

tool_result! {
    /// What `git_blame` answers.
    pub struct GitBlameResult {
        is_repo: bool,
        path: String,
        rev: Option<String>,
        start_line: u32,
        end_line: u32,
        max_lines: u32,
        total_lines: u32,
        truncated: bool,
        warnings: Vec<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<NextCall>,
        lines: Vec<BlamedLine>,
    }
}

pub async fn git_blame(server: &Server, args: GitBlameArgs) -> Result<ToolSuccess, ToolError> {
    let path = args.path;
    let given_rev = args.rev;
    let rev = given_rev.clone().unwrap_or_else(|| "HEAD".to_owned());
    let start = args.start_line;
    let end = args.end_line;
    let max = args.max_lines;
    if let Some(e) = end.filter(|e| *e < start) {
        return Err(ToolError::new(
            ErrorCode::InvalidArgument,
            format!("end_line ({e}) must be >= start_line ({start})"),
            json!({"reason": "inconsistent_arguments", "start_line": start, "end_line": e}),
            crate::envelope::FIX_INCONSISTENT_ARGUMENTS,
        ));
    }
    let opts = BlameOptions::default().lines(start, end).max_lines(max);
    let (r2, p2) = (rev.clone(), path.clone());
    let b = match with_repo(server, move |r| {
        let blame = r.blame(&r2, &p2, &opts);
        // A blame's objects and caches (10+ MiB) are freed by now; given
        // back at once, not after the next quiet moment: back-to-back
        // blames otherwise each left theirs in another malloc arena, and
        // the peak grew to 48 MiB after five (one blame: 25 MiB).
        crate::trim::trim_heap();
        blame
    })
    .await
    {
        Ok(b) => b,
        Err(e) if e.code == ErrorCode::NotFound => {
            return Err(blame_missing(server, &path, &rev, e).await);
        }
        Err(e) => return Err(e),
    };
    // The last line of the range asked for, as the reference reports it.
    let range_end = end
        .unwrap_or(u32::MAX)
        .min(start.saturating_add(max.max(1) - 1));
    let mut text: String = b
        .lines
        .iter()
        .map(|l| {
            format!(
                "{} ({} {}) {:>4}: {}\n",
                &l.commit[..8.min(l.commit.len())],
                l.author,
                l.author_time,
                l.line,
                l.content
            )
        })
        .collect();
    let next_action = match (b.has_more, b.lines.last()) {
        (true, Some(last)) => {
            // Every argument that selects the lines carries over.
            let mut a = Map::new();
            a.insert("path".into(), json!(path));
            if let Some(r) = &given_rev {
                a.insert("rev".into(), json!(r));
            }
            a.insert("start_line".into(), json!(last.line + 1));
            if let Some(e) = end {
                a.insert("end_line".into(), json!(e));
            }
            a.insert("max_lines".into(), json!(max));
            text.push_str(&format!("[more: {}]\n", call_text("git_blame", &a)));
            Some(NextCall {
                tool: "git_blame",
                arguments: a,
            })
        }
        _ => None,
    };
    let result = GitBlameResult {
        is_repo: true,
        path,
        rev: given_rev,
        start_line: start,
        end_line: range_end,
        max_lines: max,
        total_lines: b.total_lines,
        truncated: b.has_more,
        warnings: if b.has_more {
            vec!["line limit reached"]
        } else {
            Vec::new()
        },
        next_action,
        lines: b
            .lines
            .into_iter()
            .map(|l| BlamedLine {
                line: l.line,
                original_line: l.original_line,
                commit: l.commit,
                author: l.author,
                author_mail: l.author_email,
                author_time: l.author_time,
                summary: l.summary,
                content: l.content,
            })
            .collect(),
    };
    Ok(ToolSuccess::new(text.trim_end().to_owned(), &result))
}

/// A blame of a path `rev` does not have, judged as the reference judges
/// it: nothing in the working tree is `NOT_FOUND`, a directory
/// `IS_DIRECTORY`, and a file git has no such revision of (untracked, or
/// added later) is git's own failure, `GIT_ERROR`.
async fn blame_missing(server: &Server, path: &str, rev: &str, not_found: ToolError) -> ToolError {
    match worktree_kind(server, path).await {
        Ok(None) => fs_error(FsError::NotFound(path.to_owned())),
        Ok(Some(Kind::Directory)) => fs_error(FsError::IsDirectory(path.to_owned())),
        Ok(Some(_)) => ToolError::new(
            ErrorCode::GitError,
            format!("git blame: {path} is not in {rev}"),
            json!({"reason": "path_not_in_revision", "path": path, "rev": rev}),
            "Only committed files have a blame; commit it first, or name a revision that has it (git_log(path=...) lists them).",
        ),
        Err(_) => not_found,
    }
}
