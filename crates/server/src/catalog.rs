//! The tool catalog as data: names, titles, descriptions, input properties with
//! their JSON Schema constraints, and the truthful annotations.
//!
//! This is the one place the catalog is written down. `tools/list`, argument
//! validation, `server_info`, the server card and `docs/tools.md` are all
//! derived from it.

use serde_json::{Map, Value, json};

use crate::args::{ToolArgs, choice_enum, tool_args};
use crate::output::Shape;
use crate::tools::{changes, exec, files, git, patch, request_permissions, server_info};

choice_enum! {
    /// The order of `list_dir` entries.
    pub enum ListSort { Name = "name", Type = "type", Modified = "modified" }
}

choice_enum! {
    /// The order of `list_files` results.
    pub enum FilesSort { Path = "path", Modified = "modified" }
}

choice_enum! {
    /// How much of a command's output an answer carries.
    pub enum Verbosity { Summary = "summary", Preview = "preview", Full = "full" }
}

choice_enum! {
    /// How much `server_info` and `check_exec_environment` report.
    pub enum Detail { Summary = "summary", Full = "full" }
}

choice_enum! {
    /// The first signal `kill_command` sends.
    pub enum KillSignal { Term = "TERM", Kill = "KILL", Int = "INT" }
}

choice_enum! {
    /// A command's output stream.
    pub enum OutputStream { Stdout = "stdout", Stderr = "stderr" }
}

choice_enum! {
    /// How long a requested grant would last.
    pub enum GrantScope { Once = "once", Session = "session" }
}

/// What a property accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string, optionally non-empty, optionally one of `choices`.
    Str {
        min_len: Option<u64>,
        choices: &'static [&'static str],
        default: Option<&'static str>,
    },
    /// A non-negative integer in `min..=max` (integral floats accepted).
    Int {
        min: u64,
        max: Option<u64>,
        default: Option<u64>,
    },
    /// A boolean.
    Bool { default: Option<bool> },
    /// An array of strings.
    StrList,
    /// An object whose values are strings.
    StrMap,
    /// Any object.
    Object,
    /// An idempotency key: a string of 1 to 128 characters.
    Key,
    /// `apply_changes`' array of changes: its schema is [`changes_schema`];
    /// the adapter reads each entry and refuses what it cannot take.
    Changes,
}

/// One input property.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
}

/// MCP tool annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotations {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// The tools, one variant each: dispatch matches it exhaustively, so a
/// catalog entry without an adapter does not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    ServerInfo,
    CheckExecEnvironment,
    ReadFile,
    ListDir,
    ListFiles,
    SearchText,
    ApplyPatch,
    ApplyChanges,
    ExecCommand,
    WriteStdin,
    KillCommand,
    ReadOutput,
    GitStatus,
    GitDiff,
    GitLog,
    GitShow,
    GitBlame,
    RequestPermissions,
    ViewImage,
}

/// How a host that defers tools should treat one (docs/clients.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientHint {
    /// In the model's tool list from the first turn: the tools of every
    /// turn of the coding loop (read, find, change, run, answer a prompt,
    /// page a command's output — the continuation exec results name).
    AlwaysLoad,
    /// Behind the host's tool search, found by these words.
    Search(&'static str),
}

impl Tool {
    /// See [`ClientHint`].
    pub const fn client_hint(self) -> ClientHint {
        use ClientHint::{AlwaysLoad, Search};
        match self {
            Tool::ReadFile
            | Tool::ListFiles
            | Tool::SearchText
            | Tool::ApplyPatch
            | Tool::ApplyChanges
            | Tool::ExecCommand
            | Tool::WriteStdin
            | Tool::ReadOutput => AlwaysLoad,
            Tool::ServerInfo => Search("server version, limits, auth and tool list"),
            Tool::CheckExecEnvironment => {
                Search("command sandbox, network and permission gates before running commands")
            }
            Tool::ListDir => Search("list a directory tree with sizes"),
            Tool::KillCommand => Search("stop or signal a running command"),
            Tool::GitStatus => Search("git status: changed, staged and untracked files"),
            Tool::GitDiff => Search("git diff of the working tree or the index"),
            Tool::GitLog => Search("git log: recent commits"),
            Tool::GitShow => Search("git show a commit with its diff"),
            Tool::GitBlame => Search("git blame: who changed each line"),
            Tool::RequestPermissions => Search("ask the operator for a refused permission"),
            Tool::ViewImage => Search("look at an image file (PNG, JPEG, GIF, WebP)"),
        }
    }

    /// The characters of a result a host should keep inline (Claude Code
    /// saves a longer one to a file outside the workspace, which the model
    /// must then read with other tools): declared for the tools whose
    /// default call is bounded in bytes above its default limit of 50,000
    /// characters — twice the default byte limits (JSON escaping) plus
    /// room for the other fields. Larger explicit limits are the host's to
    /// divert.
    pub const fn inline_result_chars(self) -> Option<u32> {
        match self {
            // A 128 KiB page.
            Tool::ReadFile => Some(280_000),
            // Two streams of 64 KiB.
            Tool::ExecCommand | Tool::WriteStdin => Some(280_000),
            // A 256 KiB diff.
            Tool::GitDiff | Tool::GitShow => Some(540_000),
            _ => None,
        }
    }
}

/// One tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    pub tool: Tool,
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub annotations: Annotations,
    pub params: &'static [Param],
    /// The schema of a success's fields (from its [`tool_result!`]
    /// struct).
    ///
    /// [`tool_result!`]: crate::output::tool_result
    pub output: Option<Output>,
}

/// A tool's result type, as the schemas that describe it.
#[derive(Clone, Copy)]
pub struct Output {
    /// Every field with its whole schema ([`Shape::shape`]).
    pub shape: fn() -> Value,
    /// The `outputSchema` of `tools/list` ([`Shape::output_schema`]).
    pub listed: fn() -> Value,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").finish_non_exhaustive()
    }
}

impl Output {
    /// The schemas of result type `T`.
    pub const fn of<T: Shape>() -> Self {
        Self {
            shape: T::shape,
            listed: T::output_schema,
        }
    }
}

/// One property as declared in a [`tool_args!`] struct: the field's
/// identifier names it. Properties carry no description of their own: the
/// name, type and bounds say it, and the tool's description says the rest
/// (issue 19: the catalog is read in every conversation).
#[derive(Debug, Clone, Copy)]
pub struct Decl {
    pub kind: Kind,
    pub required: bool,
}

impl Decl {
    /// The property under its wire name.
    pub const fn named(self, name: &'static str) -> Param {
        Param {
            name,
            kind: self.kind,
            required: self.required,
        }
    }
}

impl Kind {
    /// Whether the catalog states a default for this property.
    pub const fn has_default(&self) -> bool {
        match self {
            Kind::Str { default, .. } => default.is_some(),
            Kind::Int { default, .. } => default.is_some(),
            Kind::Bool { default } => default.is_some(),
            Kind::StrList | Kind::StrMap | Kind::Object | Kind::Key | Kind::Changes => false,
        }
    }
}

const fn req(kind: Kind) -> Decl {
    Decl {
        kind,
        required: true,
    }
}

const fn opt(kind: Kind) -> Decl {
    Decl {
        kind,
        required: false,
    }
}

const fn string() -> Kind {
    Kind::Str {
        min_len: None,
        choices: &[],
        default: None,
    }
}

/// The output parameters every exec tool takes.
const MAX_OUTPUT_BYTES: Decl = opt(int(1, Some(MIB), Some(64 * 1024)));
const VERBOSITY_PARAM: Decl = opt(choice(Verbosity::NAMES, None));
const PREVIEW_BYTES: Decl = opt(int(1, Some(MIB), Some(4_096)));

const fn non_empty() -> Kind {
    Kind::Str {
        min_len: Some(1),
        choices: &[],
        default: None,
    }
}

const fn string_or(default: &'static str) -> Kind {
    Kind::Str {
        min_len: None,
        choices: &[],
        default: Some(default),
    }
}

/// Every permission a refusal can name: the command gates
/// (`ctm_exec_runtime::Permission::ALL`) and apply_patch's `.git` gate. A
/// test keeps the two in step.
pub const REQUESTABLE_PERMISSIONS: [&str; 8] = [
    "network",
    "shell_expansion",
    "inline_script",
    "destructive_command",
    "filesystem_escape",
    "privileged_executable",
    "sensitive_env",
    "write_git_dir",
];

const fn choice(choices: &'static [&'static str], default: Option<&'static str>) -> Kind {
    Kind::Str {
        min_len: None,
        choices,
        default,
    }
}

const fn int(min: u64, max: Option<u64>, default: Option<u64>) -> Kind {
    Kind::Int { min, max, default }
}

const fn boolean(default: bool) -> Kind {
    Kind::Bool {
        default: Some(default),
    }
}

const READ_ONLY: Annotations = Annotations {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

const MIB: u64 = 1024 * 1024;

/// How long `exec_command` and `write_stdin` wait by default, and the
/// poll a running command's answer suggests.
pub const DEFAULT_YIELD_MS: u64 = 10_000;

/// The context lines of a `git_diff`/`git_show` diff by default.
pub const GIT_CONTEXT_LINES: u32 = 3;

/// The bytes of a `git_diff`/`git_show` answer by default.
pub const GIT_MAX_BYTES: usize = 256 * 1024;

/// The most entries `list_dir` returns (its `max_entries` bound).
pub const LIST_DIR_MAX_ENTRIES: u64 = 10_000;

/// The most files `list_files` returns (its `max_results` bound).
pub const LIST_FILES_MAX_RESULTS: u64 = 50_000;

/// The most matches `search_text` returns (its `max_results` bound).
pub const SEARCH_MAX_RESULTS: u64 = 10_000;

/// The most entries `git_status` returns (its `max_entries` bound).
pub const GIT_STATUS_MAX_ENTRIES: u64 = 10_000;

/// The most `max_bytes` a `git_diff`/`git_show` call may ask for.
pub const GIT_MAX_BYTES_LIMIT: u64 = MIB;

/// The most `max_bytes` a `read_file` call may ask for.
pub const READ_MAX_BYTES: u64 = MIB;

const PATH_DOT: Decl = opt(string_or("."));

tool_args! {
    /// The arguments of `server_info` and `check_exec_environment`: the
    /// summary by default, everything with `detail: "full"`.
    pub struct InfoArgs {
        detail: Detail = opt(choice(Detail::NAMES, Some(Detail::Summary.as_str()))),
    }
}

tool_args! {
    /// The arguments of `read_file`.
    pub struct ReadFileArgs {
        path: String = req(non_empty()),
        start_line: u64 = opt(int(1, None, Some(1))),
        end_line: Option<u64> = opt(int(1, None, None)),
        max_lines: Option<u64> = opt(int(1, None, None)),
        max_bytes: usize = opt(int(1, Some(READ_MAX_BYTES), Some(128 * 1024))),
        #[expect(dead_code, reason = "validated to be utf-8, the only encoding")]
        encoding: String = opt(choice(&["utf-8"], Some("utf-8"))),
    }
}

tool_args! {
    /// The arguments of `list_dir`.
    pub struct ListDirArgs {
        path: String = PATH_DOT,
        recursive: bool = opt(boolean(false)),
        max_depth: usize = opt(int(1, Some(20), Some(1))),
        max_entries: usize = opt(int(1, Some(LIST_DIR_MAX_ENTRIES), Some(1_000))),
        include_hidden: bool = opt(boolean(false)),
        include_ignored: bool = opt(boolean(false)),
        sort: ListSort = opt(choice(ListSort::NAMES, Some(ListSort::Name.as_str()))),
    }
}

tool_args! {
    /// The arguments of `list_files`.
    pub struct ListFilesArgs {
        path: String = PATH_DOT,
        patterns: Vec<String> = opt(Kind::StrList),
        glob: Option<String> = opt(string()),
        exclude_patterns: Vec<String> = opt(Kind::StrList),
        include_hidden: bool = opt(boolean(false)),
        include_ignored: bool = opt(boolean(false)),
        max_results: usize = opt(int(1, Some(LIST_FILES_MAX_RESULTS), Some(5_000))),
        sort: FilesSort = opt(choice(FilesSort::NAMES, Some(FilesSort::Path.as_str()))),
    }
}

tool_args! {
    /// The arguments of `search_text`.
    pub struct SearchTextArgs {
        query: String = req(non_empty()),
        path: String = PATH_DOT,
        regex: bool = opt(boolean(false)),
        case_sensitive: bool = opt(boolean(false)),
        include_globs: Vec<String> = opt(Kind::StrList),
        glob: Option<String> = opt(string()),
        exclude_globs: Vec<String> = opt(Kind::StrList),
        context_lines: usize = opt(int(0, Some(5), Some(0))),
        max_results: usize = opt(int(1, Some(SEARCH_MAX_RESULTS), Some(1_000))),
        max_preview_bytes: usize = opt(int(80, Some(4_096), Some(512))),
    }
}

tool_args! {
    /// The arguments of `apply_patch`.
    pub struct ApplyPatchArgs {
        patch: String = req(non_empty()),
        dry_run: bool = opt(boolean(false)),
    }
}

tool_args! {
    /// The arguments of `apply_changes` (catalog 0.5).
    pub struct ApplyChangesArgs {
        changes: Vec<Value> = req(Kind::Changes),
        dry_run: bool = opt(boolean(false)),
        idempotency_key: Option<String> = opt(Kind::Key),
    }
}

/// `apply_patch`'s properties in catalog 0.5: an idempotency key too (read
/// from the validated map; [`ApplyPatchArgs`] stays the contract's).
const APPLY_PATCH_05_PARAMS: &[Param] = &[
    ApplyPatchArgs::PARAMS[0],
    ApplyPatchArgs::PARAMS[1],
    opt(Kind::Key).named("idempotency_key"),
];

tool_args! {
    /// The arguments of `exec_command`.
    pub struct ExecCommandArgs {
        cmd: String = req(non_empty()),
        workdir: Option<String> = opt(string_or(".")),
        cwd: Option<String> = opt(string()),
        timeout_ms: u64 = opt(int(1, Some(600_000), Some(30_000))),
        yield_time_ms: u64 = opt(int(0, Some(30_000), Some(DEFAULT_YIELD_MS))),
        max_output_bytes: usize = MAX_OUTPUT_BYTES,
        verbosity: Option<Verbosity> = VERBOSITY_PARAM,
        preview_bytes: usize = PREVIEW_BYTES,
        stdin: String = opt(string_or("")),
        tty: bool = opt(boolean(false)),
        env: Map<String, Value> = opt(Kind::StrMap),
    }
}

tool_args! {
    /// The arguments of `write_stdin`.
    pub struct WriteStdinArgs {
        command_id: String = req(non_empty()),
        chars: String = opt(string_or("")),
        yield_time_ms: u64 = opt(int(0, Some(30_000), Some(DEFAULT_YIELD_MS))),
        max_output_bytes: usize = MAX_OUTPUT_BYTES,
        verbosity: Option<Verbosity> = VERBOSITY_PARAM,
        preview_bytes: usize = PREVIEW_BYTES,
    }
}

tool_args! {
    /// The arguments of `kill_command`.
    pub struct KillCommandArgs {
        command_id: String = req(non_empty()),
        signal: KillSignal = opt(choice(KillSignal::NAMES, Some(KillSignal::Term.as_str()))),
        wait_ms: u64 = opt(int(0, Some(30_000), Some(5_000))),
        kill_wait_ms: u64 = opt(int(0, Some(30_000), Some(2_000))),
        max_output_bytes: usize = MAX_OUTPUT_BYTES,
        verbosity: Option<Verbosity> = VERBOSITY_PARAM,
        preview_bytes: usize = PREVIEW_BYTES,
    }
}

tool_args! {
    /// The arguments of `read_output`.
    pub struct ReadOutputArgs {
        output_ref: String = req(non_empty()),
        stream: Option<OutputStream> = opt(choice(OutputStream::NAMES, None)),
        offset: u64 = opt(int(0, None, Some(0))),
        limit: usize = opt(int(1, Some(MIB), Some(4_096))),
    }
}

tool_args! {
    /// The arguments of `git_status`.
    pub struct GitStatusArgs {
        path: String = PATH_DOT,
        include_untracked: bool = opt(boolean(true)),
        max_entries: usize = opt(int(1, Some(GIT_STATUS_MAX_ENTRIES), Some(1_000))),
    }
}

tool_args! {
    /// The arguments of `git_diff`.
    pub struct GitDiffArgs {
        path: Option<String> = opt(string()),
        paths: Vec<String> = opt(Kind::StrList),
        staged: bool = opt(boolean(false)),
        unstaged: bool = opt(boolean(true)),
        context_lines: u32 = opt(int(0, Some(20), Some(GIT_CONTEXT_LINES as u64))),
        max_bytes: usize = opt(int(1, Some(GIT_MAX_BYTES_LIMIT), Some(GIT_MAX_BYTES as u64))),
    }
}

tool_args! {
    /// The arguments of `git_log`.
    pub struct GitLogArgs {
        path: Option<String> = PATH_DOT,
        r#ref: String = opt(string_or("HEAD")),
        max_count: usize = opt(int(1, Some(100), Some(20))),
        skip: usize = opt(int(0, Some(10_000), Some(0))),
    }
}

tool_args! {
    /// The arguments of `git_show`.
    pub struct GitShowArgs {
        rev: String = opt(string_or("HEAD")),
        path: Option<String> = opt(string()),
        paths: Vec<String> = opt(Kind::StrList),
        include_diff: bool = opt(boolean(true)),
        context_lines: Option<u32> = opt(int(0, Some(20), Some(GIT_CONTEXT_LINES as u64))),
        max_bytes: Option<usize> = opt(int(1, Some(GIT_MAX_BYTES_LIMIT), Some(GIT_MAX_BYTES as u64))),
    }
}

tool_args! {
    /// The arguments of `git_blame`.
    pub struct GitBlameArgs {
        path: String = req(non_empty()),
        rev: Option<String> = opt(string()),
        start_line: u32 = opt(int(1, None, Some(1))),
        end_line: Option<u32> = opt(int(1, None, None)),
        max_lines: u32 = opt(int(1, Some(1_000), Some(200))),
    }
}

tool_args! {
    /// The arguments of `request_permissions`.
    pub struct RequestPermissionsArgs {
        tool_name: String = req(choice(&["exec_command", "apply_patch"], None)),
        permission: String = req(choice(&REQUESTABLE_PERMISSIONS, None)),
        #[expect(dead_code, reason = "echoed from the raw arguments in `requested`")]
        reason: String = req(non_empty()),
        #[expect(dead_code, reason = "echoed from the raw arguments in `requested`")]
        arguments: Map<String, Value> = req(Kind::Object),
        scope: GrantScope = opt(choice(GrantScope::NAMES, Some(GrantScope::Once.as_str()))),
        #[expect(dead_code, reason = "no grant is ever issued with a lifetime")]
        ttl_seconds: u64 = opt(int(1, Some(3_600), Some(300))),
    }
}

tool_args! {
    /// The arguments of `view_image`.
    pub struct ViewImageArgs {
        path: String = req(non_empty()),
        max_bytes: usize = opt(int(1_024, Some(10 * MIB), Some(5 * MIB))),
        max_width: u32 = opt(int(1, Some(10_000), Some(2_000))),
        max_height: u32 = opt(int(1, Some(10_000), Some(2_000))),
        auto_resize: bool = opt(boolean(true)),
    }
}

/// The 18 tools, in `tools/list` order.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        tool: Tool::ServerInfo,
        name: "server_info",
        title: "Server info",
        description: "Version, protocols, workspace, tools, auth, policy and limits.",
        annotations: READ_ONLY,
        params: InfoArgs::PARAMS,
        output: Some(Output::of::<server_info::ServerInfoResult>()),
    },
    ToolSpec {
        tool: Tool::CheckExecEnvironment,
        name: "check_exec_environment",
        title: "Check exec environment",
        description: "The policy, gates and sandbox exec_command runs under. Runs nothing.",
        annotations: READ_ONLY,
        params: InfoArgs::PARAMS,
        output: Some(Output::of::<exec::CheckExecEnvironmentResult>()),
    },
    ToolSpec {
        tool: Tool::ReadFile,
        name: "read_file",
        title: "Read file",
        description: "Read lines of a UTF-8 file (1-based, end_line inclusive). A cut answer names its continuation, e.g. read_file(path=\"a.py\", start_line=201).",
        annotations: READ_ONLY,
        params: ReadFileArgs::PARAMS,
        output: Some(Output::of::<files::ReadFileResult>()),
    },
    ToolSpec {
        tool: Tool::ListDir,
        name: "list_dir",
        title: "List directory",
        description: "List a directory (recursive to max_depth); ignored and hidden entries only when asked.",
        annotations: READ_ONLY,
        params: ListDirArgs::PARAMS,
        output: Some(Output::of::<files::ListDirResult>()),
    },
    ToolSpec {
        tool: Tool::ListFiles,
        name: "list_files",
        title: "List files",
        description: "List files matching globs, e.g. patterns=[\"**/*.rs\"]; ignored and hidden files only when asked.",
        annotations: READ_ONLY,
        params: ListFilesArgs::PARAMS,
        output: Some(Output::of::<files::ListFilesResult>()),
    },
    ToolSpec {
        tool: Tool::SearchText,
        name: "search_text",
        title: "Search text",
        description: "Search text files for a literal string, or a regex with regex=true.",
        annotations: READ_ONLY,
        params: SearchTextArgs::PARAMS,
        output: Some(Output::of::<files::SearchTextResult>()),
    },
    ToolSpec {
        tool: Tool::ApplyPatch,
        name: "apply_patch",
        title: "Apply patch",
        description: "The only way to change files: an atomic patch (all files or none) of Add File, Update File (+ Move to) and Delete File sections. Example:\n*** Begin Patch\n*** Update File: app.py\n@@\n-old\n+new\n*** End Patch",
        annotations: Annotations {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        params: ApplyPatchArgs::PARAMS,
        output: Some(Output::of::<patch::ApplyPatchResult>()),
    },
    ToolSpec {
        tool: Tool::ExecCommand,
        name: "exec_command",
        title: "Execute command",
        description: "Run a shell command in the workspace. Answers when it exits or after yield_time_ms; a command still running answers with a command_id for write_stdin. Example: {\"cmd\":\"pytest -q\",\"yield_time_ms\":30000}.",
        annotations: Annotations {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        params: ExecCommandArgs::PARAMS,
        output: Some(Output::of::<exec::CommandResult>()),
    },
    ToolSpec {
        tool: Tool::WriteStdin,
        name: "write_stdin",
        title: "Write stdin",
        description: "Send chars to a running command, or poll it with empty chars. Poll example: {\"command_id\":\"abc\",\"chars\":\"\"}. Input example: {\"command_id\":\"abc\",\"chars\":\"yes\\n\"}.",
        annotations: Annotations {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        },
        params: WriteStdinArgs::PARAMS,
        output: Some(Output::of::<exec::CommandResult>()),
    },
    ToolSpec {
        tool: Tool::KillCommand,
        name: "kill_command",
        title: "Kill command",
        description: "Stop a command: signal its process group, KILL after wait_ms. Cancelling a request does not stop a command; this does. Example: {\"command_id\":\"abc\",\"signal\":\"KILL\"}.",
        annotations: Annotations {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        params: KillCommandArgs::PARAMS,
        output: Some(Output::of::<exec::CommandResult>()),
    },
    ToolSpec {
        tool: Tool::ReadOutput,
        name: "read_output",
        title: "Read output",
        description: "Page a command's output by absolute offset. Streams keep a head and a rolling tail; reads in the gap clamp forward. Example: {\"output_ref\":\"command:abc:stdout\",\"offset\":0,\"limit\":4096}.",
        annotations: READ_ONLY,
        params: ReadOutputArgs::PARAMS,
        output: Some(Output::of::<exec::ReadOutputResult>()),
    },
    ToolSpec {
        tool: Tool::GitStatus,
        name: "git_status",
        title: "Git status",
        description: "Staged, unstaged and untracked changes; branch and ahead/behind. Runs no hooks.",
        annotations: READ_ONLY,
        params: GitStatusArgs::PARAMS,
        output: Some(Output::of::<git::GitStatusResult>()),
    },
    ToolSpec {
        tool: Tool::GitDiff,
        name: "git_diff",
        title: "Git diff",
        description: "Diff of unstaged and/or staged changes.",
        annotations: READ_ONLY,
        params: GitDiffArgs::PARAMS,
        output: Some(Output::of::<git::GitDiffResult>()),
    },
    ToolSpec {
        tool: Tool::GitLog,
        name: "git_log",
        title: "Git log",
        description: "Commits reachable from ref, newest first, optionally only those touching path.",
        annotations: READ_ONLY,
        params: GitLogArgs::PARAMS,
        output: Some(Output::of::<git::GitLogResult>()),
    },
    ToolSpec {
        tool: Tool::GitShow,
        name: "git_show",
        title: "Git show",
        description: "A commit and its diff, or a file's content at rev when path is a file.",
        annotations: READ_ONLY,
        params: GitShowArgs::PARAMS,
        output: Some(Output::of::<git::GitShowResult>()),
    },
    ToolSpec {
        tool: Tool::GitBlame,
        name: "git_blame",
        title: "Git blame",
        description: "Commit, author and time of each line in a range of a file.",
        annotations: READ_ONLY,
        params: GitBlameArgs::PARAMS,
        output: Some(Output::of::<git::GitBlameResult>()),
    },
    ToolSpec {
        tool: Tool::RequestPermissions,
        name: "request_permissions",
        title: "Request permissions",
        description: "Ask for a refused permission. Never escalates: says how the operator can grant it.",
        annotations: Annotations {
            read_only: true,
            destructive: false,
            idempotent: false,
            open_world: false,
        },
        params: RequestPermissionsArgs::PARAMS,
        output: Some(Output::of::<request_permissions::RequestPermissionsResult>()),
    },
    ToolSpec {
        tool: Tool::ViewImage,
        name: "view_image",
        title: "View image",
        description: "A workspace image (PNG, JPEG, GIF, WebP) as an image block, shrunk to max_width x max_height when auto_resize.",
        annotations: READ_ONLY,
        params: ViewImageArgs::PARAMS,
        output: Some(Output::of::<files::ViewImageResult>()),
    },
];

/// `apply_patch` in catalog 0.5: the contract's, with `idempotency_key`.
static APPLY_PATCH_05: ToolSpec = ToolSpec {
    params: APPLY_PATCH_05_PARAMS,
    ..TOOLS[6]
};

/// `server_info` in catalog 0.5: no input property (the full report of
/// `detail` is catalog 0.3's extension).
static SERVER_INFO_05: ToolSpec = ToolSpec {
    params: &[],
    ..TOOLS[0]
};

/// `check_exec_environment` in catalog 0.5, likewise.
static CHECK_EXEC_05: ToolSpec = ToolSpec {
    params: &[],
    ..TOOLS[1]
};

const EXEC_PARAMS: &[Param] = ExecCommandArgs::PARAMS;

/// `exec_command` in catalog 0.5: a command's lifetime is 300 s unless
/// `timeout_ms` says otherwise.
static EXEC_COMMAND_05: ToolSpec = ToolSpec {
    params: &[
        EXEC_PARAMS[0],
        EXEC_PARAMS[1],
        EXEC_PARAMS[2],
        opt(int(1, Some(600_000), Some(300_000))).named("timeout_ms"),
        EXEC_PARAMS[4],
        EXEC_PARAMS[5],
        EXEC_PARAMS[6],
        EXEC_PARAMS[7],
        EXEC_PARAMS[8],
        EXEC_PARAMS[9],
        EXEC_PARAMS[10],
    ],
    ..TOOLS[7]
};

const GIT_DIFF_PARAMS: &[Param] = GitDiffArgs::PARAMS;

/// `git_diff` in catalog 0.5: untracked files are shown as added unless
/// `include_untracked` is false (read from the validated map).
static GIT_DIFF_05: ToolSpec = ToolSpec {
    params: &[
        GIT_DIFF_PARAMS[0],
        GIT_DIFF_PARAMS[1],
        GIT_DIFF_PARAMS[2],
        GIT_DIFF_PARAMS[3],
        opt(boolean(true)).named("include_untracked"),
        GIT_DIFF_PARAMS[4],
        GIT_DIFF_PARAMS[5],
    ],
    ..TOOLS[12]
};

/// The default a served tool declares for a boolean property.
pub fn bool_default(spec: &ToolSpec, name: &str) -> Option<bool> {
    spec.params
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| match p.kind {
            Kind::Bool { default } => default,
            _ => None,
        })
}

/// The default a served tool declares for an integer property.
pub fn int_default(spec: &ToolSpec, name: &str) -> Option<u64> {
    spec.params
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| match p.kind {
            Kind::Int { default, .. } => default,
            _ => None,
        })
}

/// `apply_changes` (catalog 0.5 only).
static APPLY_CHANGES: ToolSpec = ToolSpec {
    tool: Tool::ApplyChanges,
    name: "apply_changes",
    title: "Apply changes",
    description: "Change files by line number, all or none: create, write (whole file), edit (replace, delete, insert_after, insert_before lines numbered as read_file numbered them), delete, move, copy. A change to an existing file carries the revision read_file reported; a stale one is refused. Example: {\"changes\":[{\"action\":\"edit\",\"path\":\"app.py\",\"revision\":\"<read_file revision>\",\"edits\":[{\"op\":\"replace\",\"start_line\":3,\"content\":\"    return 2\"}]}]}",
    annotations: Annotations {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: false,
    },
    params: ApplyChangesArgs::PARAMS,
    output: Some(Output::of::<changes::ApplyChangesResult>()),
};

/// The input schema of `apply_changes`' `changes`.
pub fn changes_schema() -> Value {
    let int = |min: u64| json!({"type": "integer", "minimum": min});
    json!({
        "type": "array",
        "maxItems": ctm_patch_engine::MAX_CHANGES,
        "items": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["create", "write", "edit", "delete", "move", "copy"]},
                "path": {"type": "string", "minLength": 1},
                "revision": {"type": "string", "minLength": 1},
                "content": {"type": "string"},
                "destination": {"type": "string", "minLength": 1},
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": ctm_patch_engine::MAX_EDITS,
                    "items": {
                        "type": "object",
                        "properties": {
                            "op": {"type": "string", "enum": ["replace", "delete", "insert_after", "insert_before"]},
                            "start_line": int(1),
                            "end_line": int(1),
                            "line": int(0),
                            "content": {"type": "string"},
                        },
                        "required": ["op"],
                        "additionalProperties": false,
                    },
                },
            },
            "required": ["action", "path"],
            "additionalProperties": false,
        },
    })
}

/// Which catalog the server serves (`--catalog`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatalogVersion {
    /// The v0.3 contract's: 18 tools, `apply_patch` the only mutator.
    #[default]
    V03,
    /// The reference 0.5.0's: `apply_changes`, revisions, idempotency
    /// keys; `request_permissions` only in dangerous mode.
    V05,
}

impl CatalogVersion {
    /// The name `--catalog` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V03 => "0.3",
            Self::V05 => "0.5",
        }
    }
}

/// What decides the tools a server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// `view_image` is on.
    pub view_image: bool,
    /// The catalog.
    pub version: CatalogVersion,
    /// Dangerous mode (catalog 0.5 serves `request_permissions` only then).
    pub dangerous: bool,
}

impl Served {
    /// The v0.3 catalog with every tool.
    pub const ALL_V03: Served = Served {
        view_image: true,
        version: CatalogVersion::V03,
        dangerous: false,
    };
}

/// The tools a server with `served` serves, in catalog order.
pub fn served_tools(served: Served) -> impl Iterator<Item = &'static ToolSpec> {
    let v05 = served.version == CatalogVersion::V05;
    TOOLS.iter().flat_map(move |t| {
        let own: Option<&'static ToolSpec> = match t.tool {
            Tool::ViewImage if !served.view_image => None,
            Tool::RequestPermissions if v05 && !served.dangerous => None,
            Tool::ApplyPatch if v05 => Some(&APPLY_PATCH_05),
            Tool::ServerInfo if v05 => Some(&SERVER_INFO_05),
            Tool::CheckExecEnvironment if v05 => Some(&CHECK_EXEC_05),
            Tool::ExecCommand if v05 => Some(&EXEC_COMMAND_05),
            Tool::GitDiff if v05 => Some(&GIT_DIFF_05),
            _ => Some(t),
        };
        let after = (v05 && t.tool == Tool::ApplyPatch).then_some(&APPLY_CHANGES);
        own.into_iter().chain(after)
    })
}

/// The tools this deployment serves.
pub fn enabled_tools(view_image: bool) -> impl Iterator<Item = &'static ToolSpec> {
    served_tools(Served {
        view_image,
        ..Served::ALL_V03
    })
}

/// Looks a served tool up by name.
pub fn find(name: &str, served: Served) -> Option<&'static ToolSpec> {
    served_tools(served).find(|t| t.name == name)
}

impl Annotations {
    /// The MCP `annotations` object.
    pub fn to_json(self, title: &str) -> Value {
        json!({
            "title": title,
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        })
    }

    /// What `--dangerously-fake-readonly-annotations` advertises instead.
    pub fn faked_read_only(self) -> Self {
        Self {
            read_only: true,
            destructive: false,
            ..self
        }
    }
}

impl Param {
    fn schema(&self, stated: bool) -> Value {
        let mut s = Map::new();
        match self.kind {
            Kind::Str {
                min_len,
                choices,
                default,
            } => {
                s.insert("type".into(), json!("string"));
                if let Some(n) = min_len {
                    s.insert("minLength".into(), json!(n));
                }
                if !choices.is_empty() {
                    s.insert("enum".into(), json!(choices));
                }
                // An empty string is what an absent one means: not stated
                // (but for catalog 0.5, which states every default).
                if let Some(d) = default.filter(|d| stated || !d.is_empty()) {
                    s.insert("default".into(), json!(d));
                }
            }
            Kind::Int { min, max, default } => {
                s.insert("type".into(), json!("integer"));
                s.insert("minimum".into(), json!(min));
                if let Some(m) = max {
                    s.insert("maximum".into(), json!(m));
                }
                if let Some(d) = default {
                    s.insert("default".into(), json!(d));
                }
            }
            Kind::Bool { default } => {
                s.insert("type".into(), json!("boolean"));
                // A flag is off unless given: only `true` is stated (catalog
                // 0.5 states `false` too).
                if let Some(d) = default.filter(|d| *d || stated) {
                    s.insert("default".into(), json!(d));
                }
            }
            Kind::StrList => {
                s.insert("type".into(), json!("array"));
                s.insert("items".into(), json!({"type": "string"}));
            }
            Kind::StrMap => {
                s.insert("type".into(), json!("object"));
                s.insert("additionalProperties".into(), json!({"type": "string"}));
                if stated {
                    s.insert("default".into(), json!({}));
                }
            }
            Kind::Object => {
                s.insert("type".into(), json!("object"));
                s.insert("additionalProperties".into(), json!(true));
            }
            Kind::Key => {
                s.insert("type".into(), json!("string"));
                s.insert("minLength".into(), json!(1));
                s.insert(
                    "maxLength".into(),
                    json!(ctm_patch_engine::MAX_IDEMPOTENCY_KEY_CHARS),
                );
            }
            Kind::Changes => return changes_schema(),
        }
        Value::Object(s)
    }
}

impl ToolSpec {
    /// The tool's `inputSchema` with every default and an empty `required`
    /// stated, as catalog 0.5 serves it (`stated`), or without what an
    /// absent property means anyway.
    pub fn input_schema_as(&self, stated: bool) -> Value {
        let props: Map<String, Value> = self
            .params
            .iter()
            .map(|p| (p.name.to_owned(), p.schema(stated)))
            .collect();
        let required: Vec<&str> = self
            .params
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name)
            .collect();
        let mut m = Map::new();
        m.insert("type".into(), "object".into());
        m.insert("properties".into(), Value::Object(props));
        // No required property: no `required` (the same schema, shorter).
        if stated || !required.is_empty() {
            m.insert("required".into(), required.into());
        }
        m.insert("additionalProperties".into(), false.into());
        Value::Object(m)
    }

    /// The tool as `tools/list` shows it.
    pub fn listing(self, fake_read_only: bool, version: CatalogVersion) -> Value {
        let ann = if fake_read_only {
            self.annotations.faked_read_only()
        } else {
            self.annotations
        };
        let mut v = crate::output::json_object([
            ("name", self.name.into()),
            ("title", self.title.into()),
            ("description", self.description.into()),
            (
                "inputSchema",
                self.input_schema_as(version == CatalogVersion::V05),
            ),
            (
                "outputSchema",
                self.output
                    .map_or_else(|| crate::output::tool_schema(None), |o| (o.listed)()),
            ),
            ("annotations", ann.to_json(self.title)),
        ]);
        let meta = self.client_hints();
        if !meta.is_empty()
            && let Some(m) = v.as_object_mut()
        {
            m.insert("_meta".into(), Value::Object(meta));
        }
        v
    }

    /// Hints for the hosts that read them (docs/clients.md): Claude Code
    /// loads a tool marked `anthropic/alwaysLoad` into the model's tool
    /// list from the first turn (the others wait behind its tool search,
    /// found by `anthropic/searchHint`), and keeps a result inline up to
    /// `anthropic/maxResultSizeChars` characters instead of saving it to a
    /// file.
    pub fn client_hints(self) -> Map<String, Value> {
        let mut m = Map::new();
        match self.tool.client_hint() {
            ClientHint::AlwaysLoad => {
                m.insert("anthropic/alwaysLoad".into(), Value::Bool(true));
            }
            ClientHint::Search(hint) => {
                m.insert("anthropic/searchHint".into(), Value::String(hint.into()));
            }
        }
        if let Some(chars) = self.tool.inline_result_chars() {
            m.insert("anthropic/maxResultSizeChars".into(), chars.into());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listing's `outputSchema`, made without building the result's
    /// whole shape, is the reduction of that shape, for every tool of
    /// every catalog.
    #[test]
    fn listed_output_schemas_are_the_reduced_shapes() {
        let mut checked = 0;
        for version in [CatalogVersion::V03, CatalogVersion::V05] {
            let served = Served {
                view_image: true,
                version,
                dangerous: true,
            };
            for t in served_tools(served) {
                let Some(o) = t.output else { continue };
                assert_eq!(
                    (o.listed)(),
                    crate::output::tool_schema(Some((o.shape)())),
                    "{}",
                    t.name
                );
                checked += 1;
            }
        }
        assert!(checked >= 30, "{checked}");
    }

    /// request_permissions accepts exactly the names refusals produce.
    #[test]
    fn requestable_permissions_are_the_gates() {
        let mut gates: Vec<&str> = ctm_exec_runtime::Permission::ALL
            .iter()
            .map(|p| p.as_str())
            .collect();
        gates.push("write_git_dir");
        assert_eq!(gates, REQUESTABLE_PERMISSIONS);
    }

    /// Input property names exactly as the contract lists them, and one
    /// extension: the two info tools take an optional `detail` (issue 32:
    /// a summary by default, the full report on request). A call without
    /// it is the contract's call, answered with every field the reference
    /// sends (docs/protocol.md, "A lean machine object").
    #[test]
    fn property_names_match_the_contract() {
        let expected: &[(&str, &[&str])] = &[
            ("server_info", &["detail"]),
            ("check_exec_environment", &["detail"]),
            (
                "read_file",
                &[
                    "path",
                    "start_line",
                    "end_line",
                    "max_lines",
                    "max_bytes",
                    "encoding",
                ],
            ),
            (
                "list_dir",
                &[
                    "path",
                    "recursive",
                    "max_depth",
                    "max_entries",
                    "include_hidden",
                    "include_ignored",
                    "sort",
                ],
            ),
            (
                "list_files",
                &[
                    "path",
                    "patterns",
                    "glob",
                    "exclude_patterns",
                    "include_hidden",
                    "include_ignored",
                    "max_results",
                    "sort",
                ],
            ),
            (
                "search_text",
                &[
                    "query",
                    "path",
                    "regex",
                    "case_sensitive",
                    "include_globs",
                    "glob",
                    "exclude_globs",
                    "context_lines",
                    "max_results",
                    "max_preview_bytes",
                ],
            ),
            ("apply_patch", &["patch", "dry_run"]),
            (
                "exec_command",
                &[
                    "cmd",
                    "workdir",
                    "cwd",
                    "timeout_ms",
                    "yield_time_ms",
                    "max_output_bytes",
                    "verbosity",
                    "preview_bytes",
                    "stdin",
                    "tty",
                    "env",
                ],
            ),
            (
                "write_stdin",
                &[
                    "command_id",
                    "chars",
                    "yield_time_ms",
                    "max_output_bytes",
                    "verbosity",
                    "preview_bytes",
                ],
            ),
            (
                "kill_command",
                &[
                    "command_id",
                    "signal",
                    "wait_ms",
                    "kill_wait_ms",
                    "max_output_bytes",
                    "verbosity",
                    "preview_bytes",
                ],
            ),
            ("read_output", &["output_ref", "stream", "offset", "limit"]),
            ("git_status", &["path", "include_untracked", "max_entries"]),
            (
                "git_diff",
                &[
                    "path",
                    "paths",
                    "staged",
                    "unstaged",
                    "context_lines",
                    "max_bytes",
                ],
            ),
            ("git_log", &["path", "ref", "max_count", "skip"]),
            (
                "git_show",
                &[
                    "rev",
                    "path",
                    "paths",
                    "include_diff",
                    "context_lines",
                    "max_bytes",
                ],
            ),
            (
                "git_blame",
                &["path", "rev", "start_line", "end_line", "max_lines"],
            ),
            (
                "request_permissions",
                &[
                    "tool_name",
                    "permission",
                    "reason",
                    "arguments",
                    "scope",
                    "ttl_seconds",
                ],
            ),
            (
                "view_image",
                &[
                    "path",
                    "max_bytes",
                    "max_width",
                    "max_height",
                    "auto_resize",
                ],
            ),
        ];
        assert_eq!(TOOLS.len(), 18);
        for (tool, (name, props)) in TOOLS.iter().zip(expected) {
            assert_eq!(tool.name, *name);
            let got: Vec<&str> = tool.params.iter().map(|p| p.name).collect();
            assert_eq!(&got, props, "{name}");
        }
    }

    /// Annotations exactly as the contract records them.
    #[test]
    fn annotations_match_the_contract() {
        for t in TOOLS {
            let a = t.annotations;
            let expected = match t.name {
                "apply_patch" => (false, true, false, false),
                "exec_command" => (false, true, false, true),
                "write_stdin" => (false, false, false, false),
                "kill_command" => (false, true, false, false),
                "request_permissions" => (true, false, false, false),
                _ => (true, false, true, false),
            };
            assert_eq!(
                (a.read_only, a.destructive, a.idempotent, a.open_world),
                expected,
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn catalog_05_swaps_the_right_tools() {
        let all = |version, dangerous| {
            served_tools(Served {
                view_image: true,
                version,
                dangerous,
            })
            .map(|t| (t.tool, t.name))
            .collect::<Vec<_>>()
        };
        let v03 = all(CatalogVersion::V03, false);
        assert_eq!(v03.len(), 18);
        assert_eq!(all(CatalogVersion::V03, true), v03);
        let safe = all(CatalogVersion::V05, false);
        let dangerous = all(CatalogVersion::V05, true);
        assert_eq!((safe.len(), dangerous.len()), (18, 19));
        assert!(!safe.iter().any(|(t, _)| *t == Tool::RequestPermissions));
        // Each spec made from a contract row keeps that row's tool and name.
        for t in served_tools(Served {
            view_image: true,
            version: CatalogVersion::V05,
            dangerous: true,
        }) {
            let row = TOOLS.iter().find(|r| r.name == t.name);
            assert!(row.is_none_or(|r| r.tool == t.tool), "{}", t.name);
        }
        let names: Vec<&str> = dangerous.iter().map(|(_, n)| *n).collect();
        let at = names.iter().position(|n| *n == "apply_patch").unwrap();
        assert_eq!(names[at + 1], "apply_changes");
        assert_eq!(
            int_default(
                find(
                    "exec_command",
                    Served {
                        version: CatalogVersion::V05,
                        ..Served::ALL_V03
                    }
                )
                .unwrap(),
                "timeout_ms"
            ),
            Some(300_000)
        );
        assert_eq!(
            int_default(find("exec_command", Served::ALL_V03).unwrap(), "timeout_ms"),
            Some(30_000)
        );
    }

    #[test]
    fn view_image_is_the_only_optional_tool() {
        assert_eq!(enabled_tools(true).count(), 18);
        let without: Vec<_> = enabled_tools(false).map(|t| t.name).collect();
        assert_eq!(without.len(), 17);
        assert!(!without.contains(&"view_image"));
    }
}
