//! `cargo xtask load [--secs N] [--clients N] [--stdio]`: N clients mixing
//! every kind of tool for a while against one server, over HTTP (a
//! connection per request) or, with `--stdio`, pipelined on the one stdio
//! stream (every client's request in flight at once, answers matched by id).
//! Each client patches its own counter file, so a lost or doubled patch
//! shows as a wrong count. Prints requests, errors, p50/p99 and the server's
//! peak RSS; fails on any error or lost update.
//!
//! `--abuse` (HTTP): the server runs with a bearer token and OAuth, the
//! normal clients authenticate, and hostile clients run alongside — slow
//! bodies on `/mcp` and `/oauth/register`, a registration flood with large
//! metadata, wrong bearer tokens and wrong authorize passwords. The normal
//! clients must still see 0 errors.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::build_server;
use crate::conformance::{http_post_raw, parse_response, start_http};

/// How the clients reach the server.
enum Link {
    /// The `/mcp` URL, and the bearer token to send (with `--abuse`).
    Http(String, Option<String>),
    Stdio(Arc<Pipeline>),
}

/// One stdio server shared by every client: writes are serialized, answers
/// are routed back to their caller by id.
struct Pipeline {
    stdin: Mutex<ChildStdin>,
    waiting: Arc<Mutex<HashMap<u64, Sender<Value>>>>,
    next_id: AtomicU64,
}

impl Pipeline {
    fn start(child: &mut Child) -> Result<Arc<Self>> {
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let waiting: Arc<Mutex<HashMap<u64, Sender<Value>>>> = Arc::default();
        let routes = waiting.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let Some(id) = v["id"].as_u64() else { continue };
                if let Some(tx) = routes.lock().ok().and_then(|mut w| w.remove(&id)) {
                    let _ = tx.send(v);
                }
            }
        });
        let p = Arc::new(Self {
            stdin: Mutex::new(stdin),
            waiting,
            next_id: AtomicU64::new(1),
        });
        let init = p.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "xtask-load", "version": "1"}}),
        )?;
        if init.get("result").is_none() {
            bail!("initialize failed: {init}");
        }
        p.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(p)
    }

    fn write(&self, msg: &Value) -> Result<()> {
        let mut stdin = self
            .stdin
            .lock()
            .map_err(|_| anyhow::anyhow!("stdin lock poisoned"))?;
        writeln!(stdin, "{msg}")?;
        stdin.flush()?;
        Ok(())
    }

    fn request(&self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = channel();
        self.waiting
            .lock()
            .map_err(|_| anyhow::anyhow!("routes lock poisoned"))?
            .insert(id, tx);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        rx.recv_timeout(Duration::from_secs(120))
            .with_context(|| format!("no answer to request {id} within 120 s"))
    }
}

fn call(link: &Link, tool: &str, args: Value) -> Result<Value> {
    let (status, answer) = match link {
        Link::Http(url, token) => {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
            let mut headers = vec![(
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            )];
            if let Some(t) = token {
                headers.push(("Authorization".to_owned(), format!("Bearer {t}")));
            }
            let (status, answer) =
                parse_response(&http_post_raw(url, &body.to_string(), &headers)?)?;
            (status, answer.context("no JSON answer")?)
        }
        Link::Stdio(p) => (
            200,
            p.request("tools/call", json!({"name": tool, "arguments": args}))?,
        ),
    };
    if status != 200 || answer["result"]["isError"] != false {
        bail!("{tool}: status {status}: {answer:.300}");
    }
    Ok(answer["result"]["structuredContent"].clone())
}

fn setup(ws: &Path, clients: usize) -> Result<()> {
    std::fs::create_dir_all(ws.join("src"))?;
    for i in 0..200 {
        std::fs::write(
            ws.join(format!("src/m{i:03}.rs")),
            format!("pub fn f{i}() -> u32 {{ {i} }}\n// needle {i}\n"),
        )?;
    }
    for c in 0..clients {
        std::fs::write(ws.join(format!("counter{c}.txt")), "count 0\n")?;
    }
    let git = |args: &[&str]| -> Result<()> {
        let ok = std::process::Command::new("git")
            .current_dir(ws)
            .args(["-c", "user.name=load", "-c", "user.email=load@example.com"])
            .args(args)
            .status()?
            .success();
        if !ok {
            bail!("git {args:?} failed");
        }
        Ok(())
    };
    git(&["init", "-q"])?;
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "load fixture"])
}

fn peak_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("no value")?
        .parse()?)
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut secs, mut clients, mut stdio, mut abuse) = (60u64, 16usize, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--stdio" => stdio = true,
            "--abuse" => abuse = true,
            "--secs" => secs = it.next().context("--secs N")?.parse()?,
            "--clients" => clients = it.next().context("--clients N")?.parse()?,
            other => bail!("unknown load argument: {other}"),
        }
    }
    let binary = build_server(false)?;
    let ws = tempfile::tempdir()?;
    setup(ws.path(), clients)?;
    let trusted = ["--permission-mode", "trusted"];
    let (mut server, link) = if stdio {
        let mut child = Command::new(&binary)
            .args(["--stdio", "--workspace"])
            .arg(ws.path())
            .args(trusted)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let pipeline = Pipeline::start(&mut child)?;
        (child, Link::Stdio(pipeline))
    } else if abuse {
        let token = "load-token-0123456789abcdef";
        let (child, url) = start_http(
            &binary,
            ws.path(),
            &[
                "--permission-mode",
                "trusted",
                "--oauth-mode",
                "--auth-token",
                token,
            ],
            &[("CODING_TOOLS_MCP_OAUTH_PASSWORD", "load-password-42")],
        )?;
        (child, Link::Http(url, Some(token.to_owned())))
    } else {
        let (child, url) = start_http(&binary, ws.path(), &trusted, &[])?;
        (child, Link::Http(url, None))
    };
    let link = &link;
    let pid = server.id();
    let until = Instant::now() + Duration::from_secs(secs);
    let hostile = AtomicU64::new(0);
    let hostile = &hostile;
    if abuse {
        // The token works before the first wrong one arrives: the server
        // keeps serving a token it has seen work while it slows down the
        // address that also sends wrong ones (everything here is 127.0.0.1).
        call(link, "server_info", json!({}))?;
    }
    let result = std::thread::scope(|scope| -> Result<(Vec<Duration>, usize)> {
        if let (true, Link::Http(url, _)) = (abuse, link) {
            let base = url.trim_end_matches("/mcp").to_owned();
            for kind in 0..6 {
                let base = base.clone();
                scope.spawn(move || abuser(kind, &base, until, hostile));
            }
        }
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || -> Result<(Vec<Duration>, usize)> {
                    let mut times = Vec::new();
                    let mut patches = 0usize;
                    let mut k = 0usize;
                    while Instant::now() < until {
                        let started = Instant::now();
                        match k % 7 {
                            0 => {
                                call(link, "read_file", json!({"path": format!("src/m{:03}.rs", k % 200)}))?;
                            }
                            1 => {
                                let s = call(link, "search_text", json!({"query": "needle 1", "max_results": 500}))?;
                                if s["matches"].as_array().is_none_or(Vec::is_empty) {
                                    bail!("search found nothing: {s}");
                                }
                            }
                            2 => {
                                call(link, "list_files", json!({"path": "src"}))?;
                            }
                            3 => {
                                let patch = format!(
                                    "*** Begin Patch\n*** Update File: counter{c}.txt\n@@\n-count {patches}\n+count {}\n*** End Patch\n",
                                    patches + 1
                                );
                                call(link, "apply_patch", json!({"patch": patch}))?;
                                patches += 1;
                            }
                            4 => {
                                let s = call(link, "exec_command", json!({"cmd": format!("echo client{c}")}))?;
                                if s["stdout"] != format!("client{c}\n") {
                                    bail!("exec output: {s}");
                                }
                            }
                            5 => {
                                call(link, "git_status", json!({}))?;
                            }
                            _ => {
                                call(link, "git_log", json!({"max_count": 5}))?;
                            }
                        }
                        times.push(started.elapsed());
                        k += 1;
                    }
                    Ok((times, patches))
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut patches_total = 0;
        for (c, w) in workers.into_iter().enumerate() {
            let (times, patches) = w
                .join()
                .map_err(|_| anyhow::anyhow!("client {c} panicked"))??;
            let on_disk = std::fs::read_to_string(ws.path().join(format!("counter{c}.txt")))?;
            if on_disk != format!("count {patches}\n") {
                bail!("client {c}: {patches} patches applied but the file says {on_disk:?}");
            }
            patches_total += patches;
            all.extend(times);
        }
        Ok((all, patches_total))
    });
    let rss = peak_rss_kib(pid);
    let _ = server.kill();
    let _ = server.wait();
    let (mut times, patches) = result?;
    times.sort_unstable();
    let pct =
        |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0;
    println!(
        "load: {clients} clients x {secs} s over {}: {} requests, 0 errors, {patches} patches none lost, p50 {:.2} ms, p99 {:.2} ms, server peak RSS {:.1} MiB{}",
        if stdio { "stdio, pipelined" } else { "HTTP" },
        times.len(),
        pct(0.5),
        pct(0.99),
        rss? as f64 / 1024.0,
        if abuse {
            format!(
                "; alongside {} hostile requests and connections (slow bodies, registration flood, wrong tokens and passwords)",
                hostile.load(Ordering::Relaxed)
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

/// One hostile client until `until`: 0-1 slow bodies (on `/mcp`, on
/// `/oauth/register`), 2 a registration flood with large metadata, 3 wrong
/// bearer tokens, 4 wrong authorize passwords, 5 many idle connections.
/// What the server answers does not matter; that the normal clients are
/// served does.
fn abuser(kind: usize, base: &str, until: Instant, count: &AtomicU64) {
    use std::io::{Read, Write as _};
    let hostport = base.trim_start_matches("http://").to_owned();
    // Another client address than the normal clients' 127.0.0.1: the
    // server's per-address limits and backoff are for it alone.
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return;
    };
    let connect = || -> Option<std::net::TcpStream> {
        let addr = hostport.parse().ok()?;
        rt.block_on(async {
            let sock = tokio::net::TcpSocket::new_v4().ok()?;
            sock.bind("127.0.0.2:0".parse().ok()?).ok()?;
            let s = sock.connect(addr).await.ok()?.into_std().ok()?;
            s.set_nonblocking(false).ok()?;
            Some(s)
        })
    };
    let post = |path: &str, headers: &str, body: &[u8]| {
        if let Some(mut s) = connect() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(15)));
            let head = format!(
                "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(body);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
        }
        count.fetch_add(1, Ordering::Relaxed);
    };
    while Instant::now() < until {
        match kind {
            0 | 1 => {
                // Eight connections at a time, each promising 1000 bytes
                // and sending one a second.
                let path = if kind == 0 { "/mcp" } else { "/oauth/register" };
                let conns: Vec<_> = (0..8).filter_map(|_| connect()).collect();
                for mut c in &conns {
                    let _ = c.write_all(format!("POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{").as_bytes());
                }
                count.fetch_add(conns.len() as u64, Ordering::Relaxed);
                for _ in 0..3 {
                    std::thread::sleep(Duration::from_secs(1));
                    for mut c in &conns {
                        let _ = c.write_all(b" ");
                    }
                }
            }
            2 => {
                let uris: Vec<String> = (0..50)
                    .map(|i| format!("http://127.0.0.1:{}/cb/{}", 1000 + i, "x".repeat(1000)))
                    .collect();
                let body = json!({"redirect_uris": uris, "client_name": "flood", "token_endpoint_auth_method": "none"}).to_string();
                post("/oauth/register", "Content-Type: application/json\r\n", body.as_bytes());
            }
            3 => post(
                "/mcp",
                "Content-Type: application/json\r\nAuthorization: Bearer wrong-token\r\n",
                br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            ),
            4 => post(
                "/oauth/authorize",
                "Content-Type: application/x-www-form-urlencoded\r\n",
                b"password=wrong&client_id=x&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb&response_type=code&code_challenge=abc&code_challenge_method=S256",
            ),
            _ => {
                // Idle connections that never send a byte.
                let conns: Vec<_> = (0..16).filter_map(|_| connect()).collect();
                count.fetch_add(conns.len() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_secs(3));
            }
        }
    }
}
