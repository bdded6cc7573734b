//! The command sandbox in safe mode, attacked the ways the issue "The
//! command sandbox, part 1" lists, through the real binary: each attack
//! must fail with no secret byte in any result and no marker created. Where
//! the host lacks a kernel feature, the test says so on stderr.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::*;

const SECRET: &str = "SANDBOX-SECRET-7731";

/// The tests of the issue "The command sandbox, part 1" pin the Landlock
/// tier (also what a host without user namespaces gets); `namespace.rs`
/// pins the namespace tier.
pub(super) const LANDLOCK_TIER: &[&str] = &["--sandbox", "landlock"];

pub(super) struct Layout {
    _t: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

/// `<tmp>/ws` (workspace, a git repository) beside `<tmp>/outside/secret.txt`.
pub(super) fn layout() -> Layout {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::write(ws.join("hello.py"), "print('hello from python')\n").unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    Layout { _t: t, ws, outside }
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

pub(super) fn sc(r: &Value) -> &Value {
    &r["result"]["structuredContent"]
}

/// Runs `cmd` and checks that no secret byte came back.
pub(super) fn exec(s: &mut StdioServer, cmd: &str) -> Value {
    let r = s.request(&call(1, "exec_command", json!({"cmd": cmd})));
    assert!(!r.to_string().contains(SECRET), "a secret came back: {r}");
    r
}

/// Writes `body` as a workspace script and runs it (what a command may
/// do); it must succeed.
fn plant(s: &mut StdioServer, ws: &Path, name: &str, body: &str) {
    std::fs::write(ws.join(name), body).unwrap();
    let r = exec(s, &format!("sh {name}"));
    assert_eq!(sc(&r)["exit_code"], 0, "{r}");
}

/// Calls each tool and checks that no secret byte comes back.
fn no_secret_from(s: &mut StdioServer, calls: &[(&str, Value)]) {
    for (tool, args) in calls {
        let r = s.request(&call(2, tool, args.clone()));
        assert!(!r.to_string().contains(SECRET), "{tool} leaked: {r}");
    }
}

fn refused(r: &Value, permission: &str) -> Value {
    assert_eq!(r["result"]["isError"], true, "{r}");
    let e = &sc(r)["error"];
    assert_eq!(e["code"], "PERMISSION_REQUIRED", "{r}");
    assert_eq!(e["details"]["permission"], permission, "{r}");
    e["details"].clone()
}

fn protection(s: &mut StdioServer, name: &str) -> String {
    let r = s.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    sc(&r)["sandbox"]["protections"][name]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn enforced(s: &mut StdioServer, name: &str) -> bool {
    let state = protection(s, name);
    if state != "enforced" {
        eprintln!("NOTE: {name} is {state:?} on this host; that part is not tested here");
    }
    state == "enforced"
}

pub(super) fn is_root() -> bool {
    rustix_free_euid() == 0
}

fn rustix_free_euid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX)
}

#[test]
fn reads_outside_the_workspace_are_refused_or_denied() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let abs = l.outside.join("secret.txt");
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let direct = [
        (
            "cat ../outside/secret.txt".to_owned(),
            "../outside/secret.txt".to_owned(),
        ),
        (format!("head {}", abs.display()), abs.display().to_string()),
        (
            format!("F={}; cat $F", abs.display()),
            abs.display().to_string(),
        ),
        (format!("cat {home}/.profile"), format!("{home}/.profile")),
        (
            "cat < ../outside/secret.txt".into(),
            "../outside/secret.txt".into(),
        ),
        ("cat /etc/shadow".into(), "/etc/shadow".into()),
        ("cp hello.py ../outside/".into(), "../outside/".into()),
        (
            "echo x > /tmp/ctm-sandbox-marker".into(),
            "/tmp/ctm-sandbox-marker".into(),
        ),
    ];
    for (cmd, path) in &direct {
        let r = exec(&mut s, cmd);
        let details = refused(&r, "filesystem_escape");
        assert_eq!(details["path"], json!(path), "{cmd}: {r}");
    }
    assert!(!Path::new("/tmp/ctm-sandbox-marker").exists());
    // Read roots and the private HOME stay usable.
    let r = exec(
        &mut s,
        "cat /etc/os-release | head -1 && cat ~/nothing 2>/dev/null; echo ok",
    );
    assert_eq!(sc(&r)["exit_code"], 0, "{r}");
    // Forms the gate cannot see: the kernel is the boundary.
    if !enforced(&mut s, "read_confinement") {
        return;
    }
    std::fs::write(l.ws.join("where.txt"), abs.display().to_string()).unwrap();
    std::fs::write(
        l.ws.join("rd.py"),
        "import sys\ntry:\n    print(open(open('where.txt').read()).read())\nexcept OSError as e:\n    print('denied', e.errno)\n",
    )
    .unwrap();
    std::fs::write(l.ws.join("rd.sh"), "cat \"$(cat where.txt)\"\n").unwrap();
    let r = exec(&mut s, "python3 rd.py");
    assert!(
        sc(&r)["stdout"].as_str().unwrap().starts_with("denied 13"),
        "{r}"
    );
    let r = exec(&mut s, "sh rd.sh");
    assert!(
        sc(&r)["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{r}"
    );
    std::fs::write(l.ws.join("where.txt"), format!("{home}/.profile")).unwrap();
    let r = exec(&mut s, "python3 rd.py");
    let out = sc(&r)["stdout"].as_str().unwrap();
    assert!(out.starts_with("denied"), "{r}");
    // A toolchain home on PATH is readable, its registry credentials are not.
    let fake = l.outside.join("home");
    std::fs::create_dir_all(fake.join(".cargo/bin")).unwrap();
    std::fs::write(fake.join(".cargo/bin/tool"), "#!/bin/sh\necho tool ran\n").unwrap();
    std::fs::set_permissions(
        fake.join(".cargo/bin/tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        fake.join(".cargo/credentials.toml"),
        format!("[registry]\ntoken = \"{SECRET}\"\n"),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:/bin", fake.join(".cargo/bin").display());
    let mut s = StdioServer::start_with(
        command(&l.ws, &["--stdio", "--sandbox", "landlock"])
            .env("HOME", &fake)
            .env("PATH", &path)
            // cargo exports its own to the tests it runs.
            .env_remove("CARGO_HOME")
            .env_remove("RUSTUP_HOME"),
    );
    std::fs::write(
        l.ws.join("cred.sh"),
        "tool; cat \"$CARGO_HOME/credentials.toml\"\n",
    )
    .unwrap();
    let r = exec(&mut s, "sh cred.sh");
    assert_eq!(sc(&r)["stdout"], "tool ran\n", "{r}");
    assert!(
        sc(&r)["stderr"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{r}"
    );
}

/// Opens a pseudo-terminal: (master, slave path).
#[expect(
    unsafe_code,
    reason = "posix_openpt, grantpt, unlockpt and ptsname: the test needs a terminal of its own"
)]
fn open_pty() -> (std::fs::File, PathBuf) {
    use std::os::fd::FromRawFd;
    // SAFETY: libc calls on a descriptor we own; ptsname's buffer is
    // copied at once.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
            .to_string_lossy()
            .into_owned();
        (std::fs::File::from_raw_fd(m), PathBuf::from(name))
    }
}

#[expect(unsafe_code, reason = "the FIONREAD ioctl on the test's terminal")]
fn queued_input(pts: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let rc = unsafe { libc::ioctl(pts.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(rc, 0);
    n
}

/// The server runs with a terminal of its own (as when a user starts it
/// from a shell). Commands must not push keystrokes into it, nor into any
/// other terminal, nor signal or read the server.
#[test]
#[expect(
    unsafe_code,
    reason = "pre_exec gives the server the test's terminal as its controlling one"
)]
fn no_keystroke_injection_no_signals_no_reading_the_server() {
    use std::os::unix::process::CommandExt;
    let l = layout();
    let (_master, pts_path) = open_pty();
    let pts = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pts_path)
        .unwrap();
    let pts_fd = {
        use std::os::fd::AsRawFd;
        pts.as_raw_fd()
    };
    let mut cmd = command(&l.ws, &["--stdio"]);
    cmd.env("CTM_TEST_API_TOKEN", SECRET);
    // SAFETY: setsid and TIOCSCTTY between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(pts_fd, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut s = StdioServer::start_with(&mut cmd);
    let server_pid = s.child.id();
    std::fs::write(
        l.ws.join("sti.py"),
        format!(
            r#"import fcntl, os, termios
for t in ["/dev/tty", "{pts}", "/dev/console", "/dev/tty1", "/dev/ptmx"]:
    try:
        fd = os.open(t, os.O_RDWR | os.O_NOCTTY)
    except OSError as e:
        print("open", t, e.errno); continue
    for req in (termios.TIOCSTI, 0x541C):
        try:
            fcntl.ioctl(fd, req, b"x"); print("INJECTED", t)
        except OSError as e:
            print("ioctl", t, e.errno)
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x"); print("INJECTED fd", fd)
    except OSError as e:
        print("ioctl fd", fd, e.errno)
for f in ("environ", "cmdline", "mem"):
    try:
        print(f, open("/proc/{pid}/" + f, "rb").read()[:4000])
    except OSError as e:
        print("read", f, e.errno)
try:
    os.kill({pid}, 15); print("SIGNALLED")
except OSError as e:
    print("kill", e.errno)
"#,
            pts = pts_path.display(),
            pid = server_pid
        ),
    )
    .unwrap();
    let r = exec(&mut s, "python3 sti.py");
    let out = sc(&r)["stdout"].as_str().unwrap().to_owned();
    assert!(!out.contains("INJECTED"), "{out}");
    assert!(!out.contains(SECRET), "{out}");
    if enforced(&mut s, "signal_scope") {
        assert!(!out.contains("SIGNALLED"), "{out}");
    }
    if enforced(&mut s, "signal_scope") {
        for sig in ["-TERM", "-9"] {
            exec(
                &mut s,
                &format!("kill {sig} $PPID; kill {sig} {server_pid}"),
            );
        }
    }
    assert_eq!(
        queued_input(&pts),
        0,
        "bytes were pushed into the server's terminal"
    );
    // The server is alive and serves.
    let r = s.request(&json!({"jsonrpc":"2.0","id":9,"method":"ping"}));
    assert_eq!(r["id"], 9, "{r}");
    let r = exec(&mut s, "env");
    assert!(
        !sc(&r)["stdout"]
            .as_str()
            .unwrap()
            .contains("CTM_TEST_API_TOKEN")
    );
}

#[test]
fn device_nodes_cannot_be_made() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    if !is_root() {
        eprintln!("NOTE: not root: mknod of devices fails without CAP_MKNOD anyway");
    }
    for (cmd, name) in [("mknod lp b 7 0", "lp"), ("mknod kmsg c 1 11", "kmsg")] {
        let r = exec(&mut s, cmd);
        assert_ne!(sc(&r)["exit_code"], 0, "{r}");
        assert!(
            sc(&r)["stderr"].as_str().unwrap().contains("not permitted"),
            "{r}"
        );
        assert!(!l.ws.join(name).exists(), "{name} was made");
    }
    // FIFOs: in $TMPDIR, not in the workspace (where the server's walkers
    // and git would block opening one planted as .gitignore or .git/HEAD).
    let r = exec(&mut s, "mkfifo \"$TMPDIR/pipe\" && echo made");
    assert_eq!(sc(&r)["stdout"], "made\n", "{r}");
    if enforced(&mut s, "write_confinement") {
        let r = exec(&mut s, "mkfifo pipe");
        assert_ne!(sc(&r)["exit_code"], 0, "{r}");
        assert!(!l.ws.join("pipe").exists());
    }
}

/// Processes of ours whose command line is exactly `words`.
pub(super) fn processes(words: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = words
        .iter()
        .flat_map(|w| [w.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z'));
            !zombie && std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() == want
        })
        .collect()
}

/// Waits (bounded) until no process runs `words`.
fn gone(words: &[&str]) -> bool {
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while Instant::now() < deadline {
        if processes(words).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A number unique to this test process, so processes left by another run
/// are never mistaken for ours.
pub(super) fn tag(n: u32) -> String {
    format!("9{}{n}", std::process::id())
}

pub(super) fn leave_background(ws: &Path, tag: &str) -> Vec<Vec<String>> {
    std::fs::write(ws.join("x.sh"), format!("sleep {tag}1\n")).unwrap();
    std::fs::write(
        ws.join("bg.sh"),
        format!(
            "setsid sh ./x.sh &\nsleep {tag}2 >/dev/null 2>&1 &\n( sleep {tag}3 & )\necho started\n"
        ),
    )
    .unwrap();
    (1..=3)
        .map(|i| vec!["sleep".to_owned(), format!("{tag}{i}")])
        .collect()
}

pub(super) fn all_gone(marks: &[Vec<String>]) -> bool {
    marks.iter().all(|m| {
        let words: Vec<&str> = m.iter().map(String::as_str).collect();
        gone(&words)
    })
}

pub(super) fn all_running(marks: &[Vec<String>]) -> bool {
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while Instant::now() < deadline {
        if marks.iter().all(|m| {
            let words: Vec<&str> = m.iter().map(String::as_str).collect();
            !processes(&words).is_empty()
        }) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn nothing_a_command_starts_survives_kill_exit_or_sigkill() {
    let l = layout();
    // kill_command ends a command's background processes after its shell exited.
    let marks = leave_background(&l.ws, &tag(1));
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let r = exec(&mut s, "sh bg.sh");
    assert_eq!(sc(&r)["stdout"], "started\n", "{r}");
    assert_eq!(sc(&r)["background_running"], true, "{r}");
    let id = sc(&r)["command_id"].as_str().unwrap().to_owned();
    assert!(
        all_running(&marks),
        "the background processes did not start"
    );
    let r = s.request(&call(
        2,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    assert_eq!(sc(&r)["active_commands"], 1, "background processes count");
    let r = s.request(&call(3, "kill_command", json!({"command_id": id})));
    assert!(sc(&r)["processes_signalled"].as_u64().unwrap() >= 3, "{r}");
    assert!(
        all_gone(&marks),
        "a background process survived kill_command"
    );
    let r = s.request(&call(
        4,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    assert_eq!(sc(&r)["active_commands"], 0);
    // A clean exit ends them.
    let marks = leave_background(&l.ws, &tag(2));
    exec(&mut s, "sh bg.sh");
    assert!(all_running(&marks));
    s.close_stdin();
    s.wait();
    assert!(
        all_gone(&marks),
        "a background process survived the server's exit"
    );
    // A process that forks and exits in a loop moves to a new pid all the
    // time; kill_command still ends it.
    std::fs::write(
        l.ws.join("rabbit.py"),
        "import os, time\nwhile True:\n    if os.fork():\n        os._exit(0)\n    open('hb', 'a').write('x')\n    time.sleep(0.001)\n",
    )
    .unwrap();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let r = exec(&mut s, "python3 rabbit.py >/dev/null 2>&1 &");
    let id = sc(&r)["command_id"].as_str().unwrap().to_owned();
    let hb = l.ws.join("hb");
    let size = || std::fs::metadata(&hb).map(|m| m.len()).unwrap_or(0);
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while size() < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = s.request(&call(3, "kill_command", json!({"command_id": id})));
    assert_ne!(sc(&r)["status"], "terminating", "{r}");
    let after = size();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(size(), after, "the fork loop survived kill_command");
    // The same loop with a new session at every step, ended by its timeout.
    std::fs::write(
        l.ws.join("rabbit2.py"),
        "import os, time\nwhile True:\n    if os.fork():\n        os._exit(0)\n    os.setsid()\n    open('hb2', 'a').write('x')\n    time.sleep(0.001)\n",
    )
    .unwrap();
    let hb2 = l.ws.join("hb2");
    let size2 = || std::fs::metadata(&hb2).map(|m| m.len()).unwrap_or(0);
    let r = s.request(&call(
        4,
        "exec_command",
        json!({"cmd": "python3 rabbit2.py >/dev/null 2>&1 &", "timeout_ms": 1000}),
    ));
    assert_eq!(sc(&r)["status"], "exited", "{r}");
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    loop {
        let r = s.request(&call(
            5,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        if sc(&r)["active_commands"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the setsid fork loop outlived its timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = size2();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(size2(), after, "the setsid fork loop survived its timeout");
    drop(s);
    // So does a SIGKILL of the server.
    let marks = leave_background(&l.ws, &tag(3));
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    exec(&mut s, "sh bg.sh");
    assert!(all_running(&marks));
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(
        all_gone(&marks),
        "a background process survived SIGKILL of the server"
    );
}

/// The server's active-command limit, as it reports it.
fn max_active_commands(s: &mut StdioServer) -> u64 {
    sc(&s.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    )))["limits"]["max_active_commands"]
        .as_u64()
        .unwrap()
}

#[test]
fn background_processes_count_against_the_limit() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let max = max_active_commands(&mut s);
    let t = tag(4);
    std::fs::write(
        l.ws.join("bg.sh"),
        format!("setsid sleep {t} >/dev/null 2>&1 &\n"),
    )
    .unwrap();
    for _ in 0..max {
        let r = exec(&mut s, "sh bg.sh");
        assert_eq!(sc(&r)["status"], "exited", "{r}");
    }
    let r = exec(&mut s, "sh bg.sh");
    assert_eq!(sc(&r)["error"]["code"], "COMMAND_LIMIT_REACHED", "{r}");
    s.close_stdin();
    s.wait();
    assert!(gone(&["sleep", &t]));
}

#[test]
fn a_runtime_directory_someone_else_prepared_is_never_used() {
    let l = layout();
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().canonicalize().unwrap();
    let uid = rustix_free_euid();
    let base = tmp.join(format!("coding-tools-mcp-{uid}"));
    let trap = tmp.join("trap");
    std::fs::create_dir_all(trap.join("home")).unwrap();
    std::fs::write(
        trap.join("home/.gitconfig"),
        "[core]\n\tfsmonitor = touch /tmp/ctm-hijacked\n",
    )
    .unwrap();
    let check = |base_kind: &str| {
        let mut s = StdioServer::start_with(command(&l.ws, &["--stdio"]).env("TMPDIR", &tmp));
        let r = s.request(&call(
            1,
            "check_exec_environment",
            json!({"detail": "full"}),
        ));
        let rt = sc(&r)["runtime"]["runtime_dir"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            !Path::new(&rt).starts_with(&base) && !Path::new(&rt).starts_with(&trap),
            "{base_kind}: the runtime directory {rt} is under the prepared base"
        );
        let r = exec(&mut s, "echo $HOME && git status --short");
        let home = sc(&r)["stdout"]
            .as_str()
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned();
        assert!(home.starts_with(&rt), "{r}");
        let mode = std::fs::metadata(&rt).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(!Path::new("/tmp/ctm-hijacked").exists());
        s.close_stdin();
        s.wait();
        assert!(
            !Path::new(&rt).exists(),
            "the runtime directory was left behind"
        );
    };
    symlink(&trap, &base).unwrap();
    check("a symlink");
    std::fs::remove_file(&base).unwrap();
    if is_root() {
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let ok = Command::new("chown")
            .arg("65534")
            .arg(&base)
            .status()
            .unwrap();
        assert!(ok.success());
        check("another user's directory");
        // A configured base another user owns is an error, not a fallback.
        let out = command(&l.ws, &["--stdio"])
            .env("CODING_TOOLS_MCP_RUNTIME_ROOT", &base)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("belongs to uid 65534"));
    } else {
        eprintln!("NOTE: not root: a base owned by another user cannot be made here");
    }
    // A configured base inside the workspace is refused at start.
    let out = command(&l.ws, &["--stdio"])
        .env("CODING_TOOLS_MCP_RUNTIME_ROOT", l.ws.join("rt"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the workspace"));
}

#[test]
fn tokens_by_file_and_a_warning_for_argv() {
    let ws = workspace();
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("token");
    std::fs::write(&file, "tok-from-file\n").unwrap();
    let file_arg = file.display().to_string();
    let s = HttpServer::start(ws.path(), &["--auth-token-file", &file_arg]);
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
    assert_eq!(s.post(&ping, &[]).status, 401);
    assert_eq!(
        s.post(&ping, &[("Authorization", "Bearer tok-from-file")])
            .status,
        200
    );
    let s = HttpServer::start(ws.path(), &["--auth-token", "tok-argv"]);
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while !s
        .stderr
        .seen
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("readable by every user"))
    {
        assert!(
            Instant::now() < deadline,
            "no warning about a token in argv"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // No warning for the file or the environment.
    let seen = HttpServer::start_with(
        command(ws.path(), &["--port", "0"]).env("CODING_TOOLS_MCP_AUTH_TOKEN", "tok-env"),
    );
    assert_eq!(
        seen.post(&ping, &[("Authorization", "Bearer tok-env")])
            .status,
        200
    );
    assert!(
        !seen
            .stderr
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("readable by every user"))
    );
}

#[test]
fn apply_patch_never_writes_a_git_directory_through_a_link() {
    let l = layout();
    symlink(".git", l.ws.join("gl")).unwrap();
    // A `.git` file pointing at a git directory elsewhere in the workspace.
    std::fs::create_dir(l.ws.join("sub")).unwrap();
    git(
        &l.ws,
        &["init", "-q", "--separate-git-dir", "realgit", "sub"],
    );
    let config_before = std::fs::read(l.ws.join(".git/config")).unwrap();
    let mut s = StdioServer::start(&l.ws, &[]);
    for (patch, written) in [
        (
            "*** Begin Patch\n*** Update File: gl/config\n@@\n+[core]\n+\tfsmonitor = touch /tmp/ctm-fsmonitor\n*** End Patch\n",
            l.ws.join(".git/config"),
        ),
        (
            "*** Begin Patch\n*** Add File: gl/hooks/post-commit\n+#!/bin/sh\n+touch /tmp/ctm-hook\n*** End Patch\n",
            l.ws.join(".git/hooks/post-commit"),
        ),
        (
            "*** Begin Patch\n*** Add File: realgit/hooks/pre-commit\n+#!/bin/sh\n*** End Patch\n",
            l.ws.join("realgit/hooks/pre-commit"),
        ),
        (
            "*** Begin Patch\n*** Add File: sub/.GIT\n+gitdir: ../elsewhere\n*** End Patch\n",
            l.ws.join("sub/.GIT"),
        ),
    ] {
        let r = s.request(&call(1, "apply_patch", json!({"patch": patch})));
        refused(&r, "write_git_dir");
        if written.ends_with("config") {
            assert_eq!(std::fs::read(&written).unwrap(), config_before);
        } else {
            assert!(!written.exists(), "{} was written", written.display());
        }
    }
    let r = s.request(&call(
        2,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: notes.txt\n+fine\n*** End Patch\n"}),
    ));
    assert_eq!(r["result"]["isError"], false, "{r}");
}

#[test]
fn development_still_works_in_safe_mode() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    let r = exec(&mut s, "python3 hello.py");
    assert_eq!(sc(&r)["stdout"], "hello from python\n", "{r}");
    assert!(
        sc(&r).get("background_running").is_none(),
        "nothing runs on: {r}"
    );
    let r = exec(
        &mut s,
        "git add hello.py && git -c user.name=a -c user.email=a@b commit -qm first && git status --short && git log --oneline | wc -l",
    );
    assert_eq!(sc(&r)["exit_code"], 0, "{r}");
    assert_eq!(sc(&r)["stdout"], "1\n", "{r}");
    for (tool, probe) in [("cargo", "cargo --version"), ("node", "node --version")] {
        let installed = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            eprintln!("NOTE: {tool} is not installed here");
            continue;
        }
        let r = exec(&mut s, probe);
        assert_eq!(sc(&r)["exit_code"], 0, "{probe}: {r}");
    }
    let r = s.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let sb = &sc(&r)["sandbox"];
    if sb["protections"]["read_confinement"] == "enforced" {
        let reads: Vec<&str> = sb["read_roots"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(reads.contains(&"/usr"), "{sb}");
        assert!(!reads.contains(&"/"), "{sb}");
        assert!(!reads.iter().any(|r| r.starts_with("/etc/shadow")), "{sb}");
        assert_eq!(sb["write_roots"][0], json!(l.ws.display().to_string()));
    }
    for key in [
        "read_confinement",
        "device_nodes_refused",
        "tcp_connect_bind_refused",
        "signal_scope",
        "seccomp_filter",
        "path_gate",
    ] {
        assert!(sb["protections"][key].is_string(), "{key}: {sb}");
    }
}

#[test]
fn safe_mode_refuses_tcp_without_allow_network() {
    let l = layout();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Plain connect, and the routes around Landlock's connect/bind hooks:
    // MPTCP, TCP Fast Open's sendto, listen's automatic bind.
    std::fs::write(
        l.ws.join("net.py"),
        format!(
            r#"import socket
def attempt(name, f):
    try:
        f(); print(name, "OPEN")
    except OSError as e:
        print(name, "refused", e.errno)
attempt("connect", lambda: socket.socket().connect(("127.0.0.1", {port})))
attempt("mptcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(("127.0.0.1", {port})))
attempt("fastopen", lambda: socket.socket().sendto(b"x", 0x20000000, ("127.0.0.1", {port})))
attempt("listen", lambda: socket.socket().listen())
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 6))
attempt("packet", lambda: socket.socket(socket.AF_INET, 10, 0x0300))
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
"#
        ),
    )
    .unwrap();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    if !enforced(&mut s, "tcp_connect_bind_refused") {
        return;
    }
    let r = exec(&mut s, "python3 net.py");
    let out = sc(&r)["stdout"].as_str().unwrap().to_owned();
    assert_eq!(out.lines().count(), 7, "{r}");
    assert!(!out.contains("OPEN"), "{out}");
    let mut s = StdioServer::start(&l.ws, &["--allow-network", "--sandbox", "landlock"]);
    let r = exec(&mut s, "python3 net.py");
    let out = sc(&r)["stdout"].as_str().unwrap().to_owned();
    assert!(out.starts_with("connect OPEN"), "{r}");
    // Raw and packet sockets stay closed with the network open.
    assert!(
        out.contains("raw refused") && out.contains("packet refused"),
        "{out}"
    );
}

#[test]
fn the_server_cannot_be_throttled_or_its_limits_changed() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    let pid = s.child.id();
    std::fs::write(
        l.ws.join("limits.py"),
        format!(
            r#"import os, resource
def attempt(name, f):
    try:
        f(); print(name, "DONE")
    except OSError as e:
        print(name, "refused", e.errno)
for target in ({pid}, os.getppid()):
    attempt("prlimit", lambda: resource.prlimit(target, resource.RLIMIT_CPU, (0, 0)))
    attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, target, 19))
    attempt("affinity", lambda: os.sched_setaffinity(target, {{0}}))
attempt("own limit", lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
"#
        ),
    )
    .unwrap();
    let r = exec(&mut s, "python3 limits.py");
    let out = sc(&r)["stdout"].as_str().unwrap().to_owned();
    if enforced(&mut s, "seccomp_filter") {
        assert_eq!(out.matches("DONE").count(), 1, "{out}");
        assert!(out.contains("own limit DONE"), "{out}");
    }
    // Still serving, a second later (RLIMIT_CPU 0 would have killed it).
    std::thread::sleep(Duration::from_millis(1200));
    let r = s.request(&json!({"jsonrpc":"2.0","id":9,"method":"ping"}));
    assert_eq!(r["id"], 9, "{r}");
}

#[test]
fn git_tools_never_read_what_a_command_links_into_git() {
    let l = layout();
    std::fs::write(l.ws.join("a.txt"), "a\n").unwrap();
    git(&l.ws, &["add", "a.txt"]);
    git(&l.ws, &["commit", "-qm", "one"]);
    git(&l.ws, &["pack-refs", "--all"]);
    let secret = l.outside.join("secret.txt");
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    // A command may write .git (documented); it plants a link to a file it
    // cannot read itself, hoping the git tools (not sandboxed) will.
    plant(
        &mut s,
        &l.ws,
        "plant.sh",
        &format!(
            "rm -f .git/packed-refs && ln -s {} .git/packed-refs\n",
            secret.display()
        ),
    );
    no_secret_from(
        &mut s,
        &[
            ("git_status", json!({})),
            ("git_log", json!({})),
            ("git_diff", json!({})),
        ],
    );
    // A `.git` file whose git directory's excludes link outside: the files
    // the confinement lets git and the walkers read must not include it.
    plant(
        &mut s,
        &l.ws,
        "plant2.sh",
        &format!(
            "mv .git realgit && echo 'gitdir: realgit' > .git && mkdir -p realgit/info && ln -sf {0} realgit/info/exclude && rm -f realgit/packed-refs && ln -s {0} realgit/packed-refs\n",
            secret.display()
        ),
    );
    no_secret_from(
        &mut s,
        &[
            ("git_status", json!({})),
            ("git_log", json!({})),
            ("list_files", json!({})),
            ("search_text", json!({"query": "SANDBOX"})),
        ],
    );
}

#[test]
fn a_git_file_fifo_or_device_never_hangs_or_floods_the_server() {
    let l = layout();
    std::fs::remove_dir_all(l.ws.join(".git")).unwrap();
    let mut s = StdioServer::start(&l.ws, &[]);
    // Commands cannot make a FIFO in the workspace (tested above); one made
    // by someone else, and a link a command can make.
    for plant in ["", "rm -f .git && ln -s /dev/zero .git"] {
        if plant.is_empty() {
            let ok = Command::new("mkfifo")
                .arg(l.ws.join(".git"))
                .status()
                .unwrap();
            assert!(ok.success());
        } else {
            let r = exec(&mut s, plant);
            assert_eq!(sc(&r)["exit_code"], 0, "{r}");
        }
        for (tool, args) in [
            ("list_dir", json!({"path": "."})),
            ("list_files", json!({})),
            ("search_text", json!({"query": "x"})),
            ("git_status", json!({})),
        ] {
            // An answer at all (the harness fails on a hang).
            let r = s.request(&call(2, tool, args));
            assert!(r.get("result").is_some() || r.get("error").is_some(), "{r}");
        }
    }
    s.close_stdin();
    s.wait();
    // Ignore files no project has, however they got there: a FIFO
    // .gitignore, a 2 GiB .git file, a 2 GiB .gitignore, a .ignore that is
    // /dev/zero. Walks answer, and the server reads none of them.
    let l = layout();
    for d in ["fifo", "big", "bigignore", "zero"] {
        std::fs::create_dir(l.ws.join(d)).unwrap();
        std::fs::write(l.ws.join(d).join("x.txt"), "x\n").unwrap();
    }
    let ok = Command::new("mkfifo")
        .arg(l.ws.join("fifo/.gitignore"))
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::File::create(l.ws.join("big/.git"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    std::fs::File::create(l.ws.join("bigignore/.gitignore"))
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    symlink("/dev/zero", l.ws.join("zero/.ignore")).unwrap();
    let mut s = StdioServer::start(&l.ws, &[]);
    for (tool, args) in [
        ("list_files", json!({})),
        ("list_dir", json!({"path": ".", "recursive": true})),
        ("search_text", json!({"query": "x"})),
    ] {
        let r = s.request(&call(2, tool, args));
        assert!(r.get("result").is_some(), "{r}");
    }
    let peak_kib = peak_rss_kib(s.child.id());
    assert!(peak_kib < 256 * 1024, "the server grew to {peak_kib} KiB");
}

#[test]
fn commands_of_a_root_server_have_no_capabilities() {
    if !is_root() {
        eprintln!("NOTE: not root: commands have no capabilities to drop here");
        return;
    }
    let l = layout();
    std::fs::write(
        l.ws.join("caps.py"),
        "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].strip())\n",
    )
    .unwrap();
    let mut s = StdioServer::start(&l.ws, &[]);
    let r = exec(&mut s, "exec python3 caps.py");
    assert_eq!(sc(&r)["stdout"], "CapEff:\t0000000000000000\n", "{r}");
    let r = exec(&mut s, "hostname ctm-sandbox-test");
    assert_ne!(sc(&r)["exit_code"], 0, "{r}");
}

#[test]
fn a_nul_byte_in_a_command_or_variable_is_an_invalid_argument() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    for args in [
        json!({"cmd": "echo a\u{0}b"}),
        json!({"cmd": "true", "env": {"A=B": "x"}}),
        json!({"cmd": "true", "env": {"A": "x\u{0}y"}}),
    ] {
        let r = s.request(&call(1, "exec_command", args));
        let e = &sc(&r)["error"];
        assert_eq!(e["code"], "INVALID_ARGUMENT", "{r}");
        assert_eq!(e["details"]["reason"], "unrepresentable", "{r}");
    }
}

/// request_permissions takes the permission refusals name (the reference
/// answers -32602 for filesystem_escape although its refusals name it).
#[test]
fn request_permissions_accepts_what_refusals_name() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    let r = exec(&mut s, "cat /etc/shadow");
    let named = refused(&r, "filesystem_escape")["permission"].clone();
    let r = s.request(&call(
        2,
        "request_permissions",
        json!({"tool_name": "exec_command", "permission": named, "reason": "read it", "arguments": {"cmd": "cat /etc/shadow"}}),
    ));
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(sc(&r)["error"]["code"], "ELICITATION_UNSUPPORTED", "{r}");
    assert_eq!(
        sc(&r)["error"]["details"]["permission"],
        "filesystem_escape",
        "{r}"
    );
    let r = s.request(&call(
        3,
        "request_permissions",
        json!({"tool_name": "exec_command", "permission": "long_timeout", "reason": "x", "arguments": {}}),
    ));
    assert!(
        r.get("error").is_some() || r["result"]["isError"] == true,
        "{r}"
    );
}

/// 60 commands started at once (pipelined on stdio, the server starts them
/// concurrently) against the active limit: never more running than the
/// limit (the check and the registration were apart: 17 ran of 16).
#[test]
fn concurrent_starts_never_overshoot_the_active_limit() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, LANDLOCK_TIER);
    let max = max_active_commands(&mut s);
    let t = tag(30);
    for i in 0..60 {
        s.send(&call(
            100 + i,
            "exec_command",
            json!({"cmd": format!("sleep {t}"), "yield_time_ms": 0}),
        ));
    }
    let (mut running, mut refused) = (0, 0);
    for _ in 0..60 {
        let r = s.recv();
        let v = sc(&r);
        match (v["status"].as_str(), v["error"]["code"].as_str()) {
            (Some("running"), _) => running += 1,
            (_, Some("COMMAND_LIMIT_REACHED")) => refused += 1,
            _ => panic!("unexpected answer: {r}"),
        }
    }
    assert!(
        running as u64 <= max,
        "{running} running with a limit of {max}"
    );
    assert_eq!(running as u64, max, "{running} running, {refused} refused");
    assert_eq!(running + refused, 60);
    s.close_stdin();
    s.wait();
    assert!(gone(&["sleep", &t]));
}

/// A system call made with the x32 bit (x86_64's other ABI) is refused by
/// the filter (EPERM) in both tiers, not passed to the kernel, whose answer
/// (ENOSYS where x32 is off, the call itself where it is on) the filter
/// must not depend on.
#[test]
fn x32_system_calls_are_refused_by_the_filter() {
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("NOTE: x32 exists on x86_64 only; nothing to check here");
        return;
    }
    let l = layout();
    std::fs::write(
        l.ws.join("x32.py"),
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         for name, nr in (('getpid', 39), ('mount', 165), ('ptrace', 101)):\n\
         \x20   r = libc.syscall(0x40000000 | nr, 0, 0, 0, 0, 0)\n\
         \x20   print(name, r, ctypes.get_errno())\n",
    )
    .unwrap();
    for tier in [&[][..], LANDLOCK_TIER] {
        let mut s = StdioServer::start(&l.ws, tier);
        if !enforced(&mut s, "seccomp_filter") {
            return;
        }
        let r = exec(&mut s, "python3 x32.py");
        let out = sc(&r)["stdout"].as_str().unwrap_or_default().to_owned();
        for name in ["getpid", "mount", "ptrace"] {
            assert!(
                out.contains(&format!("{name} -1 {}", libc::EPERM)),
                "{tier:?}: {out} {r}"
            );
        }
    }
}
