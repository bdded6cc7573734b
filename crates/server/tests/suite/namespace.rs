//! The namespace tier (the issue "The command sandbox, part 2"), attacked
//! through the real binary in safe mode: what Landlock alone cannot stop —
//! metadata writes, host sockets, a `.git` that makes the user's git run a
//! program, seeing and signalling the host's processes. On a host without
//! bubblewrap or user namespaces each test says so and checks nothing else.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::*;
use super::sandbox::{LANDLOCK_TIER, all_gone, all_running, layout, sc, tag};

/// Starts a server (safe mode unless `args` say otherwise) and tells
/// whether its commands run in the namespace tier; when not, prints why.
fn start(ws: &Path, args: &[&str]) -> Option<StdioServer> {
    let mut s = StdioServer::start(ws, args);
    let r = s.request(&call(
        90,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let sb = &sc(&r)["sandbox"];
    if sb["tier"] == "namespace" {
        return Some(s);
    }
    // CI installs bubblewrap and asks for the tier: there, its absence fails.
    assert!(
        std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
        "the namespace tier is required here but unavailable: {sb}"
    );
    eprintln!(
        "NOTE: no namespace tier on this host ({}; fix: {}); the namespace tests check nothing here",
        sb["namespace"]["reason"], sb["namespace"]["fix"]
    );
    None
}

fn run(s: &mut StdioServer, cmd: &str) -> Value {
    let r = s.request(&call(
        1,
        "exec_command",
        json!({"cmd": cmd, "yield_time_ms": 20000}),
    ));
    sc(&r).clone()
}

/// A directory outside the workspace and outside /tmp (which the sandbox
/// replaces), so the command sees the host's file there, read-only.
struct Outside(PathBuf);

impl Outside {
    fn new(name: &str) -> Self {
        let dir = PathBuf::from(format!("/var/tmp/ctm-ns-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn metadata_writes_outside_the_workspace_fail() {
    let l = layout();
    let out = Outside::new("meta");
    let secret = out.0.join("secret.txt");
    let tool = out.0.join("tool");
    std::fs::write(&secret, "x").unwrap();
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.mode(), m.uid(), m.mtime())
    };
    let (s0, t0) = (before(&secret), before(&tool));
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    // From a script: the path gate would refuse these names on a command line.
    std::fs::write(
        l.ws.join("meta.sh"),
        format!(
            "F={secret}; T={tool}\nchmod 666 $F; echo chmod=$?\nchown 65534 $F; echo chown=$?\ntouch -d 2001-01-01 $F; echo touch=$?\nchmod 4755 $T; echo setuid=$?\npython3 meta.py; echo xattr=$?\n",
            secret = secret.display(),
            tool = tool.display()
        ),
    )
    .unwrap();
    std::fs::write(
        l.ws.join("meta.py"),
        format!(
            "import os, sys\ntry:\n    os.setxattr({:?}, 'user.x', b'1')\nexcept OSError as e:\n    print(e.strerror)\n    sys.exit(1)\n",
            secret.display().to_string()
        ),
    )
    .unwrap();
    let v = run(&mut s, "sh meta.sh");
    let stdout = v["stdout"].as_str().unwrap_or_default().to_owned();
    for step in ["chmod", "chown", "touch", "setuid", "xattr"] {
        assert!(
            stdout.contains(&format!("{step}=1")),
            "{step} took effect: {v}"
        );
    }
    assert!(
        v["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Read-only file system"),
        "{v}"
    );
    assert_eq!((before(&secret), before(&tool)), (s0, t0));
    let xattr = Command::new("getfattr")
        .args(["-n", "user.x"])
        .arg(&secret)
        .output();
    if let Ok(o) = xattr {
        assert!(!o.status.success(), "an xattr was set");
    }
}

#[test]
fn host_sockets_in_tmp_and_run_are_out_of_reach() {
    let l = layout();
    // A same-user service's control socket in the host's /tmp (tmux's is
    // /tmp/tmux-<uid>/default).
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("service.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    std::fs::write(
        l.ws.join("dial.py"),
        format!(
            "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\n    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n",
            sock.display().to_string()
        ),
    )
    .unwrap();
    let v = run(&mut s, "python3 dial.py");
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(!out.contains("CONNECTED"), "{v}");
    assert!(out.contains("refused"), "{v}");
    assert!(
        listener.accept().is_err(),
        "the host's service saw a connection"
    );
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap()
}

/// A workspace that is a repository with one commit (`a.txt`).
fn committed() -> super::sandbox::Layout {
    let l = layout();
    std::fs::write(l.ws.join("a.txt"), "a\n").unwrap();
    assert!(git(&l.ws, &["add", "a.txt"]).status.success());
    assert!(git(&l.ws, &["commit", "-qm", "one"]).status.success());
    l
}

#[test]
fn git_stays_usable_and_cannot_be_made_to_run_programs() {
    let l = committed();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let marker = l.ws.join("PWNED");
    // Every way the issue lists to plant a program for the user's git.
    std::fs::write(
        l.ws.join("plant.sh"),
        format!(
            "printf '[core]\\n\\tfsmonitor = \"touch {m}\"\\n' >> .git/config; echo config=$?\n\
             printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/post-commit; echo hook=$?\n\
             git config core.hooksPath evil; echo hookspath=$?\n\
             mkdir -p .git/info && printf 'x' > .git/info/attributes; echo info=$?\n\
             printf '../elsewhere' > .git/commondir; echo commondir=$?\n\
             mv .git .git-moved; echo move=$?\n",
            m = marker.display()
        ),
    )
    .unwrap();
    let config_before = std::fs::read(l.ws.join(".git/config")).unwrap();
    let v = run(&mut s, "sh plant.sh");
    let out = v["stdout"].as_str().unwrap_or_default().to_owned();
    // `.git` is a mount point: it cannot be moved. The rest lands in the
    // command's copy-on-write `.git` and is never carried back, each write
    // named in the result (the seal of the issue "Nothing a command writes
    // may run later outside the sandbox"; before it, these writes failed).
    assert!(!out.contains("move=0"), "move succeeded: {v}");
    let w = v["warnings"].to_string();
    for kept_out in [
        ".git/config",
        ".git/hooks/post-commit",
        ".git/info/attributes",
        ".git/commondir",
    ] {
        assert!(w.contains(kept_out), "{kept_out} not named: {v}");
    }
    assert_eq!(
        std::fs::read(l.ws.join(".git/config")).unwrap(),
        config_before
    );
    assert!(!l.ws.join(".git/hooks/post-commit").exists());
    assert!(!l.ws.join(".git/info/attributes").exists());
    // The agent still works with git.
    std::fs::write(
        l.ws.join("work.sh"),
        "echo b > b.txt && git add b.txt && git -c user.name=a -c user.email=a@a commit -qm two && git checkout -qb topic && echo c >> a.txt && git stash -q && git stash pop -q && git log --oneline | wc -l\n",
    )
    .unwrap();
    let v = run(&mut s, "sh work.sh");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"].as_str().unwrap_or_default().trim(), "2", "{v}");
    drop(s);
    // The user's own git, outside any sandbox, runs nothing planted.
    assert!(git(&l.ws, &["status", "--short"]).status.success());
    std::fs::write(l.ws.join("c.txt"), "c\n").unwrap();
    assert!(git(&l.ws, &["add", "c.txt"]).status.success());
    assert!(git(&l.ws, &["commit", "-qm", "three"]).status.success());
    assert!(!marker.exists(), "the user's git ran a planted program");
    assert!(!l.ws.join(".git/commondir").exists());
}

#[test]
fn a_command_sees_and_signals_no_host_process() {
    let l = layout();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let server = s.child.id();
    std::fs::write(
        l.ws.join("look.sh"),
        format!("ps -eo pid,args; kill -0 {server}; echo kill=$?\n"),
    )
    .unwrap();
    let v = run(&mut s, "sh look.sh");
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("ps -eo"), "ps works inside: {v}");
    assert!(
        !out.contains("--stdio") && !out.contains("--workspace"),
        "the server is visible: {out}"
    );
    assert!(!out.contains("kill=0"), "{v}");
    // The server is unharmed.
    let r = s.request(&call(2, "server_info", json!({"detail": "full"})));
    assert_eq!(sc(&r)["ok"], true);
}

#[test]
fn kill_and_exit_leave_no_process_and_no_directory() {
    let l = layout();
    let t = tag(31);
    std::fs::write(
        l.ws.join("busy.sh"),
        format!("sleep {t}1 &\nsetsid sleep {t}2 &\nsleep {t}3\n"),
    )
    .unwrap();
    let marks: Vec<Vec<String>> = (1..=3)
        .map(|i| vec!["sleep".to_owned(), format!("{t}{i}")])
        .collect();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let r = s.request(&call(
        1,
        "exec_command",
        json!({"cmd": "sh busy.sh", "yield_time_ms": 100}),
    ));
    let id = sc(&r)["command_id"].as_str().unwrap().to_owned();
    assert!(all_running(&marks));
    let r = s.request(&call(2, "kill_command", json!({"command_id": id})));
    assert_eq!(sc(&r)["status"], "terminated", "{r}");
    assert!(all_gone(&marks), "kill_command left a process");
    // Server exit by signal, stdin open.
    s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "sh busy.sh", "yield_time_ms": 100}),
    ));
    assert!(all_running(&marks));
    let r = s.request(&call(
        4,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let dir = PathBuf::from(sc(&r)["runtime"]["runtime_dir"].as_str().unwrap());
    let since = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &s.child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    while s.child.try_wait().unwrap().is_none() {
        assert!(since.elapsed() < ANSWER_TIMEOUT, "the server did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(all_gone(&marks), "a process survived the server");
    assert!(!dir.exists(), "the runtime directory is left");
}

#[test]
fn loopback_of_the_host_only_with_the_network_open() {
    let l = layout();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::fs::write(
        l.ws.join("dial.py"),
        format!(
            "import socket\ns = socket.socket()\ns.settimeout(2)\nprint('rc', s.connect_ex(('127.0.0.1', {port})))\n"
        ),
    )
    .unwrap();
    let Some(mut s) = start(&l.ws, &["--permission-mode", "trusted", "--allow-network"]) else {
        return;
    };
    let v = run(&mut s, "python3 dial.py");
    assert_eq!(v["stdout"], "rc 0\n", "trusted + --allow-network: {v}");
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let v = run(&mut s, "python3 dial.py");
    assert_ne!(v["stdout"], "rc 0\n", "safe mode reached the host: {v}");
    // Inside its own network namespace a command may still use loopback.
    std::fs::write(
        l.ws.join("self.py"),
        "import socket\nsrv = socket.socket()\nsrv.bind(('127.0.0.1', 0))\nsrv.listen()\nc = socket.socket()\nprint('own', c.connect_ex(srv.getsockname()))\n",
    )
    .unwrap();
    let v = run(&mut s, "python3 self.py");
    assert_eq!(v["stdout"], "own 0\n", "{v}");
}

#[test]
fn the_tier_is_reported_and_landlock_alone_can_be_chosen() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let r = s.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let sb = &sc(&r)["sandbox"];
    assert_ne!(sb["tier"], "namespace", "{sb}");
    assert!(
        sb["namespace"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("--sandbox landlock"),
        "{sb}"
    );
    let r = s.request(&call(2, "server_info", json!({"detail": "full"})));
    assert_eq!(sc(&r)["sandbox"]["tier"], sb["tier"]);
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let r = s.request(&call(
        3,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let sb = &sc(&r)["sandbox"];
    assert_eq!(sb["namespace"]["git_sealed"], true);
    assert_eq!(sb["namespace"]["private_network"], true);
    assert_eq!(sb["protections"]["host_filesystem_read_only"], "enforced");
    // Which builder made it: the one asked for, else the built-in one first.
    match std::env::var("CTM_SANDBOX_BUILDER").as_deref() {
        Ok("bwrap") => assert_eq!(sb["namespace"]["builder"], "bwrap", "{sb}"),
        Ok("builtin") => assert_eq!(sb["namespace"]["builder"], "built-in", "{sb}"),
        _ => assert!(
            sb["namespace"]["builder"] == "built-in" || sb["namespace"]["builder"] == "bwrap",
            "{sb}"
        ),
    }
}

#[test]
fn nothing_of_the_server_is_inherited_and_far_families_are_refused() {
    let l = layout();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    // Descriptors a command holds: its stdio and what `ls` itself opens.
    std::fs::write(
        l.ws.join("fds.py"),
        "import os, socket\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))\nfor fam in (socket.AF_VSOCK, socket.AF_BLUETOOTH if hasattr(socket, 'AF_BLUETOOTH') else 31):\n    try:\n        socket.socket(fam, socket.SOCK_STREAM)\n        print('opened', fam)\n    except OSError as e:\n        print('refused', fam, e.errno)\n",
    )
    .unwrap();
    let v = run(&mut s, "python3 fds.py");
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with("[0, 1, 2, 3]\n"), "{v}");
    assert!(!out.contains("opened"), "{v}");
}

/// Every process of the sandbox — the command and the sandbox's own PID 1
/// — holds no capability, and the command cannot mount, unmount or make
/// its way into a namespace of PID 1 (found by the review of the built-in
/// builder: its helpers kept every capability over the sandbox's
/// namespaces while the command ran).
#[test]
fn no_process_of_the_sandbox_holds_a_capability() {
    let l = layout();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    std::fs::write(
        l.ws.join("caps.py"),
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         for pid in ('self', '1'):\n\
         \x20   for line in open(f'/proc/{pid}/status'):\n\
         \x20       if line.startswith(('CapEff', 'CapPrm', 'CapBnd', 'CapAmb')):\n\
         \x20           print(pid, line.split()[0], line.split()[1])\n\
         r = libc.umount2(b'/tmp', 2)\n\
         print('umount', r, ctypes.get_errno())\n\
         r = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n\
         print('mount', r, ctypes.get_errno())\n\
         try:\n\
         \x20   os.open('/proc/1/ns/mnt', os.O_RDONLY)\n\
         \x20   print('ns open')\n\
         except OSError as e:\n\
         \x20   print('ns refused', e.errno)\n",
    )
    .unwrap();
    let v = run(&mut s, "python3 caps.py");
    let out = v["stdout"].as_str().unwrap_or_default();
    let caps: Vec<&str> = out.lines().filter(|l| l.contains("Cap")).collect();
    assert_eq!(caps.len(), 8, "{v}");
    for c in caps {
        assert!(c.ends_with(" 0000000000000000"), "{c}: {v}");
    }
    assert!(out.contains("umount -1"), "{v}");
    assert!(out.contains("mount -1"), "{v}");
    assert!(out.contains("ns refused"), "{v}");
}

#[test]
fn every_git_file_that_runs_programs_is_sealed_and_odd_layouts_still_start() {
    let l = layout();
    let g = l.ws.join(".git");
    // A submodule whose name has a slash, a hooks directory named by
    // core.hooksPath inside the workspace (husky's layout).
    std::fs::create_dir_all(g.join("modules/third_party/foo/hooks")).unwrap();
    std::fs::write(g.join("modules/third_party/foo/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(l.ws.join(".husky")).unwrap();
    std::fs::write(l.ws.join(".husky/pre-commit"), "#!/bin/sh\n").unwrap();
    let config = std::fs::read_to_string(g.join("config")).unwrap();
    std::fs::write(
        g.join("config"),
        format!("{config}[core]\n\thooksPath = .husky\n"),
    )
    .unwrap();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    std::fs::write(
        l.ws.join("plant.sh"),
        "echo x >> .git/modules/third_party/foo/config; echo sub=$?\n\
         mkdir .git/modules/evil; echo newmodule=$?\n\
         echo x >> .husky/pre-commit; echo husky=$?\n\
         mkdir .git/commondir; echo commondir=$?\n",
    )
    .unwrap();
    let sub_config = std::fs::read(g.join("modules/third_party/foo/config")).unwrap();
    let v = run(&mut s, "sh plant.sh");
    let out = v["stdout"].as_str().unwrap_or_default();
    // The hooks directory core.hooksPath names is read-only; what lands in
    // the copy-on-write `.git` is not carried back, and said.
    assert!(
        out.contains("husky=") && !out.contains("husky=0"),
        "husky: {v}"
    );
    assert!(
        v["warnings"]
            .to_string()
            .contains(".git/modules/third_party/foo/config"),
        "{v}"
    );
    assert_eq!(
        std::fs::read(g.join("modules/third_party/foo/config")).unwrap(),
        sub_config
    );
    assert!(!g.join("modules/evil").exists(), "{v}");
    // What a command made where git would look is gone when it ends.
    assert!(!g.join("commondir").exists(), "{v}");
    // A dangling hooks link (a real repository can have one) does not keep
    // commands from starting.
    std::fs::remove_dir_all(g.join("hooks")).unwrap();
    std::os::unix::fs::symlink("/nowhere/hooks", g.join("hooks")).unwrap();
    let v = run(&mut s, "git status --short; echo ran");
    assert!(
        v["stdout"].as_str().unwrap_or_default().contains("ran"),
        "{v}"
    );
}

/// The server below a seccomp filter that refuses every new user
/// namespace (`unshare`/`clone` with `CLONE_NEWUSER` answer EPERM, `clone3`
/// ENOSYS so that libc falls back to `clone`): a host where neither the
/// built-in builder nor bwrap can make the tier.
fn without_user_namespaces(ws: &Path, args: &[&str]) -> Command {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    use std::os::unix::process::CommandExt;
    let newuser = libc::CLONE_NEWUSER as u64;
    let rule = || {
        SeccompRule::new(vec![
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(newuser),
                newuser,
            )
            .unwrap(),
        ])
        .unwrap()
    };
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(libc::SYS_unshare, vec![rule()]);
    rules.insert(libc::SYS_clone, vec![rule()]);
    let refuse_newuser = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let mut no_clone3 = std::collections::BTreeMap::new();
    no_clone3.insert(libc::SYS_clone3, vec![]);
    let refuse_clone3 = SeccompFilter::new(
        no_clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let programs: Vec<seccompiler::BpfProgram> = vec![
        refuse_newuser.try_into().unwrap(),
        refuse_clone3.try_into().unwrap(),
    ];
    let mut cmd = command(ws, args);
    cmd.arg("--stdio");
    #[expect(
        unsafe_code,
        reason = "pre_exec installs the test's seccomp filters between fork and exec"
    )]
    // SAFETY: only prctl/seccomp system calls on programs built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for p in &programs {
                seccompiler::apply_filter(p).map_err(std::io::Error::other)?;
            }
            Ok(())
        });
    }
    cmd
}

#[test]
fn where_user_namespaces_are_refused_safe_mode_says_so_and_stays_confined() {
    let l = layout();
    if Command::new("git")
        .args(["init", "-q"])
        .current_dir(&l.ws)
        .status()
        .map_or(true, |s| !s.success())
    {
        panic!("git init failed");
    }
    for builder in ["auto", "builtin", "bwrap"] {
        let mut cmd = without_user_namespaces(&l.ws, &[]);
        cmd.env("CODING_TOOLS_MCP_SANDBOX_BUILDER", builder);
        let mut s = StdioServer::start_with(&mut cmd);
        let r = s.request(&call(
            2,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let r = sc(&r);
        let ns = &r["sandbox"]["namespace"];
        assert_ne!(r["sandbox"]["tier"], "namespace", "{builder}: {r}");
        assert_eq!(ns["active"], false, "{builder}: {ns}");
        assert_eq!(ns["builder"], Value::Null, "{builder}: {ns}");
        assert_eq!(ns["git_sealed"], false, "{builder}: {ns}");
        let reason = ns["reason"].as_str().unwrap_or_default();
        if builder != "bwrap" {
            assert!(
                reason.contains("built-in namespace builder")
                    || reason.contains("the built-in builder"),
                "{builder}: {ns}"
            );
        }
        assert!(
            ns["fix"].as_str().is_some_and(|f| !f.is_empty()),
            "{builder}: {ns}"
        );
        assert!(
            r["warnings"]
                .to_string()
                .contains("git seal is not complete"),
            "{builder}: {r}"
        );
        // Commands still run, confined by Landlock (when the kernel has it).
        let v = run(&mut s, "echo still-runs");
        assert_eq!(v["stdout"], "still-runs\n", "{builder}: {v}");
        s.close_stdin();
        s.wait();
        let err = s.stderr.seen.lock().unwrap().join("\n");
        assert!(
            err.contains("the git seal is not complete"),
            "{builder}: nothing said at start: {err}"
        );
    }
    // An operator who asked for the tier gets a refusal to start, with why.
    let out = without_user_namespaces(&l.ws, &["--sandbox", "namespace"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--sandbox namespace"),
        "{out:?}"
    );
}

/// The same probes in both tiers, with a virtual environment outside the
/// workspace activated for the server: what a command can read, write, run
/// and connect to is the same (the namespace tier's extra protections —
/// metadata, sockets, processes — are tested above).
#[test]
fn both_tiers_give_commands_the_same_world() {
    let l = layout();
    let venv = Outside::new("venv");
    let env_dir = venv.0.join("env");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&env_dir)
        .status()
        .unwrap();
    assert!(made.success());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(
        l.ws.join("world.py"),
        format!(
            "import os, socket, subprocess, sys\n\
             def probe(name, f):\n\
             \x20   try:\n\
             \x20       f()\n\
             \x20       print(name, 'ok')\n\
             \x20   except Exception as e:\n\
             \x20       print(name, 'refused', type(e).__name__)\n\
             probe('venv prefix', lambda: sys.prefix == {env:?} or 1 / 0)\n\
             probe('read pyvenv.cfg', lambda: open({cfg:?}).read())\n\
             probe('read /etc/passwd', lambda: open('/etc/passwd').read())\n\
             probe('read /etc/shadow', lambda: open('/etc/shadow').read())\n\
             probe('write workspace', lambda: open('w.txt', 'w').write('x'))\n\
             probe('write /var/tmp', lambda: open('/var/tmp/ctm-world-probe', 'w').write('x'))\n\
             probe('write venv', lambda: open({venv_file:?}, 'w').write('x'))\n\
             probe('run env', lambda: subprocess.run(['/usr/bin/env'], check=True, capture_output=True))\n\
             probe('connect host loopback', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))\n",
            env = env_dir.display().to_string(),
            cfg = env_dir.join("pyvenv.cfg").display().to_string(),
            venv_file = env_dir.join("planted").display().to_string(),
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        env_dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut seen = Vec::new();
    for tier in [&[][..], LANDLOCK_TIER] {
        let mut cmd = command(&l.ws, tier);
        cmd.arg("--stdio")
            .env("VIRTUAL_ENV", &env_dir)
            .env("PATH", &path);
        let mut s = StdioServer::start_with(&mut cmd);
        let r = s.request(&call(
            90,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let t = sc(&r)["sandbox"]["tier"].clone();
        if tier.is_empty() && t != "namespace" {
            assert!(
                std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
                "the namespace tier is required here but unavailable: {r}"
            );
            eprintln!("NOTE: no namespace tier on this host: the two tiers are not compared");
            return;
        }
        let v = run(&mut s, "python world.py");
        seen.push((t, v["stdout"].as_str().unwrap_or_default().to_owned()));
    }
    // The outcome of each probe, not how it was refused (EROFS in one
    // tier is EACCES in the other).
    let outcome = |out: &str| -> Vec<String> {
        out.lines()
            .map(|l| {
                l.split(" refused").next().unwrap_or(l).to_owned()
                    + if l.contains(" refused") {
                        " refused"
                    } else {
                        ""
                    }
            })
            .collect()
    };
    let ns = &seen[0].1;
    assert_eq!(
        outcome(ns),
        outcome(&seen[1].1),
        "the tiers differ:\n{seen:?}"
    );
    for expect in [
        "venv prefix ok",
        "read pyvenv.cfg ok",
        "read /etc/passwd ok",
        "read /etc/shadow refused",
        "write workspace ok",
        "write /var/tmp refused",
        "write venv refused",
        "run env ok",
        "connect host loopback refused",
    ] {
        assert!(ns.contains(expect), "{expect}: {seen:?}");
    }
    drop(listener);
}

/// The namespaces are made once per workspace and joined by each command
/// (issue 31): what the workspace's commands share — `/tmp` and the
/// loopback network, as in the Landlock tier — and what stays each
/// command's own (its processes).
#[test]
fn commands_share_tmp_and_loopback_but_not_processes() {
    let l = layout();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let r = s.request(&call(
        2,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let setup = sc(&r)["sandbox"]["namespace"]["setup"].clone();
    assert_eq!(setup, "per workspace", "{r}");
    let v = run(&mut s, "echo kept > /tmp/shared-note");
    assert_eq!(v["exit_code"], 0, "{v}");
    let v = run(&mut s, "cat /tmp/shared-note");
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "kept",
        "{v}"
    );
    // A listener one command starts, the next reaches (over the
    // workspace's own loopback: the host's is not reachable, see above).
    std::fs::write(
        l.ws.join("listen.py"),
        "import socket, time\n\
         s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', 47613)); s.listen(1); print('listening', flush=True)\n\
         c, _ = s.accept(); c.sendall(b'pong'); c.close(); time.sleep(0.2)\n",
    )
    .unwrap();
    let r = s.request(&call(
        3,
        "exec_command",
        json!({"cmd": "python3 listen.py", "yield_time_ms": 3000}),
    ));
    assert!(
        sc(&r)["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("listening"),
        "{r}"
    );
    std::fs::write(
        l.ws.join("connect.py"),
        "import socket\n\
         print(socket.create_connection(('127.0.0.1', 47613), timeout=5).recv(4).decode())\n",
    )
    .unwrap();
    let v = run(&mut s, "python3 connect.py");
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "pong",
        "{v}"
    );
    // Another command's processes are not there.
    let t = tag(47);
    let r = s.request(&call(
        4,
        "exec_command",
        json!({"cmd": format!("sleep {t}"), "yield_time_ms": 200}),
    ));
    let id = sc(&r)["command_id"].as_str().unwrap().to_owned();
    assert!(all_running(&[vec!["sleep".to_owned(), t.clone()]]));
    let v = run(&mut s, "ps -eo args");
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("ps -eo args"), "{v}");
    assert!(
        !out.contains(&t),
        "another command's process is visible: {out}"
    );
    let r = s.request(&call(5, "kill_command", json!({"command_id": id})));
    assert_eq!(sc(&r)["status"], "terminated", "{r}");
}

/// With shared namespaces the seal's binds are still made for each
/// command from the workspace as it is then: a hook manager's file the
/// user adds after the first command is read-only to the next one, and a
/// file the user replaces is seen as it is now (no stale bind).
#[test]
fn seal_binds_follow_the_workspace_between_commands() {
    let l = committed();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    assert_eq!(run(&mut s, "true")["exit_code"], 0);
    let config = l.ws.join(".pre-commit-config.yaml");
    std::fs::write(&config, "repos: []\n").unwrap();
    let v = run(
        &mut s,
        "echo 'repos: [evil]' > .pre-commit-config.yaml; echo write=$?; cat .pre-commit-config.yaml",
    );
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(!out.contains("write=0"), "the new file was writable: {v}");
    assert!(out.contains("repos: []"), "{v}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "repos: []\n");
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, "repos: [new]\n").unwrap();
    let v = run(&mut s, "cat .pre-commit-config.yaml");
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "repos: [new]",
        "a stale view: {v}"
    );
}

/// `CODING_TOOLS_MCP_SANDBOX_PER_COMMAND` (the way back, should joining
/// fail on a host): each command builds its own sandbox, the report says
/// so, and the seal holds the same.
#[test]
fn a_sandbox_per_command_still_holds_the_seal() {
    let l = committed();
    let mut s = StdioServer::start_with(
        command(&l.ws, &[])
            .env("CODING_TOOLS_MCP_SANDBOX_PER_COMMAND", "1")
            .arg("--stdio"),
    );
    let r = s.request(&call(
        90,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let sb = &sc(&r)["sandbox"];
    if sb["tier"] != "namespace" {
        assert!(
            std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_none(),
            "{sb}"
        );
        eprintln!("NOTE: no namespace tier on this host; nothing checked");
        return;
    }
    assert!(
        sb["namespace"]["setup"]
            .as_str()
            .is_some_and(|v| v.starts_with("per command")),
        "{sb}"
    );
    let before = std::fs::read(l.ws.join(".git/config")).unwrap();
    let v = run(
        &mut s,
        "echo x > /tmp/mine; printf '[core]\\n\\tfsmonitor = true\\n' >> .git/config; echo done",
    );
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "done",
        "{v}"
    );
    assert_eq!(std::fs::read(l.ws.join(".git/config")).unwrap(), before);
    // Its own /tmp, as before shared namespaces.
    let v = run(&mut s, "ls /tmp/mine");
    assert_ne!(v["exit_code"], 0, "{v}");
}

/// From an attacker's review of shared namespaces: the directories above
/// the workspace in the sandbox's shared `/tmp` belonged to the command,
/// which renamed one (the workspace's bind moving with it) and left a tree
/// of its own at the old path, where the next command's git overlay, seal
/// binds and working directory were then made — and it wrote the real
/// `.git/config`. Every such directory is a mount point now.
#[test]
fn a_command_cannot_move_the_workspace_from_under_the_next_ones_seal() {
    let l = committed();
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    if !l.ws.starts_with("/tmp") {
        eprintln!(
            "NOTE: the workspace {} is not below /tmp; the move is tried anyway",
            l.ws.display()
        );
    }
    let config = std::fs::read(l.ws.join(".git/config")).unwrap();
    std::fs::write(
        l.ws.join("move.sh"),
        "R=$(pwd); P=$(dirname \"$R\"); mv \"$P\" \"$P-moved\"; M=$?; echo mv=$M\n\
         [ $M = 0 ] && mkdir -p \"$R/.git\" && echo fake > \"$R/a.txt\"\n\
         exit 0\n",
    )
    .unwrap();
    let v = run(&mut s, "sh move.sh");
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(!out.contains("mv=0"), "the workspace's parent moved: {v}");
    std::fs::write(
        l.ws.join("plant.sh"),
        "R=$(pwd); P=$(dirname \"$R\"); N=$(basename \"$R\")\n\
         printf '[core]\\n\\tfsmonitor = true\\n' >> \"$P-moved/$N/.git/config\"\n\
         printf '[core]\\n\\tfsmonitor = true\\n' >> .git/config\n\
         cat a.txt\n",
    )
    .unwrap();
    let v = run(&mut s, "sh plant.sh");
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "a",
        "the command ran in another tree: {v}"
    );
    assert_eq!(std::fs::read(l.ws.join(".git/config")).unwrap(), config);
}

/// From the second attacker's review (both ways of building the sandbox):
/// a `.git` file naming a git directory deeper in the workspace
/// (`a/b/repo.git`). A command moved `a` — the overlay with it — and left a
/// fake `a/b/repo.git`; the next command's plan found the fake, and the
/// command wrote `core.fsmonitor` into the real one, which the user's
/// `git status` then ran. Every directory above the git directory is a
/// mount point now.
#[test]
fn a_git_directory_deeper_in_the_workspace_cannot_be_moved_aside() {
    let l = layout();
    let _ = std::fs::remove_dir_all(l.ws.join(".git"));
    std::fs::create_dir_all(l.ws.join("a/b")).unwrap();
    let real = l.ws.join("a/b/repo.git");
    assert!(
        git(
            &l.ws,
            &["init", "-q", "--separate-git-dir", real.to_str().unwrap()]
        )
        .status
        .success()
    );
    std::fs::write(l.ws.join("f"), "f\n").unwrap();
    assert!(git(&l.ws, &["add", "f"]).status.success());
    assert!(git(&l.ws, &["commit", "-qm", "one"]).status.success());
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let config = std::fs::read(real.join("config")).unwrap();
    let marker = l.ws.join("FSMON_RAN");
    let v = run(
        &mut s,
        "mv a a2; echo mv=$?; [ -d a2 ] && mkdir -p a/b/repo.git/objects a/b/repo.git/refs && cp a2/b/repo.git/HEAD a/b/repo.git/; exit 0",
    );
    assert!(
        !v["stdout"].as_str().unwrap_or_default().contains("mv=0"),
        "the git directory's parent moved: {v}"
    );
    std::fs::write(
        l.ws.join("plant.sh"),
        format!(
            "for c in a2/b/repo.git/config a/b/repo.git/config; do\n\
             [ -f \"$c\" ] && printf '[core]\\n\\tfsmonitor = \"touch {m}; false\"\\n' >> \"$c\"\n\
             done\nexit 0\n",
            m = marker.display()
        ),
    )
    .unwrap();
    run(&mut s, "sh plant.sh");
    drop(s);
    assert_eq!(std::fs::read(real.join("config")).unwrap(), config);
    assert!(git(&l.ws, &["status", "--short"]).status.success());
    assert!(!marker.exists(), "the user's git ran a planted program");
}

/// From the second attacker's review: a hook manager's file that is a
/// symbolic link (`.pre-commit-config.yaml -> cfg/pc.yaml`) has its target
/// sealed, but no mount covers a link, and a command replaced it with a
/// file of its own that the user's next `git commit` would run. The command
/// is named in its result now (as when it creates one that was missing).
#[test]
fn a_replaced_link_to_a_hook_managers_file_is_named() {
    let l = layout();
    std::fs::create_dir_all(l.ws.join("cfg")).unwrap();
    std::fs::write(l.ws.join("cfg/pc.yaml"), "repos: []\n").unwrap();
    std::os::unix::fs::symlink("cfg/pc.yaml", l.ws.join(".pre-commit-config.yaml")).unwrap();
    assert!(git(&l.ws, &["add", "."]).status.success());
    assert!(git(&l.ws, &["commit", "-qm", "one"]).status.success());
    let Some(mut s) = start(&l.ws, &[]) else {
        return;
    };
    let v = run(&mut s, "echo ok");
    assert!(
        !v["warnings"]
            .to_string()
            .contains(".pre-commit-config.yaml"),
        "{v}"
    );
    let v = run(
        &mut s,
        "rm .pre-commit-config.yaml && printf 'repos: [local]\\n' > .pre-commit-config.yaml; echo done",
    );
    assert_eq!(
        v["stdout"].as_str().unwrap_or_default().trim(),
        "done",
        "{v}"
    );
    let w = v["warnings"].to_string();
    assert!(
        w.contains(".pre-commit-config.yaml") && w.contains("review it"),
        "the replaced link is not named: {v}"
    );
    assert_eq!(
        std::fs::read_to_string(l.ws.join("cfg/pc.yaml")).unwrap(),
        "repos: []\n"
    );
}

/// A project's own `.venv` made from an interpreter outside every system
/// root (pyenv's, uv's, under the home directory): `.venv/bin/python` links
/// to it, and runs in both tiers. What a workspace's `pyvenv.cfg` names
/// opens only the interpreter's `bin` and `lib/python3.N`, and only when
/// the environment's `python` resolves into it: a file beside them, a
/// `pyvenv.cfg` naming a directory of secrets, one whose `python` links
/// elsewhere, and a link to a secret all stay refused.
#[test]
fn a_workspace_venv_runs_its_base_interpreter_in_both_tiers() {
    let base =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("ctm-venv-{}", std::process::id()));
    if ["/tmp", "/var/tmp", "/dev/shm", "/run"]
        .iter()
        .any(|d| base.starts_with(d))
    {
        eprintln!(
            "NOTE: the build directory is in a shared directory ({}): a prefix there is never opened, so this test checks nothing here",
            base.display()
        );
        return;
    }
    let _ = std::fs::remove_dir_all(&base);
    let l = layout();
    let home = Outside::new("venv-home");
    let python_prefix = |name: &str| {
        let prefix = base.join(name);
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib/python3.11")).unwrap();
        std::fs::write(prefix.join("lib/python3.11/os.py"), "").unwrap();
        std::fs::copy("/bin/echo", prefix.join("bin/python3.11")).unwrap();
        std::fs::write(prefix.join("token"), "hunter2\n").unwrap();
        prefix
    };
    let venv_naming = |dir: &str, home: &Path, python: &Path| {
        let venv = l.ws.join(dir);
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::os::unix::fs::symlink(python, venv.join("bin/python")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", home.display()),
        )
        .unwrap();
    };
    // The project's environment.
    let prefix = python_prefix("pyenv/versions/3.11.2");
    venv_naming(".venv", &prefix.join("bin"), &prefix.join("bin/python3.11"));
    // One naming a directory of secrets (no Python in it).
    let secrets = base.join("secrets");
    std::fs::create_dir_all(secrets.join("bin")).unwrap();
    std::fs::write(secrets.join("token"), "hunter2\n").unwrap();
    std::fs::copy("/bin/echo", secrets.join("bin/python3")).unwrap();
    venv_naming("env", &secrets.join("bin"), &secrets.join("bin/python3"));
    // One naming a Python installation its `python` does not run.
    let other = python_prefix("other");
    venv_naming("venv", &other.join("bin"), Path::new("/bin/echo"));
    // One that is a link out of the workspace, to an environment elsewhere.
    let linked = python_prefix("linked");
    let elsewhere = base.join("elsewhere-venv");
    std::fs::create_dir_all(elsewhere.join("bin")).unwrap();
    std::os::unix::fs::symlink(linked.join("bin/python3.11"), elsewhere.join("bin/python"))
        .unwrap();
    std::fs::write(
        elsewhere.join("pyvenv.cfg"),
        format!("home = {}\n", linked.join("bin").display()),
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, l.ws.join(".env")).unwrap();
    std::os::unix::fs::symlink(secrets.join("token"), l.ws.join("token-link")).unwrap();
    for tier in [&[][..], LANDLOCK_TIER] {
        let mut cmd = command(&l.ws, tier);
        cmd.arg("--stdio").env("HOME", &home.0);
        let mut s = StdioServer::start_with(&mut cmd);
        let v = run(&mut s, ".venv/bin/python from-the-venv");
        assert_eq!(v["stdout"], "from-the-venv\n", "{tier:?}: {v}");
        for refused in [
            "env/bin/python from-the-secrets".to_owned(),
            "cat token-link".to_owned(),
            format!("cat {}", secrets.join("token").display()),
            format!("cat {}", prefix.join("token").display()),
            format!("cat {}", other.join("lib/python3.11/os.py").display()),
            format!("cat {}", linked.join("lib/python3.11/os.py").display()),
        ] {
            let r = s.request(&call(
                2,
                "exec_command",
                json!({"cmd": refused, "yield_time_ms": 20000}),
            ));
            let text = r.to_string();
            assert!(
                !text.contains("hunter2") && !text.contains("from-the-secrets\\n"),
                "{tier:?}: {refused}: {r}"
            );
            assert!(
                text.contains("filesystem_escape"),
                "{tier:?}: {refused}: {r}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}
