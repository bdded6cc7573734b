//! Standard input read by a thread of its own from the moment it is
//! started, so the first request is already read when serving begins.

use std::io::Read;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// Bytes read per chunk.
const CHUNK: usize = 64 * 1024;
/// Chunks read ahead of the server at most (the reading thread waits
/// past them): read-ahead memory stays at `CHUNK * AHEAD`.
const AHEAD: usize = 4;

/// This process's standard input, read ahead by a thread started with
/// [`EarlyStdin::start`]; an [`AsyncRead`] for [`crate::serve_stdout`].
///
/// `tokio::io::stdin` starts reading at the first poll, on a blocking-pool
/// thread it starts then: the first request waits for that thread. Started
/// before the rest of start-up, this reader has the first request read by
/// the time the server asks for it.
#[derive(Debug)]
pub struct EarlyStdin {
    chunks: mpsc::Receiver<std::io::Result<Vec<u8>>>,
    current: Vec<u8>,
    at: usize,
    /// A read error [`EarlyStdin::peek`] took from the thread, given to
    /// the next read.
    failed: Option<std::io::Error>,
}

impl EarlyStdin {
    /// Starts the reading thread. Needs no async runtime; call it once per
    /// process (two readers would split the input between them).
    pub fn start() -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel(AHEAD);
        std::thread::Builder::new()
            .name("ctm-stdin".into())
            .spawn(move || {
                let mut stdin = std::io::stdin().lock();
                // One buffer read into; each chunk sent is as long as what
                // was read (a request line, not 64 KiB).
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let got = match stdin.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => Ok(buf[..n].to_vec()),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => Err(e),
                    };
                    let failed = got.is_err();
                    // The server is gone (its receiver dropped): stop.
                    if tx.blocking_send(got).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(Self {
            chunks: rx,
            current: Vec::new(),
            at: 0,
            failed: None,
        })
    }

    /// The bytes read and not yet served, without waiting: empty when the
    /// client has sent nothing yet. Serving later reads them as usual. A
    /// host can look at the first request before it serves (the server
    /// orders its start-up work by what the client asks first).
    pub fn peek(&mut self) -> &[u8] {
        if self.at == self.current.len() && self.failed.is_none() {
            match self.chunks.try_recv() {
                Ok(Ok(chunk)) => {
                    self.current = chunk;
                    self.at = 0;
                }
                Ok(Err(e)) => self.failed = Some(e),
                Err(_) => {}
            }
        }
        &self.current[self.at..]
    }
}

impl AsyncRead for EarlyStdin {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.at == this.current.len() {
            if let Some(e) = this.failed.take() {
                return Poll::Ready(Err(e));
            }
            match this.chunks.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                // End of input (or the thread ended after an error it sent).
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(chunk))) => {
                    this.current = chunk;
                    this.at = 0;
                }
            }
        }
        let n = buf.remaining().min(this.current.len() - this.at);
        buf.put_slice(&this.current[this.at..this.at + n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}
