//! The catalog and the tools this build serves, through the real binary.

use serde_json::{Value, json};

use super::harness::*;

fn tools_list(s: &mut StdioServer) -> Vec<Value> {
    let r = s.request(&json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    r["result"]["tools"].as_array().unwrap().clone()
}

/// `tools/list` is pinned by `tests/snapshots/tools_list.json`. After a
/// deliberate catalog change, regenerate it with `UPDATE_SNAPSHOTS=1`.
#[test]
fn tools_list_matches_the_snapshot() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let tools = Value::Array(tools_list(&mut s));
    let path = repo_root().join("tests/snapshots/tools_list.json");
    let rendered = serde_json::to_string_pretty(&tools).unwrap() + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let expected =
        std::fs::read_to_string(&path).expect("snapshot missing: run with UPDATE_SNAPSHOTS=1");
    assert_eq!(
        rendered,
        expected,
        "tools/list drifted from {}",
        path.display()
    );
    // Deterministic across requests.
    assert_eq!(Value::Array(tools_list(&mut s)), tools);
}

#[test]
fn every_schema_is_closed_and_tool_names_are_valid() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    for t in tools_list(&mut s) {
        let name = t["name"].as_str().unwrap();
        assert!(
            name.len() <= 128
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        );
        assert_eq!(t["inputSchema"]["type"], "object");
        assert_eq!(t["inputSchema"]["additionalProperties"], false, "{name}");
        assert_eq!(t["annotations"]["title"], t["title"]);
    }
}

#[test]
fn view_image_gate_removes_only_view_image() {
    let ws = workspace();
    let mut s = StdioServer::start_with(
        command(ws.path(), &["--stdio"]).env("CODING_TOOLS_MCP_ENABLE_VIEW_IMAGE", "0"),
    );
    let names: Vec<String> = tools_list(&mut s)
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 17);
    assert!(!names.contains(&"view_image".to_owned()));
    let r = s.request(&call(2, "view_image", json!({"path": "a.png"})));
    assert_eq!(r["error"]["code"], -32602);
    let r = s.request(&call(3, "server_info", json!({"detail": "full"})));
    assert_eq!(r["result"]["structuredContent"]["tool_count"], 17);
}

#[test]
fn fake_readonly_annotations_rewrite_only_tools_list() {
    let ws = workspace();
    let mut s = StdioServer::start(
        ws.path(),
        &[
            "--permission-mode",
            "dangerous",
            "--dangerously-fake-readonly-annotations",
        ],
    );
    for t in tools_list(&mut s) {
        assert_eq!(t["annotations"]["readOnlyHint"], true);
        assert_eq!(t["annotations"]["destructiveHint"], false);
    }
    let info = s.request(&call(2, "server_info", json!({"detail": "full"})))["result"]["structuredContent"].clone();
    assert_eq!(info["annotations"]["apply_patch"]["readOnlyHint"], false);
    assert_eq!(info["annotations"]["exec_command"]["destructiveHint"], true);
    assert_eq!(info["annotation_override"]["mode"], "fake_readonly");
    assert!(
        info["annotation_override"]["rewritten_tools"]
            .as_array()
            .unwrap()
            .contains(&json!("apply_patch"))
    );
}

#[test]
fn numeric_tolerance_through_the_wire() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &["--permission-mode", "dangerous"]);
    let base =
        json!({"tool_name":"exec_command","permission":"network","reason":"tests","arguments":{}});
    let with_ttl = |ttl: &str| {
        let mut text = base.to_string();
        text.insert_str(text.len() - 1, &format!(",\"ttl_seconds\":{ttl}"));
        text
    };
    for ok in ["300", "300.0", "3600.0", "1"] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"request_permissions","arguments":{}}}}}"#,
            with_ttl(ok)
        );
        s.send_raw(&line);
        let r = s.recv();
        assert_eq!(r["result"]["isError"], false, "{ok}: {r}");
    }
    for bad in [
        "1.5",
        "\"300\"",
        "-1",
        "0",
        "3601",
        "true",
        "9007199254740992",
    ] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"request_permissions","arguments":{}}}}}"#,
            with_ttl(bad)
        );
        s.send_raw(&line);
        let r = s.recv();
        assert_eq!(r["result"]["isError"], true, "{bad}");
        assert_eq!(
            r["result"]["structuredContent"]["error"]["code"], "INVALID_ARGUMENT",
            "{bad}"
        );
        assert_eq!(
            r["result"]["structuredContent"]["error"]["category"],
            "validation"
        );
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Retryable: no.")
        );
    }
    // 2^53-1 as a float decodes exactly (it is out of range here, and the message says which value it saw).
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"request_permissions","arguments":{}}}}}"#,
        with_ttl("9007199254740991.0")
    );
    s.send_raw(&line);
    let msg = s.recv()["result"]["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("got 9007199254740991"), "{msg}");
    // Unknown argument names are refused by name.
    let r = s.request(&call(5, "server_info", json!({"verbose": true})));
    let e = &r["result"]["structuredContent"]["error"];
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert_eq!(e["details"]["unknown"], json!(["verbose"]));
}

#[test]
fn request_permissions_per_mode() {
    let ws = workspace();
    let args = json!({"tool_name":"exec_command","permission":"network","reason":"fetch deps","arguments":{"cmd":"curl x"}});
    for (mode, expect_error) in [("safe", true), ("trusted", true), ("dangerous", false)] {
        let mut s = StdioServer::start(ws.path(), &["--permission-mode", mode]);
        let r = s.request(&call(1, "request_permissions", args.clone()))["result"].clone();
        assert_eq!(r["isError"], expect_error, "{mode}");
        if expect_error {
            let e = &r["structuredContent"]["error"];
            assert_eq!(e["code"], "ELICITATION_UNSUPPORTED");
            assert_eq!(e["category"], "permission");
            assert_eq!(e["details"]["permission_mode"], mode);
            // The reference's names: nothing granted, and what was asked.
            let v = &r["structuredContent"];
            assert_eq!(
                (
                    v["status"].clone(),
                    v["grant_id"].clone(),
                    v["expires_at"].clone()
                ),
                (json!("unsupported"), Value::Null, Value::Null),
                "{r}"
            );
            assert_eq!(e["details"]["requested"], args, "{r}");
        } else {
            let v = &r["structuredContent"];
            assert_eq!(v["policy"], "auto_grant");
            assert_eq!(
                (
                    v["status"].clone(),
                    v["grant_id"].clone(),
                    v["expires_at"].clone()
                ),
                (
                    json!("granted"),
                    json!("dangerously-skip-all-permissions"),
                    Value::Null
                ),
                "{r}"
            );
        }
    }
}

#[test]
fn server_info_reports_the_deployment() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::fs::write(ws.path().join("sub/CLAUDE.md"), "nested").unwrap();
    let mut s = StdioServer::start(
        ws.path(),
        &["--allow-network", "--shell-env-inherit", "none"],
    );
    let r = s.request(&call(1, "server_info", json!({"detail": "full"})))["result"].clone();
    let i = &r["structuredContent"];
    assert_eq!(i["ok"], true);
    assert_eq!(
        i["supported_protocol_versions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18"])
    );
    assert_eq!(
        i["workspace"],
        ws.path().canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(i["permission_mode"], "safe");
    assert_eq!(i["network_allowed"], true);
    assert_eq!(i["exec_policy"]["shell_expansion"], "blocked");
    assert_eq!(i["shell_env_inherit"], "none");
    assert_eq!(i["auth"]["enabled"], false);
    assert_eq!(i["annotation_override"], Value::Null);
    assert_eq!(i["output_retention"]["head_bytes_per_stream"], 65536);
    // The reference's list of paths; what was read of each is beside it.
    assert_eq!(
        i["project_context"]["root_instruction_files"],
        json!(["AGENTS.md"])
    );
    assert_eq!(
        i["project_context"]["root_instruction_file_details"][0]["path"],
        "AGENTS.md"
    );
    assert_eq!(
        i["project_context"]["nested_instruction_files"],
        json!(["sub/CLAUDE.md"])
    );
    // Issue 19: the reference's top-level paths, no `runtime` copy of them.
    assert!(std::path::Path::new(i["home"].as_str().unwrap()).is_dir());
    assert!(i.get("runtime").is_none(), "{i}");
    assert_eq!(i["sandbox"]["details"], "check_exec_environment");
    assert_eq!(i["telemetry"], "none");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("coding-tools-mcp 0.3.0"));
    assert!(
        !text.trim_start().starts_with('{'),
        "content must not be a JSON dump"
    );
}

/// server_info and check_exec_environment carry the reference's top-level
/// fields (0.3.0, compared side by side): where commands run, Landlock, and
/// the global temp write policy.
#[test]
fn exec_environment_fields_are_the_references() {
    let ws = workspace();
    let root = ws.path().canonicalize().unwrap();
    for (mode, tmp_write) in [("safe", "blocked"), ("dangerous", "allowed")] {
        let mut s = StdioServer::start(ws.path(), &["--permission-mode", mode]);
        let i =
            s.request(&call(1, "server_info", json!({"detail": "full"})))["result"]["structuredContent"].clone();
        let c = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ))["result"]["structuredContent"]
            .clone();
        let runtime = std::path::PathBuf::from(i["runtime_dir"].as_str().unwrap());
        assert!(runtime.is_dir(), "{i}");
        for v in [&i, &c] {
            assert_eq!(v["workspace"], root.to_str().unwrap());
            assert_eq!(v["permission_mode"], mode);
            assert_eq!(v["runtime_dir"], runtime.to_str().unwrap());
            for (k, sub) in [("home", "home"), ("tmpdir", "tmp"), ("cache_dir", "cache")] {
                assert_eq!(v[k], runtime.join(sub).to_str().unwrap(), "{k}");
            }
            assert_eq!(v["network_allowed"], mode == "dangerous");
        }
        let ll = &i["landlock"];
        assert_eq!(
            ll.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["available", "abi_version", "enabled"]
        );
        let enabled = ll["available"] == true && mode == "safe";
        assert_eq!(ll["enabled"], enabled, "{ll}");
        assert_eq!(c["landlock_enabled"], enabled);
        assert_eq!(c["landlock_abi"], ll["abi_version"]);
        if ll["available"] == false {
            assert_eq!(ll["abi_version"], Value::Null);
        }
        assert_eq!(i["exec_policy"]["global_tmp_write"], tmp_write);
        assert_eq!(c["global_tmp_write"], tmp_write);
        assert!(c["warnings"].is_array());
        // Safe mode without the namespace tier also warns that the git seal
        // is not there (the issue "Nothing a command writes may run later").
        assert_eq!(
            c["warnings"].as_array().unwrap().is_empty(),
            mode == "safe" && ll["available"] == true && c["sandbox"]["tier"] == "namespace",
            "{c}"
        );
    }
}

#[test]
fn text_json_mode_is_opt_in() {
    let ws = workspace();
    let mut plain = StdioServer::start(ws.path(), &[]);
    let r = plain.request(&call(1, "server_info", json!({"detail": "full"})));
    assert_eq!(r["result"]["content"].as_array().unwrap().len(), 1);
    let mut tj = StdioServer::start(ws.path(), &["--text-json"]);
    let r = tj.request(&call(1, "server_info", json!({"detail": "full"})));
    let content = r["result"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    let dump = content[1]["text"]
        .as_str()
        .unwrap()
        .strip_prefix("structuredContent: ")
        .unwrap();
    let parsed: Value = serde_json::from_str(dump).unwrap();
    assert_eq!(parsed, r["result"]["structuredContent"]);
    assert_eq!(parsed["text_json"], true);
}

fn instructions_of(ws: &std::path::Path) -> (String, Value) {
    let mut s = StdioServer::start(ws, &[]);
    let init = s.request(&init_request(0, "2025-06-18"));
    let text = init["result"]["instructions"].as_str().unwrap().to_owned();
    let info = s.request(&call(1, "server_info", json!({"detail": "full"})));
    (text, info["result"]["structuredContent"].clone())
}

#[test]
fn instructions_stay_within_budget_with_preamble_and_index() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("AGENTS.md"), "rule\n".repeat(6_000)).unwrap();
    std::fs::write(ws.path().join("CLAUDE.md"), "more\n".repeat(6_000)).unwrap();
    for i in 0..60 {
        let dir = ws
            .path()
            .join(format!("module-with-a-rather-long-name-{i:03}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("AGENTS.md"), "nested\n").unwrap();
    }
    let (text, info) = instructions_of(ws.path());
    assert!(text.len() <= 20 * 1024, "{} bytes", text.len());
    assert!(
        text.contains("Coding tools confined to the workspace"),
        "{}",
        &text[..200]
    );
    assert!(text.contains("Project instructions from AGENTS.md"));
    assert!(text.contains("module-with-a-rather-long-name-000/AGENTS.md"));
    assert!(text.contains("more"), "the index says what it left out");
    let ctx = &info["project_context"];
    assert_eq!(ctx["instructions_bytes"], text.len(), "{ctx}");
}

#[test]
fn non_utf8_instructions_report_byte_counts_that_add_up() {
    let ws = tempfile::tempdir().unwrap();
    let mut body = b"# Rules\ncaf\xe9 au lait\n".to_vec();
    body.extend(std::iter::repeat_n(0xffu8, 25_000));
    std::fs::write(ws.path().join("AGENTS.md"), &body).unwrap();
    let (text, info) = instructions_of(ws.path());
    assert!(text.len() <= 20 * 1024, "{} bytes", text.len());
    assert!(text.contains("caf\u{FFFD} au lait"), "{}", &text[..400]);
    assert!(text.contains("not valid UTF-8"));
    let file = &info["project_context"]["root_instruction_file_details"][0];
    assert_eq!(file["size_bytes"], body.len(), "{file}");
    let included = file["included_bytes"].as_u64().unwrap();
    assert!(included < body.len() as u64);
    assert!(
        text.contains(&format!(
            "AGENTS.md is {} bytes; the first {included} are shown",
            body.len()
        )),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
    // What was quoted stands for exactly `included` bytes of the file.
    let quoted = text
        .split("Project instructions from AGENTS.md:\n")
        .nth(1)
        .unwrap();
    let quoted = quoted
        .split("\n[AGENTS.md is not valid UTF-8")
        .next()
        .unwrap();
    let replaced = quoted.matches('\u{FFFD}').count();
    assert_eq!(
        quoted.len() - 2 * replaced,
        usize::try_from(included).unwrap()
    );
}

#[test]
fn server_info_text_names_the_auth_mode() {
    let ws = workspace();
    let mut c = command(
        ws.path(),
        &["--port", "0", "--oauth-mode", "--auth-token", "tok-7"],
    );
    c.env("CODING_TOOLS_MCP_OAUTH_PASSWORD", "pw-123456");
    let s = HttpServer::start_with(&mut c);
    let r = s
        .post(
            &call(1, "server_info", json!({"detail": "full"})),
            &[("Authorization", "Bearer tok-7")],
        )
        .json();
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("Auth: bearer + OAuth"), "{text}");
    let (text, _) = {
        let mut s = StdioServer::start(ws.path(), &[]);
        let r = s.request(&call(1, "server_info", json!({"detail": "full"})));
        (
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned(),
            (),
        )
    };
    assert!(text.contains("Auth: none"), "{text}");
}

/// The schema check every stdio `tools/call` in this suite goes through
/// refuses what does not match.
#[test]
fn the_output_schema_check_can_fail() {
    let schema = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "n": {"type": ["integer", "null"]},
            "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}},
            "either": {"anyOf": [{"type": "string"}, {"type": "object", "required": ["a"]}, {"type": "null"}]},
        },
        "required": ["ok"],
        "if": {"properties": {"ok": {"const": true}}},
        "then": {"required": ["n"]},
        "else": {"required": ["error"]},
    });
    assert!(
        conforms(
            &json!({"ok": true, "n": 1, "items": [{"k": "a"}]}),
            &schema,
            "$"
        )
        .is_ok()
    );
    assert!(conforms(&json!({"ok": true, "n": null}), &schema, "$").is_ok());
    assert!(conforms(&json!({"ok": false, "error": {}}), &schema, "$").is_ok());
    assert!(conforms(&json!({"ok": false}), &schema, "$").is_err());
    for either in [json!("s"), json!({"a": 1}), json!(null)] {
        let v = json!({"ok": true, "n": 1, "either": either});
        assert!(conforms(&v, &schema, "$").is_ok(), "{v}");
    }
    for bad in [
        json!({"ok": true}),
        json!({"ok": true, "n": "1"}),
        json!({"ok": true, "n": 1.5}),
        json!({"ok": true, "n": 1, "items": [{"k": 1}]}),
        json!({"ok": true, "n": 1, "items": [{}]}),
        json!({"n": 1}),
        json!({"ok": true, "n": 1, "either": 1}),
        json!({"ok": true, "n": 1, "either": {"b": 1}}),
    ] {
        assert!(conforms(&bad, &schema, "$").is_err(), "{bad}");
    }
}

/// A workspace whose path is not UTF-8 is still described (lossily), not
/// a panic and a missing answer.
#[test]
fn a_workspace_path_that_is_not_utf8_is_reported_lossily() {
    use std::os::unix::ffi::OsStrExt;
    let parent = tempfile::tempdir().unwrap();
    let ws = parent.path().join(std::ffi::OsStr::from_bytes(b"ws-\xff"));
    std::fs::create_dir(&ws).unwrap();
    let mut s = StdioServer::start(&ws, &[]);
    for (id, tool) in [(1, "server_info"), (2, "check_exec_environment")] {
        let r = s.request(&call(id, tool, json!({})));
        let sc = &r["result"]["structuredContent"];
        assert_eq!(sc["ok"], true, "{r}");
        let w = sc["workspace"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert!(w.ends_with("ws-\u{fffd}"), "{r}");
    }
}

/// Issue 32: `server_info` and `check_exec_environment` answer a summary by
/// default — every field the reference 0.3.0 sends, and ours that say
/// something new — and the full report with `detail: "full"`.
#[test]
fn info_tools_answer_a_summary_and_the_full_report_on_request() {
    let ws = workspace();
    let mut s = StdioServer::start(ws.path(), &[]);
    let compact = |v: &Value| v.to_string().len();
    let info = sc(&s.request(&call(1, "server_info", json!({}))));
    // The reference's fields, each of them (drop-in parity).
    for key in [
        "ok",
        "server",
        "title",
        "version",
        "supported_protocol_versions",
        "workspace",
        "permission_mode",
        "network_allowed",
        "runtime_dir",
        "home",
        "tmpdir",
        "cache_dir",
        "auth_enabled",
        "dangerously_skip_all_permissions",
        "annotation_override",
        "landlock",
        "exec_policy",
        "shell_env_inherit",
        "shell_env_include_only",
        "shell_env_exclude",
        "output_retention",
        "endpoint_path",
        "project_context",
        "tools",
        "tool_count",
    ] {
        assert!(info.get(key).is_some(), "server_info lacks {key}: {info}");
    }
    assert_eq!(info["detail"], "summary");
    for key in ["annotations", "catalog_size", "auth", "limits", "telemetry"] {
        assert!(info.get(key).is_none(), "{key} in the summary: {info}");
    }
    assert!(compact(&info) < 2_000, "{} B: {info}", compact(&info));
    let full = sc(&s.request(&call(2, "server_info", json!({"detail": "full"}))));
    assert_eq!(full["detail"], "full");
    assert_eq!(full["annotations"]["exec_command"]["destructiveHint"], true);
    assert!(full["limits"].is_object(), "{full}");
    assert_eq!(full["telemetry"], "none");

    let env = sc(&s.request(&call(3, "check_exec_environment", json!({}))));
    for key in [
        "ok",
        "workspace",
        "permission_mode",
        "network_allowed",
        "runtime_dir",
        "home",
        "tmpdir",
        "cache_dir",
        "landlock_enabled",
        "landlock_abi",
        "global_tmp_write",
        "warnings",
    ] {
        assert!(
            env.get(key).is_some(),
            "check_exec_environment lacks {key}: {env}"
        );
    }
    assert_eq!(env["gates"]["network"], "blocked");
    assert!(env["sandbox"]["tier"].is_string(), "{env}");
    for key in ["read_roots", "protections", "toolchain_env", "not_confined"] {
        assert!(
            env["sandbox"].get(key).is_none(),
            "{key} in the summary: {env}"
        );
    }
    for key in ["environment", "limits", "landlock", "runtime"] {
        assert!(env.get(key).is_none(), "{key} in the summary: {env}");
    }
    assert!(compact(&env) < 1_200, "{} B: {env}", compact(&env));
    let full = sc(&s.request(&call(
        4,
        "check_exec_environment",
        json!({"detail": "full"}),
    )));
    assert!(full["sandbox"]["protections"].is_object(), "{full}");
    assert!(full["sandbox"]["not_confined"].is_array(), "{full}");
    assert!(
        full["environment"]["non_interactive_defaults"].is_array(),
        "{full}"
    );
    assert!(full["limits"].is_object(), "{full}");

    let bad = s.request(&call(5, "server_info", json!({"detail": "everything"})));
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert_eq!(sc(&bad)["error"]["code"], "INVALID_ARGUMENT", "{bad}");
}

/// Issue 32: an answer carries no field that only restates another (the
/// model of Claude Code and Codex reads `structuredContent` whole), and
/// still every fact: a command's id, status, exit code and output; where
/// output was left out, the refs to page it.
#[test]
fn answers_carry_no_field_that_restates_another() {
    let ws = workspace();
    std::fs::write(ws.path().join("a.txt"), "one\ntwo\n").unwrap();
    let mut s = StdioServer::start(ws.path(), &[]);
    let run = sc(&s.request(&call(1, "exec_command", json!({"cmd": "echo hi; exit 3"}))));
    assert_eq!(run["exit_code"], 3, "{run}");
    assert_eq!(run["stdout"], "hi\n", "{run}");
    assert!(
        run["command_id"].is_string() && run["status"] == "exited",
        "{run}"
    );
    for key in [
        "output_refs",
        "verbosity",
        "tty",
        "background_running",
        "warnings",
    ] {
        assert!(run.get(key).is_none(), "{key} restates or is empty: {run}");
    }
    let cut = sc(&s.request(&call(
        2,
        "exec_command",
        json!({"cmd": "seq 1 3000", "max_output_bytes": 1000}),
    )));
    let id = cut["command_id"].as_str().unwrap();
    assert_eq!(
        cut["output_refs"]["stdout"],
        format!("command:{id}:stdout"),
        "{cut}"
    );
    assert_eq!(cut["next_action"]["tool"], "read_output", "{cut}");

    let read = sc(&s.request(&call(3, "read_file", json!({"path": "a.txt"}))));
    assert_eq!(read["content"], "one\ntwo\n");
    assert_eq!(read["next_start_line"], Value::Null);
    for key in ["lines_returned", "has_more", "total_lines_exact"] {
        assert!(read.get(key).is_none(), "{key}: {read}");
    }
    let found = sc(&s.request(&call(4, "search_text", json!({"query": "two"}))));
    assert_eq!(found["total_matches"], 1);
    for key in ["match_count", "regex", "case_sensitive", "limit"] {
        assert!(found.get(key).is_none(), "{key}: {found}");
    }
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+2\n*** End Patch";
    let applied = sc(&s.request(&call(5, "apply_patch", json!({"patch": patch}))));
    assert_eq!(applied["additions"], 1, "{applied}");
    assert_eq!(
        applied["affected_files"],
        json!([{"path": "a.txt", "operation": "update"}])
    );
    let file = &applied["files"][0];
    assert_eq!(file["changed"], true, "{applied}");
    assert!(
        file["new_sha256"].as_str().is_some_and(|h| h.len() == 64),
        "{applied}"
    );
    for key in ["file_count", "lines_added", "lines_removed"] {
        assert!(applied.get(key).is_none(), "{key}: {applied}");
    }
    for key in ["lines_added", "old_sha256", "hunks", "destination"] {
        assert!(file.get(key).is_none(), "{key}: {applied}");
    }
    // A hunk matched other than exactly: the evidence is there.
    std::fs::write(ws.path().join("b.txt"), "alpha   \nbeta\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: b.txt\n@@\n alpha\n-beta\n+gamma\n*** End Patch";
    let fuzzy = sc(&s.request(&call(6, "apply_patch", json!({"patch": patch}))));
    assert_eq!(
        fuzzy["files"][0]["hunks"][0]["matched_with"], "trailing_whitespace",
        "{fuzzy}"
    );
}

fn sc(r: &Value) -> Value {
    r["result"]["structuredContent"].clone()
}

/// Issue 36: a binary file's refusal says it is blocked for the text tool
/// (the reference's word), so a client that forwards only text can tell a
/// policy refusal from a failure; `check_exec_environment` lists every
/// variable commands get so that nothing waits for a person.
#[test]
fn binary_reads_say_blocked_and_every_non_interactive_default_is_listed() {
    let ws = workspace();
    std::fs::write(ws.path().join("raw.bin"), b"\x00\x01\x02binary").unwrap();
    let mut s = StdioServer::start(ws.path(), &[]);
    let r = s.request(&call(1, "read_file", json!({"path": "raw.bin"})));
    let v = sc(&r);
    assert_eq!(v["error"]["code"], "BINARY_FILE", "{r}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("blocked for the text tool")),
        "{r}"
    );
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("blocked")),
        "{r}"
    );
    let env = sc(&s.request(&call(
        2,
        "check_exec_environment",
        json!({"detail": "full"}),
    )));
    let listed = &env["environment"]["non_interactive_defaults"];
    for var in [
        "PAGER=cat",
        "GIT_PAGER=cat",
        "GIT_TERMINAL_PROMPT=0",
        "GIT_EDITOR=true",
        "EDITOR=true",
        "NO_COLOR=1",
        "CI=1",
    ] {
        assert!(
            listed.as_array().unwrap().contains(&json!(var)),
            "{var}: {listed}"
        );
    }
    // And commands do get it.
    let r = s.request(&call(3, "exec_command", json!({"cmd": "printenv EDITOR"})));
    assert_eq!(sc(&r)["stdout"], "true\n", "{r}");
}
