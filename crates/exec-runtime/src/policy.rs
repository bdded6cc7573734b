//! Permission modes and the gates each one opens.

use crate::shell::CommandLine;

/// The operator's command policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// The default: network, shell expansion, inline scripts, destructive and
    /// outside-workspace commands are refused.
    Safe,
    /// Local development: network, shell expansion and inline scripts allowed.
    Trusted,
    /// Every gate open, no Landlock, no environment filter.
    Dangerous,
}

/// Whether one gate lets a command through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    /// Refused with `PERMISSION_REQUIRED`.
    Blocked,
    /// Let through.
    Allowed,
}

impl GateState {
    fn from_allowed(allowed: bool) -> Self {
        if allowed {
            Self::Allowed
        } else {
            Self::Blocked
        }
    }

    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Blocked => "blocked",
            Self::Allowed => "allowed",
        }
    }
}

/// The gates of one mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// Network-looking commands.
    pub network: GateState,
    /// `` ` ``, `$(`, `${`.
    pub shell_expansion: GateState,
    /// `sh -c`, `python -c`, `node -e`, ...
    pub inline_script: GateState,
    /// `rm -rf`, `git reset --hard`, `sudo`, ...
    pub destructive_command: GateState,
    /// Path arguments outside the workspace and runtime dir.
    pub filesystem_escape: GateState,
    /// setuid/setgid executables.
    pub privileged_executable: GateState,
    /// Secret and loader variables are removed from the environment.
    pub secret_env_filter: bool,
    /// Commands are confined with Landlock where the kernel offers it.
    pub landlock: bool,
}

impl Gates {
    /// The gates of `mode`; `allow_network` opens only the network gate.
    pub fn for_mode(mode: PermissionMode, allow_network: bool) -> Self {
        let dev = mode != PermissionMode::Safe;
        let all = mode == PermissionMode::Dangerous;
        Self {
            network: GateState::from_allowed(dev || allow_network),
            shell_expansion: GateState::from_allowed(dev),
            inline_script: GateState::from_allowed(dev),
            destructive_command: GateState::from_allowed(all),
            filesystem_escape: GateState::from_allowed(all),
            privileged_executable: GateState::from_allowed(all),
            secret_env_filter: !all,
            landlock: !all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_table() {
        let safe = Gates::for_mode(PermissionMode::Safe, false);
        assert_eq!(safe.network, GateState::Blocked);
        assert_eq!(safe.inline_script, GateState::Blocked);
        assert!(safe.secret_env_filter && safe.landlock);
        let net = Gates::for_mode(PermissionMode::Safe, true);
        assert_eq!(net.network, GateState::Allowed);
        assert_eq!(net.shell_expansion, GateState::Blocked);
        let trusted = Gates::for_mode(PermissionMode::Trusted, false);
        assert_eq!(trusted.shell_expansion, GateState::Allowed);
        assert_eq!(trusted.destructive_command, GateState::Blocked);
        let d = Gates::for_mode(PermissionMode::Dangerous, false);
        assert_eq!(d.destructive_command, GateState::Allowed);
        assert!(!d.secret_env_filter && !d.landlock);
    }
}

/// A permission a command needs (names match `request_permissions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Network access.
    Network,
    /// `` ` ``, `$(`, `${`.
    ShellExpansion,
    /// `sh -c`, `python -c`, `node -e`, ...
    InlineScript,
    /// `rm -rf`, `git reset --hard`, `sudo`, ...
    DestructiveCommand,
    /// Writing outside the workspace and runtime dir.
    FilesystemEscape,
    /// A setuid/setgid executable.
    PrivilegedExecutable,
    /// A secret-looking or code-loading variable in `env`.
    SensitiveEnv,
}

impl Permission {
    /// Every permission a command gate can name, in gate order.
    pub const ALL: [Permission; 7] = [
        Self::Network,
        Self::ShellExpansion,
        Self::InlineScript,
        Self::DestructiveCommand,
        Self::FilesystemEscape,
        Self::PrivilegedExecutable,
        Self::SensitiveEnv,
    ];

    /// Stable name (the `permission` of `request_permissions`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Network => "network",
            Self::ShellExpansion => "shell_expansion",
            Self::InlineScript => "inline_script",
            Self::DestructiveCommand => "destructive_command",
            Self::FilesystemEscape => "filesystem_escape",
            Self::PrivilegedExecutable => "privileged_executable",
            Self::SensitiveEnv => "sensitive_env",
        }
    }
}

/// Why a command was refused: the permission and the words that triggered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The permission it needs.
    pub permission: Permission,
    /// What triggered the gate.
    pub evidence: String,
    /// The path argument or executable refused, for the path gates.
    pub path: Option<String>,
    /// For inline code: the interpreter and the option that takes the code
    /// (`python3`, `-c`).
    pub inline: Option<(String, String)>,
}

const NETWORK_TOOLS: [&str; 14] = [
    "curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "ftp", "telnet", "socat",
    "rsync", "aria2c", "http",
];
const LITERAL_TOOLS: [&str; 8] = ["echo", "printf", "grep", "rg", "cat", "head", "tail", "wc"];
const SHELLS: [&str; 6] = ["sh", "bash", "zsh", "dash", "ksh", "fish"];
/// Words that open or join commands rather than name one.
const RESERVED: [&str; 11] = [
    "!", "{", "}", "if", "then", "else", "elif", "do", "while", "until", "time",
];

/// Whether an interpreter given `args` reads its program from standard
/// input: no operand names a script (`sh`, `sh -s x`, `python3 -`,
/// `python3 -u`; not `sh build.sh`, `python3 -m venv`).
fn reads_program(args: &[String]) -> bool {
    match args.iter().position(|a| !a.starts_with('-') || a == "-") {
        None => true,
        Some(i) => args[i] == "-" || i > 0 && matches!(args[i - 1].as_str(), "-s" | "--"),
    }
}

pub(crate) fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The executable and its arguments, past `VAR=x` assignments and wrappers
/// (`env`, `command`, `exec`, `nice`, `nohup`, `stdbuf`, `timeout N`), with
/// any directory stripped (`/usr/bin/curl` is `curl`).
pub(crate) fn executable(words: &[String]) -> Option<(String, &[String])> {
    let mut i = 0;
    loop {
        while i < words.len() && is_assignment(&words[i]) {
            i += 1;
        }
        let w = words.get(i)?;
        // Reserved words and grouping before a command run nothing
        // themselves (`if curl ...; then`, `! nc ...`, `{ rm ...; }`).
        if RESERVED.contains(&w.as_str()) {
            i += 1;
            continue;
        }
        let base = w.rsplit('/').next().unwrap_or(w);
        match base {
            "env" | "command" | "exec" | "nohup" | "nice" | "stdbuf" | "timeout" => {
                i += 1;
                while let Some(a) = words.get(i) {
                    if base == "env"
                        && matches!(a.as_str(), "-C" | "--chdir" | "-u" | "--unset" | "-S")
                    {
                        i += 2;
                        continue;
                    }
                    let numeric =
                        base == "timeout" && a.chars().next().is_some_and(|c| c.is_ascii_digit());
                    if a.starts_with('-') || numeric || (base == "env" && is_assignment(a)) {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            _ => return Some((base.to_owned(), &words[i + 1..])),
        }
    }
}

/// The first gate `cmd` (with caller `env`) would need, checked in a fixed
/// order, whatever the mode; [`Gates`] decides which are open.
pub fn classify(cmd: &str, caller_env: &[(&str, &str)]) -> Vec<Refusal> {
    classify_line(&CommandLine::lex(cmd), caller_env)
}

/// [`classify`] of a lexed command line: every gate reads the same words
/// (crate::shell).
pub(crate) fn classify_line(line: &CommandLine, caller_env: &[(&str, &str)]) -> Vec<Refusal> {
    let mut found = Vec::new();
    let mut add = |permission, evidence: String, inline: Option<(String, String)>| {
        if !found.iter().any(|r: &Refusal| r.permission == permission) {
            found.push(Refusal {
                permission,
                evidence,
                path: None,
                inline,
            });
        }
    };
    for (k, v) in caller_env {
        if crate::env::is_sensitive(k, v) || crate::env::steers_programs(k) {
            add(Permission::SensitiveEnv, format!("env {k}"), None);
        }
    }
    if let Some(e) = line.expansion {
        add(Permission::ShellExpansion, e.to_owned(), None);
    }
    let only_literal = line
        .commands
        .iter()
        .filter_map(|c| executable(&c.words))
        .all(|(exe, _)| LITERAL_TOOLS.contains(&exe.as_str()));
    // A shell that reads its program from a here-document or a
    // here-string runs that text: its commands are checked too.
    let fed_scripts: Vec<CommandLine> = line
        .commands
        .iter()
        .filter(|c| {
            executable(&c.words)
                .is_some_and(|(exe, args)| SHELLS.contains(&exe.as_str()) && reads_program(args))
        })
        .flat_map(|c| {
            c.stdin_data
                .iter()
                .map(|&i| CommandLine::lex(&line.data[i]))
        })
        .collect();
    if let Some(e) = fed_scripts.iter().find_map(|l| l.expansion) {
        add(Permission::ShellExpansion, e.to_owned(), None);
    }
    for command in line
        .commands
        .iter()
        .chain(fed_scripts.iter().flat_map(|l| &l.commands))
    {
        let words = &command.words;
        let Some((exe, args)) = executable(words) else {
            continue;
        };
        // A program read from standard input fed by a pipe, a
        // here-document or a here-string is inline code, as `-c` is
        // (`curl ... | sh`, `python3 <<EOF`); a shell started on its own
        // reads its terminal (an interactive session), which is not.
        let interpreter = SHELLS.contains(&exe.as_str())
            || exe.starts_with("python")
            || matches!(exe.as_str(), "node" | "ruby" | "perl" | "php");
        if interpreter && reads_program(args) && (command.piped || !command.stdin_data.is_empty()) {
            add(
                Permission::InlineScript,
                format!(
                    "{exe} reading its program from {}",
                    if command.piped {
                        "a pipe"
                    } else {
                        "a here-document"
                    }
                ),
                Some((exe.clone(), "stdin".to_owned())),
            );
        }
        let arg = |a: &str| args.iter().any(|x| x == a);
        let flags = |f: char| {
            args.iter()
                .any(|x| x.starts_with('-') && !x.starts_with("--") && x.contains(f))
        };
        if SHELLS.contains(&exe.as_str())
            && let Some(flag) = args
                .iter()
                .find(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
        {
            add(
                Permission::InlineScript,
                format!("{exe} -c"),
                Some((exe.clone(), flag.clone())),
            );
        }
        let code_options: &[&str] = if exe.starts_with("python") {
            &["-c", "-"]
        } else if exe == "node" {
            &["-e", "--eval", "-p", "--print"]
        } else if matches!(exe.as_str(), "ruby" | "perl") {
            &["-e", "-E"]
        } else {
            &[]
        };
        if let Some(option) = code_options.iter().find(|o| arg(o)) {
            add(
                Permission::InlineScript,
                format!("{exe} inline code"),
                Some((exe.clone(), (*option).to_owned())),
            );
        }
        let destructive = match exe.as_str() {
            "rm" => flags('r') && flags('f') || arg("--recursive") && arg("--force"),
            "sudo" | "su" | "doas" | "mkfs" | "mount" | "umount" | "shutdown" | "reboot"
            | "halt" | "poweroff" => true,
            e if e.starts_with("mkfs.") => true,
            "chmod" | "chown" | "chgrp" => flags('R') || arg("--recursive"),
            "find" => arg("-delete"),
            "dd" => args.iter().any(|a| a.starts_with("of=/dev/")),
            "git" => {
                (arg("reset") && arg("--hard"))
                    || (arg("clean")
                        && args
                            .iter()
                            .any(|a| a.starts_with('-') && (a.contains('f') || a.contains('x'))))
                    || (arg("push") && (arg("--force") || arg("-f")))
            }
            _ => false,
        };
        if destructive {
            add(Permission::DestructiveCommand, words.join(" "), None);
        }
        let network = NETWORK_TOOLS.contains(&exe.as_str())
            || (exe == "git"
                && ["clone", "fetch", "pull", "push", "ls-remote", "submodule"]
                    .iter()
                    .any(|s| arg(s)))
            || (matches!(exe.as_str(), "pip" | "pip3" | "uv" | "poetry")
                && (arg("install") || arg("download") || arg("sync") || arg("add")))
            || (matches!(exe.as_str(), "npm" | "yarn" | "pnpm" | "bun")
                && ["install", "i", "add", "ci", "update", "publish"]
                    .iter()
                    .any(|s| arg(s)))
            || (matches!(
                exe.as_str(),
                "apt" | "apt-get" | "dnf" | "yum" | "apk" | "brew"
            ) && ["install", "update", "upgrade"].iter().any(|s| arg(s)))
            || (matches!(exe.as_str(), "cargo")
                && ["install", "fetch", "update", "publish", "search"]
                    .iter()
                    .any(|s| arg(s)))
            || (exe == "go" && (arg("get") || arg("install") || arg("download")));
        if network {
            add(Permission::Network, words.join(" "), None);
        }
    }
    if !only_literal {
        // Every word, redirection target and here-document, as the shell
        // reads them (quotes removed): a URL or a network module anywhere.
        for w in line.texts().flat_map(str::split_whitespace) {
            if w.contains("http://")
                || w.contains("https://")
                || w.contains("socket.")
                || w.contains("urllib")
                || w.contains("requests.")
                || w.contains("http.client")
            {
                add(Permission::Network, w.to_owned(), None);
                break;
            }
        }
    }
    found
}

impl Gates {
    /// Whether `p` is allowed in this mode.
    pub fn allows(&self, p: Permission) -> bool {
        let g = match p {
            Permission::Network => self.network,
            Permission::ShellExpansion => self.shell_expansion,
            Permission::InlineScript => self.inline_script,
            Permission::DestructiveCommand => self.destructive_command,
            Permission::FilesystemEscape => self.filesystem_escape,
            Permission::PrivilegedExecutable => self.privileged_executable,
            Permission::SensitiveEnv => GateState::from_allowed(!self.secret_env_filter),
        };
        g == GateState::Allowed
    }
}

#[cfg(test)]
mod classify_tests {
    use super::*;

    fn perms(cmd: &str) -> Vec<&'static str> {
        classify(cmd, &[])
            .iter()
            .map(|r| r.permission.as_str())
            .collect()
    }

    #[test]
    fn classifier_sees_through_wrappers_and_separators() {
        assert!(perms("cargo test -q").is_empty());
        assert!(perms("ls -la && git status").is_empty());
        assert_eq!(perms("echo hi; curl https://x.example"), ["network"]);
        assert_eq!(perms("true &&\n/usr/bin/wget x"), ["network"]);
        assert_eq!(perms("env FOO=1 curl x"), ["network"]);
        assert_eq!(perms("A=1 B=2 nc host 80"), ["network"]);
        assert_eq!(perms("git clone x"), ["network"]);
        assert!(
            perms("echo https://example.com").is_empty(),
            "literal text tools may print URLs"
        );
        assert_eq!(perms("echo $(whoami)"), ["shell_expansion"]);
        assert!(perms("echo '$(not expanded)'").is_empty());
        assert_eq!(perms("bash -c 'ls'"), ["inline_script"]);
        assert_eq!(perms("python3 -c 'print(1)'"), ["inline_script"]);
        assert_eq!(perms("node -e 1"), ["inline_script"]);
        assert_eq!(perms("rm -rf build"), ["destructive_command"]);
        assert_eq!(perms("git reset --hard HEAD~1"), ["destructive_command"]);
        assert_eq!(perms("sudo ls"), ["destructive_command"]);
        assert!(perms("echo x > /dev/null 2>&1").is_empty());
        let inline = |cmd: &str| classify(cmd, &[])[0].inline.clone();
        assert_eq!(
            inline("python3 -c 'print(1)'"),
            Some(("python3".into(), "-c".into()))
        );
        assert_eq!(inline("bash -lc ls"), Some(("bash".into(), "-lc".into())));
        assert_eq!(
            inline("node --eval 1"),
            Some(("node".into(), "--eval".into()))
        );
        let env = classify("ls", &[("LD_PRELOAD", "/x.so")]);
        assert_eq!(env[0].permission, Permission::SensitiveEnv);
    }
}
