//! `coding-tools-mcp`: the composition root. [`run_command_line`] parses the
//! command line, builds the one server of the workspace, and runs the stdio
//! or the HTTP transport until input ends or a signal arrives; the binary is
//! nothing else.
//!
//! The library exists so that fuzz targets and embedders reach the same
//! argument decoder the server uses ([`validate_arguments`], [`tool_names`]), and
//! the complete result declarations ([`result_schema`]); everything else
//! stays private to the server.

#![deny(missing_docs)]
#![expect(
    clippy::result_large_err,
    reason = "ToolError is built once per failed call and carries the whole contract envelope"
)]

mod args;
mod breaker;
mod card;
mod catalog;
mod cli;
mod envelope;
mod errors;
mod limits;
mod metrics;
mod output;
mod server;
mod startup;
mod timestamp;
mod tools;
mod trace;
mod trim;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, TraceLevel};
use crate::server::{Server, SharedServer};
use crate::trace::Trace;

/// What a pipe on stdout is widened to: the most an unprivileged process
/// may ask for by default (`/proc/sys/fs/pipe-max-size`).
const STDOUT_PIPE_BYTES: usize = 1024 * 1024;

/// Widens stdout to [`STDOUT_PIPE_BYTES`] when it is a pipe: a 1 MiB
/// `read_file` page then leaves in a few writes instead of 32 rounds of
/// filling 64 KiB and waiting for the client to drain it. Where the limit
/// is lower, the pipe stays as it was.
fn widen_stdout_pipe() {
    let out = std::io::stdout();
    let is_pipe = rustix::fs::fstat(&out).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo
    });
    if is_pipe && let Err(e) = rustix::pipe::fcntl_setpipe_size(&out, STDOUT_PIPE_BYTES) {
        tracing::debug!("stdout pipe left at its size: {e}");
    }
}

/// Runs the server as the `coding-tools-mcp` command: parses the process's
/// command line and environment, serves until input ends or SIGTERM/SIGINT.
pub fn run_command_line() -> ExitCode {
    trim::tune_allocator();
    let matches = Cli::command().get_matches();
    let token_in_argv =
        matches.value_source("auth_token") == Some(clap::parser::ValueSource::CommandLine);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let trace_env = std::env::var("CODING_TOOLS_MCP_TRACE").ok();
    let config = match cli.validate(trace_env.as_deref()) {
        Ok(c) => c,
        Err(reason) => {
            eprintln!("coding-tools-mcp: error: {reason}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    // Over stdio the first request is read while the rest of start-up runs.
    let mut stdin = if config.stdio {
        match ctm_transport_stdio::EarlyStdin::start() {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("coding-tools-mcp: error: cannot start reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    // No program the server runs outside the sandbox (bwrap, git) comes
    // from where commands write; said before the first probe runs one.
    ctm_exec_runtime::distrust_for_programs(&[config.workspace.as_path()]);
    if config.sandbox_tier == ctm_exec_runtime::TierChoice::Namespace
        && config.permission_mode != cli::PermissionMode::Dangerous
    {
        let ns = ctm_exec_runtime::namespace_support();
        if !ns.available() {
            eprintln!(
                "coding-tools-mcp: error: --sandbox namespace: {}{}",
                ns.reason.as_deref().unwrap_or("unavailable"),
                ns.fix
                    .as_deref()
                    .map(|f| format!(" (fix: {f})"))
                    .unwrap_or_default()
            );
            return ExitCode::from(2);
        }
    }
    if config.generated_token
        && let Some(token) = &config.auth_token
    {
        // The one way to learn it; printed before anything can be served.
        eprintln!(
            "coding-tools-mcp: generated a bearer token for this server (CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN); send Authorization: Bearer {token}"
        );
    }
    if token_in_argv {
        tracing::warn!(
            "--auth-token on the command line is readable by every user of this machine (/proc/<pid>/cmdline); use --auth-token-file or CODING_TOOLS_MCP_AUTH_TOKEN"
        );
    }
    let workspace = match ctm_workspace_fs::Workspace::open(&config.workspace) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("coding-tools-mcp: error: {e}");
            return ExitCode::from(2);
        }
    };
    let workspace_writes = match workspace_writes(&config, &workspace) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("coding-tools-mcp: error: {e}");
            return ExitCode::from(2);
        }
    };
    let trace = match open_trace(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("coding-tools-mcp: error: cannot open the trace file: {e}");
            return ExitCode::from(2);
        }
    };
    // A public URL that is none is refused, not ignored: ignored, the
    // names a request gives would stand in for it (the issuer and audience
    // of tokens among them).
    if let Some(url) = std::env::var("CODING_TOOLS_MCP_SERVER_URL")
        .ok()
        .filter(|u| !u.is_empty())
        && !config.stdio
        && !ctm_transport_http::is_public_base_url(&url)
    {
        eprintln!(
            "coding-tools-mcp: error: CODING_TOOLS_MCP_SERVER_URL={url:?} is not an http(s)://host[:port][/path] URL"
        );
        return ExitCode::from(2);
    }
    // The built-in authorization server's issuer and the audience of the
    // tokens it mints are this server's public URL: behind a trusted proxy
    // without a configured URL, a client's forwarded headers would choose
    // them (a token minted for another backend sharing the token secret).
    let trusted_proxy_without_url = std::env::var("CODING_TOOLS_MCP_TRUST_PROXY_HEADERS")
        .is_ok_and(|v| cli::truthy(&v))
        && std::env::var("CODING_TOOLS_MCP_SERVER_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .is_none();
    if config.oauth_mode && !config.stdio && trusted_proxy_without_url {
        eprintln!(
            "coding-tools-mcp: error: --oauth-mode behind a trusted proxy (CODING_TOOLS_MCP_TRUST_PROXY_HEADERS) needs CODING_TOOLS_MCP_SERVER_URL: the issuer and the audience of the tokens this server mints must be its public URL, not one a request's forwarded headers name"
        );
        return ExitCode::from(2);
    }
    let oauth = match (config.oauth_mode, config.stdio) {
        (true, false) => match oauth_server() {
            Ok(o) => Some(o),
            Err(reason) => {
                eprintln!("coding-tools-mcp: error: {reason}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let issuer = match (&config.oauth_issuer, config.stdio) {
        // The audience tokens are checked against must be the operator's,
        // not a name a request's forwarded headers choose: one issuer signs
        // for many resources, and a client could pick another's.
        (Some(_), false) if trusted_proxy_without_url => {
            eprintln!(
                "coding-tools-mcp: error: --oauth-issuer behind a trusted proxy (CODING_TOOLS_MCP_TRUST_PROXY_HEADERS) needs CODING_TOOLS_MCP_SERVER_URL: the token audience must be this server's public URL, not one a request's headers name"
            );
            return ExitCode::from(2);
        }
        (Some(url), false) => {
            match ctm_transport_http::ExternalIssuer::new(url, config.oauth_required_scope.clone())
            {
                Ok(i) => Some(i),
                Err(reason) => {
                    eprintln!("coding-tools-mcp: error: {reason}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("coding-tools-mcp: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let metrics = if config.metrics {
        match metrics::Metrics::new(
            catalog::served_tools(server::served_by(&config)).map(|t| t.name),
        ) {
            Ok(m) => Some(Arc::new(m)),
            Err(e) => {
                eprintln!("coding-tools-mcp: error: cannot set up the metrics: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let configured_runtime_root = config.runtime_root.is_some();
    if let Some(s) = stdin.as_mut()
        && startup::first_request_needs_no_instructions(s.peek())
    {
        startup::instructions_later();
    }
    let server = Arc::new(Server::new(
        config,
        workspace,
        workspace_writes,
        trace,
        metrics,
    ));
    if configured_runtime_root && let Err(e) = &server.runtime_dirs {
        eprintln!("coding-tools-mcp: error: {e}");
        return ExitCode::from(2);
    }
    if server.config.require_git_seal {
        if server.config.permission_mode != cli::PermissionMode::Safe {
            eprintln!(
                "coding-tools-mcp: error: --require-git-seal: the git seal is safe mode's; this server runs in {} mode",
                server.config.permission_mode.as_str()
            );
            return ExitCode::from(2);
        }
        let seal = server.exec.git_seal_status();
        if !seal.sealed {
            eprintln!(
                "coding-tools-mcp: error: --require-git-seal: the git seal is not complete ({}): {}",
                seal.design,
                seal.gaps.join("; ")
            );
            finish(&server);
            return ExitCode::from(2);
        }
    }
    announce_git_seal(&server);
    let result = runtime.block_on(run(server.clone(), stdin, oauth, issuer));
    // Commands end with the server (every process of every command), then
    // its runtime directory goes. Done here rather than left to drops: a
    // task still in flight (a tool call blocked in the kernel, the stdin
    // reader) may hold the server past the runtime's shutdown.
    finish(&server);
    // Not a plain drop: that would join the blocking stdin reader, which
    // waits for a line that, with stdin held open, never comes (and any
    // tool call blocked in the kernel). Every reply owed has been written.
    runtime.shutdown_background();
    drop(server);
    match result {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(signal)) => ExitCode::from(128 + signal),
        Err(e) => {
            eprintln!("coding-tools-mcp: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Safe mode promises that nothing a command writes runs later through
/// the user's git: where that promise cannot be kept in full (no namespace
/// tier, no overlay, a workspace that is no repository), say so on stderr
/// at start — never silently. Off the start-up path: the probes take
/// milliseconds.
fn announce_git_seal(server: &Arc<Server>) {
    if server.config.permission_mode != cli::PermissionMode::Safe {
        return;
    }
    let server = server.clone();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let started = crate::startup::after_first_answer("ctm-seal-check", move || {
        let status = server.exec.git_seal_status();
        if status.degraded {
            tracing::warn!(
                "safe mode: the git seal is not complete ({}): {}; `--sandbox namespace` refuses to start without the namespace tier",
                status.design,
                status.gaps.join("; ")
            );
        }
        let _ = done_tx.send(());
    });
    if started.is_ok() {
        *SEAL_ANNOUNCED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(done_rx);
    }
}

/// The start-up announcement of an incomplete seal, until it is made: an
/// exit waits for it (bounded), so a short session still says it.
static SEAL_ANNOUNCED: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>> =
    std::sync::Mutex::new(None);

/// Kills every command and removes the runtime directory; safe to call
/// twice.
fn finish(server: &Server) {
    // The seal announcement of a session that ended at once still goes
    // out (it runs at low priority; on a busy machine after the end).
    if let Some(done) = SEAL_ANNOUNCED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        let _ = done.recv_timeout(Duration::from_secs(2));
    }
    server.exec.shutdown();
    if let Ok(dirs) = &server.runtime_dirs {
        // Bounded: a directory of millions of entries is not worth hanging
        // the exit for; what is left, the next server's sweep removes.
        let dirs = dirs.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("ctm-runtime-remove".into())
            .spawn(move || {
                dirs.remove();
                let _ = done_tx.send(());
            });
        if done_rx.recv_timeout(Duration::from_secs(2)).is_err() {
            tracing::warn!(
                "the runtime directory is still being removed; the next start sweeps the rest"
            );
        }
    }
}

/// After the first stop signal, the next one ends the process at once,
/// whatever the clean-up is doing.
fn default_stop_signals() {
    ctm_exec_runtime::default_signal_dispositions(&[
        ctm_exec_runtime::Signal::Int,
        ctm_exec_runtime::Signal::Term,
        ctm_exec_runtime::Signal::Hup,
    ]);
}

/// What `--workspace-mutation` and `--write-path` make of the workspace:
/// each write path resolved beneath the root (one that escapes it is left
/// out, with a warning, as the reference 0.5.0 does); the root itself, a
/// git directory or an entry IDEs and agents load without asking (or a
/// path inside one), and an existing file are refused.
fn workspace_writes(
    config: &cli::Config,
    workspace: &ctm_workspace_fs::Workspace,
) -> Result<ctm_exec_runtime::WorkspaceWrites, String> {
    if config.workspace_mutation != cli::WorkspaceMutation::StructuredOnly {
        return Ok(ctm_exec_runtime::WorkspaceWrites::Unrestricted);
    }
    let root = workspace.root();
    let mut write_paths = Vec::new();
    for given in &config.write_paths {
        let mut rel = std::path::PathBuf::new();
        let mut escapes = given.is_absolute() && !given.starts_with(root);
        let relative = given.strip_prefix(root).unwrap_or(given);
        for c in relative.components() {
            match c {
                std::path::Component::Normal(n) => rel.push(n),
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir if rel.pop() => {}
                _ => escapes = true,
            }
        }
        if escapes {
            tracing::warn!(path = %given.display(), "--write-path outside the workspace is ignored");
            continue;
        }
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let Some(first) = first else {
            return Err(format!(
                "--write-path {}: the workspace root; structured-only would let commands write all of it",
                given.display()
            ));
        };
        if rel.components().any(|c| c.as_os_str() == ".git")
            || ctm_exec_runtime::NEVER_WRITABLE.contains(&first.as_str())
        {
            return Err(format!(
                "--write-path {}: commands may not write git directories or what IDEs and agents load without asking",
                given.display()
            ));
        }
        let abs = root.join(&rel);
        match std::fs::symlink_metadata(&abs) {
            Ok(m) if !m.is_dir() => {
                return Err(format!("--write-path {}: not a directory", given.display()));
            }
            _ => write_paths.push(abs),
        }
    }
    Ok(ctm_exec_runtime::WorkspaceWrites::StructuredOnly { write_paths })
}

/// The names of every tool of the catalog, `view_image` included, in
/// `tools/list` order.
pub fn tool_names() -> impl Iterator<Item = &'static str> {
    catalog::enabled_tools(true).map(|t| t.name)
}

/// The complete declaration of what `tool` answers in `structuredContent`:
/// every field with its whole schema, and which a success always carries.
/// `tools/list` serves a shorter `outputSchema` (the types of the fields a
/// success always carries); this is what `docs/tools.md` lists and what the
/// black-box tests check every answer against. `None` for no such tool.
pub fn result_schema(tool: &str) -> Option<serde_json::Value> {
    catalog::served_tools(catalog::Served {
        version: catalog::CatalogVersion::V05,
        dangerous: true,
        ..catalog::Served::ALL_V03
    })
    .find(|t| t.name == tool)
    .map(|t| output::full_schema(t.output.map(|o| (o.shape)())))
}

/// Validates the `arguments` of a `tools/call` of `tool` exactly as the server
/// does before running it: unknown names, types, ranges and the one integer
/// decoder (integers and integral floats up to 2^53-1, canonical on output).
///
/// `None` when no tool has that name (with `view_image` enabled or not).
/// `Err` carries the rendered `CallToolResult` of the refusal
/// (`isError: true`, `INVALID_ARGUMENT`).
pub fn validate_arguments(
    tool: &str,
    view_image: bool,
    arguments: Option<&serde_json::Value>,
) -> Option<Result<serde_json::Map<String, serde_json::Value>, serde_json::Value>> {
    let spec = catalog::find(
        tool,
        catalog::Served {
            view_image,
            ..catalog::Served::ALL_V03
        },
    )?;
    Some(
        args::validate(spec, arguments)
            .map_err(|e| envelope::render(Err(e), envelope::RenderOptions::default())),
    )
}

fn init_logging() {
    let level = std::env::var("CODING_TOOLS_MCP_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(false)
        .init();
}

fn open_trace(config: &cli::Config) -> std::io::Result<Trace> {
    if config.trace == TraceLevel::Off {
        return Ok(Trace::off());
    }
    let sink: Box<dyn std::io::Write + Send> = match &config.trace_file {
        Some(path) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ),
        None => Box::new(std::io::stderr()),
    };
    Ok(Trace::new(config.trace, sink))
}

/// Serves until input ends (`Ok(None)`) or a stop signal arrives
/// (`Ok(Some(signal number))`).
async fn run(
    server: Arc<Server>,
    stdin: Option<ctm_transport_stdio::EarlyStdin>,
    oauth: Option<ctm_auth::OAuthServer>,
    issuer: Option<ctm_transport_http::ExternalIssuer>,
) -> std::io::Result<Option<u8>> {
    let dispatcher = Arc::new(SharedServer(server.clone()));
    let mut signals = StopSignals::install();
    if let Some(stdin) = stdin {
        tracing::info!(workspace = %server.workspace.root().display(), "serving MCP on stdio");
        widen_stdout_pipe();
        let serve =
            ctm_transport_stdio::serve_stdout(dispatcher, stdin, server.config.max_wait_secs);
        return tokio::select! {
            r = serve => r.map(|()| None),
            signal = signals.next() => {
                default_stop_signals();
                Ok(Some(signal))
            }
        };
    }
    let addr = format!("{}:{}", server.config.host, server.config.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot bind {addr}: {e}")))?;
    let local = listener.local_addr()?;
    tracing::info!(
        workspace = %server.workspace.root().display(),
        "serving MCP on http://{local}/mcp"
    );
    if server.metrics.is_some() {
        let auth = if server.config.auth_token.is_some()
            || oauth.is_some()
            || server.config.oauth_issuer.is_some()
        {
            "with the same credential as /mcp"
        } else {
            "without authentication, like /mcp"
        };
        tracing::info!("serving Prometheus metrics on http://{local}/metrics, {auth}");
    }
    let oauth = oauth.map(std::sync::Arc::new);
    if oauth.is_some() && server.config.auth_token.is_some() {
        tracing::info!(
            "both --auth-token and --oauth-mode are set: /mcp accepts the static token and OAuth access tokens"
        );
    }
    if let Some(t) = &server.config.auth_token
        && t.len() < ctm_auth::STRONG_TOKEN_CHARS
    {
        tracing::warn!(
            "the auth token has {} characters, fewer than {}: it is checked only outside the failure backoff, so wrong tokens from many addresses can lock out clients holding it for up to 15 minutes; use a longer one (--generate-auth-token makes one)",
            t.len(),
            ctm_auth::STRONG_TOKEN_CHARS
        );
    }
    let issuer = issuer.map(Arc::new);
    if let Some(i) = issuer.clone() {
        // Early, so a misconfigured issuer shows at start; not fatal (the
        // issuer may start after this server, and keys are fetched on use)
        // and not awaited (a slow issuer must not hold up serving; requests
        // that need the keys wait for this fetch).
        tokio::spawn(async move {
            match i.prefetch().await {
                Ok(n) => tracing::info!(
                    "resource-server mode: accepting access tokens of {} ({n} key(s))",
                    i.issuer()
                ),
                Err(e) => tracing::warn!(
                    "resource-server mode: the keys of {} could not be fetched yet: {e}",
                    i.issuer()
                ),
            }
        });
    }
    let limits = &server.limits;
    let config = ctm_transport_http::HttpConfig {
        max_body_bytes: limits.max_body_bytes,
        extra_allowed_origins: server.config.allowed_origins.clone(),
        deployment_wait_secs: server.config.max_wait_secs,
        server_card: {
            let card = card::server_card(&server);
            ctm_transport_http::CardSource(Arc::new(move |base| card::at_base(card.clone(), base)))
        },
        header_read_timeout: Duration::from_secs(limits.header_read_timeout_secs),
        body_read_timeout: Duration::from_secs(limits.body_read_timeout_secs),
        max_connections: limits.max_http_connections,
        max_connections_per_ip: limits.max_http_connections_per_ip,
        shutdown_grace: Duration::from_secs(limits.shutdown_grace_secs),
        bearer: server
            .config
            .auth_token
            .as_deref()
            .and_then(|t| ctm_auth::BearerToken::new(t).ok()),
        oauth,
        issuer,
        public_base_url: std::env::var("CODING_TOOLS_MCP_SERVER_URL")
            .ok()
            .filter(|u| !u.is_empty()),
        trust_proxy_headers: std::env::var("CODING_TOOLS_MCP_TRUST_PROXY_HEADERS")
            .is_ok_and(|v| cli::truthy(&v)),
        events: server.trace.enabled().then(|| {
            let s = server.clone();
            ctm_transport_http::EventSink(Arc::new(move |name, fields| {
                s.trace.event(name, fields);
            }))
        }),
        metrics: server.metrics.clone().map(|metrics| {
            ctm_transport_http::MetricsSink(Arc::new(metrics::HttpSink {
                metrics,
                exec: server.exec.clone(),
            }))
        }),
    };
    let stopped = Arc::new(std::sync::OnceLock::new());
    let shutdown = {
        let (server, stopped) = (server.clone(), stopped.clone());
        async move {
            let first = signals.next().await;
            let _ = stopped.set(first);
            // In-flight requests waiting on a command return once it is
            // gone, so the connections drain at once.
            let s = server.clone();
            let _ = tokio::task::spawn_blocking(move || s.exec.shutdown()).await;
            // A second signal while requests drain: stop now.
            tokio::spawn(async move {
                let second = signals.next().await;
                tracing::info!("second stop signal: exiting without waiting for requests");
                let _ = tokio::task::spawn_blocking(move || {
                    finish(&server);
                    std::process::exit(128 + i32::from(second));
                })
                .await;
            });
        }
    };
    let (peers, said) = loopback_clients(&server.config);
    match peers {
        ctm_transport_http::PeerPolicy::SameUser { .. } => {
            tracing::info!("HTTP without authentication: {said}");
        }
        _ if server.config.auth_token.is_none()
            && !server.config.oauth_mode
            && server.config.oauth_issuer.is_none() =>
        {
            tracing::warn!(
                "HTTP without authentication: {said}; every local account that connects runs commands as this user (require a token: --auth-token-file)"
            );
        }
        _ => {}
    }
    ctm_transport_http::serve_with_peers(dispatcher, config, listener, shutdown, peers).await?;
    Ok(stopped.get().copied())
}

/// Which local accounts the HTTP transport serves, and the words for it
/// (`server_info.auth.local_users`): without authentication, only this
/// user's loopback clients, where the kernel tells a connection's owner
/// (another account on a shared host would otherwise run commands as this
/// user), unless the operator allows everyone.
pub(crate) fn loopback_clients(
    cfg: &cli::Config,
) -> (ctm_transport_http::PeerPolicy, &'static str) {
    use ctm_transport_http::PeerPolicy;
    if cfg.stdio {
        return (
            PeerPolicy::Anyone,
            "the client that started the server (stdio)",
        );
    }
    if cfg.auth_token.is_some() || cfg.oauth_mode || cfg.oauth_issuer.is_some() {
        return (PeerPolicy::Anyone, "any client with a valid token");
    }
    if cfg.allow_other_users {
        return (
            PeerPolicy::Anyone,
            "any local account (--allow-other-users)",
        );
    }
    if !ctm_transport_http::peer_owner_known() {
        return (
            PeerPolicy::Anyone,
            "any local account (the owner of a loopback connection cannot be told on this host)",
        );
    }
    (
        PeerPolicy::SameUser {
            uid: rustix::process::geteuid().as_raw(),
        },
        "this user's loopback clients only",
    )
}

/// The OAuth server from the environment. The one secret ever printed: a
/// generated authorize password, once, on stderr.
fn oauth_server() -> Result<ctm_auth::OAuthServer, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let rng = ctm_auth::SystemRandom::new();
    let secs = |k: &str, default: u64| -> Result<u64, String> {
        match env(k) {
            None => Ok(default),
            Some(v) => v
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{k} must be a positive number of seconds")),
        }
    };
    let token_key = match env("CODING_TOOLS_MCP_OAUTH_TOKEN_SECRET") {
        Some(hex) => ctm_auth::parse_token_secret(&hex).map_err(|e| e.to_string())?,
        None => ctm_auth::random_token(&rng, 32)
            .map_err(|e| e.to_string())?
            .into_bytes(),
    };
    // As the reference: without CODING_TOOLS_MCP_OAUTH_REDIRECT_URIS the
    // pre-registered client may return to http://127.0.0.1/callback.
    let preregistered = match env("CODING_TOOLS_MCP_OAUTH_CLIENT_ID") {
        None => None,
        Some(id) => {
            let uris: Vec<String> = env("CODING_TOOLS_MCP_OAUTH_REDIRECT_URIS")
                .unwrap_or_else(|| "http://127.0.0.1/callback".into())
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(bad) = uris.iter().find(|u| !ctm_auth::redirect_uri_allowed(u)) {
                return Err(format!(
                    "CODING_TOOLS_MCP_OAUTH_REDIRECT_URIS: {bad} is not https, or http on a loopback host, without a fragment"
                ));
            }
            Some((id, env("CODING_TOOLS_MCP_OAUTH_CLIENT_SECRET"), uris))
        }
    };
    let token_ttl = secs("CODING_TOOLS_MCP_OAUTH_TOKEN_TTL", 24 * 3600)?;
    let code_ttl = secs("CODING_TOOLS_MCP_OAUTH_CODE_TTL", 300)?;
    let unused_client_ttl = secs(
        "CODING_TOOLS_MCP_OAUTH_UNUSED_CLIENT_TTL",
        ctm_auth::DEFAULT_UNUSED_CLIENT_TTL.as_secs(),
    )?;
    let max_clients = match env("CODING_TOOLS_MCP_OAUTH_MAX_CLIENTS") {
        None => ctm_auth::DEFAULT_MAX_CLIENTS,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or("CODING_TOOLS_MCP_OAUTH_MAX_CLIENTS must be a positive number")?,
    };
    // Printed only once every other setting is known to be valid, so a
    // configuration error is the single line on stderr.
    let password = match env("CODING_TOOLS_MCP_OAUTH_PASSWORD") {
        Some(p) => p,
        None => {
            // 24 bytes: 32 characters, strong enough to be checked before any backoff.
            let p = ctm_auth::random_token(&rng, 24).map_err(|e| e.to_string())?;
            eprintln!(
                "coding-tools-mcp: OAuth authorize password (set CODING_TOOLS_MCP_OAUTH_PASSWORD to choose one): {p}"
            );
            p
        }
    };
    Ok(ctm_auth::OAuthServer::new(ctm_auth::OAuthConfig {
        password,
        token_key,
        token_ttl: std::time::Duration::from_secs(token_ttl),
        code_ttl: std::time::Duration::from_secs(code_ttl),
        preregistered,
        max_clients,
        unused_client_ttl: std::time::Duration::from_secs(unused_client_ttl),
    }))
}

/// SIGINT, SIGTERM and SIGHUP, each a request to stop (SIGHUP: the
/// terminal or the session the server ran in is gone). SIGHUP is left alone
/// when the server started with it ignored (`nohup`).
struct StopSignals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let hup_ignored = signal_ignored(1);
        let on = |kind: SignalKind| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot handle signal {}: {e}", kind.as_raw_value());
                None
            }
        };
        Self {
            int: on(SignalKind::interrupt()),
            term: on(SignalKind::terminate()),
            hup: if hup_ignored {
                None
            } else {
                on(SignalKind::hangup())
            },
        }
    }

    /// The number of the next stop signal.
    async fn next(&mut self) -> u8 {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let signal = tokio::select! {
            () = recv(&mut self.int) => 2,
            () = recv(&mut self.term) => 15,
            () = recv(&mut self.hup) => 1,
        };
        let name = match signal {
            2 => "SIGINT",
            15 => "SIGTERM",
            _ => "SIGHUP",
        };
        tracing::info!("{name}: shutting down");
        signal
    }
}

/// Whether signal `n` was ignored when the process started (`SigIgn` of
/// `/proc/self/status`).
#[expect(
    clippy::disallowed_methods,
    reason = "reads the process's own status, not a workspace file"
)]
fn signal_ignored(n: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (n - 1)) != 0)
}
