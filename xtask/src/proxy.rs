//! `cargo xtask proxy`: the server behind a real reverse proxy (issue 20,
//! item 3).
//!
//! Two backends, each on its own workspace and port with
//! `CODING_TOOLS_MCP_TRUST_PROXY_HEADERS=1`, behind nginx on loopback:
//! `/w/alpha/` and `/w/beta/` route to them, the prefix stripped, with
//! `X-Forwarded-Host`/`-Proto`/`-Prefix` set (overwriting whatever the client
//! sent) and responses unbuffered over HTTP/1.1 to the upstream. nginx runs
//! unprivileged in the foreground from its own configuration under
//! `target/proxy/`, on a free port, and is stopped on the way out, failures
//! included. Then:
//!
//! - the server card read through each route names the public URL, prefix
//!   included, even when the client sends forged forwarded headers to the
//!   proxy;
//! - a backend without the flag, reached directly with forged headers,
//!   names only itself and refuses the forged Origin;
//! - the official Python SDK client (`tests/python/proxy_clients.py`)
//!   reaches each backend through the proxy in every mode (handshake era,
//!   auto, `2026-07-28`), sees that backend's workspace, polls a command it
//!   started through the same route, and does not find it through the other.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::conformance::start_http;
use crate::{build_server, phase, root, run_cmd, target_dir};

const TRUST: &str = "CODING_TOOLS_MCP_TRUST_PROXY_HEADERS";
const ROUTES: [&str; 2] = ["alpha", "beta"];

pub fn run(_args: &[String]) -> Result<()> {
    let binary = build_server(false)?;
    let python = crate::ci::python_venv()?;
    let nginx = nginx()?;
    let dir = target_dir().join("proxy");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let scratch = tempfile::tempdir()?;
    // Dropped last: every process is stopped whichever way this returns.
    let mut running = Running::default();
    let mut routes = Vec::new();
    for name in ROUTES {
        let ws = scratch.path().join(name);
        std::fs::create_dir_all(&ws)?;
        std::fs::write(ws.join("route.txt"), format!("{name}\n"))?;
        let trace = scratch.path().join(format!("trace-{name}.jsonl"));
        let trace_arg = trace.to_string_lossy().into_owned();
        // nginx's workers run as another account (nobody, when started as
        // root): a backend without a token serves them only when allowed.
        let (child, url) = start_http(
            &binary,
            &ws,
            &["--trace-file", &trace_arg, "--allow-other-users"],
            &[(TRUST, "1")],
        )?;
        running.0.push(child);
        routes.push(Route {
            name,
            upstream: authority(&url)?,
            ws,
            trace,
        });
    }
    let plain_ws = scratch.path().join("untrusted");
    std::fs::create_dir_all(&plain_ws)?;
    let (child, url) = start_http(&binary, &plain_ws, &[], &[(TRUST, "0")])?;
    running.0.push(child);
    let untrusted = authority(&url)?;

    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(&dir, port, &routes))?;
    phase(&format!(
        "nginx on 127.0.0.1:{port} ({}), routes /w/alpha/ and /w/beta/",
        conf.display()
    ));
    let error_log = dir.join("error.log");
    let child = Command::new(&nginx)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(&error_log)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", nginx.display()))?;
    running.0.push(child);
    let proxy = format!("127.0.0.1:{port}");
    wait_listening(&proxy, running.0.last_mut(), &error_log)?;

    phase("the server card and forged headers, with and without the trust flag");
    let checks = (|| {
        card_checks(&proxy, &routes, &untrusted)?;
        phase("the official Python SDK client through nginx, every mode, both routes");
        let mut sdk = Command::new(&python);
        sdk.arg(root().join("tests/python/proxy_clients.py"))
            .arg(format!("http://{proxy}"));
        for r in &routes {
            sdk.arg(format!(
                "{}={}={}",
                r.name,
                r.ws.display(),
                r.trace.display()
            ));
        }
        run_cmd(&mut sdk)
    })();
    if checks.is_err()
        && let Ok(log) = std::fs::read_to_string(&error_log)
    {
        eprintln!("--- {} ---\n{log}", error_log.display());
    }
    drop(running);
    checks?;
    eprintln!("xtask proxy: all checks passed");
    Ok(())
}

/// One backend behind the proxy.
struct Route {
    name: &'static str,
    /// `127.0.0.1:port` of the backend.
    upstream: String,
    ws: PathBuf,
    trace: PathBuf,
}

/// Processes this run started; stopped (SIGTERM, then SIGKILL after a few
/// seconds) when dropped, the last started first.
#[derive(Default)]
struct Running(Vec<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        while let Some(mut child) = self.0.pop() {
            // nginx's master stops its workers on SIGTERM; SIGKILL would
            // orphan them.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// The nginx binary, installing the Debian package when it is missing.
fn nginx() -> Result<PathBuf> {
    let find = || {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    phase("installing nginx (Debian package) for the reverse-proxy checks");
    crate::ci::apt_install("nginx");
    find().context(
        "nginx is needed for the reverse-proxy checks (apt-get install nginx, as root or with password-less sudo)",
    )
}

/// `host:port` of a `http://host:port/mcp` URL.
fn authority(url: &str) -> Result<String> {
    url.strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .map(str::to_owned)
        .with_context(|| format!("not an http URL: {url}"))
}

/// A loopback port free a moment ago (nginx binds it next).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The configuration: foreground, one worker, every path under `dir`, and a
/// location per route that strips its prefix and tells the backend the
/// public URL. `proxy_set_header` replaces what a client sent, so forged
/// `X-Forwarded-*` never reach the backend; an empty value removes the
/// header (`Forwarded`, which the backend would read in their absence).
fn nginx_conf(dir: &Path, port: u16, routes: &[Route]) -> String {
    let d = dir.display();
    let mut locations = String::new();
    for r in routes {
        locations.push_str(&format!(
            r#"
        location /w/{name}/ {{
            proxy_pass http://{upstream}/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $proxy_host;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Prefix /w/{name};
            proxy_set_header Forwarded "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
"#,
            name = r.name,
            upstream = r.upstream
        ));
    }
    format!(
        r#"daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 128;
}}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy_temp;
    fastcgi_temp_path {d}/fastcgi_temp;
    uwsgi_temp_path {d}/uwsgi_temp;
    scgi_temp_path {d}/scgi_temp;
    server {{
        listen 127.0.0.1:{port};
{locations}
    }}
}}
"#
    )
}

/// Waits until `addr` accepts connections, failing early (with nginx's
/// error log) when the process exits instead.
fn wait_listening(addr: &str, child: Option<&mut Child>, error_log: &Path) -> Result<()> {
    let child = child.context("nginx was not started")?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(error_log).unwrap_or_default();
            bail!("nginx exited ({status}) before listening on {addr}:\n{log}");
        }
        if Instant::now() > deadline {
            bail!("nginx did not listen on {addr} within 15 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A status and a body, from an HTTP/1.0 exchange (so never chunked).
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "not JSON ({}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status")?;
    Ok(Answer {
        status,
        body: raw[end + 4..].to_vec(),
    })
}

/// Every way a client could claim another name.
const FORGED: [(&str, &str); 4] = [
    ("X-Forwarded-Host", "evil.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Prefix", "/evil"),
    ("Forwarded", "host=evil.example;proto=https"),
];

fn card_url(addr: &str, path: &str, headers: &[(&str, &str)]) -> Result<String> {
    let a = request(addr, "GET", path, headers, "")?;
    ensure!(
        a.status == 200,
        "GET {addr}{path}: {} {}",
        a.status,
        String::from_utf8_lossy(&a.body)
    );
    let card = a.json()?;
    card["transport"]["url"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no transport.url in the card of {addr}{path}: {card}"))
}

fn card_checks(proxy: &str, routes: &[Route], untrusted: &str) -> Result<()> {
    for r in routes {
        let path = format!("/w/{}/.well-known/mcp.json", r.name);
        let want = format!("http://{proxy}/w/{}/mcp", r.name);
        let got = card_url(proxy, &path, &[])?;
        ensure!(got == want, "card through /w/{}: {got}, not {want}", r.name);
        println!("PASS card through nginx /w/{} names {got}", r.name);
        let got = card_url(proxy, &path, &FORGED)?;
        ensure!(
            got == want,
            "forged headers sent to nginx reached /w/{}: {got}",
            r.name
        );
        println!(
            "PASS forged X-Forwarded-* sent to nginx are replaced on /w/{}",
            r.name
        );
        let direct = card_url(&r.upstream, "/.well-known/mcp.json", &[])?;
        let own = format!("http://{}/mcp", r.upstream);
        ensure!(direct == own, "direct to the {} backend: {direct}", r.name);
    }
    let got = card_url(untrusted, "/.well-known/mcp.json", &FORGED)?;
    let own = format!("http://{untrusted}/mcp");
    ensure!(
        got == own,
        "a backend without the flag took forged headers: {got}"
    );
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut forged_origin = FORGED.to_vec();
    forged_origin.push(("Origin", "https://evil.example"));
    let refused = request(untrusted, "POST", "/mcp", &forged_origin, ping)?;
    ensure!(
        refused.status == 403,
        "a forged public origin was not refused without the flag: {}",
        refused.status
    );
    println!("PASS a backend without the flag ignores forged headers ({got}; forged Origin 403)");
    Ok(())
}
