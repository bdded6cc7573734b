//! The command line: help, version, and refusals with exit status 2.

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
        "--text-json",
    ] {
        assert!(text.contains(flag), "--help does not name {flag}");
    }
}

#[test]
fn version() {
    let out = run(&["--version"], &[]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "coding-tools-mcp 0.3.0"
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
