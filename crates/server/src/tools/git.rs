//! Adapters of the git tools (gix, on blocking threads).

use crate::server::Server;
use ctm_git_tools::{DiffOptions, DiffOutcome, GitError, GitRepo};
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::envelope::{ToolError, ToolSuccess};
use crate::errors::{git_error, join_error};

/// Runs `f` on the workspace's repository on a blocking thread; the
/// repository is opened once and shared (gix re-reads refs and the index).
async fn with_repo<T: Send + 'static>(
    server: &Server,
    f: impl FnOnce(&GitRepo) -> Result<T, GitError> + Send + 'static,
) -> Result<T, ToolError> {
    let cached = server.git.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let ws = server.workspace.clone();
    // Opening and every operation run confined (commands can write .git).
    let (result, opened) = tokio::task::spawn_blocking(move || {
        ctm_git_tools::confined(&ws, || {
            let repo = match cached {
                Some(r) => r,
                None => match GitRepo::open(&ws) {
                    Ok(r) => r,
                    Err(e) => return (Err(e), None),
                },
            };
            (f(&repo), Some(repo))
        })
    })
    .await
    .map_err(|e| join_error(&e))?;
    if let Some(r) = opened {
        *server.git.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }
    result.map_err(git_error)
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn ok(text: String, structured: Map<String, Value>) -> ToolSuccess {
    ToolSuccess {
        text,
        structured,
        extra_content: Vec::new(),
    }
}

pub async fn git_status(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let path = args.str("path").filter(|p| *p != ".").map(str::to_owned);
    let untracked = args.bool("include_untracked");
    let max = args.usize("max_entries").unwrap_or(1000);
    let s = with_repo(server, move |r| r.status(path.as_deref(), untracked, max)).await?;
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
            Some(o) => text.push_str(&format!("{} {} -> {}\n", e.xy(), o, e.path)),
            None => text.push_str(&format!("{} {}\n", e.xy(), e.path)),
        }
    }
    if s.entries.is_empty() {
        text.push_str("nothing to commit, working tree clean\n");
    }
    if s.truncated {
        text.push_str(&format!(
            "[truncated at max_entries={max}; raise it (up to 10000) or pass a narrower path]\n"
        ));
    }
    let entries: Vec<Value> = s
        .entries
        .iter()
        .map(|e| json!({"path": e.path, "orig_path": e.orig_path, "index_status": e.staged.to_string(), "worktree_status": e.unstaged.to_string(), "xy": e.xy()}))
        .collect();
    let mut st = obj(json!({
        "branch": s.branch,
        "head": s.head,
        "upstream": s.upstream,
        "ahead": s.ahead_behind.map(|x| x.0),
        "behind": s.ahead_behind.map(|x| x.1),
        "count": s.entries.len(),
        "truncated": s.truncated,
        "clean": s.entries.is_empty(),
    }));
    st.insert("entries".into(), Value::Array(entries));
    Ok(ok(text.trim_end().to_owned(), st))
}

fn paths_of(args: &Args) -> Vec<String> {
    let mut paths = args.strings("paths");
    if let Some(p) = args.map().get("path").and_then(Value::as_str) {
        paths.push(p.to_owned());
    }
    paths
}

fn diff_json(d: &DiffOutcome) -> Vec<Value> {
    d.files
        .iter()
        .map(|f| json!({"path": f.path, "old_path": f.old_path, "status": f.status.to_string(), "binary": f.binary, "lines_added": f.added, "lines_removed": f.removed, "included": f.included}))
        .collect()
}

fn omitted_hint(d: &DiffOutcome, tool: &str) -> Option<String> {
    let left: Vec<&str> = d
        .files
        .iter()
        .filter(|f| !f.included)
        .map(|f| f.path.as_str())
        .collect();
    if !d.truncated {
        return None;
    }
    Some(if left.is_empty() {
        format!(
            "[truncated by max_bytes: the file is longer than the budget; raise max_bytes (up to 1048576) or lower context_lines in {tool}]"
        )
    } else {
        format!(
            "[truncated by max_bytes; files left out: {}. Continue with {tool}(paths={:?}) or raise max_bytes]",
            left.join(", "),
            left
        )
    })
}

pub async fn git_diff(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let paths = paths_of(args);
    let staged = args.bool("staged");
    let unstaged = args.bool("unstaged");
    let opts = DiffOptions {
        context_lines: u32::try_from(args.u64("context_lines").unwrap_or(3)).unwrap_or(3),
        max_bytes: args.usize("max_bytes").unwrap_or(256 * 1024),
    };
    let (s, u) = with_repo(server, move |r| {
        let s = if staged {
            Some(r.diff_staged(&paths, opts)?)
        } else {
            None
        };
        let budget = opts
            .max_bytes
            .saturating_sub(s.as_ref().map_or(0, |d| d.text.len()));
        let u = if unstaged {
            Some(r.diff_unstaged(
                &paths,
                DiffOptions {
                    max_bytes: budget,
                    ..opts
                },
            )?)
        } else {
            None
        };
        Ok((s, u))
    })
    .await?;
    let mut text = String::new();
    let mut st = Map::new();
    for (name, d) in [("staged", &s), ("unstaged", &u)] {
        if let Some(d) = d {
            if s.is_some() && u.is_some() && !d.text.is_empty() {
                text.push_str(&format!("# {name} changes\n"));
            }
            text.push_str(&d.text);
            if let Some(h) = omitted_hint(d, "git_diff") {
                text.push_str(&h);
                text.push('\n');
            }
            st.insert(
                name.into(),
                json!({"diff": d.text, "files": diff_json(d), "truncated": d.truncated}),
            );
        }
    }
    let truncated = [&s, &u]
        .iter()
        .any(|d| d.as_ref().is_some_and(|d| d.truncated));
    if text.is_empty() {
        text = "No differences.".into();
    }
    st.insert("truncated".into(), json!(truncated));
    Ok(ok(text.trim_end().to_owned(), st))
}

fn commit_json(c: &ctm_git_tools::CommitInfo) -> Value {
    json!({
        "id": c.id, "short_id": c.short_id, "author": c.author_name, "author_email": c.author_email,
        "author_time": c.author_time, "committer": c.committer_name, "committer_time": c.committer_time,
        "subject": c.subject, "body": c.body, "parents": c.parents,
    })
}

pub async fn git_log(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let rev = args.str("ref").unwrap_or("HEAD").to_owned();
    let path = args.str("path").filter(|p| *p != ".").map(str::to_owned);
    let skip = args.usize("skip").unwrap_or(0);
    let max = args.usize("max_count").unwrap_or(20);
    let (rev2, path2) = (rev.clone(), path.clone());
    let log = with_repo(server, move |r| r.log(&rev2, path2.as_deref(), skip, max)).await?;
    let mut text: String = log
        .commits
        .iter()
        .map(|c| format!("{} {} ({})\n", c.short_id, c.subject, c.author_name))
        .collect();
    if log.commits.is_empty() {
        text = "No commits.\n".into();
    }
    let mut st = obj(
        json!({"ref": rev, "path": path, "skip": skip, "count": log.commits.len(), "has_more": log.has_more}),
    );
    if log.has_more {
        let next = skip + log.commits.len();
        text.push_str(&format!("[more: git_log(ref={rev:?}, skip={next})]\n"));
        st.insert(
            "next_action".into(),
            json!({"tool": "git_log", "arguments": {"ref": rev, "skip": next, "max_count": max}}),
        );
    }
    st.insert(
        "commits".into(),
        Value::Array(log.commits.iter().map(commit_json).collect()),
    );
    Ok(ok(text.trim_end().to_owned(), st))
}

pub async fn git_show(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let rev = args.str("rev").unwrap_or("HEAD").to_owned();
    let path = args
        .map()
        .get("path")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let paths = args.strings("paths");
    let include_diff = args.bool("include_diff");
    let opts = DiffOptions {
        context_lines: u32::try_from(args.u64("context_lines").unwrap_or(3)).unwrap_or(3),
        max_bytes: args.usize("max_bytes").unwrap_or(256 * 1024),
    };
    let rev2 = rev.clone();
    enum Shown {
        File(Vec<u8>),
        Commit(Box<(ctm_git_tools::CommitInfo, DiffOutcome)>),
    }
    let shown = with_repo(server, move |r| {
        if let Some(p) = &path {
            match r.file_at(&rev2, p) {
                Ok(bytes) => return Ok(Shown::File(bytes)),
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
        Shown::File(bytes) => {
            if bytes[..bytes.len().min(8000)].contains(&0) {
                return Err(git_error(GitError::Binary(
                    args.str("path").unwrap_or_default().to_owned(),
                )));
            }
            let total = bytes.len();
            let max = opts.max_bytes;
            let mut cut = total.min(max);
            let text_all = String::from_utf8_lossy(&bytes).into_owned();
            while !text_all.is_char_boundary(cut) {
                cut -= 1;
            }
            let content = text_all[..cut].to_owned();
            let truncated = cut < text_all.len();
            let mut text = content.clone();
            if truncated {
                text.push_str(&format!("\n[truncated at max_bytes={max} of {total} bytes; raise max_bytes (up to 1048576)]"));
            }
            let st = obj(
                json!({"rev": rev, "path": args.str("path"), "kind": "file", "content": content, "total_bytes": total, "truncated": truncated}),
            );
            Ok(ok(text, st))
        }
        Shown::Commit(boxed) => {
            let (info, diff) = *boxed;
            let mut text = format!(
                "commit {}\nAuthor: {} <{}>\n\n    {}\n",
                info.id, info.author_name, info.author_email, info.subject
            );
            if !info.body.is_empty() {
                for l in info.body.lines() {
                    text.push_str(&format!("    {l}\n"));
                }
            }
            let mut st = obj(json!({"rev": rev, "kind": "commit", "commit": commit_json(&info)}));
            if include_diff {
                if info.parents.len() > 1 {
                    text.push_str("\n[merge commit: the diff is against the first parent]\n");
                }
                text.push('\n');
                text.push_str(&diff.text);
                if let Some(h) = omitted_hint(&diff, "git_show") {
                    text.push_str(&h);
                }
                st.insert("diff".into(), json!(diff.text));
                st.insert("files".into(), Value::Array(diff_json(&diff)));
                st.insert("truncated".into(), json!(diff.truncated));
                st.insert(
                    "diff_base".into(),
                    json!(if info.parents.is_empty() {
                        "empty tree (root commit)"
                    } else {
                        "first parent"
                    }),
                );
            }
            Ok(ok(text.trim_end().to_owned(), st))
        }
    }
}

pub async fn git_blame(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let path = args.str("path").unwrap_or_default().to_owned();
    let rev = args.str("rev").unwrap_or("HEAD").to_owned();
    let start = u32::try_from(args.u64("start_line").unwrap_or(1)).unwrap_or(u32::MAX);
    let end = args
        .u64("end_line")
        .map(|e| u32::try_from(e).unwrap_or(u32::MAX));
    let max = u32::try_from(args.u64("max_lines").unwrap_or(200)).unwrap_or(1000);
    let (p2, r2) = (path.clone(), rev.clone());
    let b = with_repo(server, move |r| r.blame(&p2, &r2, start, end, max)).await?;
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
    let mut st = obj(
        json!({"path": path, "rev": rev, "total_lines": b.total_lines, "has_more": b.has_more}),
    );
    if let (true, Some(last)) = (b.has_more, b.lines.last()) {
        let next = last.line + 1;
        text.push_str(&format!(
            "[more: git_blame(path={path:?}, start_line={next})]\n"
        ));
        st.insert("next_action".into(), json!({"tool": "git_blame", "arguments": {"path": path, "rev": rev, "start_line": next}}));
    }
    let lines: Vec<Value> = b
        .lines
        .iter()
        .map(|l| json!({"line": l.line, "original_line": l.original_line, "commit": l.commit, "author": l.author, "author_email": l.author_email, "author_time": l.author_time, "summary": l.summary, "content": l.content}))
        .collect();
    st.insert("lines".into(), Value::Array(lines));
    Ok(ok(text.trim_end().to_owned(), st))
}
