//! `server_info`: everything a client may want to know about this deployment.

use std::path::PathBuf;

use ctm_protocol_eras::{SERVER_NAME, SERVER_TITLE, SERVER_VERSION, all_versions_newest_first};
use serde_json::{Map, Value, json};

use ctm_exec_runtime::landlock_support;

use crate::catalog::TOOLS;
use crate::cli::TraceLevel;
use crate::envelope::ToolSuccess;
use crate::output::tool_result;
use crate::server::Server;

/// The truthful annotations of every served tool, whatever `tools/list` shows.
pub fn real_annotations(server: &Server) -> Map<String, Value> {
    server
        .tools()
        .map(|t| (t.name.to_owned(), t.annotations.to_json(t.title)))
        .collect()
}

/// The `annotation_override` report: `null` unless the fake switch is on.
pub fn annotation_override(server: &Server) -> Value {
    if !server.config.fake_readonly_annotations {
        return Value::Null;
    }
    let rewritten: Vec<&str> = server
        .tools()
        .filter(|t| t.annotations != t.annotations.faked_read_only())
        .map(|t| t.name)
        .collect();
    json!({
        "mode": "fake_readonly",
        "flag": "--dangerously-fake-readonly-annotations",
        "advertised": { "readOnlyHint": true, "destructiveHint": false },
        "rewritten_tools": rewritten,
        "note": "tools/list advertises every tool as read-only; mutation and execution still happen. The annotations reported here are the real ones.",
    })
}

/// How commands may write outside the workspace and the runtime
/// directory, in the reference's words: Landlock or the path gate refuses
/// it (`blocked`), or nothing does (`allowed`, dangerous mode).
fn global_tmp_write(server: &Server) -> &'static str {
    let g = server.gates();
    if (g.landlock && landlock_support().available)
        || g.filesystem_escape == ctm_exec_runtime::GateState::Blocked
    {
        "blocked"
    } else {
        "allowed"
    }
}

tool_result! {
    /// The reference's top-level report of where commands run, shared by
    /// `server_info` and `check_exec_environment`.
    pub struct ExecEnvironment {
        workspace: PathBuf,
        permission_mode: &'static str,
        network_allowed: bool,
        runtime_dir: Option<PathBuf>,
        home: Option<PathBuf>,
        tmpdir: Option<PathBuf>,
        cache_dir: Option<PathBuf>,
        landlock_enabled: bool,
        landlock_abi: Option<u32>,
        global_tmp_write: &'static str,
    }
}

/// Where commands run, in the reference's top-level names.
pub fn exec_environment(server: &Server) -> ExecEnvironment {
    let dirs = server.runtime_dirs.as_ref().ok();
    let ll = landlock_support();
    ExecEnvironment {
        workspace: server.workspace.root().to_path_buf(),
        permission_mode: server.config.permission_mode.as_str(),
        network_allowed: server.gates().network == ctm_exec_runtime::GateState::Allowed,
        runtime_dir: dirs.map(|d| d.root().to_path_buf()),
        home: dirs.map(|d| d.home()),
        tmpdir: dirs.map(|d| d.tmp()),
        cache_dir: dirs.map(|d| d.cache()),
        landlock_enabled: server.gates().landlock && ll.available,
        landlock_abi: ll.available.then_some(ll.abi),
        global_tmp_write: global_tmp_write(server),
    }
}

/// Notes on what this deployment leaves unguarded, for
/// `check_exec_environment`.
pub fn exec_warnings(server: &Server) -> Vec<String> {
    let cfg = &server.config;
    let mut w = Vec::new();
    if !landlock_support().available {
        w.push("Landlock is not available on this kernel: commands are checked by policy only, not confined by the kernel.".to_owned());
    }
    if !server.gates().landlock {
        w.push(format!(
            "Permission mode {} turns off the safety gates and Landlock for commands.",
            cfg.permission_mode.as_str()
        ));
    }
    if cfg.fake_readonly_annotations {
        w.push("tools/list shows every tool as read-only; apply_patch and exec_command still change files and run commands.".to_owned());
    }
    w
}

pub fn run(server: &Server) -> ToolSuccess {
    let cfg = &server.config;
    let (instructions, ctx) = server.instructions_and_context();
    let gates = server.gates();
    let tools: Vec<&str> = server.tools().map(|t| t.name).collect();
    let runtime = match &server.runtime_dirs {
        Ok(d) => json!({
            "runtime_dir": d.root(),
            "home": d.home(),
            "tmpdir": d.tmp(),
            "cache_dir": d.cache(),
            "error": null,
        }),
        Err(e) => {
            json!({ "runtime_dir": null, "home": null, "tmpdir": null, "cache_dir": null, "error": e.to_string() })
        }
    };
    let files: Vec<Value> = ctx
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.path,
                "size_bytes": f.size_bytes,
                "included_bytes": f.included_bytes,
                "truncated": f.truncated,
                "omitted": f.omitted,
            })
        })
        .collect();
    let r = &server.limits.retention;
    let mut s = crate::output::to_map(&exec_environment(server));
    // check_exec_environment's flat names; server_info has the object.
    for k in ["landlock_enabled", "landlock_abi", "global_tmp_write"] {
        s.remove(k);
    }
    let ll = landlock_support();
    s.insert(
        "landlock".into(),
        json!({
            "available": ll.available,
            "abi_version": ll.available.then_some(ll.abi),
            "enabled": gates.landlock && ll.available,
        }),
    );
    s.insert("server".into(), json!(SERVER_NAME));
    s.insert("title".into(), json!(SERVER_TITLE));
    s.insert("version".into(), json!(SERVER_VERSION));
    s.insert(
        "supported_protocol_versions".into(),
        json!(all_versions_newest_first()),
    );
    s.insert("workspace".into(), json!(server.workspace.root()));
    s.insert(
        "transport".into(),
        json!(if cfg.stdio {
            "stdio"
        } else {
            "streamable-http"
        }),
    );
    s.insert("endpoint_path".into(), json!("/mcp"));
    s.insert("tool_count".into(), json!(tools.len()));
    s.insert("catalog_size".into(), json!(TOOLS.len()));
    s.insert("tools".into(), json!(tools));
    s.insert(
        "annotations".into(),
        Value::Object(real_annotations(server)),
    );
    s.insert("annotation_override".into(), annotation_override(server));
    s.insert(
        "auth".into(),
        json!({
            "enabled": cfg.auth_token.is_some() || cfg.oauth_mode,
            "bearer": cfg.auth_token.is_some(),
            "oauth": cfg.oauth_mode,
            "applies_to": if cfg.stdio { "none (stdio)" } else { "POST /mcp" },
        }),
    );
    s.insert(
        "auth_enabled".into(),
        json!(cfg.auth_token.is_some() || cfg.oauth_mode),
    );
    s.insert(
        "permission_mode".into(),
        json!(cfg.permission_mode.as_str()),
    );
    s.insert(
        "network_allowed".into(),
        json!(gates.network == ctm_exec_runtime::GateState::Allowed),
    );
    s.insert(
        "dangerously_skip_all_permissions".into(),
        json!(cfg.dangerously_skip_all_permissions),
    );
    s.insert(
        "shell_env_inherit".into(),
        json!(cfg.shell_env_inherit.as_str()),
    );
    s.insert(
        "shell_env_include_only".into(),
        json!(cfg.env_policy.include_only),
    );
    s.insert("shell_env_exclude".into(), json!(cfg.env_policy.exclude));
    s.insert("runtime".into(), runtime);
    s.insert(
        "sandbox".into(),
        json!(crate::tools::exec::sandbox_report(server)),
    );
    s.insert(
        "exec_policy".into(),
        json!({
            "network": gates.network.as_str(),
            "shell_expansion": gates.shell_expansion.as_str(),
            "inline_script": gates.inline_script.as_str(),
            "destructive_command": gates.destructive_command.as_str(),
            "filesystem_escape": gates.filesystem_escape.as_str(),
            "privileged_executable": gates.privileged_executable.as_str(),
            "secret_env_filter": if gates.secret_env_filter { "enabled" } else { "disabled" },
            "landlock": if gates.landlock { "requested" } else { "off" },
            "global_tmp_write": global_tmp_write(server),
        }),
    );
    s.insert(
        "output_retention".into(),
        json!({
            "buffer_bytes_per_stream": r.buffer_bytes_per_stream,
            "head_bytes_per_stream": r.head_bytes_per_stream,
        }),
    );
    s.insert(
        "project_context".into(),
        json!({
            // The reference's list of paths; what was read of each is
            // `root_instruction_file_details`.
            "root_instruction_files": ctx.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
            "root_instruction_file_details": files,
            "nested_instruction_files": ctx.nested,
            "nested_index_truncated": ctx.nested_truncated,
            "warnings": ctx.warnings.iter().map(crate::server::context_warning).collect::<Vec<_>>(),
            "instructions_bytes": instructions.len(),
        }),
    );
    s.insert("limits".into(), server.limits.to_json());
    s.insert("max_wait_secs".into(), json!(cfg.max_wait_secs));
    s.insert("text_json".into(), json!(cfg.text_json));
    s.insert(
        "trace".into(),
        json!(match cfg.trace {
            TraceLevel::Off => "off",
            TraceLevel::Metadata => "metadata",
            TraceLevel::Full => "full",
        }),
    );
    s.insert("telemetry".into(), json!("none"));
    let text = format!(
        "{SERVER_NAME} {SERVER_VERSION}\nWorkspace: {}\nTools: {} | Permission mode: {} | Auth: {}\nProtocol versions: {}",
        server.workspace.root().display(),
        tools.len(),
        cfg.permission_mode.as_str(),
        match (cfg.auth_token.is_some(), cfg.oauth_mode && !cfg.stdio) {
            (true, true) => "bearer + OAuth",
            (false, true) => "OAuth",
            (true, false) => "bearer",
            (false, false) => "none",
        },
        all_versions_newest_first().join(", "),
    );
    ToolSuccess {
        text,
        structured: s,
        extra_content: Vec::new(),
    }
}
