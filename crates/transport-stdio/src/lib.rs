//! The stdio transport of coding-tools-mcp: newline-delimited JSON-RPC.
//!
//! Every request is served on its own task, so a long `tools/call` never
//! blocks a `ping` or another call. Responses are written whole, one JSON
//! object per line, by a single writer; nothing else ever reaches the output.
//! Notifications are answered with silence; `notifications/cancelled` fires
//! the cancellation signal of the request it names, and a cancelled request
//! gets no response. End of input ends the server once the requests already
//! read have been answered.
//!
//! ```no_run
//! # async fn demo<D: ctm_protocol_eras::Dispatcher>(d: std::sync::Arc<D>) -> std::io::Result<()> {
//! ctm_transport_stdio::serve(d, tokio::io::stdin(), tokio::io::stdout(), 30).await
//! # }
//! ```
//!
//! A process serving on its own stdout uses [`serve_stdout`], which writes
//! each answer with one blocking `write` of the encoded line instead of
//! copying it through `tokio::io::stdout` and std's line buffer.

#![deny(missing_docs)]

mod stdin;

pub use stdin::EarlyStdin;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ctm_protocol_eras::{
    Cancellation, ContextSeed, Dispatcher, ErrorCode, Prepared, RpcError, WaitBudget,
    error_response, prepare, run_call,
};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;

type InFlight = Arc<Mutex<HashMap<String, Cancellation>>>;

/// An answer and the slot of the message it answers.
type Outgoing = (Value, OwnedSemaphorePermit);

/// Messages read but not yet answered (or dropped) at most: past it the
/// input is not read until an answer is written.
pub const MAX_PENDING: usize = 64;

/// After end of input, how much longer than the wait budget the requests
/// already read get to finish.
const EOF_GRACE_SECS: u64 = 30;

/// Serves JSON-RPC lines from `input`, writing responses to `output`, until
/// `input` ends. `wait_budget_secs` is the deployment wait budget: stdio has
/// no per-request header.
pub async fn serve<D, R, W>(
    dispatcher: Arc<D>,
    input: R,
    output: W,
    wait_budget_secs: u64,
) -> std::io::Result<()>
where
    D: Dispatcher,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_to(dispatcher, input, Output::Stream(output), wait_budget_secs).await
}

/// [`serve`] with answers written to this process's stdout (a duplicate of
/// descriptor 1): each answer line is handed whole to a blocking `write`
/// on the blocking pool, without a copy. Messages written to stdout by
/// anything else would interleave; nothing else may write there.
pub async fn serve_stdout<D, R>(
    dispatcher: Arc<D>,
    input: R,
    wait_budget_secs: u64,
) -> std::io::Result<()>
where
    D: Dispatcher,
    R: AsyncRead + Unpin,
{
    use std::os::fd::AsFd;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
    let output: Output<tokio::io::Sink> = Output::Fd(Arc::new(std::fs::File::from(stdout)));
    serve_to(dispatcher, input, output, wait_budget_secs).await
}

/// Where answer lines go.
enum Output<W> {
    /// Any async writer.
    Stream(W),
    /// A file written with blocking writes off the async workers.
    Fd(Arc<std::fs::File>),
}

async fn serve_to<D, R, W>(
    dispatcher: Arc<D>,
    input: R,
    output: Output<W>,
    wait_budget_secs: u64,
) -> std::io::Result<()>
where
    D: Dispatcher,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // Where answers go, when it is a descriptor: looked at before each
    // request runs, so that nothing is executed for a client that can no
    // longer read the answers.
    let watched = match &output {
        Output::Fd(f) => Some(f.clone()),
        Output::Stream(_) => None,
    };
    if watched.is_some() {
        // The blocking pool's first thread, started while the first
        // request is read rather than when its answer is written.
        drop(tokio::task::spawn_blocking(|| ()));
    }
    let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
    let writer = tokio::spawn(write_lines(output, rx));
    let in_flight: InFlight = Arc::default();
    let pending = Arc::new(Semaphore::new(MAX_PENDING));
    let mut tasks = JoinSet::new();
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        // A slot per message until its answer is written: a client that
        // sends without reading stops being read once MAX_PENDING answers
        // wait, instead of queueing them without bound.
        let Ok(slot) = pending.clone().acquire_owned().await else {
            break;
        };
        match read_line(&mut reader, &mut line, MAX_LINE_BYTES).await? {
            Line::End => break,
            Line::Read => {}
            Line::TooLong(len) => {
                // Read to its end and dropped: memory stays bounded, and
                // the next line is served as usual.
                let error = RpcError::new(
                    ErrorCode::ParseError,
                    format!("the message is {len} bytes; a line may hold at most {MAX_LINE_BYTES}"),
                    "line_too_long",
                )
                .with_data("max_bytes", serde_json::json!(MAX_LINE_BYTES));
                let _ = tx.send((error_response(Some(&Value::Null), &error), slot));
                continue;
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Nobody reads the answers any more (the writer failed, or the
        // reading end of the output is closed): take no new request.
        if tx.is_closed() || watched.as_deref().is_some_and(output_gone) {
            tracing::warn!("the output is closed: no further request is taken");
            break;
        }
        match prepare(&line, None) {
            Prepared::Reply(reply) => {
                if let Some(body) = reply.body {
                    let _ = tx.send((body, slot));
                }
            }
            Prepared::Notification(req, era) => {
                if req.method == "notifications/cancelled"
                    && let Some(id) = req.params.as_ref().and_then(|p| p.get("requestId"))
                {
                    let key = id.to_string();
                    if let Some(c) = lock(&in_flight).get(&key) {
                        c.cancel();
                    }
                }
                dispatcher.notify(&req, era);
            }
            Prepared::Call(call) => {
                let key = call
                    .req
                    .id
                    .as_ref()
                    .map(Value::to_string)
                    .unwrap_or_default();
                let cancel = Cancellation::new();
                lock(&in_flight).insert(key.clone(), cancel.clone());
                let seed = ContextSeed {
                    wait_budget: WaitBudget::deployment(wait_budget_secs),
                    cancel: cancel.clone(),
                    transport: "stdio",
                };
                let ctx = seed.for_call(&call);
                let (d, tx, in_flight) = (dispatcher.clone(), tx.clone(), in_flight.clone());
                tasks.spawn(async move {
                    let reply = run_call(d.as_ref(), call, ctx).await;
                    lock(&in_flight).remove(&key);
                    // A cancelled request is not answered (the client stopped waiting).
                    if !cancel.is_cancelled()
                        && let Some(body) = reply.body
                    {
                        let _ = tx.send((body, slot));
                    }
                });
            }
        }
        // Reap finished tasks so the set does not grow without bound.
        while tasks.try_join_next().is_some() {}
    }
    // Every request already read is answered — unless it is stuck past
    // anything the wait budget allows (a read that never returns): then it
    // is abandoned, rather than keeping the process alive for ever.
    let bound = std::time::Duration::from_secs(wait_budget_secs.saturating_add(EOF_GRACE_SECS));
    let drained =
        tokio::time::timeout(bound, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            unanswered = tasks.len(),
            "input ended; requests still running after the wait budget are abandoned"
        );
        tasks.abort_all();
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

/// The longest message read, in bytes, not counting its newline (16 MiB:
/// patches of large files fit; a line beyond it is answered with -32700 and
/// skipped, never held).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

enum Line {
    /// End of input.
    End,
    /// A line (with its newline, if any) is in the buffer.
    Read,
    /// A line of at least this many bytes was read and dropped.
    TooLong(usize),
}

/// Reads one line into `buf`, keeping it only if its message (without the
/// newline) is at most `max` bytes.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    let mut seen = 0usize;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if seen == 0 {
                Line::End
            } else if seen > max {
                Line::TooLong(seen)
            } else {
                Line::Read
            });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        // Room for `max` bytes of message and its newline.
        if seen + take <= max + 1 {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            buf.clear();
        }
        seen += take;
        r.consume(take);
        if done {
            return Ok(if seen - 1 > max {
                Line::TooLong(seen)
            } else {
                Line::Read
            });
        }
    }
}

/// Whether the reading end of `out` is gone: a pipe whose reader closed
/// reports `POLLERR`, a socket `POLLHUP` (a poll for nothing, which never
/// blocks; a terminal or a file reports neither).
fn output_gone(out: &std::fs::File) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(out, PollFlags::empty())];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&zero)) {
        Ok(n) if n > 0 => fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP),
        _ => false,
    }
}

fn lock(m: &InFlight) -> std::sync::MutexGuard<'_, HashMap<String, Cancellation>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: Output<W>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
) -> std::io::Result<()> {
    // One buffer for every answer, kept up to KEPT_BUFFER_BYTES.
    let mut bytes = Vec::new();
    // The slot is given back once the answer is written (dropped here).
    while let Some((msg, _slot)) = rx.recv().await {
        bytes.clear();
        if bytes.capacity() > KEPT_BUFFER_BYTES {
            bytes = Vec::new();
        }
        match &mut output {
            Output::Stream(w) => {
                ctm_protocol_eras::to_wire_into(&msg, &mut bytes);
                drop(msg);
                bytes.push(b'\n');
                w.write_all(&bytes).await?;
                w.flush().await?;
            }
            Output::Fd(file) => {
                // Encoded where it is written: the start of a large answer
                // goes out while the rest is escaped, and the client reads
                // it meanwhile.
                let file = file.clone();
                let (written, buffer) = tokio::task::spawn_blocking(move || {
                    use std::io::Write;
                    let mut out = &*file;
                    let written = ctm_protocol_eras::to_wire_streaming(
                        &msg,
                        &mut bytes,
                        &mut |b: &[u8]| out.write_all(b),
                    )
                    .and_then(|sent| {
                        bytes.push(b'\n');
                        out.write_all(&bytes[sent..])
                    });
                    drop(msg);
                    (written, bytes)
                })
                .await
                .map_err(std::io::Error::other)?;
                written?;
                bytes = buffer;
            }
        }
    }
    Ok(())
}

/// The answer buffer is kept between answers up to this capacity (a
/// `read_file` page of 1 MiB needs about 2.2 MiB); a larger one is freed.
const KEPT_BUFFER_BYTES: usize = 4 * 1024 * 1024;
