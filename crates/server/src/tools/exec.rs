//! Adapters of the process tools: exec_command, write_stdin, kill_command,
//! read_output, check_exec_environment.

use std::time::Duration;

use ctm_exec_runtime::{
    Delta, ExecRequest, GateState, KillOptions, KillStatus, SECCOMP_REFUSED, Signal, Snapshot,
    Status, Stream, WaitEnd, WaitOptions, landlock_support, seccomp_available,
};
use ctm_protocol_eras::RequestContext;
use serde_json::{Map, Value, json};

use crate::catalog::{
    Detail, ExecCommandArgs, InfoArgs, KillCommandArgs, KillSignal, OutputStream, ReadOutputArgs,
    Verbosity, WriteStdinArgs,
};
use crate::envelope::{ErrorCode, ToolError, ToolSuccess};
use crate::errors::exec_error;
use crate::limits::CommandLimits;
use crate::output::WirePath;
use crate::output::{Shape, any_of, tool_result};
use crate::server::Server;

tool_result! {
    /// The middle of a stream's new output that the answer leaves out.
    pub struct Elided {
        offset: u64,
        bytes: u64,
    }
}

tool_result! {
    /// Where one stream's new output lies, and what of it the answer
    /// carries.
    pub struct StreamInfo {
        bytes: u64,
        start_offset: u64,
        end_offset: u64,
        truncated: bool,
        omitted_bytes: u64,
        elided: Option<Elided>,
        head_bytes: u64,
        tail_bytes: u64,
    }
}

tool_result! {
    /// The `output_ref` of each stream of a command.
    pub struct OutputRefs {
        stdout: String,
        stderr: String,
    }
}

tool_result! {
    /// The arguments of a suggested `read_output` call.
    pub struct ReadOutputArguments {
        output_ref: String,
        offset: u64,
        limit: u64,
    }
}

tool_result! {
    /// A `read_output` call the model can make next.
    pub struct ReadOutputCall {
        tool: &'static str,
        arguments: ReadOutputArguments,
    }
}

tool_result! {
    /// The arguments of a suggested `write_stdin` poll.
    pub struct WriteStdinArguments {
        command_id: String,
        chars: &'static str,
        yield_time_ms: u64,
    }
}

tool_result! {
    /// A `write_stdin` poll the model can make next.
    pub struct WriteStdinCall {
        tool: &'static str,
        arguments: WriteStdinArguments,
    }
}

/// The call a command result suggests next: poll a running command, or
/// read output the answer left out.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum NextAction {
    /// Poll the command.
    WriteStdin(WriteStdinCall),
    /// Read left-out output.
    ReadOutput(ReadOutputCall),
}

impl Shape for NextAction {
    fn shape() -> Value {
        any_of(vec![WriteStdinCall::shape(), ReadOutputCall::shape()])
    }
}

tool_result! {
    /// How a call's wait went.
    pub struct WaitReport {
        requested_yield_ms: u64,
        effective_wait_ms: u64,
        budget_secs: u64,
        budget_source: &'static str,
        cut_by_budget: bool,
        ended_by: &'static str,
    }
}

tool_result! {
    /// A diagnostic entry with the reference's field names.
    pub struct Diagnostic {
        code: &'static str,
        severity: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        evidence: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        suggested_fix: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        suggested_next_command: Option<String>,
    }
}

tool_result! {
    /// What `exec_command`, `write_stdin` and `kill_command` answer: the
    /// command's snapshot, and for `kill_command` what the kill did (its
    /// `status` is then the kill's verdict).
    pub struct CommandResult {
        command_id: String,
        status: &'static str,
        exit_code: Option<i32>,
        signal: Option<&'static str>,
        timed_out: bool,
        /// Catalog 0.5: how the command ended in one word (`exited_0`,
        /// `exited_nonzero`, `signal`, `timeout`, `running`).
        #[serde(skip_serializing_if = "Option::is_none")]
        operation_outcome: Option<&'static str>,
        /// Only for a command on a terminal.
        tty: bool [skip_if "std::ops::Not::not"],
        elapsed_ms: u64,
        /// Only when asked for a verbosity other than `full`.
        verbosity: &'static str [skip_if "is_full"],
        #[serde(skip_serializing_if = "Option::is_none")]
        preview: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        preview_truncated: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stdout: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stderr: Option<String>,
        /// Only for a stream whose new output is not whole in the answer.
        #[serde(skip_serializing_if = "Option::is_none")]
        stdout_info: Option<StreamInfo>,
        #[serde(skip_serializing_if = "Option::is_none")]
        stderr_info: Option<StreamInfo>,
        stdout_truncated: bool,
        stderr_truncated: bool,
        stdout_omitted_bytes: u64,
        stderr_omitted_bytes: u64,
        stdout_truncated_by: Option<&'static str>,
        stdout_output_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        stdout_output_lines: Option<usize>,
        stdout_dropped_bytes: u64,
        stderr_truncated_by: Option<&'static str>,
        stderr_output_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        stderr_output_lines: Option<usize>,
        stderr_dropped_bytes: u64,
        truncated: bool,
        /// When an answer left output out or names one stream's ref
        /// (`output_ref`, as with an explicit verbosity): the refs
        /// `read_output` pages, each `command:<command_id>:<stream>`.
        #[serde(skip_serializing_if = "Option::is_none")]
        output_refs: Option<OutputRefs>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_ref: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_stream: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output_truncated: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        truncated_output_streams: Option<Vec<&'static str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
        /// Only when the command left a process running after it.
        background_running: bool [skip_if "std::ops::Not::not"],
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<NextAction>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_actions: Option<Vec<ReadOutputCall>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        wait: Option<WaitReport>,
        warnings: Vec<String> [skip_if "Vec::is_empty"],
        #[serde(skip_serializing_if = "Option::is_none")]
        diagnostics: Option<Vec<Diagnostic>>,
        // kill_command only. The process's own status, when it is not
        // the kill's verdict in `status`.
        #[serde(skip_serializing_if = "Option::is_none")]
        process_status: Option<&'static str>,
        /// Every signal sent, when there was more than `signal_sent`.
        #[serde(skip_serializing_if = "Option::is_none")]
        signals_sent: Option<Vec<&'static str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        processes_signalled: Option<usize>,
        /// The last signal sent; null when none was.
        #[serde(skip_serializing_if = "Option::is_none")]
        signal_sent: Option<Option<&'static str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        killed: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        evicted: Option<bool>,
    }
}

tool_result! {
    /// What `read_output` answers.
    pub struct ReadOutputResult {
        output_ref: String,
        stream_output_ref: String,
        stream: &'static str,
        requested_offset: u64,
        offset: u64,
        limit: usize,
        content: String,
        bytes: usize,
        next_offset: Option<u64>,
        omitted_bytes: u64,
        head_retained_bytes: u64,
        evicted_gap_bytes: u64,
        total_bytes: u64,
        total_stream_bytes: u64,
        total_retained_bytes: u64,
        retained_start_offset: u64,
        stdout_dropped_bytes: u64,
        stderr_dropped_bytes: u64,
        stream_dropped_bytes: u64,
        truncated: bool,
        running: bool,
        warnings: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_action: Option<ReadOutputCall>,
    }
}

/// The wait of one call: `min(yield_time_ms, the request's budget)`.
struct Wait {
    requested_ms: u64,
    effective: Duration,
    cut_by_budget: bool,
}

/// `yield_time_ms` when none is given.
use crate::catalog::DEFAULT_YIELD_MS;

fn wait_of(requested_ms: u64, ctx: &RequestContext) -> Wait {
    let budget_ms = ctx.wait_budget.effective_secs.saturating_mul(1000);
    Wait {
        requested_ms,
        effective: Duration::from_millis(requested_ms.min(budget_ms)),
        cut_by_budget: budget_ms < requested_ms,
    }
}

/// The default verbosity, left out of answers.
fn is_full(v: &&str) -> bool {
    *v == "full"
}

fn output_ref(id: &str, stream: Stream) -> String {
    format!("command:{id}:{}", stream.as_str())
}

/// The offsets of a stream's new output, when the answer does not carry it
/// whole (cut, or bytes dropped or skipped); the `*_truncated`,
/// `*_omitted_bytes` and `*_dropped_bytes` fields say the rest every time.
fn stream_info(d: &Delta) -> Option<StreamInfo> {
    let whole = !d.truncated() && d.omitted_bytes == 0 && d.dropped_bytes == 0;
    (!whole).then(|| StreamInfo {
        bytes: d.new_bytes,
        start_offset: d.start_offset,
        end_offset: d.end_offset,
        truncated: d.truncated(),
        omitted_bytes: d.omitted_bytes,
        elided: d.elided.map(|(offset, bytes)| Elided { offset, bytes }),
        head_bytes: d.head_bytes,
        tail_bytes: d.tail_bytes,
    })
}

/// A `read_output` call for `limit` bytes of `output_ref` from `offset`.
fn read_output_call(output_ref: String, offset: u64, limit: u64) -> ReadOutputCall {
    ReadOutputCall {
        tool: "read_output",
        arguments: ReadOutputArguments {
            output_ref,
            offset,
            limit,
        },
    }
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
            s.signal.map_or("?", Signal::as_str)
        ),
        Status::Timeout => format!(
            "Status: timeout | signal {} | timed out after {ms} ms",
            s.signal.map_or("?", Signal::as_str)
        ),
    }
}

/// The exit code as the reference reports it: a signal's end is the
/// negative signal number (`-15` for SIGTERM), as Python's `returncode`.
fn exit_code(s: &Snapshot) -> Option<i32> {
    s.exit_code.or(s.signal_number.map(|n| -n))
}

/// Python's `repr` of a short string, for the summary's tail.
fn quoted(t: &str) -> String {
    let t: String = if t.chars().count() > 120 {
        t.chars().take(117).chain("...".chars()).collect()
    } else {
        t.to_owned()
    };
    format!("'{}'", t.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// One line about the run: `exit 0 | 0.1s | 2 lines | tail: 'hi'` (the
/// reference's fields and order).
fn summary_of(s: &Snapshot) -> String {
    let head = match exit_code(s) {
        Some(c) => format!("exit {c}"),
        None => s.status.as_str().to_owned(),
    };
    let lines = s.stdout.lines + s.stderr.lines;
    let mut parts = vec![
        head,
        format!("{:.1}s", s.elapsed.as_secs_f64()),
        format!("{lines} lines"),
    ];
    let tail = if s.stderr.last_line.is_empty() {
        &s.stdout.last_line
    } else {
        &s.stderr.last_line
    };
    if !tail.is_empty() {
        parts.push(format!("tail: {}", quoted(tail)));
    }
    parts.join(" | ")
}

/// The reference's preview layout (a section per stream that printed),
/// cut to `limit` bytes: the start, and the end too when there is room
/// for both around a marker. Returns the text and whether it was cut.
fn preview_of(out: &str, err: &str, limit: usize) -> (String, bool) {
    let mut all = String::new();
    if !out.is_empty() {
        all.push_str("--- stdout ---\n");
        all.push_str(out);
    }
    if !err.is_empty() {
        if !all.is_empty() {
            all.push('\n');
        }
        all.push_str("--- stderr ---\n");
        all.push_str(err);
    }
    let limit = limit.max(1);
    if all.len() <= limit {
        return (all, false);
    }
    let floor = |i: usize| all.floor_char_boundary(i);
    let ceil = |i: usize| all.ceil_char_boundary(i);
    const MARK: &str = "\n[... preview cut here ...]\n";
    if limit <= MARK.len() + 2 {
        return (all[..floor(limit)].to_owned(), true);
    }
    let room = limit - MARK.len();
    let head = floor((room / 2).max(1));
    let tail = ceil(all.len() - (room - room / 2).max(1));
    (format!("{}{MARK}{}", &all[..head], &all[tail..]), true)
}

impl Diagnostic {
    /// A diagnostic without advice yet (`evidence` is left out when empty).
    fn new(code: &'static str, severity: &'static str, evidence: String) -> Self {
        Self {
            code,
            severity,
            evidence: (!evidence.is_empty()).then_some(evidence),
            suggested_fix: None,
            suggested_next_command: None,
        }
    }
}

/// The executable a shell could not find, from its complaint
/// (`sh: 1: foo: not found`, `bash: line 1: foo: command not found`).
fn missing_executable(stderr: &str) -> Option<(&str, &str)> {
    stderr.lines().rev().find_map(|line| {
        let rest = line
            .strip_suffix(": command not found")
            .or_else(|| line.strip_suffix(": not found"))?;
        let name = rest.rsplit(": ").next()?.trim();
        (!name.is_empty()).then_some((line.trim(), name))
    })
}

/// What the reference's clients read about a run that did not go
/// cleanly: a timeout, cut output, a missing executable.
fn exec_diagnostics(s: &Snapshot, cut: bool) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    if s.timed_out || s.status == Status::Timeout {
        out.push(Diagnostic {
            suggested_fix: Some(
                "Give it a larger timeout_ms, or split the work into shorter commands.",
            ),
            ..Diagnostic::new(
                "COMMAND_TIMED_OUT",
                "error",
                format!(
                    "timeout_ms ran out after {} ms; the command was ended with {}",
                    s.elapsed.as_millis(),
                    s.signal.map_or("a signal", Signal::as_str)
                ),
            )
        });
    }
    if cut {
        out.push(Diagnostic {
            suggested_fix: Some(
                "Read the rest with the read_output call in next_action, or run again with a larger max_output_bytes.",
            ),
            ..Diagnostic::new(
                "OUTPUT_TRUNCATED",
                "warning",
                "the new output is larger than max_output_bytes or was evicted from the retained buffer".to_owned(),
            )
        });
    }
    let missing = missing_executable(&s.stderr.text);
    if exit_code(s) == Some(127) || missing.is_some() {
        let (evidence, next) = match missing {
            Some((line, name)) => (line.to_owned(), format!("command -v {name}")),
            None => (
                "exit code 127".to_owned(),
                "command -v <executable>".to_owned(),
            ),
        };
        out.push(Diagnostic {
            suggested_next_command: Some(next),
            ..Diagnostic::new("EXECUTABLE_NOT_FOUND", "error", evidence)
        });
    }
    out
}

/// Whether the answer names a next call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Poll {
    /// A running command's poll, else the first continuation.
    Suggest,
    /// A kill ended the command after the snapshot: no next call (the
    /// continuations stay in `next_actions`).
    Ended,
}

/// What the caller asked to see of the output.
#[derive(Debug, Clone, Copy)]
struct View {
    verbosity: Option<Verbosity>,
    preview_bytes: usize,
}

/// Renders a snapshot: status line first, then output, then the exact
/// continuation calls. Returns the text and the structured result.
fn render(
    s: &Snapshot,
    view: View,
    wait: Option<&Wait>,
    ctx: &RequestContext,
    poll: Poll,
) -> (String, CommandResult) {
    let asked_verbosity = view.verbosity;
    let verbosity = asked_verbosity.map_or("full", Verbosity::as_str);
    let preview_bytes = view.preview_bytes;
    let id = &s.command_id;
    let streams = [(Stream::Stdout, &s.stdout), (Stream::Stderr, &s.stderr)];
    let mut text = status_line(s);
    let out = shown(&s.stdout, &output_ref(id, Stream::Stdout));
    let err = shown(&s.stderr, &output_ref(id, Stream::Stderr));
    // Streams whose new output the answer does not carry whole.
    let mut cut_streams: Vec<Stream> = streams
        .iter()
        .filter(|(_, d)| d.truncated())
        .map(|(stream, _)| *stream)
        .collect();
    let cut = !cut_streams.is_empty();
    let mut preview_cut = false;
    let (mut preview, mut preview_truncated) = (None, None);
    let (mut stdout, mut stderr) = (None, None);
    match verbosity {
        "summary" => {}
        "preview" => {
            let (shown, was_cut) = preview_of(&out, &err, preview_bytes);
            preview_cut = was_cut;
            text.push('\n');
            text.push_str(&shown);
            preview = Some(shown);
            preview_truncated = Some(was_cut);
        }
        _ => {
            if !out.is_empty() {
                text.push('\n');
                text.push_str(&out);
            }
            if !err.is_empty() {
                text.push_str("\nstderr:\n");
                text.push_str(&err);
            }
            stdout = Some(out);
            stderr = Some(err);
        }
    }
    // The reference's names: what cut the inline text, how much it shows
    // (bytes, and lines counted as its pieces between newlines, when the
    // text is there), and what the buffer has evicted.
    let truncated_by = |d: &Delta| d.elided.map(|_| "bytes");
    let output_lines = |t: &Option<String>| t.as_deref().map(|t| t.matches('\n').count() + 1);
    // The stream a single reference names: the first cut one, else the one
    // that printed (stderr only when stdout printed nothing).
    let main_stream = cut_streams.first().copied().unwrap_or(
        if s.stdout.new_bytes == 0 && s.stderr.new_bytes > 0 {
            Stream::Stderr
        } else {
            Stream::Stdout
        },
    );
    let named = cut || asked_verbosity.is_some();
    if preview_cut && !cut {
        cut_streams = streams
            .iter()
            .filter(|(_, d)| d.new_bytes > 0)
            .map(|(stream, _)| *stream)
            .collect();
    }
    let mut next_actions = Vec::new();
    for (stream, d) in streams {
        let from = match verbosity {
            "full" => d.elided.map(|(o, _)| o),
            // Nothing is shown: every stream that printed can be read.
            "summary" if d.new_bytes > 0 => Some(d.start_offset),
            "preview" if preview_cut && d.new_bytes > 0 => Some(d.start_offset),
            _ => None,
        };
        if let Some(offset) = from {
            let limit = d.elided.map_or(65536, |(_, n)| n.clamp(1, 1 << 20));
            next_actions.push(read_output_call(output_ref(id, stream), offset, limit));
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
    if s.background_running {
        text.push_str(&format!(
            "\n[Processes this command started are still running in the background; they count against the active-command limit until they end. Stop them with kill_command(command_id=\"{id}\").]"
        ));
    }
    let next_action = if s.status == Status::Running && poll == Poll::Suggest {
        // Suggest the default wait, not a short first yield again: one poll
        // then usually sees the end (capped by the request's wait budget).
        let y = DEFAULT_YIELD_MS.min(ctx.wait_budget.effective_secs.saturating_mul(1000));
        // The id is on the status line: stated once.
        text.push_str(&format!(
            "\nPoll: write_stdin(chars=\"\", yield_time_ms={y}); stop: kill_command."
        ));
        Some(NextAction::WriteStdin(WriteStdinCall {
            tool: "write_stdin",
            arguments: WriteStdinArguments {
                command_id: id.clone(),
                chars: "",
                yield_time_ms: y,
            },
        }))
    } else if poll == Poll::Suggest {
        next_actions.first().cloned().map(NextAction::ReadOutput)
    } else {
        None
    };
    let wait = wait.and_then(|w| {
        let b = ctx.wait_budget;
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
        let cut_by_budget = w.cut_by_budget && s.wait_end == WaitEnd::Deadline;
        // A wait that ended as its status says (the command exited, or the
        // yield passed) is not reported: only a cut or an unusual end.
        let routine = matches!(s.wait_end, WaitEnd::Exited | WaitEnd::Deadline) && !cut_by_budget;
        (!routine).then(|| WaitReport {
            requested_yield_ms: w.requested_ms,
            effective_wait_ms: u64::try_from(w.effective.as_millis()).unwrap_or(u64::MAX),
            budget_secs: b.effective_secs,
            budget_source: b.source.as_str(),
            cut_by_budget,
            ended_by: match s.wait_end {
                WaitEnd::Exited => "exit",
                WaitEnd::Deadline => "deadline",
                WaitEnd::Quiet => "output_quiet",
                WaitEnd::Cancelled => "cancelled",
            },
        })
    });
    let mut warnings = Vec::new();
    for (stream, d) in streams {
        if d.elided.is_some() {
            warnings.push(format!(
                "{} truncated from middle by bytes",
                stream.as_str()
            ));
        }
        if d.omitted_bytes > 0 {
            warnings.push(format!("{} cursor skipped dropped bytes", stream.as_str()));
        }
    }
    if !landlock_support().available {
        warnings.push(format!(
            "commands are not confined by Landlock here ({})",
            landlock_support().reason.clone().unwrap_or_default()
        ));
    }
    if let Some(w) = s.git_seal.as_ref().and_then(|r| r.warning()) {
        warnings.push(w);
    }
    let diagnostics = exec_diagnostics(s, cut);
    let result = CommandResult {
        command_id: id.clone(),
        status: s.status.as_str(),
        exit_code: exit_code(s),
        signal: s.signal.map(Signal::as_str),
        timed_out: s.timed_out,
        // Set by the catalog 0.5 layer (tools::run).
        operation_outcome: None,
        tty: s.tty,
        elapsed_ms: u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX),
        verbosity,
        preview,
        preview_truncated,
        stdout_info: stream_info(&s.stdout),
        stderr_info: stream_info(&s.stderr),
        stdout_truncated: s.stdout.truncated(),
        stderr_truncated: s.stderr.truncated(),
        stdout_omitted_bytes: s.stdout.omitted_bytes,
        stderr_omitted_bytes: s.stderr.omitted_bytes,
        stdout_truncated_by: truncated_by(&s.stdout),
        stdout_output_bytes: s.stdout.head_bytes + s.stdout.tail_bytes,
        stdout_output_lines: output_lines(&stdout),
        stdout_dropped_bytes: s.stdout.dropped_bytes,
        stderr_truncated_by: truncated_by(&s.stderr),
        stderr_output_bytes: s.stderr.head_bytes + s.stderr.tail_bytes,
        stderr_output_lines: output_lines(&stderr),
        stderr_dropped_bytes: s.stderr.dropped_bytes,
        stdout,
        stderr,
        truncated: cut || preview_cut,
        output_refs: (named || preview_cut || s.stdout.omitted_bytes + s.stderr.omitted_bytes > 0)
            .then(|| OutputRefs {
                stdout: output_ref(id, Stream::Stdout),
                stderr: output_ref(id, Stream::Stderr),
            }),
        output_ref: named.then(|| output_ref(id, main_stream)),
        output_stream: named.then(|| main_stream.as_str()),
        output_truncated: cut.then_some(true),
        truncated_output_streams: (cut || preview_cut)
            .then(|| cut_streams.iter().map(|s| s.as_str()).collect()),
        summary: asked_verbosity.is_some().then(|| summary_of(s)),
        background_running: s.background_running,
        // The reference's list of reads, whenever there is one (its
        // first entry is `next_action` once the command has ended).
        next_actions: (!next_actions.is_empty()).then_some(next_actions),
        next_action,
        wait,
        warnings,
        diagnostics: (!diagnostics.is_empty()).then_some(diagnostics),
        process_status: None,
        signals_sent: None,
        processes_signalled: None,
        signal_sent: None,
        killed: None,
        evicted: None,
    };
    (text, result)
}

pub async fn exec_command(
    server: &Server,
    args: &ExecCommandArgs,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let workdir = match (args.workdir.as_deref(), args.cwd.as_deref()) {
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
        .env
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    let req = ExecRequest::new(&args.cmd)
        .with_workdir(workdir)
        .with_timeout(Duration::from_millis(args.timeout_ms))
        .with_tty(args.tty)
        .with_stdin(&args.stdin)
        .with_env(env);
    let wait = wait_of(args.yield_time_ms, ctx);
    let opts = WaitOptions::default()
        .with_wait(wait.effective)
        .with_max_output_bytes(args.max_output_bytes);
    let view = View {
        verbosity: args.verbosity,
        preview_bytes: args.preview_bytes,
    };
    let cmd = req.cmd.clone();
    let env_keys: Vec<String> = req.env.keys().cloned().collect();
    let snap = server
        .exec
        .exec(req, opts, ctx.cancel.cancelled())
        .await
        .map_err(|e| refusal_details(exec_error(e, &server.config), &cmd, env_keys))?;
    let (text, result) = render(&snap, view, Some(&wait), ctx, Poll::Suggest);
    Ok(ToolSuccess::new(text, &result))
}

/// The reference's `details` of a refusal that depend on the request: the
/// command line (whitespace collapsed) for the gates that judge all of it,
/// and the names of the caller's variables for `sensitive_env`.
fn refusal_details(mut e: ToolError, cmd: &str, env_keys: Vec<String>) -> ToolError {
    if e.code != ErrorCode::PermissionRequired {
        return e;
    }
    let permission = e.details["permission"].as_str().unwrap_or_default();
    match permission {
        "network" | "shell_expansion" | "destructive_command" => {
            e.details["command"] = json!(cmd.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        "sensitive_env" => e.details["env_keys"] = json!(env_keys),
        _ => {}
    }
    e
}

pub async fn write_stdin(
    server: &Server,
    args: &WriteStdinArgs,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let id = args.command_id.as_str();
    let wait = wait_of(args.yield_time_ms, ctx);
    let opts = WaitOptions::default()
        .with_wait(wait.effective)
        .with_max_output_bytes(args.max_output_bytes);
    let view = View {
        verbosity: args.verbosity,
        preview_bytes: args.preview_bytes,
    };
    let snap = server
        .exec
        .poll(id, &args.chars, opts, ctx.cancel.cancelled())
        .await
        .map_err(|e| exec_error(e, &server.config))?;
    let (text, result) = render(&snap, view, Some(&wait), ctx, Poll::Suggest);
    Ok(ToolSuccess::new(text, &result))
}

pub async fn kill_command(
    server: &Server,
    args: &KillCommandArgs,
    ctx: &RequestContext,
) -> Result<ToolSuccess, ToolError> {
    let id = args.command_id.as_str();
    let signal = match args.signal {
        KillSignal::Kill => Signal::Kill,
        KillSignal::Int => Signal::Int,
        KillSignal::Term => Signal::Term,
    };
    let opts = KillOptions::default()
        .with_signal(signal)
        .with_wait(Duration::from_millis(args.wait_ms))
        .with_kill_wait(Duration::from_millis(args.kill_wait_ms))
        .with_max_output_bytes(args.max_output_bytes);
    let view = View {
        verbosity: args.verbosity,
        preview_bytes: args.preview_bytes,
    };
    let outcome = server.exec.kill(id, opts).await.map_err(|e| {
        let mut err = exec_error(e, &server.config);
        err.extra.insert("status".into(), json!("not_found"));
        err
    })?;
    let sent: Vec<&'static str> = outcome.signals_sent.iter().map(|s| s.as_str()).collect();
    let poll = if outcome.status == KillStatus::Terminating {
        Poll::Suggest
    } else {
        Poll::Ended
    };
    let (text, mut result) = render(&outcome.snapshot, view, None, ctx, poll);
    // The kill's verdict replaces the process's status (which stays in
    // `process_status`).
    result.status = outcome.status.as_str();
    let process_status = outcome.snapshot.status.as_str();
    result.process_status = (process_status != result.status).then_some(process_status);
    result.signals_sent = (sent.len() > 1).then(|| sent.clone());
    result.processes_signalled = Some(outcome.processes_signalled);
    // The reference's names: the last signal sent (the escalation's KILL
    // when there was one; null when the command had ended and nothing was
    // sent), whether the command ended after it, and whether it left the
    // running set (false only while it is still terminating).
    result.signal_sent = Some(sent.last().copied());
    result.killed = Some(outcome.ended_by_kill);
    result.evicted = Some(outcome.status != KillStatus::Terminating);
    let head = match outcome.status {
        KillStatus::Terminating => format!(
            "Kill: command {id} terminating — still alive after {} | the command is kept; retry kill_command",
            sent.join(", then ")
        ),
        KillStatus::Exited if outcome.signals_sent.is_empty() => {
            format!("Kill: command {id} exited — it had already finished; nothing was sent")
        }
        s => format!(
            "Kill: command {id} {} | sent {}",
            s.as_str(),
            sent.join(", then ")
        ),
    };
    Ok(ToolSuccess::new(format!("{text}\n{head}"), &result))
}

pub async fn read_output(server: &Server, args: ReadOutputArgs) -> Result<ToolSuccess, ToolError> {
    let raw = args.output_ref;
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
    let arg_stream = args.stream.map(|s| match s {
        OutputStream::Stdout => Stream::Stdout,
        OutputStream::Stderr => Stream::Stderr,
    });
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
    let offset = args.offset;
    let limit = args.limit;
    let page = server
        .exec
        .read_output(id, stream, offset, limit)
        .map_err(|e| {
            let mut err = exec_error(e, &server.config);
            // The reference's words here (there is no stdin to deny); the
            // contract's category, not_found.
            if err.code == ErrorCode::CommandNotFound {
                err.message = "Output command not found.".into();
            }
            err
        })?;
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
    let mut warnings = Vec::new();
    if page.slice.omitted > 0 {
        warnings.push(format!("{} offset skipped dropped bytes", stream.as_str()));
    }
    if page.evicted_gap_bytes > 0 {
        warnings.push(format!(
            "{} bytes of {} between its first and its last bytes were evicted; send large output to a file (cmd > out.log 2>&1) to keep all of it",
            page.evicted_gap_bytes,
            stream.as_str()
        ));
    }
    let next_action = next.map(|n| {
        text.push_str(&format!(
            "\n[more: read_output(output_ref=\"{stream_ref}\", offset={n}, limit={limit})]"
        ));
        read_output_call(stream_ref.clone(), n, limit as u64)
    });
    let result = ReadOutputResult {
        output_ref: raw,
        stream_output_ref: stream_ref,
        stream: stream.as_str(),
        requested_offset: offset,
        offset: page.slice.offset,
        limit,
        content,
        bytes: keep,
        next_offset: next,
        omitted_bytes: page.slice.omitted,
        head_retained_bytes: page.head_retained_bytes,
        evicted_gap_bytes: page.evicted_gap_bytes,
        total_bytes: page.total_bytes,
        total_stream_bytes: page.total_bytes,
        total_retained_bytes: page.retained_bytes,
        retained_start_offset: page.retained_start_offset,
        stdout_dropped_bytes: page.dropped_bytes.0,
        stderr_dropped_bytes: page.dropped_bytes.1,
        stream_dropped_bytes: match stream {
            Stream::Stdout => page.dropped_bytes.0,
            Stream::Stderr => page.dropped_bytes.1,
        },
        truncated: next.is_some(),
        running: page.running,
        warnings,
        next_action,
    };
    Ok(ToolSuccess::new(text, &result))
}

tool_result! {
    /// The namespace tier: whether commands get it, and why not.
    pub struct NamespaceReport {
        active: bool,
        /// Why the tier is not active, and how to get it.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        fix: Option<String>,
        /// What builds the sandbox: `built-in` (this binary) or `bwrap`.
        #[serde(skip_serializing_if = "Option::is_none")]
        builder: Option<&'static str>,
        /// `per workspace` (namespaces made once, joined by each command)
        /// or `per command: <why>`.
        #[serde(skip_serializing_if = "Option::is_none")]
        setup: Option<String>,
        /// The system `bwrap` and its version (`detail: "full"`).
        #[serde(skip_serializing_if = "Option::is_none")]
        bwrap: Option<WirePath>,
        #[serde(skip_serializing_if = "Option::is_none")]
        bwrap_version: Option<String>,
        private_network: bool,
        git_sealed: bool,
        git_seal: GitSealReport,
    }
}

tool_result! {
    /// Safe mode's git seal: how it is made, what it protects, what keeps
    /// it from being complete.
    pub struct GitSealReport {
        design: &'static str,
        protected: Vec<String>,
        gaps: Vec<String>,
    }
}

tool_result! {
    /// A `PATH` entry not made a read root, and why.
    pub struct UnreadablePathEntry {
        path: String,
        reason: &'static str,
    }
}

tool_result! {
    /// Each protection of commands: `enforced`, `unavailable`, `off` or
    /// `heuristic`.
    pub struct Protections {
        read_confinement: &'static str,
        write_confinement: &'static str,
        truncate_confinement: &'static str,
        device_nodes_refused: &'static str,
        device_ioctl_confined: &'static str,
        terminal_injection_refused: &'static str,
        tcp_connect_bind_refused: &'static str,
        signal_scope: &'static str,
        abstract_unix_socket_scope: &'static str,
        seccomp_filter: &'static str,
        other_processes_untouchable: &'static str,
        new_session: &'static str,
        descendants_tracked: &'static str,
        no_new_privs: &'static str,
        path_gate: &'static str,
        privileged_executable_gate: &'static str,
        host_filesystem_read_only: &'static str,
        private_tmp_and_run: &'static str,
        pid_namespace: &'static str,
        network_namespace: &'static str,
        git_config_and_hooks_read_only: &'static str,
        git_directory_copy_on_write: &'static str,
        set_id_bits_refused: &'static str,
    }
}

tool_result! {
    /// What confines commands (`sandbox` of `check_exec_environment`).
    /// The roots, the toolchain, each protection and what is not confined
    /// are in the full report (`detail: "full"`); a reason is there only
    /// when something is unavailable.
    pub struct SandboxReport {
        tier: &'static str,
        namespace: NamespaceReport,
        #[serde(skip_serializing_if = "Option::is_none")]
        landlock_unavailable_reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        seccomp_unavailable_reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        read_roots: Option<Vec<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        write_roots: Option<Vec<WirePath>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        toolchain_env: Option<Map<String, Value>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        path_entries_not_readable: Option<Vec<UnreadablePathEntry>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        protections: Option<Protections>,
        #[serde(skip_serializing_if = "Option::is_none")]
        seccomp_refuses: Option<Vec<&'static str>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        not_confined: Option<Vec<&'static str>>,
    }
}

tool_result! {
    /// The permission gates of commands.
    pub struct GateReport {
        network: &'static str,
        shell_expansion: &'static str,
        inline_script: &'static str,
        destructive_command: &'static str,
        filesystem_escape: &'static str,
        privileged_executable: &'static str,
        sensitive_env: &'static str,
    }
}

tool_result! {
    /// Landlock on this host, and where commands may write.
    pub struct LandlockReport {
        available: bool,
        abi: u32,
        enforced_for_commands: bool,
        reason: Option<String>,
        writable: Option<Vec<Option<WirePath>>>,
    }
}

tool_result! {
    /// How the environment of commands is built (variable names only).
    pub struct EnvironmentReport {
        inherit: &'static str,
        include_only: Vec<String>,
        exclude: Vec<String>,
        set: Vec<String>,
        secret_env_filter: bool,
        non_interactive_defaults: Vec<String>,
    }
}

tool_result! {
    /// What `check_exec_environment` answers: the reference's flat fields,
    /// then ours.
    pub struct CheckExecEnvironmentResult {
        /// Catalog 0.5, or a workspace read-only to commands.
        #[serde(skip_serializing_if = "Option::is_none")]
        workspace_mutation_policy: Option<WorkspaceMutationPolicy>,
        workspace: WirePath,
        permission_mode: &'static str,
        network_allowed: bool,
        runtime_dir: Option<WirePath>,
        home: Option<WirePath>,
        tmpdir: Option<WirePath>,
        cache_dir: Option<WirePath>,
        landlock_enabled: bool,
        landlock_abi: Option<u32>,
        global_tmp_write: &'static str,
        warnings: Vec<String>,
        /// `summary` (the default) or `full`, as asked.
        detail: &'static str,
        gates: GateReport,
        sandbox: SandboxReport,
        // The full report only.
        #[serde(skip_serializing_if = "Option::is_none")]
        shell: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        landlock: Option<LandlockReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        environment: Option<EnvironmentReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        runtime: Option<super::server_info::RuntimeReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limits: Option<CommandLimits>,
        #[serde(skip_serializing_if = "Option::is_none")]
        active_commands: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        probes_run: Option<bool>,
    }
}

/// What confines commands on this host in this mode: the roots, and for
/// each protection whether the kernel enforces it (`enforced`), the host
/// lacks it (`unavailable`), the mode does not ask for it (`off`), or it is
/// a reading of the command line (`heuristic`).
pub fn sandbox_report(server: &Server, full: bool) -> SandboxReport {
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
    let tier = server.exec.tier();
    let ns = tier.tier == "namespace";
    let seal = server.exec.git_seal_status();
    let ns_support = ctm_exec_runtime::namespace_support();
    let by_ns = |wanted: bool| kernel(wanted, ns);
    let not_confined: Vec<&str> = if ns {
        vec![
            "UDP and ICMP datagram sockets, where the network is open",
            "a repository a command creates below the workspace root and registers as a submodule (see docs/security.md)",
        ]
    } else {
        vec![
            "UDP and ICMP datagram sockets",
            "pathname UNIX sockets (e.g. another program's control socket)",
            "metadata writes outside the write roots: chmod, chown, utimes, xattrs",
            "reading /proc of the command's own child processes",
            ".git's config and hooks (writable by commands)",
        ]
    };
    SandboxReport {
        tier: tier.tier,
        namespace: NamespaceReport {
            active: ns,
            reason: tier.reason.clone(),
            fix: tier.fix.clone(),
            builder: match (ns_support.available(), ns_support.built_in()) {
                (false, _) => None,
                (true, true) => Some("built-in"),
                (true, false) => Some("bwrap"),
            },
            setup: ns.then(|| server.exec.namespace_setup()),
            bwrap: ns_support.bwrap.clone().map(WirePath).filter(|_| full),
            bwrap_version: ns_support.version.clone().filter(|_| full),
            private_network: tier.private_network,
            git_sealed: seal.sealed,
            git_seal: GitSealReport {
                design: seal.design,
                protected: seal.protected.clone(),
                gaps: seal.gaps.clone(),
            },
        },
        landlock_unavailable_reason: ll.reason.clone(),
        seccomp_unavailable_reason: seccomp_available().as_ref().err().cloned(),
        read_roots: (confined && full).then_some(read_roots),
        write_roots: (confined && full).then(|| write_roots.into_iter().map(WirePath).collect()),
        toolchain_env: full.then(|| tc.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect()),
        path_entries_not_readable: full.then(|| {
            tc.skipped
                .iter()
                .map(|(path, reason)| UnreadablePathEntry {
                    path: path.clone(),
                    reason,
                })
                .collect()
        }),
        protections: full.then_some(Protections {
            read_confinement: kernel(g.landlock, ll.filesystem()),
            write_confinement: kernel(g.landlock, ll.filesystem()),
            truncate_confinement: kernel(g.landlock, ll.truncate()),
            device_nodes_refused: kernel(g.landlock, ll.filesystem() || seccomp_ok),
            device_ioctl_confined: kernel(g.landlock, ll.ioctl_dev()),
            terminal_injection_refused: kernel(g.landlock, seccomp_ok),
            tcp_connect_bind_refused: kernel(
                g.landlock && g.network == GateState::Blocked,
                ll.tcp(),
            ),
            signal_scope: kernel(g.landlock, ll.scopes()),
            abstract_unix_socket_scope: kernel(g.landlock, ll.scopes()),
            seccomp_filter: kernel(g.landlock, seccomp_ok),
            other_processes_untouchable: kernel(g.landlock, seccomp_ok && ll.scopes()),
            new_session: "enforced",
            descendants_tracked: "enforced",
            no_new_privs: kernel(g.landlock, ll.filesystem() || seccomp_ok),
            path_gate: gate(g.filesystem_escape),
            privileged_executable_gate: gate(g.privileged_executable),
            host_filesystem_read_only: by_ns(g.landlock),
            private_tmp_and_run: by_ns(g.landlock),
            pid_namespace: by_ns(g.landlock),
            network_namespace: by_ns(g.landlock && g.network == GateState::Blocked),
            git_config_and_hooks_read_only: by_ns(g.landlock && tier.git_sealed),
            git_directory_copy_on_write: by_ns(
                g.landlock && tier.git_sealed && seal.design == "overlay",
            ),
            set_id_bits_refused: kernel(g.landlock, seccomp_ok),
        }),
        seccomp_refuses: full.then(|| {
            if g.landlock && seccomp_ok {
                SECCOMP_REFUSED.to_vec()
            } else {
                Vec::new()
            }
        }),
        not_confined: full.then_some(not_confined),
    }
}

tool_result! {
    /// Whether commands may write the workspace (`--workspace-mutation`),
    /// and whether the kernel holds them to it.
    pub struct WorkspaceMutationPolicy {
        mode: &'static str,
        /// Workspace-relative directories commands may still write.
        write_paths: Vec<String>,
        enforced: bool,
        /// `landlock` (in either tier), `namespace` (the read-only mount
        /// alone), or `none`.
        enforced_by: &'static str,
        structured_write_tools: Vec<&'static str>,
        warnings: Vec<String>,
    }
}

/// The report of `--workspace-mutation`: in catalog 0.5 always, else when
/// the workspace is read-only to commands.
pub fn workspace_mutation_policy(server: &Server) -> Option<WorkspaceMutationPolicy> {
    let writes = server.exec.workspace_writes();
    let v05 = server.served().version == crate::catalog::CatalogVersion::V05;
    if !v05 && !writes.structured_only() {
        return None;
    }
    let tools = if v05 {
        vec!["apply_changes", "apply_patch"]
    } else {
        vec!["apply_patch"]
    };
    let root = server.workspace.root();
    let write_paths = writes
        .write_paths()
        .iter()
        .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
        .collect();
    if !writes.structured_only() {
        return Some(WorkspaceMutationPolicy {
            mode: "unrestricted",
            write_paths,
            enforced: true,
            enforced_by: "none",
            structured_write_tools: tools,
            warnings: Vec::new(),
        });
    }
    let ll = landlock_support();
    // Truncation is refused from ABI 3 on; below, a command could empty
    // a file it may only read.
    let landlock = server.gates().landlock && ll.truncate();
    let mount = server.exec.tier().tier == "namespace";
    let (enforced_by, warnings) = match (landlock, mount) {
        (true, _) => ("landlock", Vec::new()),
        (false, true) => ("namespace", Vec::new()),
        (false, false) => (
            "none",
            vec![format!(
                "commands can still write the workspace: {}",
                if server.gates().landlock {
                    format!(
                        "Landlock {} here and the namespace tier is not in use",
                        if ll.available {
                            "cannot refuse truncation (ABI < 3)"
                        } else {
                            "is unavailable"
                        }
                    )
                } else {
                    "dangerous mode runs commands unconfined".to_owned()
                }
            )],
        ),
    };
    Some(WorkspaceMutationPolicy {
        mode: "structured-only",
        write_paths,
        enforced: enforced_by != "none",
        enforced_by,
        structured_write_tools: tools,
        warnings,
    })
}

pub fn check_exec_environment(server: &Server, args: &InfoArgs) -> ToolSuccess {
    let full = args.detail == Detail::Full;
    let g = server.gates();
    let ll = landlock_support();
    let confined = g.landlock && ll.available;
    let runtime = super::server_info::runtime_report(server);
    let text = format!(
        "Exec environment: {} mode | Landlock {} | network {} | shell expansion {} | inline scripts {}{}",
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
        g.inline_script.as_str(),
        if server.config.permission_mode == crate::cli::PermissionMode::Safe {
            let seal = server.exec.git_seal_status();
            if seal.sealed {
                format!(" | git seal complete ({})", seal.design)
            } else {
                format!(
                    " | git seal NOT complete ({}): {}",
                    seal.design,
                    seal.gaps.first().cloned().unwrap_or_default()
                )
            }
        } else {
            String::new()
        }
    );
    let text = match workspace_mutation_policy(server).filter(|p| p.mode != "unrestricted") {
        Some(p) if p.enforced => format!(
            "{text} | workspace read-only to commands ({}){}",
            p.enforced_by,
            if p.write_paths.is_empty() {
                String::new()
            } else {
                format!(" but {}", p.write_paths.join(", "))
            }
        ),
        Some(_) => {
            format!("{text} | structured-only NOT enforced: commands can write the workspace")
        }
        None => text,
    };
    // The reference's flat fields first; ours add detail beside them.
    let env = super::server_info::exec_environment(server);
    let policy = &server.config.env_policy;
    let result = CheckExecEnvironmentResult {
        workspace_mutation_policy: workspace_mutation_policy(server),
        workspace: env.workspace,
        permission_mode: env.permission_mode,
        network_allowed: env.network_allowed,
        runtime_dir: env.runtime_dir,
        home: env.home,
        tmpdir: env.tmpdir,
        cache_dir: env.cache_dir,
        landlock_enabled: env.landlock_enabled,
        landlock_abi: env.landlock_abi,
        global_tmp_write: env.global_tmp_write,
        warnings: super::server_info::exec_warnings(server),
        detail: args.detail.as_str(),
        shell: full.then_some("/bin/sh -c"),
        gates: GateReport {
            network: g.network.as_str(),
            shell_expansion: g.shell_expansion.as_str(),
            inline_script: g.inline_script.as_str(),
            destructive_command: g.destructive_command.as_str(),
            filesystem_escape: g.filesystem_escape.as_str(),
            privileged_executable: g.privileged_executable.as_str(),
            sensitive_env: if g.secret_env_filter {
                "blocked"
            } else {
                "allowed"
            },
        },
        landlock: full.then(|| LandlockReport {
            available: ll.available,
            abi: ll.abi,
            enforced_for_commands: confined,
            reason: ll.reason.clone(),
            writable: confined.then(|| {
                server
                    .exec
                    .write_roots()
                    .iter()
                    .map(|p| Some(p.as_path().into()))
                    .collect()
            }),
        }),
        environment: full.then(|| EnvironmentReport {
            inherit: server.config.shell_env_inherit.as_str(),
            include_only: policy.include_only.clone(),
            exclude: policy.exclude.clone(),
            // Names only: values may be secrets the operator chose to pass.
            set: policy.set.keys().cloned().collect(),
            secret_env_filter: g.secret_env_filter,
            // What commands get, from the one list that sets it.
            non_interactive_defaults: ctm_exec_runtime::NON_INTERACTIVE_DEFAULTS
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        }),
        runtime: full.then_some(runtime),
        sandbox: sandbox_report(server, full),
        limits: full.then(|| server.limits.commands()),
        active_commands: full.then(|| server.exec.active()),
        probes_run: full.then_some(false),
    };
    ToolSuccess::new(text, &result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_tail_is_quoted_and_bounded() {
        assert_eq!(quoted("hi"), "'hi'");
        assert_eq!(quoted("it's"), "'it\\'s'");
        let long = "x".repeat(121);
        assert_eq!(quoted(&long), format!("'{}...'", "x".repeat(117)));
        assert_eq!(quoted(&"y".repeat(120)), format!("'{}'", "y".repeat(120)));
    }

    #[test]
    fn preview_keeps_the_start_and_the_end_when_both_fit() {
        assert_eq!(
            preview_of("hi\n", "e\n", 4096),
            ("--- stdout ---\nhi\n\n--- stderr ---\ne\n".into(), false)
        );
        assert_eq!(preview_of("", "e\n", 4096).0, "--- stderr ---\ne\n");
        let out: String = (1..=50).map(|i| format!("{i}\n")).collect();
        assert_eq!(
            preview_of(&out, "", 20),
            ("--- stdout ---\n1\n2\n3".into(), true)
        );
        let (p, cut) = preview_of(&out, "", 60);
        assert!(cut && p.len() <= 60, "{p}");
        assert!(
            p.starts_with("--- stdout ---\n1\n") && p.ends_with("49\n50\n"),
            "{p}"
        );
        // Never inside a character.
        let (p, _) = preview_of(&"é".repeat(100), "", 41);
        assert!(p.len() <= 41, "{p}");
    }

    #[test]
    fn the_missing_executable_is_read_from_the_shell() {
        assert_eq!(
            missing_executable("/bin/sh: 1: foo: not found\n"),
            Some(("/bin/sh: 1: foo: not found", "foo"))
        );
        assert_eq!(
            missing_executable("bash: line 1: bar: command not found"),
            Some(("bash: line 1: bar: command not found", "bar"))
        );
        assert_eq!(missing_executable("all good\n"), None);
    }
}
