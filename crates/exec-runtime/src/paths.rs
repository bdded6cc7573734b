//! The path-escape gate: before a command runs, every argument that names a
//! path is checked against what the sandbox lets the command reach. A
//! heuristic over the command line (Landlock is the boundary); its value is
//! a precise refusal — the argument, and what to use instead — where the
//! kernel would only say "Permission denied".

use std::path::{Component, Path, PathBuf};

use ctm_workspace_fs::{FsError, Workspace};

use crate::policy::{Reading, executable, is_assignment};
use crate::shell::CommandLine;

/// How a command uses a path argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathAccess {
    /// Read, list or execute.
    Read,
    /// Create, change or remove.
    Write,
}

/// One argument that names a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathArg {
    /// As written (quotes removed).
    pub text: String,
    /// How the command uses it.
    pub access: PathAccess,
}

/// Commands whose arguments are text to print, not paths.
const LITERAL: [&str; 3] = ["echo", "printf", "true"];
/// Commands whose first operand is a pattern or a program.
const PATTERN_FIRST: [&str; 6] = ["grep", "egrep", "fgrep", "rg", "sed", "awk"];
/// Commands that change every path operand.
const WRITERS: [&str; 10] = [
    "mv", "rm", "touch", "mkdir", "rmdir", "chmod", "chown", "chgrp", "tee", "truncate",
];
/// Commands that read their operands and write the last one.
const COPIERS: [&str; 3] = ["cp", "install", "ln"];
const SHELLS: [&str; 6] = ["sh", "bash", "zsh", "dash", "ksh", "fish"];

/// Every argument of `cmd` that names a path, with how it is used.
pub fn path_arguments(cmd: &str) -> Vec<PathArg> {
    path_arguments_of(&Reading::of(CommandLine::lex(cmd)))
}

/// Every argument of a lexed command line that names a path, with how it
/// is used: redirection targets, then each command's operands.
pub(crate) fn path_arguments_of(reading: &Reading) -> Vec<PathArg> {
    let mut found = Vec::new();
    let mut add = |text: &str, access| {
        if !text.is_empty() {
            found.push(PathArg {
                text: text.to_owned(),
                access,
            });
        }
    };
    // The line's own commands and those of the programs it hands on
    // (here-documents a shell reads, `sh -c`, `eval`, `find -exec`, ...).
    for command in reading.commands() {
        for r in &command.redirects {
            add(
                &r.target,
                if r.output {
                    PathAccess::Write
                } else {
                    PathAccess::Read
                },
            );
        }
        let plain = &command.words;
        for w in plain.iter().take_while(|w| is_assignment(w)) {
            if let Some((_, v)) = w.split_once('=') {
                add(v, PathAccess::Read);
            }
        }
        // `env -C dir` and `git -C dir` change directory.
        for pair in plain.windows(2) {
            if matches!(pair[0].as_str(), "-C" | "--chdir") {
                add(&pair[1], PathAccess::Read);
            }
        }
        let Some((exe, args)) = executable(plain) else {
            continue;
        };
        if let Some(path) = invoked(plain, &exe).filter(|w| w.contains('/')) {
            add(path, PathAccess::Read);
        }
        command_operands(&exe, args, &mut add);
    }
    found
}

fn command_operands(exe: &str, args: &[String], add: &mut impl FnMut(&str, PathAccess)) {
    if LITERAL.contains(&exe) {
        return;
    }
    let operands = |skip_values: &[&str]| -> Vec<&str> {
        let mut v = Vec::new();
        let mut skip = false;
        for a in args {
            if skip {
                skip = false;
                continue;
            }
            if skip_values.contains(&a.as_str()) {
                skip = true;
                continue;
            }
            if let Some((opt, value)) = a.split_once('=')
                && opt.starts_with('-')
            {
                v.push(value);
                continue;
            }
            if !a.starts_with('-') || a == "-" {
                v.push(a.as_str());
            }
        }
        v
    };
    if PATTERN_FIRST.contains(&exe) {
        let explicit = args.iter().any(|a| {
            matches!(
                a.as_str(),
                "-e" | "-f" | "--regexp" | "--file" | "--expression"
            )
        });
        let mut skip_next = false;
        let mut pattern_done = explicit;
        let in_place = exe == "sed"
            && args
                .iter()
                .any(|a| a.starts_with("-i") || a == "--in-place");
        for (i, a) in args.iter().enumerate() {
            if skip_next {
                skip_next = false;
                continue;
            }
            if matches!(a.as_str(), "-f" | "--file") {
                if let Some(f) = args.get(i + 1) {
                    add(f, PathAccess::Read);
                }
                skip_next = true;
                continue;
            }
            if matches!(
                a.as_str(),
                "-e" | "--regexp"
                    | "--expression"
                    | "-g"
                    | "--glob"
                    | "-t"
                    | "--type"
                    | "-m"
                    | "-A"
                    | "-B"
                    | "-C"
            ) {
                skip_next = true;
                continue;
            }
            if a.starts_with('-') {
                continue;
            }
            if !pattern_done {
                pattern_done = true;
                continue;
            }
            add(
                a,
                if in_place {
                    PathAccess::Write
                } else {
                    PathAccess::Read
                },
            );
        }
        return;
    }
    if SHELLS.contains(&exe) || exe.starts_with("python") || matches!(exe, "node" | "ruby" | "perl")
    {
        // Inline code is its own gate; after `-c CODE` come $0 and arguments.
        let code_flag = |a: &str| {
            (SHELLS.contains(&exe) && a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
                || matches!(a, "-c" | "-e" | "-E" | "--eval" | "-p" | "--print")
        };
        let mut skip = false;
        for a in args {
            if skip {
                skip = false;
                continue;
            }
            if code_flag(a) || matches!(a.as_str(), "-m" | "-r" | "--require" | "-W" | "-X") {
                skip = true;
                continue;
            }
            match a.split_once('=') {
                Some((opt, value)) if opt.starts_with('-') => add(value, PathAccess::Read),
                _ if !a.starts_with('-') => add(a, PathAccess::Read),
                _ => {}
            }
        }
        return;
    }
    if exe == "find" {
        for a in args
            .iter()
            .take_while(|a| !a.starts_with('-') && !matches!(a.as_str(), "!" | "("))
        {
            add(a, PathAccess::Read);
        }
        return;
    }
    if exe == "dd" {
        for a in args {
            if let Some(p) = a.strip_prefix("of=") {
                add(p, PathAccess::Write);
            } else if let Some(p) = a.strip_prefix("if=") {
                add(p, PathAccess::Read);
            }
        }
        return;
    }
    if WRITERS.contains(&exe) {
        for a in operands(&[]) {
            add(a, PathAccess::Write);
        }
        return;
    }
    if COPIERS.contains(&exe) {
        let ops = operands(&["-t", "--target-directory", "-S", "--suffix", "-m", "--mode"]);
        let target = args
            .iter()
            .position(|a| a == "-t" || a == "--target-directory")
            .and_then(|i| args.get(i + 1));
        match target {
            Some(t) => {
                add(t, PathAccess::Write);
                for a in ops {
                    add(a, PathAccess::Read);
                }
            }
            None => {
                let n = ops.len();
                for (i, a) in ops.into_iter().enumerate() {
                    // ln's first operand is only the text of the link.
                    let access = if i + 1 == n && n > 1 {
                        PathAccess::Write
                    } else {
                        PathAccess::Read
                    };
                    add(a, access);
                }
            }
        }
        return;
    }
    let values: &[&str] = match exe {
        "tar" => &["-C", "--directory", "-f", "--file"],
        "git" => &["-c", "-m", "--message", "-C"],
        _ => &[],
    };
    for a in operands(values) {
        add(a, PathAccess::Read);
    }
    if matches!(exe, "tar" | "unzip") {
        for pair in args.windows(2) {
            if matches!(pair[0].as_str(), "-C" | "--directory" | "-d") {
                add(&pair[1], PathAccess::Write);
            }
        }
    }
}

/// The word of `words` that runs `exe` (`/usr/bin/curl` for `curl`).
fn invoked<'w>(words: &'w [String], exe: &str) -> Option<&'w String> {
    words
        .iter()
        .find(|w| !is_assignment(w) && w.rsplit('/').next() == Some(exe))
}

/// The executables a lexed command line runs (as written).
pub(crate) fn executables(reading: &Reading) -> Vec<String> {
    reading
        .commands()
        .filter_map(|c| {
            let (exe, _) = executable(&c.words)?;
            invoked(&c.words, &exe).cloned()
        })
        .collect()
}

/// What a command may reach, for the gate's verdicts.
#[derive(Debug, Clone)]
pub struct Reach<'a> {
    /// The workspace.
    pub workspace: &'a Workspace,
    /// The command's working directory, relative to the workspace root.
    pub workdir: &'a Path,
    /// The runtime directory (`HOME`, `TMPDIR` are inside).
    pub runtime: &'a Path,
    /// `HOME` of commands, what `~` means.
    pub home: &'a Path,
    /// Where commands may read and execute.
    pub read_roots: &'a [PathBuf],
    /// The namespace tier: `/tmp`, `/dev/shm` and `/dev/pts` are the
    /// sandbox's own, and so is `/proc` (its processes only).
    pub private_system_dirs: bool,
}

/// Paths any command may name: the standard devices and its own process.
fn always_reachable(p: &Path, access: PathAccess) -> bool {
    const READ_WRITE: [&str; 9] = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/stdin",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/tty",
    ];
    READ_WRITE.iter().any(|d| p == Path::new(d))
        || p.starts_with("/dev/fd")
        || (access == PathAccess::Read
            && (p.starts_with("/proc/self") || p.starts_with("/proc/thread-self")))
}

/// `p` with `.` and `..` resolved lexically (`/..` stays `/`).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

impl Reach<'_> {
    /// Whether the command may use `arg` as it intends.
    pub fn allows(&self, arg: &PathArg) -> bool {
        let text = arg.text.as_str();
        if text.contains("://") || text.starts_with('$') || text == "-" || text == "--" {
            return true;
        }
        let abs = if text == "~" {
            self.home.to_path_buf()
        } else if let Some(rest) = text.strip_prefix("~/") {
            self.home.join(rest)
        } else if text.starts_with('~') {
            // Another user's home.
            return false;
        } else if text.starts_with('/') {
            PathBuf::from(text)
        } else {
            return self.allows_relative(&self.workdir.join(text).to_string_lossy(), arg.access);
        };
        let abs = normalize(&abs);
        if always_reachable(&abs, arg.access) || abs.starts_with(self.runtime) {
            return true;
        }
        if self.private_system_dirs
            && (["/tmp", "/dev/shm", "/dev/pts"]
                .iter()
                .any(|d| abs.starts_with(d))
                || (arg.access == PathAccess::Read && abs.starts_with("/proc")))
        {
            return true;
        }
        if let Ok(rel) = abs.strip_prefix(self.workspace.root()) {
            return self.allows_relative(&rel.to_string_lossy(), arg.access);
        }
        arg.access == PathAccess::Read && self.read_roots.iter().any(|r| abs.starts_with(r))
    }

    fn allows_relative(&self, rel: &str, access: PathAccess) -> bool {
        let rel = if rel.is_empty() { "." } else { rel };
        match self.workspace.resolve_beneath(rel) {
            Err(FsError::Outside(_) | FsError::Absolute(_)) => false,
            // A link out of the workspace (`.venv/bin/python` to its base
            // interpreter) reaches what its target reaches: a read root,
            // for reading and running, and nothing else.
            Err(FsError::SymlinkEscape(_)) => {
                access == PathAccess::Read
                    && std::fs::canonicalize(self.workspace.root().join(rel)).is_ok_and(|t| {
                        always_reachable(&t, access)
                            || self.read_roots.iter().any(|r| t.starts_with(r))
                    })
            }
            _ => true,
        }
    }
}

/// A setuid or setgid file among the executables of `cmd`, found the way
/// the shell finds it (`PATH`, or relative to the working directory).
pub fn privileged_executable(cmd: &str, path_var: &str, cwd: &Path) -> Option<PathBuf> {
    privileged_executable_of(&Reading::of(CommandLine::lex(cmd)), path_var, cwd)
}

/// [`privileged_executable`] of a lexed command line.
pub(crate) fn privileged_executable_of(
    reading: &Reading,
    path_var: &str,
    cwd: &Path,
) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    // Built into every POSIX shell: run in the shell, never looked up.
    const BUILTINS: [&str; 16] = [
        "true", "false", "echo", "printf", "cd", "test", "[", "exit", "export", "set", "unset",
        "read", "wait", "shift", ":", ".",
    ];
    for exe in executables(reading)
        .into_iter()
        .filter(|e| !BUILTINS.contains(&e.as_str()))
    {
        let candidates: Vec<PathBuf> = if exe.contains('/') {
            vec![cwd.join(&exe)]
        } else {
            path_var
                .split(':')
                .filter(|d| d.starts_with('/'))
                .map(|d| Path::new(d).join(&exe))
                .collect()
        };
        let found = candidates.into_iter().find_map(|c| {
            std::fs::metadata(&c)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| (c, m))
        });
        if let Some((path, meta)) = found
            && meta.permissions().mode() & 0o6000 != 0
        {
            return Some(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &str) -> Vec<(String, PathAccess)> {
        path_arguments(cmd)
            .into_iter()
            .map(|a| (a.text, a.access))
            .collect()
    }

    fn r(s: &str) -> (String, PathAccess) {
        (s.to_owned(), PathAccess::Read)
    }

    fn w(s: &str) -> (String, PathAccess) {
        (s.to_owned(), PathAccess::Write)
    }

    #[test]
    fn operands_redirections_and_assignments() {
        assert_eq!(
            args("cat ../outside/secret.txt"),
            [r("../outside/secret.txt")]
        );
        assert_eq!(args("head -n 3 /abs/x"), [r("3"), r("/abs/x")]);
        assert_eq!(args("F=/abs/x; cat $F"), [r("/abs/x"), r("$F")]);
        assert_eq!(args("echo /etc/passwd"), Vec::<(String, PathAccess)>::new());
        assert_eq!(args("echo hi > /tmp/x 2>&1"), [w("/tmp/x")]);
        assert_eq!(args("cat < ../s"), [r("../s")]);
        assert_eq!(args("cmd &>log"), [w("log")]);
        assert_eq!(args("grep -rn needle /etc"), [r("/etc")]);
        assert_eq!(args("grep -e a -e b src"), [r("src")]);
        assert_eq!(args("sed -i s/a/b/ f.txt"), [w("f.txt")]);
        assert_eq!(args("cp a b /x/"), [r("a"), r("b"), w("/x/")]);
        assert_eq!(
            args("ln -s /etc/passwd link"),
            [r("/etc/passwd"), w("link")]
        );
        assert_eq!(args("rm -f /x"), [w("/x")]);
        assert_eq!(args("dd if=/dev/zero of=../y"), [r("/dev/zero"), w("../y")]);
        assert_eq!(args("git -C /other status"), [r("/other"), r("status")]);
        assert_eq!(args("env -C /x ls"), [r("/x")]);
        assert_eq!(args("python3 x.py --out=/o"), [r("x.py"), r("/o")]);
        // The string is the shell's program: its paths are checked too.
        assert_eq!(
            args("sh -c 'cat /etc/x' name arg"),
            [r("name"), r("arg"), r("/etc/x")]
        );
        assert_eq!(args("/opt/tool run"), [r("/opt/tool"), r("run")]);
        assert_eq!(args("find / -name x"), [r("/")]);
    }

    #[test]
    fn heredoc_bodies_are_data() {
        let cmd = "cat <<'EOF' > out.txt\n/etc/passwd\nrm -rf /\nEOF\nwc -l out.txt";
        assert_eq!(args(cmd), [w("out.txt"), r("out.txt")]);
        assert_eq!(
            args("cat <<< /etc/passwd"),
            Vec::<(String, PathAccess)>::new()
        );
        assert_eq!(
            executables(&Reading::of(CommandLine::lex(cmd))),
            ["cat", "wc"]
        );
    }

    #[test]
    fn verdicts() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        let workspace = Workspace::open(&root).unwrap();
        let roots = vec![PathBuf::from("/usr")];
        let reach = Reach {
            private_system_dirs: false,
            workspace: &workspace,
            workdir: Path::new("sub"),
            runtime: Path::new("/rt/x"),
            home: Path::new("/rt/x/home"),
            read_roots: &roots,
        };
        let ok = |t: &str, access| {
            reach.allows(&PathArg {
                text: t.into(),
                access,
            })
        };
        use PathAccess::{Read, Write};
        assert!(ok("..", Read), "the workdir's parent is the root");
        assert!(!ok("../..", Read));
        assert!(!ok("../etc-link/passwd", Read));
        assert!(ok("/usr/bin/env", Read));
        assert!(!ok("/usr/bin/x", Write));
        assert!(!ok("/usr/../etc/shadow", Read));
        assert!(ok("~/.profile", Read));
        assert!(!ok("~root/.profile", Read));
        assert!(ok("/rt/x/tmp/f", Write));
        assert!(!ok("/rt/y", Read));
        assert!(ok(&format!("{}/sub/new", root.display()), Write));
        assert!(!ok(&format!("{}/etc-link/passwd", root.display()), Read));
        assert!(ok("/dev/null", Write));
        assert!(ok("/proc/self/status", Read));
        assert!(!ok("/proc/1/environ", Read));
        assert!(ok("https://example.com/x", Read));
    }
}
