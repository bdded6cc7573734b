//! The command line: help, version, and refusals with exit status 2.

use serde_json::{Value, json};

use super::harness::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let ws = workspace();
    let mut c = command(ws.path(), args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn help_names_the_important_flags() {
    let out = run(&["--help"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--workspace",
        "--shell-env-inherit",
        "--permission-mode",
        "--allow-network",
        "--stdio",
        "--auth-token",
        "--oauth-mode",
        "--enable-view-image",
        "--dangerously-skip-all-permissions",
        "--dangerously-fake-readonly-annotations",
        "--max-wait-secs",
        "--patch-max-file-bytes",
        "CODING_TOOLS_MCP_PATCH_MAX_FILE_BYTES",
        "--patch-max-total-bytes",
        "CODING_TOOLS_MCP_PATCH_MAX_TOTAL_BYTES",
        "--text-json",
        "--auth-mode",
        "--generate-auth-token",
        "--shell-env-include-only",
        "--shell-env-exclude",
        "--shell-env-set",
        "CODING_TOOLS_MCP_AUTH_MODE",
        "CODING_TOOLS_MCP_DANGEROUSLY_SKIP_ALL_PERMISSIONS",
        "CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN",
        "CODING_TOOLS_MCP_SHELL_ENV_SET",
        "CODING_TOOLS_MCP_SHELL_ENV_INCLUDE_ONLY",
        "CODING_TOOLS_MCP_SHELL_ENV_EXCLUDE",
    ] {
        assert!(text.contains(flag), "--help does not name {flag}");
    }
}

/// `--version` names the binary's own crate version, and `serverInfo`
/// (whose version protocol-eras writes down, its own version moving on its
/// own) says the same.
#[test]
fn version() {
    let out = run(&["--version"], &[]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        concat!("coding-tools-mcp ", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        ctm_protocol_eras::SERVER_VERSION,
        env!("CARGO_PKG_VERSION"),
        "set ctm_protocol_eras::SERVER_VERSION to the server's version"
    );
}

#[test]
fn invalid_combinations_exit_2_with_one_line() {
    let cases: &[(&[&str], &[(&str, &str)])] = &[
        (&["--stdio", "--dangerously-fake-readonly-annotations"], &[]),
        (
            &[
                "--permission-mode",
                "dangerous",
                "--dangerously-fake-readonly-annotations",
            ],
            &[],
        ),
        (&["--host", "0.0.0.0"], &[]),
        (
            &[
                "--permission-mode",
                "safe",
                "--dangerously-skip-all-permissions",
            ],
            &[],
        ),
        (
            &["--oauth-mode", "--port", "0"],
            &[("CODING_TOOLS_MCP_OAUTH_TOKEN_SECRET", "not-hex")],
        ),
        (
            &["--oauth-mode", "--port", "0"],
            &[("CODING_TOOLS_MCP_OAUTH_TOKEN_TTL", "0")],
        ),
        (&["--stdio", "--max-wait-secs", "0"], &[]),
        (
            &["--port", "0"],
            &[("CODING_TOOLS_MCP_AUTH_MODE", "bearer")],
        ),
        (
            &["--port", "0", "--host", "0.0.0.0"],
            &[
                ("CODING_TOOLS_MCP_AUTH_MODE", "noauth"),
                ("CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN", "1"),
            ],
        ),
        (
            &["--stdio"],
            &[("CODING_TOOLS_MCP_SHELL_ENV_SET", "[\"A=1\"]")],
        ),
        (
            &["--stdio"],
            &[("CODING_TOOLS_MCP_SHELL_ENV_SET", "{\"A\": true}")],
        ),
        (
            &["--stdio"],
            &[("CODING_TOOLS_MCP_SHELL_ENV_SET", "{\"A=B\": \"1\"}")],
        ),
        (
            &["--stdio"],
            &[(
                "CODING_TOOLS_MCP_DANGEROUSLY_FAKE_READONLY_ANNOTATIONS",
                "1",
            )],
        ),
    ];
    for (args, env) in cases {
        let out = run(args, env);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("coding-tools-mcp: error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
    let missing = tempfile::tempdir().unwrap().path().join("missing");
    let out = std::process::Command::new(BIN)
        .arg("--workspace")
        .arg(&missing)
        .arg("--stdio")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_unknown_auth_mode_is_refused() {
    let out = run(&["--port", "0"], &[("CODING_TOOLS_MCP_AUTH_MODE", "magic")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("bearer") && err.contains("noauth"), "{err}");
}

fn info(env: &[(&str, &str)]) -> Value {
    let ws = workspace();
    let mut c = command(ws.path(), &["--stdio"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut s = StdioServer::start_with(&mut c);
    let r = s.request(&call(1, "server_info", json!({"detail": "full"})));
    r["result"]["structuredContent"].clone()
}

#[test]
fn dangerously_skip_all_permissions_from_the_environment() {
    let on = info(&[("CODING_TOOLS_MCP_DANGEROUSLY_SKIP_ALL_PERMISSIONS", "1")]);
    assert_eq!(on["permission_mode"], "dangerous", "{on}");
    assert_eq!(on["dangerously_skip_all_permissions"], true);
    // As the reference: only 1/true/yes/on turn it on.
    for off in ["0", "false", "2", ""] {
        let v = info(&[("CODING_TOOLS_MCP_DANGEROUSLY_SKIP_ALL_PERMISSIONS", off)]);
        assert_eq!(v["permission_mode"], "safe", "{off:?}: {v}");
    }
}

#[test]
fn auth_mode_and_generated_tokens_over_http() {
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    // oauth: as --oauth-mode.
    let ws = workspace();
    let mut c = command(ws.path(), &["--port", "0"]);
    c.env("CODING_TOOLS_MCP_AUTH_MODE", "OAuth")
        .env("CODING_TOOLS_MCP_OAUTH_PASSWORD", "pw-123456");
    let s = HttpServer::start_with(&mut c);
    let meta = s.raw_request("GET", "/.well-known/oauth-authorization-server", &[], None);
    assert_eq!(meta.status, 200);
    assert_eq!(
        s.post(&ping, &[]).status,
        401,
        "oauth mode asks for a token"
    );
    // bearer with a token: the token is required.
    let mut c = command(ws.path(), &["--port", "0"]);
    c.env("CODING_TOOLS_MCP_AUTH_MODE", "bearer")
        .env("CODING_TOOLS_MCP_AUTH_TOKEN", "tok-42");
    let s = HttpServer::start_with(&mut c);
    assert_eq!(s.post(&ping, &[]).status, 401);
    assert_eq!(
        s.post(&ping, &[("Authorization", "Bearer tok-42")]).status,
        200
    );
    // A short token is guessable enough to stay behind the backoff, which
    // others' failures can fill: the operator is told at start.
    // See: target/attack-session3.md L1
    let warned = std::iter::from_fn(|| s.stderr.next())
        .any(|l| l.contains("fewer than 32") && l.contains("--generate-auth-token"));
    assert!(warned, "{:?}", s.stderr.seen.lock().unwrap());
    // A non-loopback bind without any: a token is generated and printed once.
    let mut c = command(ws.path(), &["--port", "0", "--host", "0.0.0.0"]);
    c.env("CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN", "yes");
    let s = HttpServer::start_with(&mut c);
    let seen = s.stderr.seen.lock().unwrap().clone();
    let token = seen
        .iter()
        .find_map(|l| l.split("Authorization: Bearer ").nth(1))
        .unwrap_or_else(|| panic!("no generated token on stderr: {seen:?}"))
        .trim()
        .to_owned();
    assert!(token.len() >= 40, "{token}");
    assert!(
        !seen.iter().any(|l| l.contains("fewer than 32")),
        "{seen:?}"
    );
    let addr = s.addr.replace("0.0.0.0", "127.0.0.1");
    let local = HttpClient { addr };
    assert_eq!(local.post(&ping, &[]).status, 401);
    let bearer = format!("Bearer {token}");
    assert_eq!(local.post(&ping, &[("Authorization", &bearer)]).status, 200);
    // On loopback nothing is generated (nothing is required there).
    let mut c = command(ws.path(), &["--port", "0"]);
    c.env("CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN", "1");
    let s = HttpServer::start_with(&mut c);
    assert_eq!(s.post(&ping, &[]).status, 200);
}

#[test]
fn shell_env_include_exclude_and_set() {
    let ws = workspace();
    let mut c = command(ws.path(), &["--stdio", "--shell-env-inherit", "all"]);
    c.env("CTM_T_KEEP", "kept")
        .env("CTM_T_DROP_B", "dropped")
        .env("OTHER_T", "other")
        .env("CODING_TOOLS_MCP_SHELL_ENV_INCLUDE_ONLY", "ctm_t_*, PATH")
        .env("CODING_TOOLS_MCP_SHELL_ENV_EXCLUDE", "*_B")
        .env(
            "CODING_TOOLS_MCP_SHELL_ENV_SET",
            r#"{"CTM_T_SET": "chosen", "PAGER": "less", "HOME": "/nowhere", "N": 7}"#,
        );
    let mut s = StdioServer::start_with(&mut c);
    let r = s.request(&call(1, "exec_command", json!({"cmd": "env"})));
    let out = r["result"]["structuredContent"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    let has = |kv: &str| out.lines().any(|l| l == kv);
    assert!(has("CTM_T_KEEP=kept"), "{out}");
    assert!(!out.contains("CTM_T_DROP_B"), "exclude: {out}");
    assert!(!out.contains("OTHER_T"), "include_only: {out}");
    assert!(
        has("CTM_T_SET=chosen") && has("PAGER=less") && has("N=7"),
        "{out}"
    );
    assert!(!has("HOME=/nowhere"), "HOME stays private: {out}");
    let r = s.request(&call(
        2,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let env = &r["result"]["structuredContent"]["environment"];
    assert_eq!(env["include_only"], json!(["ctm_t_*", "PATH"]), "{env}");
    assert_eq!(env["exclude"], json!(["*_B"]));
    assert_eq!(env["set"], json!(["CTM_T_SET", "HOME", "N", "PAGER"]));
    assert!(!env.to_string().contains("chosen"), "values are not shown");
    let r = s.request(&call(3, "server_info", json!({"detail": "full"})));
    let info = &r["result"]["structuredContent"];
    assert_eq!(info["shell_env_include_only"], json!(["ctm_t_*", "PATH"]));
    assert_eq!(info["shell_env_exclude"], json!(["*_B"]));
}

/// `--shell-env-inherit all` passes the server's environment on, minus
/// what looks secret by name or by value (the names the attacker's review
/// saw reach commands, and credentials by their shape).
#[test]
fn secrets_in_the_environment_never_reach_commands() {
    let ws = workspace();
    let mut c = command(ws.path(), &["--stdio", "--shell-env-inherit", "all"]);
    let secrets = [
        ("DB_PASS", "hunter2hunter2"),
        ("SMTP_PASS", "smtp-secret-1"),
        ("GPG_PASSPHRASE", "correct horse"),
        (
            "SLACK_WEBHOOK_URL",
            "https://hooks.slack.com/services/T00000000/B00000000/pdFZKVeTuE8sk7oOcBrzbqgy",
        ),
        ("SSL_PRIVKEY", "/etc/ssl/private/k.pem"),
        ("STRIPE_SK", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        ("BEARER", "abc.def.ghi"),
        ("PAYMENTS", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
        (
            "NOTIFY",
            "https://discord.com/api/webhooks/123456789012345678/aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        ),
    ];
    for (k, v) in secrets {
        c.env(k, v);
    }
    c.env("CTM_T_HARMLESS", "visible");
    let mut s = StdioServer::start_with(&mut c);
    let r = s.request(&call(1, "exec_command", json!({"cmd": "env"})));
    let out = r["result"]["structuredContent"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned();
    assert!(out.lines().any(|l| l == "CTM_T_HARMLESS=visible"), "{out}");
    for (k, v) in secrets {
        assert!(
            !out.contains(k) && !out.contains(v),
            "{k} reached the command: {out}"
        );
    }
}
