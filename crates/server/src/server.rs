//! The composition root: state shared by every client, and the dispatcher.

use std::sync::Arc;
use std::time::Instant;

use ctm_exec_runtime::{EnvInherit, ExecConfig, ExecRuntime, Gates, RuntimeDirError, RuntimeDirs};
use ctm_patch_engine::PatchEngine;
use ctm_protocol_eras::{
    Dispatcher, Era, ErrorCode, MODERN_VERSIONS, Method, MethodOutcome, Request, RequestContext,
    RpcError, negotiate, server_info,
};
use ctm_workspace_fs::{
    ContextNote, ContextWarning, ProjectContext, Workspace, project_context_with,
};
use serde_json::{Map, Value, json};

use crate::catalog::{self, ToolSpec};
use crate::cli::{Config, PermissionMode, ShellEnvInherit};
use crate::envelope::{RenderOptions, ToolError, render};
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::trace::{Trace, redact};
use crate::{args, tools};

/// One runtime per workspace, shared by every client of it.
pub struct Server {
    pub config: Config,
    pub workspace: Workspace,
    pub patch: Arc<PatchEngine>,
    /// Recorded results of keyed mutations (catalog 0.5's
    /// `idempotency_key`).
    pub idempotency: Arc<ctm_patch_engine::IdempotencyStore<crate::envelope::ToolSuccess>>,
    /// Catalog 0.5's repeat-failure breaker.
    pub breaker: crate::breaker::Breaker,
    pub runtime_dirs: Result<Arc<RuntimeDirs>, Arc<RuntimeDirError>>,
    pub exec: ExecRuntime,
    /// The workspace's repository, opened on first use and shared after.
    pub git: ctm_git_tools::RepoCache,
    pub limits: Limits,
    /// Image decodes in flight, for every client (`view_image`).
    pub image_decodes: Arc<tokio::sync::Semaphore>,
    pub trace: Trace,
    /// Set by `--metrics`: every tool call is counted.
    pub metrics: Option<Arc<Metrics>>,
    /// The `tools/list` result: fixed for the life of the process.
    /// The `tools/list` result, built once (from start-up on, beside it).
    tools_listing: Arc<std::sync::OnceLock<Value>>,
    /// A copy of the listing made beside start-up: the first `tools/list`
    /// takes it instead of copying the listing on its way.
    spare_listing: Arc<std::sync::Mutex<Option<Value>>>,
    /// The instructions of the first `initialize`, made from start-up on.
    first_instructions: Arc<std::sync::OnceLock<String>>,
    first_instructions_taken: std::sync::atomic::AtomicBool,
    /// Returns freed heap to the system once calls go quiet.
    trimmer: crate::trim::Trimmer,
}

impl Server {
    pub fn new(
        config: Config,
        workspace: Workspace,
        workspace_writes: ctm_exec_runtime::WorkspaceWrites,
        trace: Trace,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        // The listing (a few milliseconds of schemas) is built beside the
        // rest of start-up, not when the first `tools/list` asks for it.
        let tools_listing = Arc::new(std::sync::OnceLock::new());
        let spare_listing = Arc::new(std::sync::Mutex::new(None));
        {
            let (cell, spare) = (tools_listing.clone(), spare_listing.clone());
            let (served, fake) = (served_by(&config), config.fake_readonly_annotations);
            let _ = std::thread::Builder::new()
                .name("ctm-tools-list".into())
                .spawn(move || {
                    let copy = cell.get_or_init(|| build_listing(served, fake)).clone();
                    *spare.lock().unwrap_or_else(|p| p.into_inner()) = Some(copy);
                });
        }
        let mut limits = Limits::new(config.max_wait_secs);
        let first_instructions = Arc::new(std::sync::OnceLock::new());
        {
            let cell = first_instructions.clone();
            let (ws, context) = (workspace.clone(), limits.context.clone());
            let job = move || {
                cell.get_or_init(|| instructions_for(&ws, &context).0);
            };
            if crate::startup::instructions_wait() {
                let _ = crate::startup::after_first_answer("ctm-instructions", job);
            } else {
                let _ = std::thread::Builder::new()
                    .name("ctm-instructions".into())
                    .spawn(move || {
                        // Beside the listing, which a first `tools/list`
                        // waits for: the listing keeps its core.
                        ctm_exec_runtime::background_priority();
                        job();
                    });
            }
        }
        let runtime_dirs = RuntimeDirs::create(workspace.root(), config.runtime_root.as_deref())
            .map(Arc::new)
            .map_err(Arc::new);
        match &runtime_dirs {
            Err(e) => tracing::warn!("{e}"),
            Ok(d) => {
                if let Some(w) = d.warning() {
                    tracing::warn!("runtime directory: {w}");
                }
            }
        }
        limits.patch_max_file_bytes = config.patch_max_file_bytes;
        limits.patch_max_total_bytes = config.patch_max_total_bytes;
        // Safe mode keeps patches out of .git/ (hooks and config live there).
        let protect_git = config.permission_mode == PermissionMode::Safe;
        let patch = Arc::new(
            PatchEngine::new(workspace.clone())
                .with_protected_git_dir(protect_git)
                .with_max_file_bytes(config.patch_max_file_bytes)
                .with_max_patch_bytes(config.patch_max_total_bytes),
        );
        // Temp and backup files of a server killed mid-commit: removed in the
        // background so start-up does not wait for a walk of the workspace.
        let sweep = workspace.clone();
        let _ = crate::startup::after_first_answer("ctm-sweep", move || {
            let left = ctm_patch_engine::clean_leftovers(&sweep);
            for (path, why) in &left.failed {
                tracing::warn!("cannot remove leftover patch file {path}: {why}");
            }
            tracing::info!(
                removed = left.removed.len(),
                kept_for_live_processes = left.kept,
                "leftover patch files swept"
            );
        });
        // The server reaps the orphans of its commands itself.
        let exec = ExecRuntime::builder(ExecConfig {
            gates: gates_for(&config),
            inherit: match config.shell_env_inherit {
                ShellEnvInherit::Core => EnvInherit::Core,
                ShellEnvInherit::All => EnvInherit::All,
                ShellEnvInherit::None => EnvInherit::None,
            },
            env_policy: config.env_policy.clone(),
            budget: limits.retention,
            allow_roots: config.exec_allow_roots.clone(),
            sandbox: ctm_exec_runtime::SandboxConfig {
                tier: config.sandbox_tier,
                seal_git: config.permission_mode == PermissionMode::Safe,
                helper: std::env::current_exe().ok(),
            },
        })
        .subreaper(true)
        .workspace_writes(workspace_writes)
        .warm_up(false)
        .build(workspace.clone(), runtime_dirs.clone());
        {
            let exec = exec.clone();
            let _ = crate::startup::after_first_answer("ctm-warm-up", move || exec.warm_up());
        }
        Self {
            config,
            git: ctm_git_tools::RepoCache::new(workspace.clone()),
            workspace,
            patch,
            idempotency: Arc::new(ctm_patch_engine::IdempotencyStore::default()),
            breaker: crate::breaker::Breaker::default(),
            exec,
            runtime_dirs,
            limits,
            image_decodes: tools::new_decode_slots(),
            trace,
            metrics,
            tools_listing,
            spare_listing,
            first_instructions,
            first_instructions_taken: std::sync::atomic::AtomicBool::new(false),
            trimmer: crate::trim::Trimmer::default(),
        }
    }

    pub fn gates(&self) -> Gates {
        gates_for(&self.config)
    }

    pub fn tools(&self) -> impl Iterator<Item = &'static ToolSpec> {
        catalog::served_tools(self.served())
    }

    /// What decides the tools this server serves.
    pub fn served(&self) -> catalog::Served {
        served_by(&self.config)
    }

    /// The `instructions` of `initialize` and `server/discover`: the first
    /// were made at start-up, beside it (the workspace's files read then);
    /// later ones are read afresh.
    pub fn instructions(&self) -> String {
        if !self
            .first_instructions_taken
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return self
                .first_instructions
                .get_or_init(|| self.instructions_and_context().0)
                .clone();
        }
        self.instructions_and_context().0
    }

    /// The instructions and what they were made of. The whole text — the
    /// preamble, the quoted files and the nested index — stays within the
    /// context budget (20 KiB by default): the files get what the other two
    /// leave.
    pub fn instructions_and_context(&self) -> (String, ProjectContext) {
        instructions_for(&self.workspace, &self.limits.context)
    }

    fn capabilities() -> Value {
        json!({ "tools": { "listChanged": false } })
    }

    fn initialize(&self, req: &Request) -> MethodOutcome {
        let requested = req.param_str("protocolVersion");
        Ok(json!({
            "protocolVersion": negotiate(requested),
            "capabilities": Self::capabilities(),
            "serverInfo": server_info(),
            "instructions": self.instructions(),
        }))
    }

    fn discover(&self) -> MethodOutcome {
        Ok(json!({
            "supportedVersions": MODERN_VERSIONS,
            "capabilities": Self::capabilities(),
            "instructions": self.instructions(),
        }))
    }

    fn tools_list(&self) -> MethodOutcome {
        let spare = self
            .spare_listing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(listing) = spare {
            return Ok(listing);
        }
        let listing = self
            .tools_listing
            .get_or_init(|| build_listing(self.served(), self.config.fake_readonly_annotations));
        Ok(listing.clone())
    }

    async fn tools_call(&self, req: Request, ctx: RequestContext) -> MethodOutcome {
        let params = req.params.clone().unwrap_or_default();
        let name = match params.get("name") {
            Some(Value::String(n)) => n.clone(),
            _ => {
                return Err(RpcError::new(
                    ErrorCode::InvalidParams,
                    "params.name must be the name of a tool",
                    "missing_tool_name",
                ));
            }
        };
        let arguments = params.get("arguments");
        if arguments.is_some_and(|a| !a.is_object() && !a.is_null()) {
            return Err(RpcError::new(
                ErrorCode::InvalidParams,
                "params.arguments must be an object",
                "arguments_not_object",
            ));
        }
        let Some(spec) = catalog::find(&name, self.served()) else {
            return Err(RpcError::new(
                ErrorCode::InvalidParams,
                format!("Unknown tool: {name}"),
                "unknown_tool",
            )
            .with_data("name", json!(name)));
        };
        self.trace_policy(&ctx, spec.name, arguments);
        let started = Instant::now();
        let outcome = match args::validate(spec, arguments) {
            Ok(args) if self.served().version == catalog::CatalogVersion::V05 => {
                self.run_guarded(spec, args, &ctx).await
            }
            Ok(args) => tools::run(self, spec, args, &ctx).await,
            // What the schema refuses is never counted by the breaker.
            Err(e) => Err(e),
        };
        if let Some(m) = &self.metrics {
            let code = outcome.as_ref().err().map(|e| e.code);
            m.tool_call(spec.name, code, started.elapsed());
        }
        self.trace_tool_call(spec.name, arguments, &outcome, started);
        self.trimmer.call_ended();
        Ok(render(
            outcome,
            RenderOptions {
                text_json: self.config.text_json,
            },
        ))
    }

    /// Catalog 0.5: a call under the repeat-failure breaker
    /// ([`crate::breaker`]).
    async fn run_guarded(
        &self,
        spec: &'static ToolSpec,
        args: Map<String, Value>,
        ctx: &RequestContext,
    ) -> Result<crate::envelope::ToolSuccess, crate::envelope::ToolError> {
        let print = tools::changes::fingerprint(&args);
        let generation = self.breaker.generation();
        if let Some(code) = self.breaker.blocked(spec.name, &print) {
            let hint = "Do not send these arguments again: look at the current state (read_file, git_status, list_dir) and make a different call.";
            return Err(crate::envelope::ToolError::new(
                crate::envelope::ErrorCode::RepeatedCallBlocked,
                format!(
                    "this exact {} call already failed {} times with {code}; it is refused until its arguments change",
                    spec.name,
                    crate::breaker::REPEAT_FAILURE_LIMIT
                ),
                json!({"tool": spec.name, "error_code": code, "attempts": crate::breaker::REPEAT_FAILURE_LIMIT, "retry_hint": hint}),
                hint,
            ));
        }
        let mut outcome = tools::run(self, spec, args, ctx).await;
        match &mut outcome {
            Ok(success) => {
                self.breaker.success(spec.name, &print, generation);
                let s = &success.structured;
                let wrote = matches!(
                    spec.tool,
                    catalog::Tool::ApplyPatch | catalog::Tool::ApplyChanges
                ) && s.get("dry_run") == Some(&Value::Bool(false))
                    && s.get("idempotent_replay").is_none()
                    && s.get("already_applied") != Some(&Value::Bool(true));
                if wrote {
                    self.breaker.reset();
                } else if let Some(id) = finished_command(s)
                    && self.commands_may_write()
                {
                    self.breaker.command_finished(id);
                }
            }
            Err(e) => {
                let n = self.breaker.failure(
                    spec.name,
                    &print,
                    e.code.as_str(),
                    e.retryable,
                    generation,
                );
                if n >= crate::breaker::REPEAT_FAILURE_LIMIT
                    && let Value::Object(d) = &mut e.details
                {
                    d.insert("consecutive_identical_failures".into(), json!(n));
                    d.insert(
                        "breaker".into(),
                        json!(format!("This exact call has now failed {n} times; sent again unchanged it will be refused.")),
                    );
                }
            }
        }
        outcome
    }

    /// Whether a finished command may have written the workspace: not
    /// when it is held read-only to commands with no write path.
    fn commands_may_write(&self) -> bool {
        match crate::tools::exec::workspace_mutation_policy(self) {
            Some(p) if p.mode == "structured-only" => !p.enforced || !p.write_paths.is_empty(),
            _ => true,
        }
    }

    /// The `request` event, for every dispatched request.
    fn trace_request(&self, req: &Request, ctx: &RequestContext) {
        if !self.trace.enabled() {
            return;
        }
        let mut f = Map::new();
        f.insert("era".into(), json!(era_name(ctx.era)));
        f.insert("protocol_version".into(), json!(ctx.protocol_version));
        f.insert("method".into(), json!(req.method));
        f.insert(
            "tool".into(),
            json!(req.param_str("name").filter(|_| req.method == "tools/call")),
        );
        f.insert("id".into(), req.id.clone().unwrap_or(Value::Null));
        f.insert("transport".into(), json!(ctx.transport));
        self.trace.event("request", f);
    }

    /// The `request_policy_selected` event of a tool call.
    fn trace_policy(&self, ctx: &RequestContext, tool: &str, arguments: Option<&Value>) {
        if !self.trace.enabled() {
            return;
        }
        let b = ctx.wait_budget;
        let mut p = Map::new();
        p.insert("tool".into(), json!(tool));
        p.insert("effective_wait_secs".into(), json!(b.effective_secs));
        p.insert("budget_source".into(), json!(b.source.as_str()));
        p.insert("requested_budget_secs".into(), json!(b.requested_secs));
        p.insert("deployment_budget_secs".into(), json!(b.deployment_secs));
        if self.trace.full() {
            let bytes = arguments.map_or(0, |a| a.to_string().len());
            p.insert("arguments_bytes".into(), json!(bytes));
        }
        self.trace.event("request_policy_selected", p);
    }

    /// The `tool_call` event: what ran, with which arguments (redacted and
    /// bounded), and how it ended.
    fn trace_tool_call(
        &self,
        tool: &str,
        arguments: Option<&Value>,
        outcome: &Result<crate::envelope::ToolSuccess, ToolError>,
        started: Instant,
    ) {
        if !self.trace.enabled() {
            return;
        }
        let structured = outcome.as_ref().ok().map(|s| &s.structured);
        let field = |k: &str| structured.and_then(|s| s.get(k)).cloned();
        let mut f = Map::new();
        f.insert(
            "timestamp".into(),
            json!(crate::timestamp::utc(std::time::SystemTime::now())),
        );
        f.insert("tool".into(), json!(tool));
        f.insert("ok".into(), json!(outcome.is_ok()));
        f.insert("status".into(), field("status").unwrap_or(Value::Null));
        f.insert(
            "command_id".into(),
            field("command_id").unwrap_or(Value::Null),
        );
        f.insert(
            "args".into(),
            redact(arguments.unwrap_or(&Value::Object(Map::new()))),
        );
        f.insert(
            "error_code".into(),
            json!(outcome.as_ref().err().map(|e| e.code.as_str())),
        );
        f.insert(
            "duration_ms".into(),
            json!(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)),
        );
        let truncated = outcome
            .as_ref()
            .ok()
            .and_then(|s| s.structured.get("truncated"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        f.insert("truncated".into(), json!(truncated));
        if self.trace.full()
            && let Ok(s) = outcome
        {
            f.insert("result_text_bytes".into(), json!(s.text.len()));
        }
        self.trace.event("tool_call", f);
    }
}

/// The nested-instruction index (with its leading blank line), at most
/// `max` bytes: the paths that fit, then how many more there are.
/// The words of a note in the instructions about a root instruction file;
/// each names the call that reads what was left out.
fn context_note(note: &ContextNote) -> String {
    match note {
        ContextNote::BeyondFileLimit {
            path,
            size_bytes,
            max_files,
        } => format!(
            "[omitted: {path} ({size_bytes} bytes) is beyond the {max_files}-file limit; read it with read_file(path=\"{path}\")]"
        ),
        ContextNote::Unreadable { path } => format!("[omitted: {path} could not be read]"),
        ContextNote::DidNotFit {
            path,
            size_bytes,
            budget_bytes,
        } => format!(
            "[omitted: {path} ({size_bytes} bytes) did not fit the {budget_bytes}-byte instruction budget; read it with read_file(path=\"{path}\")]"
        ),
        ContextNote::InvalidUtf8 {
            path,
            invalid_sequences,
        } => format!(
            "[{path} is not valid UTF-8: {invalid_sequences} invalid byte sequence(s) shown as U+FFFD]"
        ),
        ContextNote::Truncated {
            path,
            size_bytes,
            shown_bytes,
            next_line,
        } => format!(
            "[truncated: {path} is {size_bytes} bytes; the first {shown_bytes} are shown. Continue with read_file(path=\"{path}\", start_line={next_line})]"
        ),
        other => other.plain(),
    }
}

/// The words of why a root instruction file was not loaded.
pub fn context_warning(w: &ContextWarning) -> String {
    match w {
        ContextWarning::NotRegular { path } => {
            format!("{path} was not loaded: not a regular file")
        }
        ContextWarning::Refused { path, error } => format!("{path} was not loaded: {error}"),
        ContextWarning::Unreadable { path, error } => format!("{path} could not be read: {error}"),
        other => format!("{other:?}"),
    }
}

fn nested_index(nested: &[String], truncated: bool, max: usize) -> String {
    if nested.is_empty() {
        return String::new();
    }
    let head =
        "\n\nNested instruction files (not loaded; read the one for the directory you work in): ";
    // Room for the tail: ", and 9999 more (index truncated)".
    let tail_room = 40;
    let mut text = head.to_owned();
    let mut listed = 0;
    for path in nested {
        let sep = if listed == 0 { "" } else { ", " };
        if text.len() + sep.len() + path.len() + tail_room > max {
            break;
        }
        text.push_str(sep);
        text.push_str(path);
        listed += 1;
    }
    let more = nested.len() - listed;
    match (more, truncated) {
        (0, false) => {}
        (0, true) => text.push_str(", ... (index truncated)"),
        (n, t) => {
            let t = if t { " (index truncated)" } else { "" };
            if listed == 0 {
                text.push_str(&format!("{n} files, none listed here{t}"));
            } else {
                text.push_str(&format!(", and {n} more{t}"));
            }
        }
    }
    if text.len() > max {
        return String::new();
    }
    text
}

fn gates_for(config: &Config) -> Gates {
    let mode = match config.permission_mode {
        PermissionMode::Safe => ctm_exec_runtime::PermissionMode::Safe,
        PermissionMode::Trusted => ctm_exec_runtime::PermissionMode::Trusted,
        PermissionMode::Dangerous => ctm_exec_runtime::PermissionMode::Dangerous,
    };
    Gates::for_mode(mode, config.allow_network)
}

fn era_name(era: Era) -> &'static str {
    match era {
        Era::Handshake => "handshake",
        Era::Modern => "2026-07-28",
    }
}

/// The dispatcher the transports call, sharing one [`Server`].
#[derive(Clone)]
pub struct SharedServer(pub Arc<Server>);

impl Dispatcher for SharedServer {
    fn handle(
        &self,
        method: Method,
        req: Request,
        ctx: RequestContext,
    ) -> impl std::future::Future<Output = MethodOutcome> + Send {
        let server = self.0.clone();
        async move {
            server.trace_request(&req, &ctx);
            let outcome = match method {
                Method::Initialize => server.initialize(&req),
                Method::Ping => Ok(json!({})),
                Method::Discover => server.discover(),
                Method::ToolsList => server.tools_list(),
                Method::ToolsCall => server.tools_call(req, ctx).await,
            };
            crate::startup::answered();
            outcome
        }
    }

    fn notify(&self, req: &Request, era: Era) {
        tracing::debug!(method = %req.method, era = era_name(era), "notification");
    }
}

/// The command a result shows finished (an exit code or a signal), which
/// may have written the workspace.
fn finished_command(s: &Map<String, Value>) -> Option<&str> {
    let id = s.get("command_id")?.as_str()?;
    let ended = s.get("exit_code").is_some_and(|c| !c.is_null())
        || s.get("signal").is_some_and(|c| !c.is_null());
    ended.then_some(id)
}

/// The tools a server with `config` serves.
pub fn served_by(config: &crate::cli::Config) -> catalog::Served {
    catalog::Served {
        view_image: config.view_image,
        version: config.catalog,
        dangerous: config.permission_mode == crate::cli::PermissionMode::Dangerous,
    }
}

/// The `tools/list` result of a server with these settings.
fn build_listing(served: catalog::Served, fake_read_only: bool) -> Value {
    let tools: Vec<Value> = catalog::served_tools(served)
        .map(|t| t.listing(fake_read_only, served.version))
        .collect();
    let mut m = serde_json::Map::new();
    m.insert("tools".into(), Value::Array(tools));
    Value::Object(m)
}

/// The instructions of a server on `workspace` (see
/// [`Server::instructions_and_context`]).
fn instructions_for(
    workspace: &Workspace,
    limits: &ctm_workspace_fs::ContextLimits,
) -> (String, ProjectContext) {
    let total = limits.total_bytes;
    let preamble = format!(
        "Coding tools confined to the workspace {}; paths are relative to it. Change files only with apply_patch, never through exec_command.",
        workspace.root().display()
    );
    let mut index = String::new();
    let ctx = project_context_with(
        workspace,
        limits,
        |ctx| {
            // At most an eighth of the budget, whole paths only.
            index = nested_index(&ctx.nested, ctx.nested_truncated, total / 8);
            preamble.len() + 2 + index.len()
        },
        context_note,
    );
    let mut text = preamble;
    if !ctx.text.is_empty() {
        text.push_str("\n\n");
        text.push_str(&ctx.text);
    }
    text.push_str(&index);
    (text, ctx)
}
