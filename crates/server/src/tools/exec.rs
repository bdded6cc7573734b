//! Adapters of the process tools: exec_command, write_stdin, kill_command,
//! read_output, check_exec_environment.

use std::time::Duration;

use ctm_exec_runtime::{
    Delta, ExecRequest, GateState, KillStatus, SECCOMP_REFUSED, Signal, Snapshot, Status, Stream,
    WaitEnd, landlock_support, seccomp_available,
};
use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::envelope::{ToolError, ToolSuccess};
use crate::errors::exec_error;
use crate::server::Server;

/// The wait of one call: `min(yield_time_ms, the request's budget)`.
struct Wait {
    requested_ms: u64,
    effective: Duration,
    cut_by_budget: bool,
}

/// `yield_time_ms` when none is given.
const DEFAULT_YIELD_MS: u64 = 10_000;

fn wait_of(args: &Args, ctx: &RequestContext) -> Wait {
    let requested_ms = args.u64("yield_time_ms").unwrap_or(DEFAULT_YIELD_MS);
    let budget_ms = ctx.wait_budget.effective_secs.saturating_mul(1000);
    Wait {
        requested_ms,
        effective: Duration::from_millis(requested_ms.min(budget_ms)),
        cut_by_budget: budget_ms < requested_ms,
    }
}

fn output_ref(id: &str, stream: Stream) -> String {
    format!("command:{id}:{}", stream.as_str())
}

fn delta_json(d: &Delta) -> Value {
    json!({
        "bytes": d.new_bytes,
        "start_offset": d.start_offset,
        "end_offset": d.end_offset,
        "truncated": d.truncated(),
        "omitted_bytes": d.omitted_bytes,
        "elided": d.elided.map(|(o, n)| json!({"offset": o, "bytes": n})),
        "head_bytes": d.head_bytes,
        "tail_bytes": d.tail_bytes,
    })
}

/// The inline text of a stream: all of its new output, or its head and
/// tail around one gap line that states the exact call for the middle.
fn shown(d: &Delta, oref: &str) -> String {
    match d.elided {
        None => d.text.clone(),
        Some((offset, len)) => {
            let head = &d.text[..(d.head_bytes as usize).min(d.text.len())];
            let tail_at = d.text.len().saturating_sub(d.tail_bytes as usize);
            let tail = &d.text[tail_at..];
            format!(
                "{head}\n[... {len} bytes left out here: read_output(output_ref=\"{oref}\", offset={offset}, limit={len}) ...]\n{tail}"
            )
        }
    }
}

fn status_line(s: &Snapshot) -> String {
    let ms = s.elapsed.as_millis();
    match s.status {
        Status::Running => format!(
            "Status: running | command_id {} | {ms} ms so far",
            s.command_id
        ),
        Status::Exited => format!(
            "Status: exited | exit code {} | {ms} ms",
            s.exit_code.map_or("?".into(), |c| c.to_string())
        ),
        Status::Terminated => format!(
            "Status: terminated | signal {} | {ms} ms",
            s.signal.unwrap_or("?")
        ),
        Status::Timeout => format!(
            "Status: timeout | signal {} | timed out after {ms} ms",
            s.signal.unwrap_or("?")
        ),
    }
}

/// Renders a snapshot: status line first, then output, then the exact
/// continuation calls.
fn render(
    s: &Snapshot,
    args: &Args,
    wait: Option<&Wait>,
    ctx: &RequestContext,
    extra: Map<String, Value>,
) -> ToolSuccess {
    let verbosity = args.str("verbosity").unwrap_or("full");
    let preview_bytes = args.usize("preview_bytes").unwrap_or(4096);
    let id = &s.command_id;
    let mut text = status_line(s);
    let mut st = Map::new();
    st.insert("command_id".into(), json!(id));
    st.insert("status".into(), json!(s.status.as_str()));
    st.insert("exit_code".into(), json!(s.exit_code));
    st.insert("signal".into(), json!(s.signal));
    st.insert("timed_out".into(), json!(s.timed_out));
    st.insert("tty".into(), json!(s.tty));
    st.insert(
        "elapsed_ms".into(),
        json!(u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX)),
    );
    st.insert("verbosity".into(), json!(verbosity));
    match verbosity {
        "summary" => {}
        "preview" => {
            let cut = |t: &str| -> String {
                if t.len() <= preview_bytes {
                    return t.to_owned();
                }
                let mut start = t.len() - preview_bytes;
                while !t.is_char_boundary(start) {
                    start += 1;
                }
                t[start..].to_owned()
            };
            let preview = format!(
                "--- stdout ---\n{}\n--- stderr ---\n{}",
                cut(&s.stdout.text),
                cut(&s.stderr.text)
            );
            text.push('\n');
            text.push_str(&preview);
            st.insert("preview".into(), json!(preview));
        }
        _ => {
            let out = shown(&s.stdout, &output_ref(id, Stream::Stdout));
            let err = shown(&s.stderr, &output_ref(id, Stream::Stderr));
            if !out.is_empty() {
                text.push('\n');
                text.push_str(&out);
            }
            if !err.is_empty() {
                text.push_str("\nstderr:\n");
                text.push_str(&err);
            }
            st.insert("stdout".into(), json!(out));
            st.insert("stderr".into(), json!(err));
        }
    }
    st.insert("stdout_info".into(), delta_json(&s.stdout));
    st.insert("stderr_info".into(), delta_json(&s.stderr));
    st.insert("stdout_truncated".into(), json!(s.stdout.truncated()));
    st.insert("stderr_truncated".into(), json!(s.stderr.truncated()));
    st.insert("stdout_omitted_bytes".into(), json!(s.stdout.omitted_bytes));
    st.insert("stderr_omitted_bytes".into(), json!(s.stderr.omitted_bytes));
    // The reference's names: what cut the inline text, how much it shows
    // (bytes, and lines counted as its pieces between newlines, when the
    // text is there), and what the buffer has evicted.
    for (name, d) in [("stdout", &s.stdout), ("stderr", &s.stderr)] {
        st.insert(
            format!("{name}_truncated_by"),
            json!(d.elided.map(|_| "bytes")),
        );
        st.insert(
            format!("{name}_output_bytes"),
            json!(d.head_bytes + d.tail_bytes),
        );
        if let Some(lines) = st
            .get(name)
            .and_then(Value::as_str)
            .map(|t| t.matches('\n').count() + 1)
        {
            st.insert(format!("{name}_output_lines"), json!(lines));
        }
        st.insert(format!("{name}_dropped_bytes"), json!(d.dropped_bytes));
    }
    let truncated = s.stdout.truncated()
        || s.stderr.truncated()
        || (verbosity != "full" && (s.stdout.new_bytes > 0 || s.stderr.new_bytes > 0));
    st.insert("truncated".into(), json!(truncated));
    st.insert(
        "output_refs".into(),
        json!({"stdout": output_ref(id, Stream::Stdout), "stderr": output_ref(id, Stream::Stderr)}),
    );
    let mut next_actions = Vec::new();
    for (stream, d) in [(Stream::Stdout, &s.stdout), (Stream::Stderr, &s.stderr)] {
        let from = if verbosity == "full" {
            d.elided.map(|(o, _)| o)
        } else if d.new_bytes > 0 {
            Some(d.start_offset)
        } else {
            None
        };
        if let Some(offset) = from {
            let limit = d.elided.map_or(65536, |(_, n)| n.clamp(1, 1 << 20));
            next_actions.push(json!({"tool": "read_output", "arguments": {"output_ref": output_ref(id, stream), "offset": offset, "limit": limit}}));
            // In full verbosity the gap line in the output states the call.
            if verbosity != "full" {
                text.push_str(&format!(
                    "\n[{} output left out: read_output(output_ref=\"{}\", offset={offset})]",
                    stream.as_str(),
                    output_ref(id, stream)
                ));
            }
        }
    }
    st.insert("background_running".into(), json!(s.background_running));
    if s.background_running {
        text.push_str(&format!(
            "\n[Processes this command started are still running in the background; they count against the active-command limit until they end. Stop them with kill_command(command_id=\"{id}\").]"
        ));
    }
    if s.status == Status::Running {
        // Suggest the default wait, not a short first yield again: one poll
        // then usually sees the end (capped by the request's wait budget).
        let y = DEFAULT_YIELD_MS.min(ctx.wait_budget.effective_secs.saturating_mul(1000));
        let next = json!({"tool": "write_stdin", "arguments": {"command_id": id, "chars": "", "yield_time_ms": y}});
        // The id is on the status line: stated once.
        text.push_str(&format!(
            "\nStill running: poll with write_stdin(chars=\"\", yield_time_ms={y}); stop it with kill_command."
        ));
        st.insert("next_action".into(), next);
    } else if let Some(first) = next_actions.first() {
        st.insert("next_action".into(), first.clone());
    }
    if !next_actions.is_empty() {
        st.insert("next_actions".into(), Value::Array(next_actions));
    }
    if let Some(w) = wait {
        let b = ctx.wait_budget;
        st.insert(
            "wait".into(),
            json!({
                "requested_yield_ms": w.requested_ms,
                "effective_wait_ms": u64::try_from(w.effective.as_millis()).unwrap_or(u64::MAX),
                "budget_secs": b.effective_secs,
                "budget_source": b.source.as_str(),
                "cut_by_budget": w.cut_by_budget && s.wait_end == WaitEnd::Deadline,
                "ended_by": match s.wait_end {
                    WaitEnd::Exited => "exit",
                    WaitEnd::Deadline => "deadline",
                    WaitEnd::Quiet => "output_quiet",
                    WaitEnd::Cancelled => "cancelled",
                },
            }),
        );
        if w.cut_by_budget && s.wait_end == WaitEnd::Deadline {
            text.push_str(&format!(
                "\n[The wait was cut to {} s by the request's {} budget.]",
                b.effective_secs,
                if b.source.as_str() == "request_header" {
                    "X-Coding-Tools-Budget-Secs"
                } else {
                    "deployment (--max-wait-secs)"
                }
            ));
        }
    }
    let mut warnings = Vec::new();
    if !landlock_support().available {
        warnings.push(json!(format!(
            "commands are not confined by Landlock here ({})",
            landlock_support().reason.clone().unwrap_or_default()
        )));
    }
    st.insert("warnings".into(), Value::Array(warnings));
    st.extend(extra);
    ToolSuccess {
        text,
        structured: st,
        extra_content: Vec::new(),
    }
}

pub async fn exec_command(
    server: &Server,
    args: &Args,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let workdir = match (
        args.map().get("workdir").and_then(Value::as_str),
        args.map().get("cwd").and_then(Value::as_str),
    ) {
        (Some(w), Some(c)) if w != c => {
            return Err(ToolError::invalid_argument(
                format!("workdir ({w:?}) and its alias cwd ({c:?}) disagree"),
                json!({"reason": "conflicting_arguments", "arguments": ["workdir", "cwd"]}),
            ));
        }
        (Some(w), _) => w.to_owned(),
        (None, Some(c)) => c.to_owned(),
        (None, None) => ".".to_owned(),
    };
    let env = args
        .map()
        .get("env")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let req = ExecRequest {
        cmd: args.str("cmd").unwrap_or_default().to_owned(),
        workdir,
        timeout: Duration::from_millis(args.u64("timeout_ms").unwrap_or(30_000)),
        tty: args.bool("tty"),
        stdin: args.str("stdin").unwrap_or_default().to_owned(),
        env,
    };
    let wait = wait_of(args, ctx);
    let max = args.usize("max_output_bytes").unwrap_or(65_536);
    let snap = server
        .exec
        .exec(req, wait.effective, ctx.cancel.cancelled(), max)
        .await
        .map_err(|e| exec_error(e, &server.config))?;
    Ok(render(&snap, args, Some(&wait), ctx, Map::new()))
}

pub async fn write_stdin(
    server: &Server,
    args: &Args,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let id = args.str("command_id").unwrap_or_default();
    let wait = wait_of(args, ctx);
    let max = args.usize("max_output_bytes").unwrap_or(65_536);
    let snap = server
        .exec
        .poll(
            id,
            args.str("chars").unwrap_or_default(),
            wait.effective,
            ctx.cancel.cancelled(),
            max,
        )
        .await
        .map_err(|e| exec_error(e, &server.config))?;
    Ok(render(&snap, args, Some(&wait), ctx, Map::new()))
}

pub async fn kill_command(
    server: &Server,
    args: &Args,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let id = args.str("command_id").unwrap_or_default();
    let signal = match args.str("signal") {
        Some("KILL") => Signal::KILL,
        Some("INT") => Signal::INT,
        _ => Signal::TERM,
    };
    let wait = Duration::from_millis(args.u64("wait_ms").unwrap_or(5_000));
    let kill_wait = Duration::from_millis(args.u64("kill_wait_ms").unwrap_or(2_000));
    let max = args.usize("max_output_bytes").unwrap_or(65_536);
    let outcome = server
        .exec
        .kill(id, signal, wait, kill_wait, max)
        .await
        .map_err(|e| {
            let mut err = exec_error(e, &server.config);
            err.extra.insert("status".into(), json!("not_found"));
            err
        })?;
    let mut extra = Map::new();
    extra.insert("status".into(), json!(outcome.status.as_str()));
    extra.insert(
        "process_status".into(),
        json!(outcome.snapshot.status.as_str()),
    );
    extra.insert("signals_sent".into(), json!(outcome.signals_sent));
    extra.insert(
        "processes_signalled".into(),
        json!(outcome.processes_signalled),
    );
    extra.insert("killed".into(), json!(outcome.status == KillStatus::Killed));
    let mut r = render(&outcome.snapshot, args, None, ctx, extra);
    let head = match outcome.status {
        KillStatus::Terminating => format!(
            "Kill: command {id} terminating — still alive after {} | the command is kept; retry kill_command",
            outcome.signals_sent.join(", then ")
        ),
        KillStatus::Exited if outcome.signals_sent.is_empty() => {
            format!("Kill: command {id} exited — it had already finished; nothing was sent")
        }
        s => format!(
            "Kill: command {id} {} | sent {}",
            s.as_str(),
            outcome.signals_sent.join(", then ")
        ),
    };
    r.text = format!("{}\n{head}", r.text);
    if outcome.status != KillStatus::Terminating {
        r.structured.remove("next_action");
        r.text = r.text.replace(
            "\nStill running: poll with write_stdin(",
            "\n[was running: write_stdin(",
        );
    }
    Ok(r)
}

pub async fn read_output(server: &Server, args: &Args) -> Result<ToolSuccess, ToolError> {
    let raw = args.str("output_ref").unwrap_or_default().to_owned();
    let bad = || {
        ToolError::invalid_argument(
            format!(
                "invalid output_ref {raw:?}: expected command:<id>:stdout or command:<id>:stderr"
            ),
            json!({"reason": "invalid_output_ref"}),
        )
    };
    let rest = raw.strip_prefix("command:").ok_or_else(bad)?;
    let (id, ref_stream) = match rest.rsplit_once(':') {
        Some((id, "stdout")) => (id, Some(Stream::Stdout)),
        Some((id, "stderr")) => (id, Some(Stream::Stderr)),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    let arg_stream = match args.str("stream") {
        Some("stdout") => Some(Stream::Stdout),
        Some("stderr") => Some(Stream::Stderr),
        _ => None,
    };
    let stream = match (ref_stream, arg_stream) {
        (Some(a), Some(b)) if a != b => {
            return Err(ToolError::invalid_argument(
                format!("stream {} contradicts output_ref {raw:?}", b.as_str()),
                json!({"reason": "stream_mismatch"}),
            ));
        }
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => return Err(bad()),
    };
    let offset = args.u64("offset").unwrap_or(0);
    let limit = args.usize("limit").unwrap_or(4096);
    let page = server
        .exec
        .read_output(id, stream, offset, limit)
        .map_err(|e| exec_error(e, &server.config))?;
    // Never split a character: stop before an incomplete trailing sequence.
    let bytes = &page.slice.bytes;
    let keep = match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() && page.slice.next_offset.is_some() => e.valid_up_to(),
        _ => bytes.len(),
    };
    let content = String::from_utf8_lossy(&bytes[..keep]).into_owned();
    let next = if keep < bytes.len() {
        Some(page.slice.offset + keep as u64)
    } else {
        page.slice.next_offset
    };
    let stream_ref = output_ref(id, stream);
    let mut text = content.clone();
    if page.slice.omitted > 0 {
        text = format!(
            "[{} bytes at offsets {}..{} were evicted; continuing from {}]\n{text}",
            page.slice.omitted, offset, page.slice.offset, page.slice.offset
        );
    }
    let mut st = Map::new();
    st.insert("output_ref".into(), json!(stream_ref));
    st.insert("stream".into(), json!(stream.as_str()));
    st.insert("requested_offset".into(), json!(offset));
    st.insert("offset".into(), json!(page.slice.offset));
    st.insert("limit".into(), json!(limit));
    st.insert("content".into(), json!(content));
    st.insert("bytes".into(), json!(keep));
    st.insert("next_offset".into(), json!(next));
    st.insert("omitted_bytes".into(), json!(page.slice.omitted));
    st.insert(
        "head_retained_bytes".into(),
        json!(page.head_retained_bytes),
    );
    st.insert("evicted_gap_bytes".into(), json!(page.evicted_gap_bytes));
    st.insert("total_bytes".into(), json!(page.total_bytes));
    st.insert("running".into(), json!(page.running));
    if let Some(n) = next {
        let action = json!({"tool": "read_output", "arguments": {"output_ref": stream_ref, "offset": n, "limit": limit}});
        text.push_str(&format!(
            "\n[more: read_output(output_ref=\"{stream_ref}\", offset={n})]"
        ));
        st.insert("next_action".into(), action);
    }
    Ok(ToolSuccess {
        text,
        structured: st,
        extra_content: Vec::new(),
    })
}

/// What confines commands on this host in this mode: the roots, and for
/// each protection whether the kernel enforces it (`enforced`), the host
/// lacks it (`unavailable`), the mode does not ask for it (`off`), or it is
/// a reading of the command line (`heuristic`).
pub fn sandbox_report(server: &Server) -> Value {
    let g = server.gates();
    let ll = landlock_support();
    let confined = g.landlock && ll.available;
    let kernel = |wanted: bool, have: bool| {
        if !wanted {
            "off"
        } else if have {
            "enforced"
        } else {
            "unavailable"
        }
    };
    let seccomp_ok = seccomp_available().is_ok();
    let tc = server.exec.toolchains();
    let write_roots = server.exec.write_roots();
    let read_roots: Vec<String> = if confined {
        tc.read_roots
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    } else {
        Vec::new()
    };
    let gate = |s: GateState| {
        if s == GateState::Blocked {
            "heuristic"
        } else {
            "off"
        }
    };
    json!({
        "landlock_abi": ll.abi,
        "landlock_unavailable_reason": ll.reason,
        "seccomp_unavailable_reason": seccomp_available().as_ref().err(),
        "read_roots": if confined { json!(read_roots) } else { json!(null) },
        "write_roots": if confined { json!(write_roots) } else { json!(null) },
        "toolchain_env": tc.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<String, Value>>(),
        "path_entries_not_readable": tc.skipped.iter().map(|(d, why)| json!({"path": d, "reason": why})).collect::<Vec<_>>(),
        "protections": {
            "read_confinement": kernel(g.landlock, ll.filesystem()),
            "write_confinement": kernel(g.landlock, ll.filesystem()),
            "truncate_confinement": kernel(g.landlock, ll.truncate()),
            "device_nodes_refused": kernel(g.landlock, ll.filesystem() || seccomp_ok),
            "device_ioctl_confined": kernel(g.landlock, ll.ioctl_dev()),
            "terminal_injection_refused": kernel(g.landlock, seccomp_ok),
            "tcp_connect_bind_refused": kernel(g.landlock && g.network == GateState::Blocked, ll.tcp()),
            "signal_scope": kernel(g.landlock, ll.scopes()),
            "abstract_unix_socket_scope": kernel(g.landlock, ll.scopes()),
            "seccomp_filter": kernel(g.landlock, seccomp_ok),
            "other_processes_untouchable": kernel(g.landlock, seccomp_ok && ll.scopes()),
            "new_session": "enforced",
            "descendants_tracked": "enforced",
            "no_new_privs": kernel(g.landlock, ll.filesystem() || seccomp_ok),
            "path_gate": gate(g.filesystem_escape),
            "privileged_executable_gate": gate(g.privileged_executable),
        },
        "seccomp_refuses": if g.landlock && seccomp_ok { json!(SECCOMP_REFUSED) } else { json!([]) },
        "not_confined": [
            "UDP and ICMP datagram sockets",
            "pathname UNIX sockets (e.g. another program's control socket)",
            "metadata writes outside the write roots: chmod, chown, utimes, xattrs",
            "reading /proc of the command's own child processes",
        ],
    })
}

pub fn check_exec_environment(server: &Server) -> ToolSuccess {
    let g = server.gates();
    let ll = landlock_support();
    let confined = g.landlock && ll.available;
    let runtime = match &server.runtime_dirs {
        Ok(d) => {
            json!({"runtime_dir": d.root(), "home": d.home(), "tmpdir": d.tmp(), "cache_dir": d.cache(), "error": null})
        }
        Err(e) => json!({"runtime_dir": null, "error": e}),
    };
    let st = json!({
        "permission_mode": server.config.permission_mode.as_str(),
        "shell": "/bin/sh -c",
        "gates": {
            "network": g.network.as_str(),
            "shell_expansion": g.shell_expansion.as_str(),
            "inline_script": g.inline_script.as_str(),
            "destructive_command": g.destructive_command.as_str(),
            "filesystem_escape": g.filesystem_escape.as_str(),
            "privileged_executable": g.privileged_executable.as_str(),
            "sensitive_env": if g.secret_env_filter { "blocked" } else { "allowed" },
        },
        "landlock": {
            "available": ll.available,
            "abi": ll.abi,
            "enforced_for_commands": confined,
            "reason": ll.reason,
            "writable": if confined { json!([server.workspace.root(), server.runtime_dirs.as_ref().ok().map(|d| d.root().to_path_buf())]) } else { json!(null) },
        },
        "environment": {
            "inherit": server.config.shell_env_inherit.as_str(),
            "include_only": server.config.env_policy.include_only,
            "exclude": server.config.env_policy.exclude,
            // Names only: values may be secrets the operator chose to pass.
            "set": server.config.env_policy.set.keys().collect::<Vec<_>>(),
            "secret_env_filter": g.secret_env_filter,
            "non_interactive_defaults": ["PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0", "GIT_EDITOR=true", "NO_COLOR=1", "CI=1"],
        },
        "runtime": runtime,
        "sandbox": sandbox_report(server),
        "limits": server.limits.to_json()["commands"],
        "active_commands": server.exec.active(),
        "probes_run": false,
    });
    let text = format!(
        "Exec environment: {} mode | Landlock {} | network {} | shell expansion {} | inline scripts {}",
        server.config.permission_mode.as_str(),
        if confined {
            format!("enforced (ABI {})", ll.abi)
        } else if ll.available {
            "available, off in this mode".into()
        } else {
            "unavailable".into()
        },
        g.network.as_str(),
        g.shell_expansion.as_str(),
        g.inline_script.as_str()
    );
    // The reference's flat fields first; ours add detail beside them.
    let mut structured = super::server_info::exec_environment(server);
    structured.insert(
        "warnings".into(),
        json!(super::server_info::exec_warnings(server)),
    );
    structured.extend(st.as_object().cloned().unwrap_or_default());
    ToolSuccess {
        text,
        structured,
        extra_content: Vec::new(),
    }
}
