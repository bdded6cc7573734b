//! Permission modes and the gates each one opens.

use crate::shell::{CommandLine, SimpleCommand};

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

/// Whether `exe` runs a program it reads (from a file, or from standard
/// input when no operand names one).
fn is_interpreter(exe: &str) -> bool {
    SHELLS.contains(&exe)
        || exe.starts_with("python")
        || exe.starts_with("perl")
        || exe.starts_with("ruby")
        || matches!(exe, "node" | "nodejs" | "php" | "." | "source")
}

/// Whether what `c` reads on standard input may be run as a program: it
/// feeds a shell or an interpreter that reads one, a group or `exec` (whose
/// commands are not known here), a command invoked by a path of its own
/// (`./cat` may be a shell), a command that hands on a program of its own
/// (`find -exec sh`, `sh -c sh`: that program inherits the input), or a
/// pipe into one that reads its program from the pipe (`cat <<E | sh`).
fn feeds_program(c: &SimpleCommand, after: &[SimpleCommand]) -> bool {
    match executable(&c.words) {
        None => true,
        Some((exe, args)) => {
            (is_interpreter(&exe) && reads_program(args))
                || invoked_by_own_path(&c.words, &exe)
                || !embedded_commands(&c.words).is_empty()
                // Any command the pipe feeds, a compound command's too.
                || (c.pipes_out
                    && after.iter().any(|n| {
                        n.piped
                            && executable(&n.words)
                                .is_none_or(|(e, a)| is_interpreter(&e) && reads_program(a))
                    }))
        }
    }
}

/// Whether the word that runs `exe` names it by a path outside the system
/// directories (a file the workspace may hold).
fn invoked_by_own_path(words: &[String], exe: &str) -> bool {
    words
        .iter()
        .find(|w| !is_assignment(w) && w.rsplit('/').next() == Some(exe))
        .is_some_and(|w| {
            w.contains('/')
                && ![
                    "/usr/bin/",
                    "/bin/",
                    "/usr/local/bin/",
                    "/usr/sbin/",
                    "/sbin/",
                ]
                .iter()
                .any(|d| w.strip_prefix(d).is_some_and(|rest| !rest.contains('/')))
        })
}

/// A command line and the programs it hands on, read once for every gate
/// (the set-id, path and policy gates of one command read the same).
pub(crate) struct Reading {
    pub line: CommandLine,
    /// What [`programs`] found the line hands on.
    pub programs: Vec<CommandLine>,
    /// Whether every program handed on was read.
    pub complete: bool,
}

impl Reading {
    pub(crate) fn of(line: CommandLine) -> Self {
        let (programs, complete) = programs(&line);
        Self {
            line,
            programs,
            complete,
        }
    }

    /// Every simple command: the line's, then its programs'.
    pub(crate) fn commands(&self) -> impl Iterator<Item = &SimpleCommand> {
        std::iter::once(&self.line)
            .chain(&self.programs)
            .flat_map(|l| &l.commands)
    }
}

/// Every program a command line hands on to be run, read as command lines
/// of their own, nested to a depth of 8: here-documents and here-strings
/// that [`feeds_program`] (all of them when the line leaves one open), and
/// the command lines in words ([`embedded_commands`]). Each distinct text
/// is read once, and at most 256 of them, 1 MiB in all; `false` when more
/// was handed on than that (the gates then refuse the line rather than
/// pass what they did not read).
fn programs(line: &CommandLine) -> (Vec<CommandLine>, bool) {
    const DEPTH: usize = 8;
    const MOST: usize = 256;
    const BYTES: usize = 1 << 20;
    if line.unread {
        // Refused whatever it hands on.
        return (Vec::new(), false);
    }
    // Every program read here shares one budget of 4 Mi characters.
    crate::shell::set_budget(4 << 20);
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut bytes = 0usize;
    let mut complete = true;
    let texts_of = |l: &CommandLine| -> Vec<String> {
        let mut out = Vec::new();
        for (i, c) in l.commands.iter().enumerate() {
            if l.open || feeds_program(c, &l.commands[i + 1..]) {
                out.extend(c.stdin_data.iter().map(|&d| l.data[d].clone()));
            }
            out.extend(embedded_commands(&c.words));
        }
        out
    };
    let mut out: Vec<CommandLine> = Vec::new();
    let mut level: Vec<String> = texts_of(line);
    for depth in 0..=DEPTH {
        if level.is_empty() {
            break;
        }
        if depth == DEPTH {
            complete = false;
            break;
        }
        let mut next = Vec::new();
        for text in level {
            if !seen.insert(text.clone()) {
                continue;
            }
            bytes += text.len();
            if seen.len() > MOST || bytes > BYTES {
                complete = false;
                break;
            }
            let l = CommandLine::lex_on_budget(&text);
            if l.unread {
                complete = false;
                break;
            }
            next.extend(texts_of(&l));
            out.push(l);
        }
        if !complete {
            break;
        }
        level = next;
    }
    (out, complete)
}

/// The command lines a command carries in its words, which the shell or
/// the command runs: `eval`'s words, `trap`'s action, `env -S`'s string,
/// and `find`'s `-exec`/`-execdir`/`-ok` commands.
fn embedded_commands(words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut all = words
        .iter()
        .skip_while(|w| is_assignment(w) || RESERVED.contains(&w.as_str()));
    let Some(first) = all.next() else {
        return out;
    };
    let rest: Vec<&String> = all.collect();
    embedded_in(first.rsplit('/').next().unwrap_or(first), &rest, &mut out);
    // Behind a wrapper (`timeout 5 sh -c ...`, `nice find ... -exec`,
    // `command eval ...`): the command it runs carries them too.
    if let Some((exe, args)) = executable(words)
        && args.len() + 1 < words.len()
    {
        let args: Vec<&String> = args.iter().collect();
        embedded_in(&exe, &args, &mut out);
    }
    out
}

/// [`embedded_commands`] of the command `base` with arguments `rest`.
fn embedded_in(base: &str, rest: &[&String], out: &mut Vec<String>) {
    if SHELLS.contains(&base) {
        // `sh -c 'string'`: the string is the program (the first operand
        // after the options, `-c` anywhere in a cluster).
        let mut saw_c = false;
        for w in rest {
            if w.starts_with("--") {
                continue;
            }
            if w.starts_with('-') {
                saw_c |= w.contains('c');
                continue;
            }
            if saw_c {
                out.push((*w).clone());
            }
            break;
        }
    }
    match base {
        "eval" => out.push(
            rest.iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "trap" => out.extend(
            rest.iter()
                .find(|w| !w.starts_with('-'))
                .map(|w| (*w).clone()),
        ),
        "env" => {
            for pair in rest.windows(2) {
                if matches!(pair[0].as_str(), "-S" | "--split-string") {
                    out.push(pair[1].clone());
                }
            }
        }
        "find" => {
            let mut i = 0;
            while i < rest.len() {
                if matches!(rest[i].as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
                    // Its words are the command's arguments as they are:
                    // quoted again to be read as one line.
                    let cmd: Vec<String> = rest[i + 1..]
                        .iter()
                        .take_while(|w| !matches!(w.as_str(), ";" | "+"))
                        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
                        .collect();
                    i += cmd.len() + 1;
                    out.push(cmd.join(" "));
                }
                i += 1;
            }
        }
        _ => {}
    }
}

/// The options at the start of `args`, with the values of those that take
/// one, up to the first operand (`-` counts as an option: stdin).
fn leading_options(args: &[String]) -> &[String] {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "--" || !a.starts_with('-') && !a.starts_with('+') {
            break;
        }
        i += if VALUED_OPTIONS.contains(&a.as_str()) {
            2
        } else {
            1
        };
    }
    &args[..i.min(args.len())]
}

/// Interpreter options whose value is the next word.
const VALUED_OPTIONS: [&str; 16] = [
    "-r",
    "--require",
    "--import",
    "--loader",
    "-I",
    "--check-hash-based-pycs",
    "-M",
    "-x",
    "-o",
    "+o",
    "-O",
    "+O",
    "-W",
    "-X",
    "--rcfile",
    "--init-file",
];

/// Whether an interpreter given `args` reads its program from standard
/// input: no operand names a script, or it names standard input (`sh`,
/// `sh -s x`, `bash -o posix`, `python3 -W ignore`, `python3 -`,
/// `sh /dev/stdin`; not `sh build.sh`, `python3 -m venv`).
fn reads_program(args: &[String]) -> bool {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "-s" || a == "--" {
            return true;
        }
        if VALUED_OPTIONS.contains(&a.as_str()) {
            i += 2;
            continue;
        }
        if a.starts_with('-') && a != "-" {
            i += 1;
            continue;
        }
        // Standard input, or a descriptor a here-document may be on
        // (`sh /dev/fd/3 3<<EOF`).
        return a == "-"
            || a == "/dev/stdin"
            || a.starts_with("/dev/fd/")
            || a.starts_with("/proc/self/fd/");
    }
    true
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
            "env" | "command" | "exec" | "nohup" | "nice" | "stdbuf" | "timeout" | "xargs"
            | "builtin" => {
                i += 1;
                let mut timed = false;
                while let Some(a) = words.get(i) {
                    let valued = match base {
                        "env" => matches!(a.as_str(), "-C" | "--chdir" | "-u" | "--unset" | "-S"),
                        "timeout" => {
                            matches!(a.as_str(), "-s" | "--signal" | "-k" | "--kill-after")
                        }
                        "nice" => a == "-n" || a == "--adjustment",
                        "stdbuf" => matches!(a.as_str(), "-i" | "-o" | "-e"),
                        "xargs" => matches!(
                            a.as_str(),
                            "-a" | "-d"
                                | "-E"
                                | "-I"
                                | "-L"
                                | "-n"
                                | "-P"
                                | "-s"
                                | "--arg-file"
                                | "--delimiter"
                                | "--eof"
                                | "--replace"
                                | "--max-lines"
                                | "--max-args"
                                | "--max-procs"
                                | "--max-chars"
                        ),
                        _ => false,
                    };
                    if valued {
                        i += 2;
                        continue;
                    }
                    if a.starts_with('-') || (base == "env" && is_assignment(a)) {
                        i += 1;
                    } else if base == "timeout" && !timed {
                        // Its first operand is the duration, however
                        // written (`5`, `+5`, `.5`, `inf`, `5m`).
                        timed = true;
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
    classify_line(&Reading::of(CommandLine::lex(cmd)), caller_env)
}

/// [`classify`] of a lexed command line: every gate reads the same words
/// (crate::shell).
pub(crate) fn classify_line(reading: &Reading, caller_env: &[(&str, &str)]) -> Vec<Refusal> {
    let line = &reading.line;
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
    // Programs the line hands to a shell or an interpreter: here-documents,
    // `sh -c` strings, `eval`, `trap`, `env -S`, `find -exec`, nested.
    let (fed_scripts, complete) = (&reading.programs, reading.complete);
    // What could not be read is refused, in every mode (the destructive
    // gate is closed in trusted mode too): a line past the lexer's depth,
    // a `${...}` shells close in different places, more programs handed
    // on than are read.
    if line.unread || !complete || fed_scripts.iter().any(|l| l.unread) {
        add(
            Permission::DestructiveCommand,
            "a command line nested or handed on too deeply to be checked".to_owned(),
            None,
        );
    }
    // A group or `exec` given a here-document, or a pipe anywhere in the
    // line: an interpreter that reads standard input may read it.
    let group_fed = line
        .commands
        .iter()
        .any(|c| !c.stdin_data.is_empty() && executable(&c.words).is_none());
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
        let interpreter = is_interpreter(&exe);
        if interpreter
            && reads_program(args)
            && (command.piped || group_fed || !command.stdin_data.is_empty())
        {
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
        if exe == "eval" {
            add(
                Permission::InlineScript,
                "eval".to_owned(),
                Some((exe.clone(), "eval".to_owned())),
            );
        }
        // Options come before the program's operand; what follows it is the
        // program's own arguments (`bash build.sh -c Release`).
        let options = leading_options(args);
        if SHELLS.contains(&exe.as_str())
            && let Some(flag) = options
                .iter()
                .find(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
        {
            add(
                Permission::InlineScript,
                format!("{exe} -c"),
                Some((exe.clone(), flag.clone())),
            );
        }
        // The option that takes code, also inside a cluster of short
        // options or with the code attached (`-Ic`, `-c'...'`, `-le`, `-pe`);
        // a cluster ends at an option whose value follows (`-Mfeature`,
        // `-Ilib`, `-rjson`, `-Wdefault`).
        let (short, long, valued): (&[char], &[&str], &[char]) = if exe.starts_with("python") {
            (&['c'], &["-"], &['W', 'X', 'm'])
        } else if exe == "node" || exe == "nodejs" {
            (&['e', 'p'], &["--eval", "--print"], &[])
        } else if exe.starts_with("ruby") {
            (&['e', 'E'], &[], &['r', 'I'])
        } else if exe.starts_with("perl") {
            (&['e', 'E'], &[], &['M', 'm', 'I', 'x'])
        } else {
            (&[], &[], &[])
        };
        let option = options.iter().find(|a| {
            long.iter().any(|l| {
                a == l
                    || (l.starts_with("--")
                        && a.strip_prefix(l).is_some_and(|r| r.starts_with('=')))
            }) || (a.len() > 1
                && a.starts_with('-')
                && !a.starts_with("--")
                && a[1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() && !valued.contains(c))
                    .any(|c| short.contains(&c)))
        });
        if let Some(option) = option {
            add(
                Permission::InlineScript,
                format!("{exe} inline code"),
                Some((exe.clone(), option.clone())),
            );
        }
        let destructive = match exe.as_str() {
            "rm" => {
                (flags('r') || flags('R') || arg("--recursive")) && (flags('f') || arg("--force"))
            }
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
        // Every word and redirection target, as the shell reads them
        // (quotes removed), and every here-document read as a program: a
        // URL or a network module anywhere. (A here-document a data reader
        // gets, such as a script `cat` writes to a file, is not run.)
        let words = line.commands.iter().flat_map(|c| {
            c.words
                .iter()
                .chain(c.redirects.iter().map(|r| &r.target))
                .map(String::as_str)
        });
        for w in words
            .chain(fed_scripts.iter().flat_map(CommandLine::texts))
            .flat_map(str::split_whitespace)
        {
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

    /// The attacker review of the one lexer (issue 31, item 6): each line
    /// runs what the gate names under /bin/sh (dash) or bash, and each was
    /// missed by a reading that differed from the shell's.
    #[test]
    fn lines_read_as_the_shell_reads_them() {
        let cases: &[(&str, &str)] = &[
            // Only space and tab are blanks: `\r#` is no comment.
            ("true \r#; echo X$(id)X", "shell_expansion"),
            ("true \u{a0}#; curl -sS 1.1.1.1", "network"),
            ("true \u{c}#; rm -rf victim", "destructive_command"),
            // A here-document delimiter ends at a blank only.
            (
                "cat <<'EOF'\r\nEOF\r\necho X$(id)X #\r\n",
                "shell_expansion",
            ),
            (
                "cat <<'EOF'\u{a0}\nEOF\u{a0}\ncurl -sS 1.1.1.1\n",
                "network",
            ),
            // A backslash-newline joins `<<` and `-`, `$` and `(`.
            ("cat <<\\\n-'EOF'\n\tEOF\necho X$(id)X\n", "shell_expansion"),
            ("echo \"$\\\n(rm -rf victim)\"", "shell_expansion"),
            ("echo \"$\\\n(rm -rf victim)\"", "destructive_command"),
            // `$'` is no quote to dash.
            ("echo $'\\' ; echo X$(id)X ; echo '\\'", "shell_expansion"),
            // `&>` is `&` then `>` to dash.
            ("echo &>/dev/stderr curl -sS 1.1.1.1", "network"),
            // A here-document that something other than a data reader reads.
            (". /dev/stdin <<'EOF'\nrm -rf victim\nEOF", "inline_script"),
            (
                ". /dev/stdin <<'EOF'\nrm -rf victim\nEOF",
                "destructive_command",
            ),
            (
                "(sh) <<'EOF'\nrm -rf victim\ncurl x\nEOF",
                "destructive_command",
            ),
            ("(sh) <<'EOF'\nrm -rf victim\ncurl x\nEOF", "network"),
            ("{ sh; } <<'EOF'\necho $(id)\nEOF", "shell_expansion"),
            // A here-document inside a substitution, checked against its own body.
            (
                "cat <<'A' $(sh <<'B'\nrm -rf victim\nB\n)\nharmless\nA",
                "destructive_command",
            ),
            // Quotes inside `${...}`.
            (
                "echo ${x:-'}'} ; rm -rf victim ; echo 'x'",
                "destructive_command",
            ),
            // Programs from a pipe, across a newline or a comment.
            ("echo 'echo hi' |\nsh", "inline_script"),
            ("echo 'echo hi' | # c\nsh", "inline_script"),
            ("echo 'echo hi' | (sh)", "inline_script"),
            ("sh /dev/stdin <<'EOF'\necho hi\nEOF", "inline_script"),
            ("bash -o posix <<'EOF'\necho hi\nEOF", "inline_script"),
            ("python3 -W ignore <<'EOF'\nprint(1)\nEOF", "inline_script"),
            // Commands inside words.
            ("eval 'echo hi'", "inline_script"),
            ("eval 'curl -sS 1.1.1.1'", "network"),
            ("trap 'rm -rf victim' EXIT", "destructive_command"),
            ("env -S 'sh -c \"echo hi\"'", "inline_script"),
            ("find . -name x -exec rm -rf {} ;", "destructive_command"),
            ("timeout -s KILL 5 curl -sS 1.1.1.1", "network"),
            ("nice -n 5 sh -c 'echo hi'", "inline_script"),
            ("xargs curl -sS <<'EOF'\n1.1.1.1\nEOF", "network"),
            ("rm -Rf victim", "destructive_command"),
            ("rm --recursive -f victim", "destructive_command"),
            // Code options in a cluster or with the code attached.
            ("python3 -Ic 'print(42)'", "inline_script"),
            ("python3 -c'print(42)'", "inline_script"),
            ("perl -le 'print 1'", "inline_script"),
            ("perl5.36.0 -e 'print 1'", "inline_script"),
            ("nodejs -e 1", "inline_script"),
            ("node -pe 42", "inline_script"),
            // The second attacker review.
            (
                "cat <<\\\n-'E'\nx\\\n\tE\nrm -rf victim\n-E\nE\n",
                "destructive_command",
            ),
            (
                "./cat <<'EOF'\necho $(id)\nrm -rf victim\nEOF",
                "destructive_command",
            ),
            ("(python3) <<'EOF'\nimport os\nEOF", "inline_script"),
            ("echo 'print(1)' | (true; python3)", "inline_script"),
            ("echo 'echo hi' | { true; sh; }", "inline_script"),
            ("exec <<'EOF'\nprint(1)\nEOF\npython3", "inline_script"),
            (
                "echo \"${x:-'}\"; rm -rf victim; echo \"'}\"",
                "destructive_command",
            ),
            ("echo ${x:-$(rm -rf victim)}", "destructive_command"),
            ("cat <<E\n$(rm -rf victim)\nE", "destructive_command"),
            (
                "echo $(case x in x) rm -rf victim;; esac)",
                "destructive_command",
            ),
            (
                "sh <<'A'\nsh <<'B'\nrm -rf victim\nB\nA",
                "destructive_command",
            ),
            ("cat <<'E' | sh\nrm -rf victim\nE", "destructive_command"),
            ("eval \"eval 'rm -rf victim'\"", "destructive_command"),
            ("sh -c 'rm -rf victim'", "destructive_command"),
            ("bash -lc 'curl -sS 1.1.1.1'", "network"),
            (
                "find . -maxdepth 0 -exec env -S 'rm -rf victim' ;",
                "destructive_command",
            ),
            // The third attacker review.
            ("cat <<'' # \\\n\nrm -rf victim\n\n", "destructive_command"),
            (
                "cat <<E\nabc\\\\\\\nE\n'\nE\nrm -rf victim\n#'",
                "destructive_command",
            ),
            (
                "find . -maxdepth 0 -exec sh \\; <<'EOF'\nrm -rf victim\nEOF",
                "destructive_command",
            ),
            (
                "sh /dev/fd/3 3<<'EOF'\nrm -rf victim\nEOF",
                "destructive_command",
            ),
            ("trap 'echo \"echo hi\" | sh' EXIT", "inline_script"),
            ("node -r fs -e 'console.log(42)'", "inline_script"),
            ("node --require fs -e 1", "inline_script"),
            ("perl -I lib -e 'print 42'", "inline_script"),
            ("node --eval='console.log(42)'", "inline_script"),
            ("perl -0777e 'print 42'", "inline_script"),
            (
                "sh -c sh <<'EOF'\nrm -rf victim\nEOF",
                "destructive_command",
            ),
            ("eval sh <<'EOF'\nrm -rf victim\nEOF", "destructive_command"),
            (
                "x=abc; echo \"${x#'}\"'}\"; rm -rf victim #'",
                "destructive_command",
            ),
            ("nice --adjustment 5 rm -rf victim", "destructive_command"),
            ("timeout +5 rm -rf victim", "destructive_command"),
            ("timeout inf rm -rf victim", "destructive_command"),
            ("xargs --max-args 1 rm -rf victim", "destructive_command"),
            ("stdbuf -o L rm -rf victim", "destructive_command"),
            // The fourth review: a pipe feeds a compound command's body.
            ("echo 'echo hi' | if true; then sh; fi", "inline_script"),
            ("echo 'echo hi' | case x in x) sh;; esac", "inline_script"),
            ("echo 'echo hi' | for i in 1; do sh; done", "inline_script"),
            (
                "cat <<'E' | while true; do sh; break; done\nrm -rf victim\nE",
                "destructive_command",
            ),
            // Behind a wrapper.
            ("timeout 5 sh -c 'rm -rf victim'", "destructive_command"),
            ("env sh -c 'rm -rf victim'", "destructive_command"),
            ("nice sh -c 'rm -rf victim'", "destructive_command"),
            ("command eval 'rm -rf victim'", "destructive_command"),
            (
                "timeout 5 find . -maxdepth 1 -name victim -exec rm -rf {} +",
                "destructive_command",
            ),
        ];
        // Past what is read: refused, not passed (in every mode: the
        // destructive gate is closed in trusted mode too).
        let many = "trap : USR1; ".repeat(300) + "trap 'rm -rf victim' EXIT";
        assert!(perms(&many).contains(&"destructive_command"));
        let deep = "$(".repeat(40) + "rm -rf victim" + &")".repeat(40);
        assert!(perms(&deep).contains(&"destructive_command"));
        // Many readings of nested programs cost what their distinct texts
        // cost, not twice per level.
        let mut nested = String::from("x;");
        for k in 0..9 {
            nested = format!("sh -s $'\\x' <<'E{k}'\n{nested}\nE{k}");
        }
        let t = std::time::Instant::now();
        let _ = perms(&nested);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        // Substitutions in here-documents nested 2,000 deep: read to the
        // lexer's depth and budget, then refused, at once.
        let nest = "cat <<E\n".to_owned() + &"$(cat <<E\n".repeat(2_000) + "\nE\n";
        let t = std::time::Instant::now();
        assert!(perms(&nest).contains(&"destructive_command"));
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        for cmd in [
            "perl -Mfeature=say x.pl",
            "ruby -Ilib -rjson x.rb",
            "python3 -Wdefault x.py",
        ] {
            assert!(perms(cmd).is_empty(), "{cmd:?}: {:?}", perms(cmd));
        }
        for (cmd, gate) in cases {
            assert!(perms(cmd).contains(gate), "{cmd:?}: {:?}", perms(cmd));
        }
        // Data stays data.
        for cmd in [
            "python3 --version | head -1",
            "node --version | head -1",
            "bash --version | head -1",
            "ls | wc -l; python3 --version",
            "bash 2>&1 | tee session.log",
            "cat <<'EOF' | tee notes.md\nSee https://example.com/docs\nEOF",
            "cat <<'EOF' | git apply\n rm -rf build\nEOF",
            "git commit -q -F - <<'EOF'\nfeat: add `parse_args` helper, see $(docs)\nEOF",
            "python3 s.py <<'EOF'\nsee `x` here\nEOF",
            "sqlite3 t.db <<'EOF'\nCREATE TABLE `t` (a);\nEOF",
            "cat > x.sh <<'EOF'\necho a \\\nb\nEOF",
            "python3 t.py -c cfg.yaml",
            "node app.js -p 8080",
            "bash build.sh -c Release",
            "cat <<'EOF' > x.sh\necho $(date)\ncurl -sS https://example.com\nEOF",
            "cat <<'EOF' > x.py\nimport socket\nurllib.request.urlopen('https://x')\nEOF\nchmod +x x.py",
            "grep -r 'curl' .",
            "git commit -m 'use $(...) in docs'",
            "printf 'a\\nb\\n' | sort",
            "bash",
        ] {
            assert!(perms(cmd).is_empty(), "{cmd:?}: {:?}", perms(cmd));
        }
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
