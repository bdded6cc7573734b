//! The command line, compatible with the Python original's flags and
//! environment variables, and its validation into a [`Config`].

use std::net::IpAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Parser, ValueEnum};

/// Serve workspace-confined coding tools over MCP (stdio or Streamable HTTP).
#[derive(Debug, Parser)]
#[command(name = "coding-tools-mcp", version, about, long_about = None)]
pub struct Cli {
    /// Workspace root every tool is confined to [default: the current directory]
    #[arg(long, env = "CODING_TOOLS_MCP_WORKSPACE")]
    pub workspace: Option<PathBuf>,

    /// Address to bind for HTTP
    #[arg(long, env = "CODING_TOOLS_MCP_HOST", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to bind for HTTP (0 picks a free port, printed on stderr)
    #[arg(long, env = "CODING_TOOLS_MCP_PORT", default_value_t = 8000)]
    pub port: u16,

    /// Serve newline-delimited JSON-RPC on stdin/stdout instead of HTTP
    #[arg(long)]
    pub stdio: bool,

    /// Require `Authorization: Bearer <token>` on /mcp. Prefer
    /// --auth-token-file or the environment variable: a command line is
    /// readable by every user of the machine
    #[arg(long, env = "CODING_TOOLS_MCP_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,

    /// Read the bearer token from this file (first line; trailing whitespace ignored)
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_AUTH_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "auth_token"
    )]
    pub auth_token_file: Option<PathBuf>,

    /// Let commands read and execute beneath DIR too (repeatable;
    /// CODING_TOOLS_MCP_EXEC_ALLOW_ROOTS is `:`-separated)
    #[arg(
        long = "exec-allow-root",
        env = "CODING_TOOLS_MCP_EXEC_ALLOW_ROOTS",
        value_name = "DIR",
        value_delimiter = ':'
    )]
    pub exec_allow_roots: Vec<PathBuf>,

    /// Base directory of the private runtime directory (HOME, TMPDIR of
    /// commands); must be outside the workspace and this user's
    #[arg(long, env = "CODING_TOOLS_MCP_RUNTIME_ROOT", value_name = "DIR")]
    pub runtime_root: Option<PathBuf>,

    /// How HTTP clients authenticate: bearer (a static token is required),
    /// oauth (as --oauth-mode), noauth (never generate a token)
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_AUTH_MODE",
        value_enum,
        ignore_case = true
    )]
    pub auth_mode: Option<AuthMode>,

    /// On a non-loopback HTTP bind without a token or OAuth, generate a
    /// bearer token and print it once on stderr
    #[arg(long, env = "CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN", value_parser = truthy_parser())]
    pub generate_auth_token: bool,

    /// Enable the OAuth 2.1 authorization server (Authorization Code + PKCE S256,
    /// dynamic registration); the authorize page asks for CODING_TOOLS_MCP_OAUTH_PASSWORD
    /// (generated and printed on stderr once when unset)
    #[arg(long, env = "CODING_TOOLS_MCP_OAUTH_MODE", value_parser = truthy_parser())]
    pub oauth_mode: bool,

    /// Resource-server mode: accept the JWT access tokens (RFC 9068) of this
    /// external OAuth authorization server, named by its issuer URL (https,
    /// or http on a loopback host), and serve no OAuth endpoints of our own.
    /// Exclusive with --oauth-mode
    #[arg(long, env = "CODING_TOOLS_MCP_OAUTH_ISSUER", value_name = "URL")]
    pub oauth_issuer: Option<String>,

    /// With --oauth-issuer: a scope every access token must grant (in
    /// `scope` or `scp`); a token without it is answered 403 insufficient_scope
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_OAUTH_REQUIRED_SCOPE",
        value_name = "SCOPE"
    )]
    pub oauth_required_scope: Option<String>,

    /// Serve a non-loopback address without any authentication (anyone who can
    /// reach it can run commands in the workspace)
    #[arg(long, env = "CODING_TOOLS_MCP_ALLOW_UNAUTHENTICATED_REMOTE", value_parser = truthy_parser())]
    pub allow_unauthenticated_remote: bool,

    /// Baseline environment that exec_command children inherit
    #[arg(long, env = "CODING_TOOLS_MCP_SHELL_ENV_INHERIT", value_enum, default_value_t = ShellEnvInherit::Core)]
    pub shell_env_inherit: ShellEnvInherit,

    /// Keep only the inherited variables whose names match one of these
    /// comma-separated globs (case-insensitive), after the secret filter
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_SHELL_ENV_INCLUDE_ONLY",
        value_name = "GLOBS",
        value_delimiter = ','
    )]
    pub shell_env_include_only: Vec<String>,

    /// Drop the inherited variables whose names match one of these
    /// comma-separated globs (case-insensitive)
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_SHELL_ENV_EXCLUDE",
        value_name = "GLOBS",
        value_delimiter = ','
    )]
    pub shell_env_exclude: Vec<String>,

    /// Variables every command gets, as a JSON object of strings
    /// (not filtered: the operator chose them; HOME and TMPDIR stay private)
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_SHELL_ENV_SET",
        value_name = "JSON",
        hide_env_values = true
    )]
    pub shell_env_set: Option<String>,

    /// Sandbox of commands in safe and trusted mode: auto (bubblewrap
    /// namespaces where the host allows them, else Landlock alone),
    /// namespace (required: exit 2 without it), landlock (Landlock alone)
    #[arg(long, env = "CODING_TOOLS_MCP_SANDBOX", value_enum, default_value_t = SandboxTier::Auto, ignore_case = true)]
    pub sandbox: SandboxTier,

    /// Safe mode: refuse to start (exit 2) unless the git seal is complete
    /// for this workspace (the namespace tier, the copy-on-write .git, every
    /// path git's config names covered)
    #[arg(long, env = "CODING_TOOLS_MCP_REQUIRE_GIT_SEAL", value_parser = truthy_parser())]
    pub require_git_seal: bool,

    /// Command policy: safe refuses network, shell expansion and inline scripts;
    /// trusted allows local development; dangerous disables the gates
    #[arg(long, env = "CODING_TOOLS_MCP_PERMISSION_MODE", value_enum)]
    pub permission_mode: Option<PermissionMode>,

    /// Allow network-looking commands without opening any other gate
    #[arg(long, env = "CODING_TOOLS_MCP_ALLOW_NETWORK", value_parser = truthy_parser())]
    pub allow_network: bool,

    /// Over HTTP without authentication, serve loopback clients of other
    /// local accounts too (by default only this user's)
    #[arg(long, env = "CODING_TOOLS_MCP_ALLOW_OTHER_USERS", value_parser = truthy_parser())]
    pub allow_other_users: bool,

    /// Whether commands may write the workspace: unrestricted, or
    /// structured-only (commands see it read-only; only apply_patch and
    /// apply_changes write it, and commands the --write-path directories)
    #[arg(long, env = "CODING_TOOLS_MCP_WORKSPACE_MUTATION", value_enum, default_value_t = WorkspaceMutation::Unrestricted, ignore_case = true)]
    pub workspace_mutation: WorkspaceMutation,

    /// With --workspace-mutation structured-only: a workspace directory
    /// commands may still write, made when the first command starts
    /// (repeatable; CODING_TOOLS_MCP_WRITE_PATHS is `:`-separated)
    #[arg(
        long = "write-path",
        env = "CODING_TOOLS_MCP_WRITE_PATHS",
        value_name = "DIR",
        value_delimiter = ':'
    )]
    pub write_paths: Vec<PathBuf>,

    /// The tool catalog: 0.3 (the v0.3 contract's 18 tools) or 0.5 (the
    /// reference 0.5.0's: apply_changes, file revisions, idempotency keys)
    #[arg(long, env = "CODING_TOOLS_MCP_CATALOG", value_name = "VERSION", default_value = "0.3", value_parser = ["0.3", "0.5"])]
    pub catalog: String,

    /// Serve view_image (on by default; CODING_TOOLS_MCP_ENABLE_VIEW_IMAGE=0 removes it)
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_ENABLE_VIEW_IMAGE",
        value_name = "BOOL",
        num_args = 0..=1,
        default_value = "true",
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub enable_view_image: bool,

    /// Alias of --permission-mode dangerous (workspace path boundaries still apply)
    #[arg(long, env = "CODING_TOOLS_MCP_DANGEROUSLY_SKIP_ALL_PERMISSIONS", value_parser = truthy_parser())]
    pub dangerously_skip_all_permissions: bool,

    /// Report every tool as read-only in tools/list for clients that refuse
    /// mutating tools; mutation still happens. Requires dangerous mode, and
    /// authentication over HTTP; server_info and the server card keep the real
    /// annotations
    #[arg(long, env = "CODING_TOOLS_MCP_DANGEROUSLY_FAKE_READONLY_ANNOTATIONS", value_parser = truthy_parser())]
    pub dangerously_fake_readonly_annotations: bool,

    /// Longest synchronous wait of one request, in seconds (HTTP clients may ask
    /// for less, or up to this, with X-Coding-Tools-Budget-Secs)
    #[arg(long, env = "CODING_TOOLS_MCP_MAX_WAIT_SECS", default_value_t = 30)]
    pub max_wait_secs: u64,

    /// Largest file apply_patch reads to update, move or delete it, in bytes;
    /// larger ones are refused (PATCH_FAILED, reason file_too_large) before
    /// they are read. A patch holds about twice the file in memory
    #[arg(
        long,
        env = "CODING_TOOLS_MCP_PATCH_MAX_FILE_BYTES",
        default_value_t = ctm_patch_engine::DEFAULT_MAX_FILE_BYTES
    )]
    pub patch_max_file_bytes: u64,

    /// Most bytes of files one apply_patch call reads in all, each file counted
    /// every time the patch names it; a larger patch is refused (PATCH_FAILED,
    /// reason patch_too_large) before its files are read. Default: four times
    /// --patch-max-file-bytes (128 MiB)
    #[arg(long, env = "CODING_TOOLS_MCP_PATCH_MAX_TOTAL_BYTES")]
    pub patch_max_total_bytes: Option<u64>,

    /// Append structuredContent as JSON text for text-only clients
    #[arg(long, env = "CODING_TOOLS_MCP_TEXT_JSON", value_parser = truthy_parser())]
    pub text_json: bool,

    /// Write a JSON-lines trace to stderr (CODING_TOOLS_MCP_TRACE=1, or =full for payload sizes and redacted previews)
    #[arg(long)]
    pub trace: bool,

    /// Write the trace to this file instead of stderr (turns the trace on)
    #[arg(long, value_name = "PATH")]
    pub trace_file: Option<PathBuf>,

    /// Serve Prometheus metrics on GET /metrics of the HTTP port, behind the
    /// same authentication as /mcp (HTTP only; off by default: no route)
    #[arg(long, env = "CODING_TOOLS_MCP_METRICS", value_parser = truthy_parser())]
    pub metrics: bool,

    /// Extra allowed browser Origin for HTTP (repeatable; loopback origins are always allowed)
    #[arg(
        long = "allowed-origin",
        env = "CODING_TOOLS_MCP_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,
}

/// A boolean environment value as the reference reads them: `1`, `true`,
/// `yes`, `on` (any case) are true, anything else false. A bare flag is true.
fn truthy_parser() -> impl clap::builder::TypedValueParser<Value = bool> {
    clap::builder::StringValueParser::new().map(|v: String| truthy(&v))
}

/// The reference's reading of a boolean environment value.
pub fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxTier {
    Auto,
    Namespace,
    Landlock,
}

/// `--workspace-mutation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkspaceMutation {
    Unrestricted,
    StructuredOnly,
}

/// `--auth-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    Bearer,
    Oauth,
    Noauth,
}

/// `--shell-env-inherit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellEnvInherit {
    Core,
    All,
    None,
}

/// `--permission-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PermissionMode {
    Safe,
    Trusted,
    Dangerous,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Safe => "safe",
            Self::Trusted => "trusted",
            Self::Dangerous => "dangerous",
        }
    }
}

impl ShellEnvInherit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Core => "core",
            Self::All => "all",
            Self::None => "none",
        }
    }
}

/// How much the trace records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceLevel {
    Off,
    Metadata,
    Full,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub workspace: PathBuf,
    pub host: String,
    pub port: u16,
    pub stdio: bool,
    pub auth_token: Option<String>,
    pub oauth_mode: bool,
    /// The external authorization server of resource-server mode.
    pub oauth_issuer: Option<String>,
    pub oauth_required_scope: Option<String>,
    pub exec_allow_roots: Vec<PathBuf>,
    pub runtime_root: Option<PathBuf>,
    pub shell_env_inherit: ShellEnvInherit,
    pub env_policy: ctm_exec_runtime::EnvPolicy,
    pub sandbox_tier: ctm_exec_runtime::TierChoice,
    /// Refuse to start without a complete git seal.
    pub require_git_seal: bool,
    /// A bearer token this process generated (printed once at start).
    pub generated_token: bool,
    pub permission_mode: PermissionMode,
    pub allow_network: bool,
    /// Loopback clients of other local accounts are served without a token.
    pub allow_other_users: bool,
    pub view_image: bool,
    /// The catalog served.
    pub catalog: crate::catalog::CatalogVersion,
    pub workspace_mutation: WorkspaceMutation,
    /// Workspace-relative, as given (resolved at start-up).
    pub write_paths: Vec<PathBuf>,
    pub dangerously_skip_all_permissions: bool,
    pub fake_readonly_annotations: bool,
    pub max_wait_secs: u64,
    pub patch_max_file_bytes: u64,
    pub patch_max_total_bytes: u64,
    pub text_json: bool,
    pub trace: TraceLevel,
    pub trace_file: Option<PathBuf>,
    pub allowed_origins: Vec<String>,
    /// Serve `GET /metrics` (HTTP only).
    pub metrics: bool,
}

fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_matches(['[', ']'])
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// `CODING_TOOLS_MCP_TRACE`: unset/0/false → off, `full` → full, anything else → metadata.
pub fn trace_level(flag: bool, env: Option<&str>) -> TraceLevel {
    match env.map(str::trim) {
        Some("full") => TraceLevel::Full,
        Some("" | "0" | "false" | "no" | "off") | None => {
            if flag {
                TraceLevel::Metadata
            } else {
                TraceLevel::Off
            }
        }
        Some(_) => TraceLevel::Metadata,
    }
}

/// Comma-separated patterns, trimmed, empty ones dropped.
fn clean_patterns(v: Vec<String>) -> Vec<String> {
    v.into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// `CODING_TOOLS_MCP_SHELL_ENV_SET`: a JSON object whose values are strings
/// (numbers are taken as their text).
fn parse_env_set(json: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    const WHAT: &str = "CODING_TOOLS_MCP_SHELL_ENV_SET must be a JSON object of strings";
    // Messages never echo a value: it may be a secret the operator passes.
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| {
        format!(
            "{WHAT}: not JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(format!("{WHAT}: the value is not an object"));
    };
    map.into_iter()
        .map(|(k, v)| {
            let text = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    let kind = match other {
                        serde_json::Value::Bool(_) => "a boolean",
                        serde_json::Value::Null => "null",
                        serde_json::Value::Array(_) => "an array",
                        _ => "an object",
                    };
                    return Err(format!("{WHAT}: {k} is {kind}"));
                }
            };
            if k.is_empty() || k.contains(['=', '\0']) || text.contains('\0') {
                return Err(format!("{WHAT}: {k:?} cannot be an environment variable"));
            }
            Ok((k, text))
        })
        .collect()
}

impl Cli {
    /// Checks the combinations; the error is the one-line reason for exit 2.
    pub fn validate(self, trace_env: Option<&str>) -> Result<Config, String> {
        if self.workspace_mutation != WorkspaceMutation::StructuredOnly
            && self.write_paths.iter().any(|p| !p.as_os_str().is_empty())
        {
            return Err(
                "--write-path (CODING_TOOLS_MCP_WRITE_PATHS) needs --workspace-mutation structured-only: without it commands write the whole workspace".into(),
            );
        }
        let mode = match (self.permission_mode, self.dangerously_skip_all_permissions) {
            (Some(m), true) if m != PermissionMode::Dangerous => {
                return Err(format!(
                    "--dangerously-skip-all-permissions means --permission-mode dangerous, but --permission-mode {} was given",
                    m.as_str()
                ));
            }
            (_, true) => PermissionMode::Dangerous,
            (Some(m), false) => m,
            (None, false) => PermissionMode::Safe,
        };
        let workspace = match self.workspace {
            Some(w) => w,
            None => std::env::current_dir()
                .map_err(|e| format!("cannot read the current directory: {e}"))?,
        };
        if !workspace.is_dir() {
            return Err(format!(
                "--workspace {} is not an existing directory",
                workspace.display()
            ));
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "the operator's token file, named on the command line, not workspace content"
        )]
        let from_file = match &self.auth_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("--auth-token-file {}: cannot read it: {e}", path.display())
                })?;
                let token = text.lines().next().unwrap_or_default().trim().to_owned();
                if token.is_empty() {
                    return Err(format!(
                        "--auth-token-file {}: the file holds no token",
                        path.display()
                    ));
                }
                Some(token)
            }
            None => None,
        };
        let mut auth_token = from_file.or(self.auth_token.filter(|t| !t.is_empty()));
        let oauth_mode = self.oauth_mode || self.auth_mode == Some(AuthMode::Oauth);
        let oauth_issuer = self.oauth_issuer.filter(|u| !u.is_empty());
        let oauth_required_scope = self.oauth_required_scope.filter(|s| !s.is_empty());
        if oauth_issuer.is_some() && oauth_mode {
            return Err(
                "--oauth-issuer (an external authorization server issues the tokens) and --oauth-mode (this server issues them) are exclusive; choose one".into(),
            );
        }
        if oauth_required_scope.is_some() && oauth_issuer.is_none() {
            return Err("--oauth-required-scope needs --oauth-issuer".into());
        }
        // As the reference: a token is generated for a non-loopback bind that
        // has no other authentication, unless noauth was chosen; bearer mode
        // asks for a token on any bind.
        let generate = !self.stdio
            && self.generate_auth_token
            && auth_token.is_none()
            && !oauth_mode
            && oauth_issuer.is_none()
            && match self.auth_mode {
                Some(AuthMode::Noauth) => false,
                Some(AuthMode::Bearer) => true,
                _ => !is_loopback_host(&self.host),
            };
        if generate {
            let rng = ctm_auth::SystemRandom::new();
            auth_token = Some(
                ctm_auth::random_token(&rng, 32)
                    .map_err(|e| format!("cannot generate a bearer token: {e}"))?,
            );
        }
        if !self.stdio && self.auth_mode == Some(AuthMode::Bearer) && auth_token.is_none() {
            return Err(
                "CODING_TOOLS_MCP_AUTH_MODE=bearer needs a token: --auth-token-file, CODING_TOOLS_MCP_AUTH_TOKEN, or CODING_TOOLS_MCP_GENERATE_AUTH_TOKEN=1".into(),
            );
        }
        let env_policy = ctm_exec_runtime::EnvPolicy {
            include_only: clean_patterns(self.shell_env_include_only),
            exclude: clean_patterns(self.shell_env_exclude),
            set: match self.shell_env_set.as_deref().map(str::trim) {
                None | Some("") => Default::default(),
                Some(json) => parse_env_set(json)?,
            },
        };
        if let Some(t) = &auth_token
            && ctm_auth::BearerToken::new(t).is_err()
        {
            return Err(
                "--auth-token must be visible ASCII without spaces (CODING_TOOLS_MCP_AUTH_TOKEN)"
                    .into(),
            );
        }
        let authenticated = auth_token.is_some() || oauth_mode || oauth_issuer.is_some();
        if self.dangerously_fake_readonly_annotations {
            if mode != PermissionMode::Dangerous {
                return Err(
                    "--dangerously-fake-readonly-annotations requires --permission-mode dangerous"
                        .into(),
                );
            }
            if !self.stdio && !authenticated {
                return Err(
                    "--dangerously-fake-readonly-annotations over HTTP requires --auth-token"
                        .into(),
                );
            }
        }
        if !self.stdio
            && !is_loopback_host(&self.host)
            && !authenticated
            && !self.allow_unauthenticated_remote
        {
            return Err(format!(
                "binding {} (not loopback) requires --auth-token, --oauth-mode or --oauth-issuer (or, knowingly, --allow-unauthenticated-remote)",
                self.host
            ));
        }
        if self.metrics && self.stdio {
            return Err(
                "--metrics serves GET /metrics on the HTTP port; it cannot be used with --stdio"
                    .into(),
            );
        }
        if self.max_wait_secs == 0 {
            return Err("--max-wait-secs must be at least 1".into());
        }
        if self.patch_max_file_bytes == 0 {
            return Err("--patch-max-file-bytes must be at least 1".into());
        }
        if self.patch_max_total_bytes == Some(0) {
            return Err("--patch-max-total-bytes must be at least 1".into());
        }
        Ok(Config {
            workspace,
            host: self.host,
            port: self.port,
            stdio: self.stdio,
            auth_token,
            generated_token: generate,
            oauth_mode,
            oauth_issuer,
            oauth_required_scope,
            exec_allow_roots: self
                .exec_allow_roots
                .into_iter()
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            runtime_root: self.runtime_root.filter(|p| !p.as_os_str().is_empty()),
            shell_env_inherit: self.shell_env_inherit,
            env_policy,
            sandbox_tier: match self.sandbox {
                SandboxTier::Auto => ctm_exec_runtime::TierChoice::Auto,
                SandboxTier::Namespace => ctm_exec_runtime::TierChoice::Namespace,
                SandboxTier::Landlock => ctm_exec_runtime::TierChoice::Landlock,
            },
            require_git_seal: self.require_git_seal,
            permission_mode: mode,
            allow_network: self.allow_network,
            allow_other_users: self.allow_other_users,
            view_image: self.enable_view_image,
            workspace_mutation: self.workspace_mutation,
            write_paths: self
                .write_paths
                .into_iter()
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            catalog: match self.catalog.as_str() {
                "0.5" => crate::catalog::CatalogVersion::V05,
                _ => crate::catalog::CatalogVersion::V03,
            },
            dangerously_skip_all_permissions: self.dangerously_skip_all_permissions,
            fake_readonly_annotations: self.dangerously_fake_readonly_annotations,
            max_wait_secs: self.max_wait_secs,
            patch_max_file_bytes: self.patch_max_file_bytes,
            patch_max_total_bytes: self
                .patch_max_total_bytes
                .unwrap_or(self.patch_max_file_bytes.saturating_mul(4)),
            text_json: self.text_json,
            // A trace file is asked for to be written: it turns the trace on.
            trace: trace_level(self.trace || self.trace_file.is_some(), trace_env),
            trace_file: self.trace_file,
            allowed_origins: self
                .allowed_origins
                .into_iter()
                .filter(|o| !o.is_empty())
                .collect(),
            metrics: self.metrics,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let mut all = vec!["coding-tools-mcp", "--workspace", "."];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .validate(None)
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.host, "127.0.0.1");
        assert_eq!(c.port, 8000);
        assert_eq!(c.permission_mode, PermissionMode::Safe);
        assert!(c.view_image);
        assert_eq!(c.max_wait_secs, 30);
        assert_eq!(c.patch_max_file_bytes, 32 * 1024 * 1024);
        assert_eq!(c.patch_max_total_bytes, 128 * 1024 * 1024);
        let c = parse(&["--patch-max-file-bytes", "100"]).unwrap();
        assert_eq!(c.patch_max_total_bytes, 400);
        let c = parse(&["--patch-max-total-bytes", "7"]).unwrap();
        assert_eq!(c.patch_max_total_bytes, 7);
        assert!(parse(&["--patch-max-total-bytes", "0"]).is_err());
    }

    #[test]
    fn invalid_combinations() {
        assert!(parse(&["--dangerously-fake-readonly-annotations", "--stdio"]).is_err());
        assert!(
            parse(&[
                "--dangerously-fake-readonly-annotations",
                "--permission-mode",
                "dangerous"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "--dangerously-fake-readonly-annotations",
                "--permission-mode",
                "dangerous",
                "--stdio"
            ])
            .is_ok()
        );
        assert!(
            parse(&[
                "--dangerously-fake-readonly-annotations",
                "--permission-mode",
                "dangerous",
                "--auth-token",
                "t"
            ])
            .is_ok()
        );
        assert!(
            parse(&[
                "--dangerously-skip-all-permissions",
                "--permission-mode",
                "safe"
            ])
            .is_err()
        );
        assert_eq!(
            parse(&["--dangerously-skip-all-permissions"])
                .unwrap()
                .permission_mode,
            PermissionMode::Dangerous
        );
        assert!(parse(&["--host", "0.0.0.0"]).is_err());
        assert!(parse(&["--host", "0.0.0.0", "--auth-token", "t"]).is_ok());
        assert!(parse(&["--host", "::1"]).is_ok());
        assert!(parse(&["--max-wait-secs", "0"]).is_err());
        assert!(parse(&["--auth-token", "a b"]).is_err());
        assert!(parse(&["--oauth-mode"]).is_ok());
        assert!(parse(&["--host", "0.0.0.0", "--oauth-mode"]).is_ok());
        let issuer = ["--oauth-issuer", "https://idp.example"];
        assert!(parse(&issuer).is_ok());
        assert!(parse(&["--host", "0.0.0.0", issuer[0], issuer[1]]).is_ok());
        let both = parse(&["--oauth-mode", issuer[0], issuer[1]]).unwrap_err();
        assert!(both.contains("exclusive"), "{both}");
        assert!(parse(&["--auth-mode", "oauth", issuer[0], issuer[1]]).is_err());
        assert!(parse(&["--oauth-required-scope", "mcp"]).is_err());
        assert!(
            parse(&[issuer[0], issuer[1], "--oauth-required-scope", "mcp"])
                .is_ok_and(|c| c.oauth_required_scope.as_deref() == Some("mcp"))
        );
        assert!(parse(&["--host", "0.0.0.0", "--allow-unauthenticated-remote"]).is_ok());
        assert!(parse(&["--enable-view-image", "0"]).is_ok_and(|c| !c.view_image));
        assert!(parse(&["--enable-view-image"]).is_ok_and(|c| c.view_image));
        assert!(parse(&["--allow-network"]).is_ok_and(|c| c.allow_network));
        assert!(parse(&["--metrics"]).is_ok_and(|c| c.metrics));
        assert!(parse(&[]).is_ok_and(|c| !c.metrics));
        assert!(parse(&["--metrics", "--stdio"]).is_err());
    }

    #[test]
    fn trace_levels() {
        assert_eq!(trace_level(false, None), TraceLevel::Off);
        assert_eq!(trace_level(false, Some("0")), TraceLevel::Off);
        assert_eq!(trace_level(true, None), TraceLevel::Metadata);
        assert_eq!(trace_level(false, Some("1")), TraceLevel::Metadata);
        assert_eq!(trace_level(false, Some("full")), TraceLevel::Full);
    }
}
