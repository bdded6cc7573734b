//! Every limit of the server, in one value with documented defaults.

use ctm_exec_runtime::RetentionBudget;
use ctm_workspace_fs::ContextLimits;

use crate::envelope::EMERGENCY_TEXT_CEILING;
use crate::output::tool_result;

/// The limits `server_info` reports and every component obeys.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest HTTP request body (1 MiB).
    pub max_body_bytes: usize,
    /// Emergency ceiling on one result's text.
    pub emergency_text_ceiling: usize,
    /// Deployment maximum synchronous wait (`--max-wait-secs`).
    pub max_wait_secs: u64,
    /// How long an HTTP client may take to send its headers.
    pub header_read_timeout_secs: u64,
    /// How long an HTTP client may take to send its body.
    pub body_read_timeout_secs: u64,
    /// HTTP connections served at once.
    pub max_http_connections: usize,
    /// HTTP connections one client address (IPv4, or IPv6 /64) may hold.
    pub max_http_connections_per_ip: usize,
    /// How long shutdown waits for in-flight HTTP requests.
    pub shutdown_grace_secs: u64,
    /// Largest file apply_patch reads (`--patch-max-file-bytes`).
    pub patch_max_file_bytes: u64,
    /// Most bytes of files one apply_patch call reads (`--patch-max-total-bytes`).
    pub patch_max_total_bytes: u64,
    /// Project-context budgets.
    pub context: ContextLimits,
    /// Command output retention.
    pub retention: RetentionBudget,
}

impl Limits {
    pub fn new(max_wait_secs: u64) -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            emergency_text_ceiling: EMERGENCY_TEXT_CEILING,
            max_wait_secs,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 10,
            max_http_connections: 256,
            max_http_connections_per_ip: 64,
            shutdown_grace_secs: 5,
            patch_max_file_bytes: ctm_patch_engine::DEFAULT_MAX_FILE_BYTES,
            patch_max_total_bytes: ctm_patch_engine::DEFAULT_MAX_PATCH_BYTES,
            context: ContextLimits::default(),
            retention: RetentionBudget::default(),
        }
    }

    /// The limits as `server_info` reports them.
    pub fn report(&self) -> LimitsReport {
        let c = &self.context;
        LimitsReport {
            max_body_bytes: self.max_body_bytes,
            emergency_text_ceiling_bytes: self.emergency_text_ceiling,
            max_wait_secs: self.max_wait_secs,
            header_read_timeout_secs: self.header_read_timeout_secs,
            body_read_timeout_secs: self.body_read_timeout_secs,
            max_http_connections: self.max_http_connections,
            max_http_connections_per_ip: self.max_http_connections_per_ip,
            view_image: ViewImageLimits {
                max_concurrent_decodes: crate::tools::MAX_CONCURRENT_DECODES,
                max_decode_pixels: ctm_workspace_fs::MAX_DECODE_PIXELS,
            },
            apply_patch: PatchLimits {
                max_file_bytes: self.patch_max_file_bytes,
                max_total_bytes: self.patch_max_total_bytes,
            },
            project_context: ContextLimitsReport {
                max_files: c.max_files,
                per_file_bytes: c.per_file_bytes,
                total_bytes: c.total_bytes,
                max_scan_entries: c.max_scan_entries,
                max_depth: c.max_depth,
                max_nested: c.max_nested,
            },
            commands: self.commands(),
        }
    }

    /// The command limits, as `server_info` and `check_exec_environment`
    /// report them.
    pub fn commands(&self) -> CommandLimits {
        let r = &self.retention;
        CommandLimits {
            max_active_commands: r.max_active_commands,
            max_retained_commands: r.max_retained_commands,
            retained_ttl_secs: r.retained_ttl_secs,
            max_total_retained_bytes: r.max_total_bytes,
        }
    }
}

tool_result! {
    /// The `limits` section of `server_info`.
    pub struct LimitsReport {
        max_body_bytes: usize,
        emergency_text_ceiling_bytes: usize,
        max_wait_secs: u64,
        header_read_timeout_secs: u64,
        body_read_timeout_secs: u64,
        max_http_connections: usize,
        max_http_connections_per_ip: usize,
        view_image: ViewImageLimits,
        apply_patch: PatchLimits,
        project_context: ContextLimitsReport,
        commands: CommandLimits,
    }
}

tool_result! {
    /// How many images `view_image` decodes at once, and how large.
    pub struct ViewImageLimits {
        max_concurrent_decodes: usize,
        max_decode_pixels: u64,
    }
}

tool_result! {
    /// How much of the files `apply_patch` reads.
    pub struct PatchLimits {
        max_file_bytes: u64,
        max_total_bytes: u64,
    }
}

tool_result! {
    /// The project-context budgets.
    pub struct ContextLimitsReport {
        max_files: usize,
        per_file_bytes: usize,
        total_bytes: usize,
        max_scan_entries: usize,
        max_depth: usize,
        max_nested: usize,
    }
}

tool_result! {
    /// How many commands run and stay readable, and for how long.
    pub struct CommandLimits {
        max_active_commands: usize,
        max_retained_commands: usize,
        retained_ttl_secs: u64,
        max_total_retained_bytes: usize,
    }
}
