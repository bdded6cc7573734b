//! A small client for the real binary: stdio lines and raw HTTP/1.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_coding-tools-mcp");
/// A bound on how long a test waits for an answer that should come at once;
/// a hang fails the test instead of blocking CI.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

pub const MODERN: &str = "2026-07-28";

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "blackbox", "version": "1"},
    })
}

pub fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("AGENTS.md"),
        "# Rules\nRun cargo test before you stop.\n",
    )
    .unwrap();
    dir
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn command(ws: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--workspace").arg(ws).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("CODING_TOOLS_MCP_") {
            c.env_remove(k);
        }
    }
    pass_sandbox_builder(&mut c);
    c.env("TMPDIR", ws.join(".runtime-tmp"));
    let _ = std::fs::create_dir_all(ws.join(".runtime-tmp"));
    c
}

/// `CTM_SANDBOX_BUILDER` (`builtin`, `bwrap`) becomes the server's
/// `CODING_TOOLS_MCP_SANDBOX_BUILDER`: CI runs the sandbox suites once
/// with each builder of the namespace tier.
pub fn pass_sandbox_builder(c: &mut Command) {
    if let Some(b) = std::env::var_os("CTM_SANDBOX_BUILDER") {
        c.env("CODING_TOOLS_MCP_SANDBOX_BUILDER", b);
    }
}

/// Lines of a child stream, readable with a timeout.
pub struct Lines {
    rx: Receiver<String>,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Lines {
    pub fn spawn(stream: impl Read + Send + 'static) -> Self {
        let (tx, rx) = channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                seen2.lock().unwrap().push(line.clone());
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { rx, seen }
    }

    pub fn next(&self) -> Option<String> {
        self.rx.recv_timeout(ANSWER_TIMEOUT).ok()
    }
}

/// The binary on stdio.
pub struct StdioServer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub stdout: Lines,
    pub stderr: Lines,
}

impl StdioServer {
    pub fn start(ws: &Path, args: &[&str]) -> Self {
        Self::start_with(command(ws, args).arg("--stdio"))
    }

    pub fn start_with(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = Lines::spawn(child.stdout.take().unwrap());
        let stderr = Lines::spawn(child.stderr.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    pub fn recv(&self) -> Value {
        let line = self.stdout.next().expect("no answer on stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {line}"))
    }

    /// Sends one request and reads one answer; a `tools/call` answer's
    /// `structuredContent` must match the tool's `outputSchema`.
    pub fn request(&mut self, msg: &Value) -> Value {
        self.send(msg);
        let answer = self.recv();
        if msg["method"] == "tools/call"
            && let Some(tool) = msg.pointer("/params/name").and_then(Value::as_str)
        {
            assert_conforms(tool, &answer);
        }
        answer
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    pub fn wait(&mut self) -> std::process::ExitStatus {
        for _ in 0..(ANSWER_TIMEOUT.as_millis() / 20) {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("server did not exit");
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary on HTTP (port 0, read back from stderr).
pub struct HttpServer {
    pub child: Child,
    pub client: HttpClient,
    pub stderr: Lines,
}

/// Raw HTTP/1.1 requests to one server address (cheap to clone across threads).
#[derive(Clone)]
pub struct HttpClient {
    pub addr: String,
}

/// A connection to `addr` from the local address `source` (another
/// loopback address such as `127.0.0.2`), so the server sees another client.
pub fn connect_from(source: &str, addr: &str) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(format!("{source}:0").parse().unwrap()).unwrap();
        let s = sock.connect(addr.parse().unwrap()).await.unwrap();
        let s = s.into_std().unwrap();
        s.set_nonblocking(false).unwrap();
        s
    })
}

/// Requests to a server from another client address.
#[derive(Clone)]
pub struct SourcedClient {
    pub addr: String,
    pub source: String,
}

impl SourcedClient {
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> HttpResponse {
        let bytes = request_bytes(&self.addr, method, path, headers, body);
        exchange(connect_from(&self.source, &self.addr), &bytes)
    }

    pub fn post(&self, body: &Value, headers: &[(&str, &str)]) -> HttpResponse {
        let b = body.to_string();
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.raw_request("POST", "/mcp", &h, Some(b.as_bytes()))
    }
}

fn request_bytes(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b);
    }
    bytes
}

/// Writes a request and reads the whole response.
fn exchange(mut s: TcpStream, bytes: &[u8]) -> HttpResponse {
    s.set_read_timeout(Some(ANSWER_TIMEOUT)).unwrap();
    // A server may answer (413, 400) and close before it has read a
    // whole oversized body: the answer is what the test reads.
    if let Err(e) = s.write_all(bytes) {
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "{e}"
        );
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    HttpResponse::parse(&out)
}

impl std::ops::Deref for HttpServer {
    type Target = HttpClient;

    fn deref(&self) -> &HttpClient {
        &self.client
    }
}

impl HttpServer {
    pub fn start(ws: &Path, args: &[&str]) -> Self {
        let mut cmd = command(ws, args);
        cmd.args(["--port", "0"]);
        Self::start_with(&mut cmd)
    }

    pub fn start_with(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Lines::spawn(child.stderr.take().unwrap());
        let addr = loop {
            let line = stderr.next().expect("server did not announce its address");
            if let Some(rest) = line.split("serving MCP on http://").nth(1) {
                let url = rest.split_whitespace().next().unwrap_or_default();
                break url.trim_end_matches("/mcp").to_owned();
            }
        };
        Self {
            child,
            client: HttpClient { addr },
            stderr,
        }
    }
}

impl HttpClient {
    pub fn post(&self, body: &Value, headers: &[(&str, &str)]) -> HttpResponse {
        let b = body.to_string();
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        self.raw_request("POST", "/mcp", &h, Some(b.as_bytes()))
    }

    /// Posts a modern request with correct mirror headers.
    pub fn post_modern(&self, method: &str, params: Value) -> HttpResponse {
        let mut p = params;
        p["_meta"] = meta();
        let name = p.get("name").and_then(Value::as_str).map(str::to_owned);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": p});
        let mut h = vec![("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)];
        if let Some(n) = name.as_deref() {
            h.push(("Mcp-Name", n));
        }
        self.post(&body, &h)
    }

    /// Sends a request with exactly these headers (plus Host and, when a body
    /// is given, Content-Length) and reads the whole response.
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> HttpResponse {
        self.raw(&request_bytes(&self.addr, method, path, headers, body))
    }

    pub fn raw(&self, bytes: &[u8]) -> HttpResponse {
        exchange(TcpStream::connect(&self.addr).unwrap(), bytes)
    }

    /// The same server, seen from another client address.
    pub fn from(&self, source: &str) -> SourcedClient {
        SourcedClient {
            addr: self.addr.clone(),
            source: source.to_owned(),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    fn parse(raw: &[u8]) -> Self {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP response: {:?}", String::from_utf8_lossy(raw)));
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Self {
            status,
            headers,
            body: raw[split + 4..].to_vec(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn code(&self) -> i64 {
        self.json()["error"]["code"].as_i64().unwrap()
    }
}

pub fn init_request(id: i64, version: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"blackbox","version":"1"}}})
}

pub fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":arguments}})
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`, ...).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// A process's peak resident memory, in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// Each tool's complete result declaration (`coding_tools_mcp::result_schema`:
/// every field, nested objects whole, what a success always carries), which
/// the shorter `outputSchema` of `tools/list` is derived from.
fn output_schemas() -> &'static std::collections::HashMap<String, Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, Value>> =
        std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        coding_tools_mcp::tool_names()
            .map(|t| {
                (
                    t.to_owned(),
                    coding_tools_mcp::result_schema(t).expect("a declared tool"),
                )
            })
            .collect()
    })
}

/// Each tool's `outputSchema` as `tools/list` serves it, read once from a
/// server on an empty workspace (the schemas do not depend on the
/// deployment).
fn served_schemas() -> &'static std::collections::HashMap<String, Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, Value>> =
        std::sync::OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let ws = workspace();
        let mut s = StdioServer::start(ws.path(), &[]);
        s.send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        let list = s.recv();
        list["result"]["tools"]
            .as_array()
            .expect("tools/list answers tools")
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_owned(),
                    t["outputSchema"].clone(),
                )
            })
            .collect()
    })
}

/// Panics unless the `structuredContent` of a `tools/call` answer
/// conforms to the tool's complete result declaration (and so to the
/// `outputSchema` of `tools/list`, which only drops from it).
pub fn assert_conforms(tool: &str, answer: &Value) {
    let Some(structured) = answer.pointer("/result/structuredContent") else {
        return;
    };
    let Some(schema) = output_schemas().get(tool) else {
        return;
    };
    if let Err(e) = conforms(structured, schema, "$") {
        panic!(
            "{tool}: structuredContent does not match its result declaration: {e}\n{structured}"
        );
    }
    if let Some(schema) = served_schemas().get(tool)
        && let Err(e) = conforms(structured, schema, "$")
    {
        panic!("{tool}: structuredContent does not match its outputSchema: {e}\n{structured}");
    }
}

/// The JSON Schema keywords our output schemas use: `type` (one or a
/// list), `properties`, `required`, `items`, `enum`, `const`,
/// `additionalProperties: false`, `anyOf`, and `if`/`then`/`else`.
pub fn conforms(v: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let type_name = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if let Some(t) = schema.get("type") {
        let allowed: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => return Err(format!("{at}: malformed type {t}")),
        };
        let actual = type_name(v);
        let ok = allowed.contains(&actual) || (actual == "integer" && allowed.contains(&"number"));
        if !ok {
            return Err(format!("{at}: {actual} where the schema says {t}"));
        }
    }
    if let Some(Value::Array(choices)) = schema.get("enum")
        && !choices.contains(v)
    {
        return Err(format!("{at}: {v} is not one of {choices:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return Err(format!("{at}: {v} is not {c}"));
    }
    if let Some(Value::Array(choices)) = schema.get("anyOf")
        && !choices.iter().any(|s| conforms(v, s, at).is_ok())
    {
        return Err(format!("{at}: {v} matches none of {choices:?}"));
    }
    if let Value::Object(m) = v {
        if let Some(Value::Array(req)) = schema.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !m.contains_key(r) {
                    return Err(format!("{at}: required {r} is missing"));
                }
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, item) in m {
            match props.and_then(|p| p.get(k)) {
                Some(s) => conforms(item, s, &format!("{at}.{k}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: {k} is not declared"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(s)) = (v, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conforms(item, s, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(cond) = schema.get("if") {
        let branch = if conforms(v, cond, at).is_ok() {
            schema.get("then")
        } else {
            schema.get("else")
        };
        if let Some(b) = branch {
            conforms(v, b, at)?;
        }
    }
    Ok(())
}
