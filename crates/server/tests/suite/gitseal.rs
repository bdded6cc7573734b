//! The git seal (issue "Nothing a command writes may run later outside the
//! sandbox"), attacked through the real binary in safe mode, as the user
//! running the tests and, when that is root, once more as the unprivileged
//! user `nobody`: each plant of the attacker's review is made by a command,
//! then the user's own git runs outside any sandbox (`status`, `checkout`,
//! `rebase --continue`) and must run nothing. Work an agent does with git
//! inside one command must still land in the repository. On a host without
//! the namespace tier each test says so and checks nothing else.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::harness::*;
use super::sandbox::{is_root, sc};

const NOBODY: u32 = 65534;

/// One workspace of one user: `root/ws`, a repository with one commit;
/// `root/home` an empty home for that user's git; `root/PWNED` the file a
/// planted program would make.
struct Case {
    _t: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    /// Run everything as `nobody` (the tests run as root).
    nobody: bool,
}

impl Case {
    fn new(nobody: bool) -> Self {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        if nobody {
            chown_nobody(&root);
        }
        let c = Self {
            _t: t,
            root,
            ws,
            nobody,
        };
        c.git_ok(&c.ws, &["init", "-q", "-b", "main"]);
        std::fs::write(c.ws.join("a.txt"), "a\n").unwrap();
        if nobody {
            chown_nobody(&c.ws.join("a.txt"));
        }
        c.git_ok(&c.ws, &["add", "a.txt"]);
        c.git_ok(&c.ws, &["commit", "-qm", "one"]);
        c
    }

    fn who(&self) -> &'static str {
        if self.nobody {
            "nobody"
        } else {
            "the test user"
        }
    }

    fn marker(&self) -> PathBuf {
        self.root.join("PWNED")
    }

    fn as_user(&self, program: &str) -> Command {
        if self.nobody {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".into(),
                "--".into(),
                program.into(),
            ]);
            c
        } else {
            Command::new(program)
        }
    }

    /// The user's own git, outside any sandbox.
    fn git(&self, dir: &Path, args: &[&str]) -> Output {
        self.as_user("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.root.join("home"))
            .env_remove("XDG_CONFIG_HOME")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_EDITOR", "true")
            .output()
            .unwrap()
    }

    fn git_ok(&self, dir: &Path, args: &[&str]) -> String {
        let o = self.git(dir, args);
        assert!(o.status.success(), "git {args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        if self.nobody {
            chown_nobody(&self.ws);
        }
    }

    /// The server on stdio, as this case's user, in safe mode unless `args`
    /// say otherwise; `None` (with a note) without the namespace tier.
    fn server(&self, args: &[&str], env: &[(&str, &str)]) -> Option<StdioServer> {
        let bin = bin_for(self.nobody);
        let mut cmd = self.as_user(bin.to_str().unwrap());
        cmd.arg("--workspace")
            .arg(&self.ws)
            .args(args)
            .arg("--stdio");
        for (k, _) in std::env::vars() {
            if k.starts_with("CODING_TOOLS_MCP_") {
                cmd.env_remove(k);
            }
        }
        pass_sandbox_builder(&mut cmd);
        cmd.env("HOME", self.root.join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("XDG_CONFIG_HOME");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut s = StdioServer::start_with(&mut cmd);
        let r = s.request(&call(
            90,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let sb = &sc(&r)["sandbox"];
        if sb["tier"] == "namespace" || args.contains(&"landlock") {
            return Some(s);
        }
        assert!(
            std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
            "the namespace tier is required here but unavailable: {sb}"
        );
        eprintln!(
            "NOTE: no namespace tier on this host ({}); the git seal tests check nothing here",
            sb["namespace"]["reason"]
        );
        None
    }

    /// The user runs `args` and nothing planted runs.
    fn user_runs_nothing(&self, args: &[&str]) -> Output {
        let o = self.git(&self.ws, args);
        assert!(
            !self.marker().exists(),
            "as {}: `git {args:?}` ran a program a command planted ({o:?})",
            self.who()
        );
        o
    }
}

/// The binary where `nobody` can run it: a copy in a directory of its own
/// under /tmp (the checkout may sit below a directory only root can enter;
/// the server finds its sandbox entry through its own descriptor, so a copy
/// runs as the original does).
fn bin_for(nobody: bool) -> PathBuf {
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if !nobody {
        return PathBuf::from(BIN);
    }
    COPY.get_or_init(|| {
        let dir = PathBuf::from(format!("/tmp/ctm-gitseal-bin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let to = dir.join("coding-tools-mcp");
        std::fs::copy(BIN, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    })
    .clone()
}

fn chown_nobody(p: &Path) {
    let ok = Command::new("chown")
        .arg("-R")
        .arg(format!("{NOBODY}:{NOBODY}"))
        .arg(p)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Each scenario once as the test user and, as root, once as `nobody`.
fn as_each_user(f: impl Fn(&Case)) {
    f(&Case::new(false));
    if is_root() {
        f(&Case::new(true));
    } else {
        eprintln!("NOTE: not root: the run as another unprivileged user is skipped");
    }
}

fn run(s: &mut StdioServer, cmd: &str) -> Value {
    let r = s.request(&call(
        1,
        "exec_command",
        json!({"cmd": cmd, "yield_time_ms": 30000}),
    ));
    sc(&r).clone()
}

fn stdout(v: &Value) -> String {
    v["stdout"].as_str().unwrap_or_default().to_owned()
}

/// The command reported `step=<status>` with a failing status.
fn refused(v: &Value, step: &str) -> bool {
    let out = stdout(v);
    out.contains(&format!("{step}=")) && !out.contains(&format!("{step}=0"))
}

fn warnings(v: &Value) -> String {
    v["warnings"].to_string()
}

#[test]
fn work_done_with_git_inside_one_command_lands_in_the_repository() {
    as_each_user(|c| {
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        c.write(
            "work.sh",
            "set -e\n\
             g() { git -c user.name=a -c user.email=a@a \"$@\"; }\n\
             echo b > b.txt; g add b.txt; g commit -qm two\n\
             g checkout -qb topic; echo t > t.txt; g add t.txt; g commit -qm topic\n\
             g checkout -q main; echo c > c.txt; g add c.txt; g commit -qm three\n\
             g merge -q --no-edit topic\n\
             g checkout -qb side HEAD~1; echo s > s.txt; g add s.txt; g commit -qm side\n\
             g rebase -q main\n\
             echo dirty >> a.txt; g stash -q\n\
             g tag v1\n\
             g gc -q\n\
             echo ok\n",
        );
        let v = run(&mut s, "sh work.sh");
        assert_eq!(v["exit_code"], 0, "as {}: {v}", c.who());
        assert_eq!(stdout(&v).trim(), "ok", "{v}");
        // Nothing of it was refused.
        assert!(!warnings(&v).contains("git seal"), "{v}");
        drop(s);
        // The user's own git sees every change: branches, the merge, the
        // rebase, the stash, the tag, the packs gc wrote, and all is sound.
        let log = c.git_ok(&c.ws, &["log", "--format=%s", "side"]);
        let mut subjects: Vec<&str> = log.lines().collect();
        assert_eq!(subjects.len(), 6, "as {}: {log}", c.who());
        assert_eq!(subjects[0], "side", "{log}");
        assert!(subjects[1].starts_with("Merge branch 'topic'"), "{log}");
        subjects.sort_unstable();
        assert_eq!(
            subjects[1..],
            ["one", "side", "three", "topic", "two"],
            "{log}"
        );
        assert_eq!(
            c.git_ok(&c.ws, &["rev-parse", "--abbrev-ref", "HEAD"])
                .trim(),
            "side"
        );
        assert!(c.git_ok(&c.ws, &["stash", "list"]).contains("stash@{0}"));
        assert!(c.git_ok(&c.ws, &["tag"]).contains("v1"));
        c.git_ok(&c.ws, &["fsck", "--strict", "--no-dangling"]);
        assert_eq!(
            c.git_ok(&c.ws, &["status", "--porcelain"]).trim(),
            "?? work.sh"
        );
        let packs = std::fs::read_dir(c.ws.join(".git/objects/pack"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".idx")
            })
            .count();
        assert!(packs >= 1, "gc's pack was not carried back");
    });
}

#[test]
fn an_invalid_git_directory_never_makes_the_workspace_root_the_repository() {
    as_each_user(|c| {
        let head = std::fs::read(c.ws.join(".git/HEAD")).unwrap();
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        // The review's first attack: break .git, lay a bare repository out
        // at the root whose config runs a program.
        c.write(
            "plant.sh",
            &format!(
                "printf x > .git/HEAD; echo head=$?\n\
                 mv .git/objects .git/o2; mv .git/refs .git/r2\n\
                 mkdir -p objects refs/heads\n\
                 printf 'ref: refs/heads/main\\n' > HEAD\n\
                 printf '[core]\\n\\tbare = false\\n\\tfsmonitor = \"touch {m}\"\\n' > config\n\
                 git status >/dev/null 2>&1; echo inside=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(stdout(&v).contains("head=0"), "{v}");
        let w = warnings(&v);
        assert!(w.contains(".git/HEAD"), "the refusal is not named: {v}");
        assert!(w.contains("neither an object id nor a ref"), "{v}");
        drop(s);
        assert_eq!(std::fs::read(c.ws.join(".git/HEAD")).unwrap(), head);
        assert!(c.ws.join(".git/objects").is_dir() && c.ws.join(".git/refs").is_dir());
        let o = c.user_runs_nothing(&["status", "--short"]);
        assert!(o.status.success(), "{o:?}");
        assert_eq!(
            c.git_ok(&c.ws, &["rev-parse", "--absolute-git-dir"]).trim(),
            c.ws.join(".git").display().to_string()
        );
        c.user_runs_nothing(&["checkout", "-q", "-b", "later"]);
    });
}

#[test]
fn git_files_of_worktrees_and_submodules_cannot_be_repointed() {
    as_each_user(|c| {
        // A linked worktree as the workspace: .git is a file naming a
        // directory outside it.
        let main = c.root.join("main");
        c.git_ok(&c.ws, &["clone", "-q", ".", main.to_str().unwrap()]);
        let wt = main.join("wt");
        c.git_ok(&main, &["worktree", "add", "-q", wt.to_str().unwrap()]);
        let dot_git = std::fs::read(wt.join(".git")).unwrap();
        let case = Case {
            _t: tempfile::tempdir().unwrap(),
            root: c.root.clone(),
            ws: wt.clone(),
            nobody: c.nobody,
        };
        let Some(mut s) = case.server(&[], &[]) else {
            return;
        };
        let env = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let seal = &sc(&env)["sandbox"]["namespace"];
        assert_eq!(seal["git_sealed"], true, "{seal}");
        case.write(
            "plant.sh",
            &format!(
                "mkdir -p .git-evil/objects .git-evil/refs\n\
                 printf 'ref: refs/heads/x\\n' > .git-evil/HEAD\n\
                 printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' > .git-evil/config\n\
                 printf 'gitdir: .git-evil\\n' > .git; echo repoint=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(refused(&v, "repoint"), "{v}");
        drop(s);
        assert_eq!(std::fs::read(wt.join(".git")).unwrap(), dot_git);
        case.user_runs_nothing(&["status", "--short"]);

        // Submodules: a command can neither repoint one's .git nor register
        // a repository it built as a new one.
        let sub_src = c.root.join("subsrc");
        std::fs::create_dir_all(&sub_src).unwrap();
        if c.nobody {
            chown_nobody(&sub_src);
        }
        c.git_ok(&sub_src, &["init", "-q", "-b", "main"]);
        c.git_ok(&sub_src, &["commit", "-q", "--allow-empty", "-m", "s"]);
        c.git_ok(
            &c.ws,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                sub_src.to_str().unwrap(),
                "sub",
            ],
        );
        c.git_ok(&c.ws, &["commit", "-qm", "sub"]);
        let sub_git = std::fs::read(c.ws.join("sub/.git")).unwrap();
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        c.write(
            "plant.sh",
            &format!(
                "mkdir -p sub/.evil && cp -r .git/modules/sub/. sub/.evil/\n\
                 printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> sub/.evil/config\n\
                 printf 'gitdir: .evil\\n' > sub/.git; echo repoint=$?\n\
                 git init -q evil && printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> evil/.git/config\n\
                 git -c user.name=a -c user.email=a@a -C evil commit -q --allow-empty -m e\n\
                 git update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil; echo link=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(
            refused(&v, "repoint") && stdout(&v).contains("link=0"),
            "{v}"
        );
        let w = warnings(&v);
        assert!(w.contains("registers a new submodule"), "{v}");
        assert!(w.contains("created the git repository evil/.git"), "{v}");
        drop(s);
        assert_eq!(std::fs::read(c.ws.join("sub/.git")).unwrap(), sub_git);
        let o = c.user_runs_nothing(&["status", "--short"]);
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("A  evil"),
            "{o:?}"
        );
    });
}

#[test]
fn hooks_husky_runs_and_the_parents_of_a_hooks_directory_stay_put() {
    as_each_user(|c| {
        // husky 9: core.hooksPath = .husky/_, whose stubs run .husky/<hook>.
        c.write(".husky/_/h", "#!/bin/sh\nn=$(basename \"$0\")\nh=$(dirname \"$(dirname \"$0\")\")/$n\n[ -f \"$h\" ] && sh -e \"$h\"\n");
        for hook in ["post-checkout", "pre-commit"] {
            std::os::unix::fs::symlink("h", c.ws.join(".husky/_").join(hook)).unwrap();
        }
        std::fs::set_permissions(
            c.ws.join(".husky/_/h"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        c.git_ok(&c.ws, &["config", "core.hooksPath", ".husky/_"]);
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        c.write(
            "plant.sh",
            &format!(
                "printf 'touch {m}\\n' > .husky/post-checkout; echo husky=$?\n\
                 mv .husky .husky.old; echo move=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(refused(&v, "husky") && refused(&v, "move"), "{v}");
        // The refusal explains itself: what is protected, and why.
        assert!(
            warnings(&v).contains("safe mode keeps .husky read-only for commands"),
            "{v}"
        );
        assert!(
            v["stderr"]
                .as_str()
                .unwrap_or_default()
                .contains("Read-only"),
            "{v}"
        );
        drop(s);
        c.user_runs_nothing(&["checkout", "-q", "-b", "b1"]);

        // A hooks directory elsewhere in the workspace: its parent cannot be
        // renamed away to put a new one in its place.
        c.write("tools/hooks/README", "hooks\n");
        c.git_ok(&c.ws, &["config", "core.hooksPath", "tools/hooks"]);
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        c.write(
            "plant.sh",
            &format!(
                "mv tools tools.old; echo move=$?\n\
                 printf '#!/bin/sh\\ntouch {m}\\n' > tools/hooks/post-checkout; echo hook=$?\n\
                 chmod +x tools/hooks/post-checkout\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(refused(&v, "move") && refused(&v, "hook"), "{v}");
        drop(s);
        c.user_runs_nothing(&["checkout", "-q", "-b", "b2"]);
    });
}

#[test]
fn a_config_file_the_repository_includes_is_read_only() {
    as_each_user(|c| {
        c.write(".gitconfig", "[alias]\n\tst = status\n");
        c.git_ok(&c.ws, &["config", "include.path", "../.gitconfig"]);
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        let env = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let seal = &sc(&env)["sandbox"]["namespace"]["git_seal"];
        assert!(
            seal["protected"].to_string().contains(".gitconfig"),
            "{seal}"
        );
        c.write(
            "plant.sh",
            &format!(
                "printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> .gitconfig; echo include=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(refused(&v, "include"), "{v}");
        drop(s);
        c.user_runs_nothing(&["status", "--short"]);
    });
}

#[test]
fn sequencer_state_never_reaches_the_repository() {
    as_each_user(|c| {
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        c.write(
            "plant.sh",
            &format!(
                "mkdir -p .git/rebase-merge && cd .git/rebase-merge\n\
                 printf 'exec touch {m}\\n' > git-rebase-todo\n\
                 printf 'refs/heads/main\\n' > head-name; git rev-parse HEAD > orig-head; git rev-parse HEAD > onto\n\
                 : > interactive; echo 1 > msgnum; echo 1 > end\n\
                 echo planted=$?\n",
                m = c.marker().display()
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(stdout(&v).contains("planted=0"), "{v}");
        assert!(warnings(&v).contains("rebase-merge"), "{v}");
        drop(s);
        assert!(!c.ws.join(".git/rebase-merge").exists());
        let o = c.user_runs_nothing(&["rebase", "--continue"]);
        assert!(!o.status.success(), "a rebase was in progress: {o:?}");
    });
}

#[test]
fn a_bwrap_planted_on_path_inside_the_workspace_is_never_run() {
    as_each_user(|c| {
        // The server's PATH has the workspace's virtualenv first (an
        // activated .venv); a command planted bwrap there.
        let bin = c.ws.join(".venv/bin");
        c.write(
            ".venv/bin/bwrap",
            &format!(
                "#!/bin/sh\ntouch {}\nexec /usr/bin/bwrap \"$@\"\n",
                c.marker().display()
            ),
        );
        std::fs::set_permissions(bin.join("bwrap"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let path = format!("{}:/usr/bin:/bin", bin.display());
        // The bwrap builder (the built-in one runs no bwrap at all).
        let env = [
            ("PATH", path.as_str()),
            ("CODING_TOOLS_MCP_SANDBOX_BUILDER", "bwrap"),
        ];
        let Some(mut s) = c.server(&[], &env) else {
            assert!(!c.marker().exists(), "the planted bwrap ran at start");
            return;
        };
        let env = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let ns = &sc(&env)["sandbox"]["namespace"];
        assert_eq!(ns["bwrap"], "/usr/bin/bwrap", "{ns}");
        let v = run(&mut s, "echo ran");
        assert_eq!(stdout(&v).trim(), "ran", "{v}");
        drop(s);
        assert!(
            !c.marker().exists(),
            "as {}: the planted bwrap ran",
            c.who()
        );
    });
}

#[test]
fn no_command_makes_a_set_id_file_in_either_tier() {
    as_each_user(|c| {
        for tier in [&[][..], &["--sandbox", "landlock"][..]] {
            let Some(mut s) = c.server(tier, &[]) else {
                return;
            };
            c.write(
                "setid.py",
                "import os, stat\n\
                 for mode in (0o4755, 0o2755, 0o6755):\n\
                 \x20   n = f'made{mode:o}'\n\
                 \x20   try:\n\
                 \x20       os.close(os.open(n, os.O_CREAT | os.O_WRONLY, mode))\n\
                 \x20   except OSError as e:\n\
                 \x20       print('open refused', e.errno)\n\
                 for mode in (0o4755, 0o2755):\n\
                 \x20   try:\n\
                 \x20       os.chmod('copy', mode)\n\
                 \x20   except OSError as e:\n\
                 \x20       print('chmod refused', e.errno)\n\
                 try:\n\
                 \x20   os.mknod('node', stat.S_IFREG | 0o4755)\n\
                 except OSError as e:\n\
                 \x20   print('mknod refused', e.errno)\n\
                 os.chmod('copy', 0o755)\n\
                 print('plain chmod ok')\n",
            );
            if tier.is_empty() {
                // The workspace is mounted nosuid in the namespace tier too.
                let v = run(&mut s, "cat /proc/self/mountinfo");
                let ws = c.ws.display().to_string();
                let line = stdout(&v)
                    .lines()
                    .find(|l| l.split(' ').nth(4) == Some(ws.as_str()))
                    .map(str::to_owned)
                    .unwrap_or_default();
                assert!(line.contains("nosuid"), "{line:?}: {v}");
            }
            let v = run(
                &mut s,
                "cp /bin/sh copy && python3 setid.py; chmod u+s copy; echo chmod=$?",
            );
            assert!(
                stdout(&v).contains("plain chmod ok") && refused(&v, "chmod"),
                "{tier:?}: {v}"
            );
            drop(s);
            for e in std::fs::read_dir(&c.ws).unwrap() {
                let e = e.unwrap();
                let mode = e.metadata().unwrap().mode();
                assert_eq!(
                    mode & 0o6000,
                    0,
                    "as {}, {tier:?}: {} has a set-id bit ({mode:o})",
                    c.who(),
                    e.path().display()
                );
            }
            for f in ["copy", "node", "made4755", "made2755", "made6755"] {
                let _ = std::fs::remove_file(c.ws.join(f));
            }
        }
    });
}

#[test]
fn without_the_namespace_tier_safe_mode_says_the_seal_is_not_there() {
    let c = Case::new(false);
    let Some(mut s) = c.server(&["--sandbox", "landlock"], &[]) else {
        return;
    };
    let env = s.request(&call(
        2,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let r = sc(&env);
    assert_eq!(r["sandbox"]["namespace"]["git_sealed"], false, "{r}");
    assert!(
        r["warnings"]
            .to_string()
            .contains("git seal is not complete"),
        "{r}"
    );
    let text = env["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("git seal NOT complete"), "{text}");
    s.close_stdin();
    s.wait();
    let err = s.stderr.seen.lock().unwrap().join("\n");
    assert!(
        err.contains("the git seal is not complete"),
        "nothing said at start: {err}"
    );
}

#[test]
fn an_object_that_does_not_hash_to_its_name_is_not_kept() {
    as_each_user(|c| {
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        // The blob id of "later\n", a file the user commits next; the
        // command stores other content under it.
        let later = c.root.join("later.txt");
        std::fs::write(&later, "later\n").unwrap();
        let id = c.git_ok(&c.root, &["hash-object", later.to_str().unwrap()]);
        let id = id.trim();
        c.write(
            "plant.py",
            &format!(
                "import zlib, os\nd = '.git/objects/{}'\nos.makedirs(d, exist_ok=True)\nopen(d + '/{}', 'wb').write(zlib.compress(b'blob 6\\0evil!\\n'))\nprint('planted')\n",
                &id[..2],
                &id[2..]
            ),
        );
        let v = run(&mut s, "python3 plant.py");
        assert!(stdout(&v).contains("planted"), "{v}");
        assert!(warnings(&v).contains("does not hash to its name"), "{v}");
        drop(s);
        assert!(
            !c.ws
                .join(".git/objects")
                .join(&id[..2])
                .join(&id[2..])
                .exists()
        );
        c.write("later.txt", "later\n");
        c.git_ok(&c.ws, &["add", "later.txt"]);
        c.git_ok(&c.ws, &["commit", "-qm", "later"]);
        assert_eq!(c.git_ok(&c.ws, &["cat-file", "-p", id]), "later\n");
    });
}

#[test]
fn apply_patch_writes_what_commands_may_not_and_flags_it() {
    let c = Case::new(false);
    let mut s = StdioServer::start(&c.ws, &[]);
    let r = s.request(&call(
        1,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: .vscode/tasks.json\n+{\"version\": \"2.0.0\"}\n*** Add File: src/ok.txt\n+fine\n*** End Patch\n"}),
    ));
    let v = sc(&r);
    assert_eq!(v["applied"], true, "{r}");
    let w = v["warnings"].to_string();
    assert!(
        w.contains(".vscode/tasks.json is loaded or run by IDEs and agents without asking"),
        "{r}"
    );
    assert!(!w.contains("src/ok.txt"), "{r}");
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("show this change to the user"), "{text}");
    assert!(c.ws.join(".vscode/tasks.json").is_file());
}

#[test]
fn require_git_seal_refuses_to_start_without_it() {
    let c = Case::new(false);
    let out = |args: &[&str]| {
        command(&c.ws, args)
            .arg("--stdio")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let o = out(&["--require-git-seal", "--sandbox", "landlock"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the git seal is not complete"),
        "{o:?}"
    );
    let o = out(&["--require-git-seal", "--permission-mode", "trusted"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // Where the seal holds, the server starts and serves.
    let mut probe = StdioServer::start(&c.ws, &[]);
    let r = probe.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    drop(probe);
    if sc(&r)["sandbox"]["namespace"]["git_sealed"] == true {
        let mut s = StdioServer::start(&c.ws, &["--require-git-seal"]);
        let r = s.request(&call(2, "server_info", json!({"detail": "full"})));
        assert_eq!(sc(&r)["ok"], true, "{r}");
    } else {
        eprintln!("NOTE: no complete git seal on this host; only the refusals were checked");
    }
}

/// Writes `.git/index` (version 2) from `entries` (name, mode, id, extended
/// flag, dev): a command's own index, made by hand.
const MAKE_INDEX: &str = r#"import hashlib, struct, subprocess, sys
def sh(*a, cwd=None, inp=None):
    return subprocess.run(a, cwd=cwd, input=inp, capture_output=True, check=True).stdout.decode().strip()
def index(entries):
    out = b"DIRC" + struct.pack(">II", 2, len(entries))
    for name, mode, oid, ext, dev in entries:
        n = name.encode()
        flags = len(n) | (0x4000 if ext else 0)
        e = struct.pack(">10I", 0, 0, 0, 0, dev, 0, mode, 0, 0, 0) + bytes.fromhex(oid) + struct.pack(">H", flags)
        base = 62
        if ext:
            e += b"\0\0"
            base = 64
        size = (base + len(n) + 8) & ~7
        out += e + n + b"\0" * (size - base - len(n))
    open(".git/index", "wb").write(out + hashlib.sha1(out).digest())
"#;

#[test]
fn crafted_indexes_never_reach_the_repository() {
    as_each_user(|c| {
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        let m = c.marker().display().to_string();
        c.write("mkidx.py", MAKE_INDEX);
        // An extended-flags bit in a version 2 index hides a gitlink from a
        // parser that ignores it; the submodule's config runs a program.
        c.write(
            "sub.sh",
            &format!(
                "mkdir -p a/sub && cd a/sub && git init -q && echo y > y && git add y && git -c user.name=a -c user.email=a@a commit -qm s && git config core.fsmonitor 'touch {m}; false'\n"
            ),
        );
        c.write(
            "hide.py",
            "from mkidx import *\n\
             sub = sh('git', 'rev-parse', 'HEAD', cwd='a/sub')\n\
             open('a/a', 'w').write('hi\\n')\n\
             blob = sh('git', 'hash-object', '-w', 'a/a')\n\
             a = sh('git', 'rev-parse', ':a.txt')\n\
             index([('a.txt', 0o100644, a, False, 0), ('a/a', 0o100644, blob, True, 0), ('a/sub', 0o160000, sub, False, 0o100644)])\n\
             print('written')\n",
        );
        let v = run(&mut s, "sh sub.sh && python3 hide.py");
        assert!(stdout(&v).contains("written"), "{v}");
        assert!(warnings(&v).contains(".git/index"), "as {}: {v}", c.who());
        c.user_runs_nothing(&["status", "--short"]);
        // An entry whose path is inside .git: `git restore .` would write it.
        c.write(
            "hook.py",
            &format!(
                "from mkidx import *\n\
                 b = sh('git', 'hash-object', '-w', '--stdin', inp=b'#!/bin/sh\\ntouch {m}\\n')\n\
                 a = sh('git', 'rev-parse', ':a.txt')\n\
                 index([('.git/hooks/post-checkout', 0o100755, b, False, 0), ('a.txt', 0o100644, a, False, 0)])\n\
                 print('written')\n"
            ),
        );
        let v = run(&mut s, "python3 hook.py");
        assert!(stdout(&v).contains("written"), "{v}");
        assert!(warnings(&v).contains("names .git"), "{v}");
        drop(s);
        let _ = c.git(&c.ws, &["restore", "."]);
        assert!(!c.ws.join(".git/hooks/post-checkout").exists());
        c.user_runs_nothing(&["checkout", "-q", "-b", "after"]);
    });
}

#[test]
fn a_commit_that_adds_a_submodule_or_replaces_history_does_not_land() {
    as_each_user(|c| {
        let head = c.git_ok(&c.ws, &["rev-parse", "HEAD"]);
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        let m = c.marker().display().to_string();
        c.write(
            "link.sh",
            &format!(
                "set -e\nmkdir -p a/sub && cd a/sub && git init -q && echo y > y && git add y && git -c user.name=a -c user.email=a@a commit -qm s && git config core.fsmonitor 'touch {m}; false'\n\
                 cd ../..\n\
                 git update-index --add --cacheinfo 160000,$(git -C a/sub rev-parse HEAD),a/sub\n\
                 git -c user.name=a -c user.email=a@a commit -qm link\n\
                 echo done\n"
            ),
        );
        let v = run(&mut s, "sh link.sh");
        assert!(stdout(&v).contains("done"), "{v}");
        let w = warnings(&v);
        assert!(
            w.contains("a tree that adds a submodule"),
            "as {}: {v}",
            c.who()
        );
        assert_eq!(
            c.git_ok(&c.ws, &["rev-parse", "HEAD"]),
            head,
            "the commit landed"
        );
        // The user's usual recovery moves: nothing planted runs.
        c.git_ok(&c.ws, &["reset", "-q"]);
        c.user_runs_nothing(&["status", "--short"]);
        // A replace ref would change what the user's git shows for a commit.
        c.write(
            "replace.sh",
            "set -e\nrm -rf a\necho other > other.txt && git add other.txt && git -c user.name=a -c user.email=a@a commit -qm other\n\
             git replace HEAD~1 HEAD\necho done\n",
        );
        let v = run(&mut s, "sh replace.sh");
        assert!(stdout(&v).contains("done"), "{v}");
        assert!(warnings(&v).contains("replace refs"), "{v}");
        drop(s);
        assert!(c.git_ok(&c.ws, &["replace", "-l"]).trim().is_empty());
    });
}

#[test]
fn hook_managers_files_and_config_in_a_home_workspace_are_sealed() {
    as_each_user(|c| {
        let m = c.marker().display().to_string();
        c.write(".pre-commit-config.yaml", "repos: []\n");
        c.write(".gitconfig", "[user]\n\tname = t\n");
        // An active hook makes the seal say what it cannot cover.
        c.write(
            ".git/hooks/pre-commit",
            "#!/bin/sh\nexec ./scripts/lint.sh\n",
        );
        std::fs::set_permissions(
            c.ws.join(".git/hooks/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let home = c.ws.display().to_string();
        let Some(mut s) = c.server(&[], &[("HOME", &home)]) else {
            return;
        };
        let env = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let seal = &sc(&env)["sandbox"]["namespace"];
        assert_eq!(seal["git_sealed"], false, "{seal}");
        assert!(
            seal["git_seal"]["gaps"]
                .to_string()
                .contains("hooks in .git/hooks (pre-commit)"),
            "{seal}"
        );
        let protected = seal["git_seal"]["protected"].to_string();
        assert!(
            protected.contains(".gitconfig") && protected.contains(".pre-commit-config.yaml"),
            "{seal}"
        );
        c.write(
            "plant.sh",
            &format!(
                "printf 'repos: [{{repo: local, hooks: [{{id: x, name: x, entry: touch {m}, language: system}}]}}]\\n' > .pre-commit-config.yaml; echo precommit=$?\n\
                 printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> .gitconfig; echo global=$?\n"
            ),
        );
        let v = run(&mut s, "sh plant.sh");
        assert!(
            refused(&v, "precommit") && refused(&v, "global"),
            "as {}: {v}",
            c.who()
        );
        drop(s);
        let o = c
            .as_user("git")
            .args(["status", "--short"])
            .current_dir(&c.ws)
            .env("HOME", &c.ws)
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        assert!(!c.marker().exists(), "the user's git ran a planted program");
    });
}

#[test]
fn what_is_not_kept_is_said_even_when_git_leaves_maintenance_running() {
    as_each_user(|c| {
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        // git commit starts auto-maintenance in the background (git 2.47
        // detaches it); below bubblewrap it ends with the shell.
        let v = run(
            &mut s,
            "git config a.b 1; git -c user.name=a -c user.email=a@a commit -q --allow-empty -m e; echo done",
        );
        assert!(stdout(&v).contains("done"), "{v}");
        assert!(
            v.get("background_running").is_none(),
            "nothing runs on: {v}"
        );
        assert!(
            warnings(&v).contains(".git/config (repository config)"),
            "as {}: {v}",
            c.who()
        );
        drop(s);
        assert_eq!(c.git_ok(&c.ws, &["log", "-1", "--format=%s"]).trim(), "e");
    });
}

#[test]
fn a_split_index_is_not_carried_back_half() {
    as_each_user(|c| {
        c.git_ok(&c.ws, &["config", "core.splitIndex", "true"]);
        c.git_ok(&c.ws, &["update-index", "--split-index"]);
        let Some(mut s) = c.server(&[], &[]) else {
            return;
        };
        let v = run(&mut s, "echo y > g && git add g; echo done");
        assert!(stdout(&v).contains("done"), "{v}");
        assert!(warnings(&v).contains("split index"), "{v}");
        drop(s);
        // The user's repository still works.
        c.git_ok(&c.ws, &["status", "--short"]);
        c.git_ok(&c.ws, &["add", "g"]);
        c.git_ok(&c.ws, &["commit", "-qm", "g"]);
    });
}
