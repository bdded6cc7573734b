//! The `coding-tools-mcp` command; see the library for what it does.

fn main() -> std::process::ExitCode {
    coding_tools_mcp::run_command_line()
}
