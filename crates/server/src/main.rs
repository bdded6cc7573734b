//! The `coding-tools-mcp` command; see the library for what it does.

fn main() -> std::process::ExitCode {
    // Inside a command's namespace sandbox this process is the sandbox's
    // entry: it applies Landlock and seccomp and becomes the command.
    ctm_exec_runtime::enter_if_requested();
    coding_tools_mcp::run_command_line()
}
