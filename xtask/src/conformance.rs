//! `cargo xtask conformance`: the contract vectors of
//! `tests/conformance/vectors.json` against any server, over stdio
//! (`--server-cmd 'CMD {ws}'`) and HTTP (`--url URL`); and, for CI, the
//! official conformance suite against our binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::peer::Peer;
use crate::root;

/// Scenarios of the official suite that apply to a tools-only server; the
/// rest need the suite's own test tools, prompts or resources (see
/// docs/conformance.md).
const SERVER_SCENARIOS: [&str; 7] = [
    "server-initialize",
    "ping",
    "tools-list",
    "server-stateless",
    "dns-rebinding-protection",
    "caching",
    "http-header-validation",
];

/// Starts the binary on HTTP (port 0) and returns it with its `/mcp` URL.
pub fn start_http(
    binary: &Path,
    ws: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Result<(Child, String)> {
    let mut cmd = Command::new(binary);
    cmd.arg("--workspace")
        .arg(ws)
        .args(["--port", "0"])
        .args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .context("the server exited before announcing its address")??;
        if let Some(rest) = line.split("serving MCP on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok((child, url))
}

/// The official suite (scenarios above, with the expected-failures
/// baseline) and its authorization-server metadata check.
pub fn official_suite(node: &Path, node_dir: &Path, binary: &Path) -> Result<()> {
    server_scenarios(node, node_dir, binary, &[])?;
    let cli = node_dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let ws = tempfile::tempdir()?;
    authorization_scenario(node, &cli, binary, ws.path())
}

/// The official suite's server scenarios against the binary started with
/// `args` (`--catalog 0.5`: the same expected failures).
pub fn server_scenarios(node: &Path, node_dir: &Path, binary: &Path, args: &[&str]) -> Result<()> {
    let cli = node_dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let baseline = root().join("tests/conformance/expected-failures.yaml");
    let ws = tempfile::tempdir()?;
    let (mut server, url) = start_http(binary, ws.path(), args, &[])?;
    let mut result = Ok(());
    for scenario in SERVER_SCENARIOS {
        let r = run_suite(
            scenario,
            Command::new(node)
                .arg(&cli)
                .args([
                    "server",
                    "--url",
                    &url,
                    "--scenario",
                    scenario,
                    "--expected-failures",
                ])
                .arg(&baseline),
        );
        if r.is_err() && result.is_ok() {
            result = r;
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The authorization-server metadata scenario against `--oauth-mode`.
fn authorization_scenario(node: &Path, cli: &Path, binary: &Path, ws: &Path) -> Result<()> {
    let (mut oauth, url) = start_http(
        binary,
        ws,
        &["--oauth-mode"],
        &[("CODING_TOOLS_MCP_OAUTH_PASSWORD", "ci-password")],
    )?;
    let issuer = url.trim_end_matches("/mcp").to_owned();
    let r = run_suite(
        "authorization-server-metadata-endpoint",
        Command::new(node).arg(cli).args([
            "authorization",
            "--url",
            &issuer,
            "--scenario",
            "authorization-server-metadata-endpoint",
        ]),
    );
    let _ = oauth.kill();
    let _ = oauth.wait();
    r
}

/// Runs one scenario of the official suite. It reports every check, in
/// colour, with the expected failures of the baseline as red `FAILURE`
/// lines; so a passing run is summed up in one line (its counts, and how
/// many failures the baseline expects), and only a failing run shows the
/// suite's whole report.
fn run_suite(scenario: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let out = crate::plain_output(cmd)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let raw =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let text = crate::strip_ansi(&raw);
    if !out.status.success() {
        eprint!("{}", if crate::to_terminal() { &raw } else { &text });
        bail!(
            "official conformance scenario {scenario} failed: {}",
            out.status
        );
    }
    let counts = text
        .lines()
        .find_map(|l| l.strip_prefix("Passed: "))
        .unwrap_or("passed");
    let expected = text.lines().filter(|l| l.starts_with("  ~ ")).count();
    if expected > 0 {
        eprintln!(
            "official conformance {scenario}: {counts} ({expected} expected by tests/conformance/expected-failures.yaml)"
        );
    } else {
        eprintln!("official conformance {scenario}: {counts}");
    }
    Ok(())
}

/// One POST on a fresh connection; the status and the JSON body, if any.
pub fn http_post(
    url: &str,
    body: &str,
    headers: &[(String, String)],
) -> Result<(u16, Option<Value>)> {
    parse_response(&http_post_raw(url, body, headers)?)
}

/// One POST on a fresh connection; the raw response bytes.
pub fn http_post_raw(url: &str, body: &str, headers: &[(String, String)]) -> Result<Vec<u8>> {
    let rest = url.strip_prefix("http://").context("only http:// URLs")?;
    let (hostport, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut s = TcpStream::connect(hostport)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    let mut has_ct = false;
    for (k, v) in headers {
        has_ct |= k.eq_ignore_ascii_case("content-type");
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_ct {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Ok(out)
}

/// One GET on a fresh connection: the status and the body's bytes.
pub fn http_get(url: &str, headers: &[(String, String)]) -> Result<(u16, Vec<u8>)> {
    let rest = url.strip_prefix("http://").context("only http:// URLs")?;
    let (hostport, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut s = TcpStream::connect(hostport)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut req = format!("GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no HTTP response")?;
    let head = String::from_utf8_lossy(&out[..split]);
    let status = head.split(' ').nth(1).context("no status")?.parse()?;
    Ok((status, out[split + 4..].to_vec()))
}

/// The status and JSON body (if any) of a raw HTTP response.
pub fn parse_response(out: &[u8]) -> Result<(u16, Option<Value>)> {
    let text = String::from_utf8_lossy(out);
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP response")?;
    let status = head.split(' ').nth(1).context("no status")?.parse()?;
    let body = body.trim();
    Ok((
        status,
        if body.is_empty() {
            None
        } else {
            serde_json::from_str(body).ok()
        },
    ))
}

/// `expected` is contained in `actual` (objects by key, everything else equal).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| contains(av, v))),
        _ => actual == expected,
    }
}

fn check(v: &Value, status: Option<u16>, body: &Option<Value>) -> Result<(), String> {
    let expect = &v["expect"];
    if let (Some(want), Some(got)) = (expect.get("status").and_then(Value::as_u64), status)
        && u64::from(got) != want
    {
        return Err(format!("status {got}, expected {want}"));
    }
    if expect["no_body"] == Value::Bool(true) {
        return if body.is_none() {
            Ok(())
        } else {
            Err(format!("expected no answer, got {body:?}"))
        };
    }
    let Some(body) = body else {
        return Err("no answer".into());
    };
    if let Some(code) = expect.get("error_code")
        && body["error"]["code"] != *code
    {
        return Err(format!(
            "error code {}, expected {code}",
            body["error"]["code"]
        ));
    }
    if expect["id_absent"] == Value::Bool(true) && body.get("id").is_some() {
        return Err("id present".into());
    }
    if let Some(partial) = expect.get("result")
        && !contains(&body["result"], partial)
    {
        return Err(format!(
            "result {} does not contain {partial}",
            body["result"]
        ));
    }
    if let Some(absent) = expect.get("result_absent").and_then(Value::as_array) {
        for k in absent.iter().filter_map(Value::as_str) {
            if body["result"].get(k).is_some() {
                return Err(format!("result has {k}"));
            }
        }
    }
    if let Some(n) = expect.get("tool_count").and_then(Value::as_u64)
        && body["result"]["tools"].as_array().map(Vec::len) != Some(n as usize)
    {
        return Err(format!("expected {n} tools"));
    }
    Ok(())
}

/// Runs the vectors; prints `N passed, M failed`.
pub fn run(args: &[String]) -> Result<()> {
    let mut server_cmd = None;
    let mut url = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--server-cmd" => {
                server_cmd = Some(it.next().context("--server-cmd TEMPLATE")?.clone())
            }
            "--url" => url = Some(it.next().context("--url URL")?.clone()),
            other => bail!("unknown argument {other}"),
        }
    }
    if server_cmd.is_none() && url.is_none() {
        bail!("give --server-cmd 'CMD {{ws}}' (stdio) and/or --url URL (HTTP)");
    }
    let vectors: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(
        root().join("tests/conformance/vectors.json"),
    )?)?;
    let (mut passed, mut failed) = (0, 0);
    let (mut over_stdio, mut over_http) = (0, 0);
    let mut report = |name: &str, transport: &str, r: Result<(), String>| match r {
        Ok(()) => passed += 1,
        Err(e) => {
            failed += 1;
            println!("FAIL [{transport}] {name}: {e}");
        }
    };
    let body_of = |v: &Value| match &v["request"] {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    if let Some(tpl) = &server_cmd {
        let ws = tempfile::tempdir()?;
        std::fs::write(ws.path().join("AGENTS.md"), "# Rules\nVector workspace.\n")?;
        let words = crate::peer::template_words(tpl, ws.path())?;
        let mut s = Peer::spawn(Command::new(&words[0]).args(&words[1..]))?;
        for (i, v) in vectors
            .iter()
            .filter(|v| v["transport"] != "http")
            .enumerate()
        {
            over_stdio += 1;
            let name = v["name"].as_str().unwrap_or("?");
            s.send(&body_of(v))?;
            // A sentinel ping shows whether the vector itself was answered:
            // answers may come in any order, but the server reads lines in
            // order, so anything the vector provokes without an id is
            // written before the sentinel's answer.
            let sentinel = Value::String(format!("sentinel-{i}"));
            s.send(
                &serde_json::json!({"jsonrpc": "2.0", "id": sentinel, "method": "ping"})
                    .to_string(),
            )?;
            let want_id = v["request"].get("id").filter(|id| !id.is_null()).cloned();
            let mut answers = Vec::new();
            let mut seen_sentinel = false;
            while !seen_sentinel
                || want_id
                    .as_ref()
                    .is_some_and(|id| !answers.iter().any(|a: &Value| a["id"] == *id))
            {
                if want_id.is_some() && v["expect"]["no_body"] == Value::Bool(true) && seen_sentinel
                {
                    break;
                }
                let m = s.recv()?;
                if m["id"] == sentinel {
                    seen_sentinel = true;
                } else {
                    answers.push(m);
                }
            }
            if answers.len() > 1 {
                report(
                    name,
                    "stdio",
                    Err(format!("more than one answer: {answers:?}")),
                );
                continue;
            }
            report(name, "stdio", check(v, None, &answers.pop()));
        }
    }
    if let Some(url) = &url {
        for v in vectors.iter().filter(|v| v["transport"] != "stdio") {
            over_http += 1;
            let name = v["name"].as_str().unwrap_or("?");
            let headers: Vec<(String, String)> = v["headers"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .flat_map(|(k, val)| match val {
                            Value::Array(items) => items
                                .iter()
                                .map(|i| (k.clone(), i.as_str().unwrap_or_default().to_owned()))
                                .collect::<Vec<_>>(),
                            other => {
                                vec![(k.clone(), other.as_str().unwrap_or_default().to_owned())]
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let r = http_post(url, &body_of(v), &headers)
                .map_err(|e| e.to_string())
                .and_then(|(st, body)| check(v, Some(st), &body));
            report(name, "http", r);
        }
    }
    println!(
        "conformance vectors: {} vectors, {} runs ({over_stdio} over stdio, {over_http} over HTTP): {passed} passed, {failed} failed",
        vectors.len(),
        over_stdio + over_http
    );
    if failed > 0 {
        bail!("{failed} vector(s) failed");
    }
    Ok(())
}
