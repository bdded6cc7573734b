//! `server_info`: everything a client may want to know about this deployment.

use ctm_protocol_eras::{SERVER_NAME, SERVER_TITLE, SERVER_VERSION, all_versions_newest_first};
use serde_json::{Map, Value};

use ctm_exec_runtime::landlock_support;

use crate::catalog::{Detail, InfoArgs, TOOLS};
use crate::cli::TraceLevel;
use crate::envelope::ToolSuccess;
use crate::limits::LimitsReport;
use crate::output::WirePath;
use crate::output::{to_map, tool_result};
use crate::server::Server;

/// The truthful annotations of every served tool, whatever `tools/list` shows.
pub fn real_annotations(server: &Server) -> Map<String, Value> {
    server
        .tools()
        .map(|t| (t.name.to_owned(), t.annotations.to_json(t.title)))
        .collect()
}

tool_result! {
    /// The annotations `tools/list` shows in place of the real ones.
    #[expect(non_snake_case, reason = "MCP's annotation names")]
    pub struct AdvertisedAnnotations {
        readOnlyHint: bool,
        destructiveHint: bool,
    }
}

tool_result! {
    /// What `--dangerously-fake-readonly-annotations` changes.
    pub struct AnnotationOverride {
        mode: &'static str,
        flag: &'static str,
        advertised: AdvertisedAnnotations,
        rewritten_tools: Vec<&'static str>,
        note: &'static str,
    }
}

/// The `annotation_override` report: none unless the fake switch is on.
fn annotation_override_report(server: &Server) -> Option<AnnotationOverride> {
    if !server.config.fake_readonly_annotations {
        return None;
    }
    let rewritten_tools = server
        .tools()
        .filter(|t| t.annotations != t.annotations.faked_read_only())
        .map(|t| t.name)
        .collect();
    Some(AnnotationOverride {
        mode: "fake_readonly",
        flag: "--dangerously-fake-readonly-annotations",
        advertised: AdvertisedAnnotations {
            readOnlyHint: true,
            destructiveHint: false,
        },
        rewritten_tools,
        note: "tools/list advertises every tool as read-only; mutation and execution still happen. The annotations reported here are the real ones.",
    })
}

/// The `annotation_override` report: `null` unless the fake switch is on.
pub fn annotation_override(server: &Server) -> Value {
    annotation_override_report(server).map_or(Value::Null, |o| Value::Object(to_map(&o)))
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
        workspace: WirePath,
        permission_mode: &'static str,
        network_allowed: bool,
        runtime_dir: Option<WirePath>,
        home: Option<WirePath>,
        tmpdir: Option<WirePath>,
        cache_dir: Option<WirePath>,
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
        workspace: server.workspace.root().into(),
        permission_mode: server.config.permission_mode.as_str(),
        network_allowed: server.gates().network == ctm_exec_runtime::GateState::Allowed,
        runtime_dir: dirs.map(|d| d.root().into()),
        home: dirs.map(|d| d.home().into()),
        tmpdir: dirs.map(|d| d.tmp().into()),
        cache_dir: dirs.map(|d| d.cache().into()),
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
    if cfg.permission_mode == crate::cli::PermissionMode::Safe {
        let seal = server.exec.git_seal_status();
        if seal.degraded {
            w.push(format!(
                "The git seal is not complete ({}): {}.",
                seal.design,
                seal.gaps.join("; ")
            ));
        }
    }
    w
}

tool_result! {
    /// Landlock on this kernel, and whether commands use it.
    pub struct LandlockReport {
        available: bool,
        abi_version: Option<u32>,
        enabled: bool,
    }
}

tool_result! {
    /// Who must authenticate, and how.
    pub struct AuthReport {
        enabled: bool,
        bearer: bool,
        oauth: bool,
        applies_to: &'static str,
        /// Which local accounts the server serves (HTTP without a token:
        /// this user's loopback clients only, unless allowed).
        local_users: &'static str,
    }
}

tool_result! {
    /// The runtime directory of commands, or why there is none.
    pub struct RuntimeReport {
        runtime_dir: Option<WirePath>,
        home: Option<WirePath>,
        tmpdir: Option<WirePath>,
        cache_dir: Option<WirePath>,
        error: Option<String>,
    }
}

/// The runtime directory of commands, or why there is none.
pub fn runtime_report(server: &Server) -> RuntimeReport {
    match &server.runtime_dirs {
        Ok(d) => RuntimeReport {
            runtime_dir: Some(d.root().into()),
            home: Some(d.home().into()),
            tmpdir: Some(d.tmp().into()),
            cache_dir: Some(d.cache().into()),
            error: None,
        },
        Err(e) => RuntimeReport {
            runtime_dir: None,
            home: None,
            tmpdir: None,
            cache_dir: None,
            error: Some(e.to_string()),
        },
    }
}

tool_result! {
    /// Where commands run, in one word, and where to read the rest.
    pub struct SandboxSummary {
        tier: &'static str,
        details: &'static str,
    }
}

tool_result! {
    /// Each permission gate of `exec_command`.
    pub struct ExecPolicyReport {
        network: &'static str,
        shell_expansion: &'static str,
        inline_script: &'static str,
        destructive_command: &'static str,
        filesystem_escape: &'static str,
        privileged_executable: &'static str,
        secret_env_filter: &'static str,
        landlock: &'static str,
        global_tmp_write: &'static str,
    }
}

tool_result! {
    /// How much of each stream of a command is kept.
    pub struct OutputRetention {
        buffer_bytes_per_stream: usize,
        head_bytes_per_stream: usize,
    }
}

tool_result! {
    /// What was read of one root instruction file.
    pub struct InstructionFileReport {
        path: String,
        size_bytes: u64,
        included_bytes: usize,
        truncated: bool,
        omitted: bool,
    }
}

tool_result! {
    /// The instruction files behind `instructions`.
    pub struct ProjectContextReport {
        /// The reference's list of paths; what was read of each is
        /// `root_instruction_file_details` (`detail: "full"`).
        root_instruction_files: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        root_instruction_file_details: Option<Vec<InstructionFileReport>>,
        nested_instruction_files: Vec<String>,
        nested_index_truncated: bool [skip_if "std::ops::Not::not"],
        warnings: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        instructions_bytes: Option<usize>,
    }
}

tool_result! {
    /// The repeat-failure breaker of catalog 0.5: the third identical call
    /// of one that failed `limit` times the same way is refused.
    pub struct BreakerReport {
        limit: u32,
        capacity: usize,
        tracked_calls: usize,
    }
}

tool_result! {
    /// What `server_info` answers. The first fields are those of
    /// `check_exec_environment` ([`exec_environment`]), in its order, less
    /// its flat Landlock fields: `landlock` is an object here.
    pub struct ServerInfoResult {
        workspace: WirePath,
        permission_mode: &'static str,
        network_allowed: bool,
        runtime_dir: Option<WirePath>,
        home: Option<WirePath>,
        tmpdir: Option<WirePath>,
        cache_dir: Option<WirePath>,
        landlock: LandlockReport,
        server: &'static str,
        title: &'static str,
        version: &'static str,
        supported_protocol_versions: Vec<&'static str>,
        transport: &'static str,
        endpoint_path: &'static str,
        tool_count: usize,
        tools: Vec<&'static str>,
        /// `0.5` when the reference 0.5.0's catalog is served (`--catalog`).
        #[serde(skip_serializing_if = "Option::is_none")]
        catalog: Option<&'static str>,
        /// Catalog 0.5: the repeat-failure breaker.
        #[serde(skip_serializing_if = "Option::is_none")]
        repeat_failure_breaker: Option<BreakerReport>,
        /// Catalog 0.5, or a workspace read-only to commands.
        #[serde(skip_serializing_if = "Option::is_none")]
        workspace_mutation_policy: Option<super::exec::WorkspaceMutationPolicy>,
        annotation_override: Option<AnnotationOverride>,
        auth_enabled: bool,
        dangerously_skip_all_permissions: bool,
        shell_env_inherit: &'static str,
        shell_env_include_only: Vec<String>,
        shell_env_exclude: Vec<String>,
        /// Only when the runtime directory is unusable: why (the paths are
        /// the top-level fields above).
        #[serde(skip_serializing_if = "Option::is_none")]
        runtime: Option<RuntimeReport>,
        /// The tier; `check_exec_environment` has the whole report.
        sandbox: SandboxSummary,
        exec_policy: ExecPolicyReport,
        output_retention: OutputRetention,
        project_context: ProjectContextReport,
        max_wait_secs: u64,
        text_json: bool,
        /// `summary` (the default) or `full`, as asked.
        detail: &'static str,
        // The full report only.
        #[serde(skip_serializing_if = "Option::is_none")]
        catalog_size: Option<usize>,
        /// The real annotations of each served tool, by name (their
        /// titles are in `tools/list`).
        #[serde(skip_serializing_if = "Option::is_none")]
        annotations: Option<Map<String, Value>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        auth: Option<AuthReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        limits: Option<LimitsReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        trace: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        telemetry: Option<&'static str>,
    }
}

pub fn run(server: &Server, args: &InfoArgs) -> ToolSuccess {
    let full = args.detail == Detail::Full;
    let cfg = &server.config;
    let (instructions, ctx) = server.instructions_and_context();
    let gates = server.gates();
    let tools: Vec<&'static str> = server.tools().map(|t| t.name).collect();
    let dirs = server.runtime_dirs.as_ref().ok();
    let runtime = runtime_report(server);
    let r = &server.limits.retention;
    let ll = landlock_support();
    let network_allowed = gates.network == ctm_exec_runtime::GateState::Allowed;
    // OAuth: tokens of the built-in authorization server or of an external one.
    let oauth = cfg.oauth_mode || cfg.oauth_issuer.is_some();
    let auth_enabled = cfg.auth_token.is_some() || oauth;
    let text = format!(
        "{SERVER_NAME} {SERVER_VERSION}\nWorkspace: {}\nTools: {} | Permission mode: {} | Auth: {}",
        server.workspace.root().display(),
        tools.len(),
        cfg.permission_mode.as_str(),
        match (cfg.auth_token.is_some(), oauth && !cfg.stdio) {
            (true, true) => "bearer + OAuth",
            (false, true) => "OAuth",
            (true, false) => "bearer",
            (false, false) => "none",
        },
    );
    let result = ServerInfoResult {
        workspace: server.workspace.root().into(),
        permission_mode: cfg.permission_mode.as_str(),
        network_allowed,
        runtime_dir: dirs.map(|d| d.root().into()),
        home: dirs.map(|d| d.home().into()),
        tmpdir: dirs.map(|d| d.tmp().into()),
        cache_dir: dirs.map(|d| d.cache().into()),
        landlock: LandlockReport {
            available: ll.available,
            abi_version: ll.available.then_some(ll.abi),
            enabled: gates.landlock && ll.available,
        },
        server: SERVER_NAME,
        title: SERVER_TITLE,
        version: SERVER_VERSION,
        supported_protocol_versions: all_versions_newest_first(),
        transport: if cfg.stdio {
            "stdio"
        } else {
            "streamable-http"
        },
        endpoint_path: "/mcp",
        tool_count: tools.len(),
        tools,
        catalog: Some(server.served().version)
            .filter(|v| *v != crate::catalog::CatalogVersion::V03)
            .map(crate::catalog::CatalogVersion::as_str),
        workspace_mutation_policy: super::exec::workspace_mutation_policy(server),
        repeat_failure_breaker: (server.served().version == crate::catalog::CatalogVersion::V05)
            .then(|| BreakerReport {
                limit: crate::breaker::REPEAT_FAILURE_LIMIT,
                capacity: crate::breaker::BREAKER_CAPACITY,
                tracked_calls: server.breaker.tracked(),
            }),
        annotation_override: annotation_override_report(server),
        catalog_size: full.then_some(TOOLS.len()),
        annotations: full.then(|| {
            real_annotations(server)
                .into_iter()
                .map(|(name, mut a)| {
                    if let Some(a) = a.as_object_mut() {
                        a.remove("title");
                    }
                    (name, a)
                })
                .collect()
        }),
        auth: full.then_some(AuthReport {
            enabled: auth_enabled,
            bearer: cfg.auth_token.is_some(),
            oauth,
            applies_to: if cfg.stdio {
                "none (stdio)"
            } else {
                "POST /mcp"
            },
            local_users: crate::loopback_clients(cfg).1,
        }),
        auth_enabled,
        dangerously_skip_all_permissions: cfg.dangerously_skip_all_permissions,
        shell_env_inherit: cfg.shell_env_inherit.as_str(),
        shell_env_include_only: cfg.env_policy.include_only.clone(),
        shell_env_exclude: cfg.env_policy.exclude.clone(),
        runtime: runtime.error.is_some().then_some(runtime),
        sandbox: SandboxSummary {
            tier: server.exec.tier().tier,
            details: "check_exec_environment",
        },
        exec_policy: ExecPolicyReport {
            network: gates.network.as_str(),
            shell_expansion: gates.shell_expansion.as_str(),
            inline_script: gates.inline_script.as_str(),
            destructive_command: gates.destructive_command.as_str(),
            filesystem_escape: gates.filesystem_escape.as_str(),
            privileged_executable: gates.privileged_executable.as_str(),
            secret_env_filter: if gates.secret_env_filter {
                "enabled"
            } else {
                "disabled"
            },
            landlock: if gates.landlock { "requested" } else { "off" },
            global_tmp_write: global_tmp_write(server),
        },
        output_retention: OutputRetention {
            buffer_bytes_per_stream: r.buffer_bytes_per_stream,
            head_bytes_per_stream: r.head_bytes_per_stream,
        },
        project_context: ProjectContextReport {
            root_instruction_files: ctx.files.iter().map(|f| f.path.clone()).collect(),
            root_instruction_file_details: full.then(|| {
                ctx.files
                    .iter()
                    .map(|f| InstructionFileReport {
                        path: f.path.clone(),
                        size_bytes: f.size_bytes,
                        included_bytes: f.included_bytes,
                        truncated: f.truncated,
                        omitted: f.omitted,
                    })
                    .collect()
            }),
            nested_instruction_files: ctx.nested,
            nested_index_truncated: ctx.nested_truncated,
            warnings: ctx
                .warnings
                .iter()
                .map(crate::server::context_warning)
                .collect(),
            instructions_bytes: full.then_some(instructions.len()),
        },
        max_wait_secs: cfg.max_wait_secs,
        text_json: cfg.text_json,
        detail: args.detail.as_str(),
        limits: full.then(|| server.limits.report()),
        trace: full.then_some(match cfg.trace {
            TraceLevel::Off => "off",
            TraceLevel::Metadata => "metadata",
            TraceLevel::Full => "full",
        }),
        telemetry: full.then_some("none"),
    };
    ToolSuccess::new(text, &result)
}
