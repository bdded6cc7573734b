//! A server under test on stdio: one JSON-RPC message per line each way.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

pub struct Peer {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// A `--peer`/`--server-cmd` template (`CMD ARGS... {ws}`) as its words,
/// with `{ws}` replaced by the workspace.
pub fn template_words(template: &str, ws: &std::path::Path) -> Result<Vec<String>> {
    let words: Vec<String> = template
        .replace("{ws}", &ws.to_string_lossy())
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if words.is_empty() {
        bail!("empty server command template");
    }
    Ok(words)
}

/// A `--peer` template as a command run in `ws`: `--stdio --workspace
/// {ws}` is added when the template does not place `{ws}` itself, and a
/// relative program path is taken from here (the server runs in `ws`).
pub fn stdio_command(template: &str, ws: &std::path::Path) -> Result<Command> {
    let template = if template.contains("{ws}") {
        template.to_owned()
    } else {
        format!("{template} --stdio --workspace {{ws}}")
    };
    let mut words = template_words(&template, ws)?;
    if words[0].contains('/') && std::path::Path::new(&words[0]).is_relative() {
        words[0] = std::env::current_dir()?
            .join(&words[0])
            .to_string_lossy()
            .into_owned();
    }
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]).current_dir(ws);
    Ok(cmd)
}

impl Peer {
    /// Sends request `id` and reads until its answer, skipping the
    /// notifications a server may interleave.
    pub fn request(&mut self, id: u64, method: &str, params: Value) -> Result<Value> {
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&msg.to_string())?;
        loop {
            let v = self.recv()?;
            if v.get("id").is_some() {
                return Ok(v);
            }
        }
    }

    /// Spawns `cmd` with piped stdin/stdout and stderr discarded.
    pub fn spawn(cmd: &mut Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let stdin = child.stdin.take().context("stdin")?;
        // Large reads, as `Command::output` makes for the floors.
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().context("stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
        })
    }

    /// Writes one line (the newline is added) and flushes.
    pub fn send(&mut self, line: &str) -> Result<()> {
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.write_all(b"\n")?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Reads the next line as JSON.
    pub fn recv(&mut self) -> Result<Value> {
        let mut line = Vec::new();
        self.recv_bytes(&mut line)?;
        serde_json::from_slice(&line)
            .with_context(|| format!("not JSON: {:.400}", String::from_utf8_lossy(&line)))
    }

    /// Reads the next line's bytes into `line` (cleared first; a caller
    /// that keeps the buffer reads large answers without growing it).
    pub fn recv_bytes(&mut self, line: &mut Vec<u8>) -> Result<()> {
        line.clear();
        if self.stdout.read_until(b'\n', line)? == 0 {
            bail!("the server closed stdout");
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
