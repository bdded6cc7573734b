//! The sandbox run the way a host program runs it: this test binary is the
//! host, so it is also the sandbox's builder, holder and entry (it calls
//! `enter_if_requested` first, as a host's `main` must). Each check starts
//! real processes; a check this host cannot run (no user namespaces, no
//! seccomp) says so and why, and does not count as passed.

#![expect(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    unsafe_code,
    reason = "test code: a failed unwrap is a failed test; checks start processes, make raw system calls, and the seccomp child answers on stdout"
)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, ExitCode};

use ctm_sandbox::namespace::{self, Plan};

/// Set in the environment of a copy of this binary started to make system
/// calls under the seccomp filter.
const SECCOMP_CHILD: &str = "CTM_SANDBOX_TEST_SECCOMP_CHILD";

fn main() -> ExitCode {
    ctm_sandbox::enter_if_requested();
    if std::env::var_os(SECCOMP_CHILD).is_some() {
        return seccomp_child();
    }
    let checks: [(&str, Check); 3] = [
        (
            "the seccomp filter refuses what it lists, in a real process",
            seccomp_refuses,
        ),
        (
            "a command in the namespace tier sees its own world",
            namespace_confines,
        ),
        (
            "nothing of a command outlives its sandbox",
            nothing_outlives,
        ),
    ];
    let mut failed = 0;
    for (name, check) in checks {
        match check() {
            Ok(Outcome::Passed) => eprintln!("ok: {name}"),
            Ok(Outcome::Skipped(why))
                if std::env::var_os("CTM_REQUIRE_NAMESPACE_TIER").is_some() =>
            {
                failed += 1;
                eprintln!(
                    "FAILED: {name}: required here (CTM_REQUIRE_NAMESPACE_TIER), not run: {why}"
                );
            }
            Ok(Outcome::Skipped(why)) => eprintln!("NOTE: not run on this host: {name}: {why}"),
            Err(e) => {
                failed += 1;
                eprintln!("FAILED: {name}: {e}");
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

type Check = fn() -> Result<Outcome, String>;

enum Outcome {
    Passed,
    Skipped(String),
}

fn errno_of(ret: libc::c_long) -> i32 {
    if ret < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    } else {
        0
    }
}

/// In the copy of this binary: attaches the namespace tier's filter, makes
/// each call and prints `name errno` per line.
fn seccomp_child() -> ExitCode {
    let prog = match ctm_sandbox::seccomp::program_namespaced() {
        Ok(p) => p,
        Err(e) => {
            println!("no-program {e}");
            return ExitCode::SUCCESS;
        }
    };
    if let Err(e) = ctm_sandbox::seccomp::enforce(prog) {
        println!("no-seccomp {e}");
        return ExitCode::SUCCESS;
    }
    let dir = std::env::temp_dir().join(format!("ctm-sandbox-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = std::ffi::CString::new(dir.join("f").into_os_string().into_encoded_bytes()).unwrap();
    // Each call's errno, read right after it.
    let check = |ret: libc::c_long| errno_of(ret);
    // SAFETY: system calls with valid pointers or none.
    let calls: Vec<(&str, i32)> = unsafe {
        vec![
            ("getpid", check(libc::getpid() as libc::c_long)),
            (
                "mount",
                check(libc::syscall(
                    libc::SYS_mount,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )),
            ),
            (
                "ptrace",
                check(libc::syscall(
                    libc::SYS_ptrace,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )),
            ),
            (
                "socket-packet",
                check(libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) as libc::c_long),
            ),
            (
                "socket-vsock",
                check(libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0) as libc::c_long),
            ),
            (
                "creat-setuid",
                check(
                    libc::open(file.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o4755)
                        as libc::c_long,
                ),
            ),
            (
                "creat-plain",
                check(
                    libc::open(file.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644)
                        as libc::c_long,
                ),
            ),
            (
                "chmod-setgid",
                check(libc::chmod(file.as_ptr(), 0o2755) as libc::c_long),
            ),
            (
                "openat2",
                check(libc::syscall(
                    libc::SYS_openat2,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )),
            ),
            (
                "x32-getpid",
                check(libc::syscall(0x4000_0000 | libc::SYS_getpid)),
            ),
        ]
    };
    for (name, errno) in calls {
        println!("{name} {errno}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    ExitCode::SUCCESS
}

fn seccomp_refuses() -> Result<Outcome, String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .env(SECCOMP_CHILD, "1")
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(line) = text.lines().find(|l| l.starts_with("no-")) {
        return Ok(Outcome::Skipped(line.to_owned()));
    }
    let got: std::collections::BTreeMap<&str, i32> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, e)| (n, e.parse().unwrap_or(-1)))
        .collect();
    let want = [
        ("getpid", 0),
        ("mount", libc::EPERM),
        ("ptrace", libc::EPERM),
        ("socket-packet", libc::EPERM),
        ("socket-vsock", libc::EPERM),
        ("creat-setuid", libc::EPERM),
        ("creat-plain", 0),
        ("chmod-setgid", libc::EPERM),
        ("openat2", libc::ENOSYS),
        ("x32-getpid", libc::EPERM),
    ];
    for (name, errno) in want {
        if got.get(name) != Some(&errno) {
            return Err(format!(
                "{name}: errno {:?}, expected {errno} (child said {text:?}, stderr {:?})",
                got.get(name),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(Outcome::Passed)
}

/// This binary, held open without close-on-exec (the plan execs it as
/// `/proc/self/fd/N`).
fn helper() -> OwnedFd {
    rustix::fs::open(
        "/proc/self/exe",
        rustix::fs::OFlags::PATH,
        rustix::fs::Mode::empty(),
    )
    .unwrap()
}

/// Runs `script` with `/bin/sh -c` in a sandbox the built-in builder makes
/// for `workspace` (network closed, no Landlock ruleset).
fn run_in_sandbox(workspace: &Path, script: &str) -> Result<std::process::Output, Outcome> {
    let support = namespace::support();
    if !support.available() || !support.built_in() {
        return Err(Outcome::Skipped(format!(
            "no built-in namespace tier: {}",
            support.reason.as_deref().unwrap_or("bwrap chosen")
        )));
    }
    let helper = helper();
    let plan = Plan {
        bwrap: None,
        workspace,
        workspace_read_only: false,
        write_paths: &[],
        runtime: None,
        hidden_roots: &[],
        unshare_net: true,
        legacy_git_seal: false,
        seal_binds: &[],
        hide: None,
        helper_fd: helper.as_raw_fd(),
        ruleset_fd: -1,
        read_access: 0,
        write_access: 0,
        terminal_access: 0,
        tty: false,
        hold: None,
    };
    let argv = namespace::argv(&plan);
    Command::new(&argv[0])
        .args(&argv[1..])
        .args(["/bin/sh", "-c", script])
        .current_dir(workspace)
        .output()
        .map_err(|e| Outcome::Skipped(format!("cannot start the builder: {e}")))
}

fn namespace_confines() -> Result<Outcome, String> {
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let outside = tempfile::NamedTempFile::new_in("/var/tmp").map_err(|e| e.to_string())?;
    let private = format!("ctm-sandbox-test-tmp-{}", std::process::id());
    let script = format!(
        "echo pid=$$; \
         echo procs=$(ls /proc | grep -c '^[0-9]'); \
         echo net=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,); \
         grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status; \
         echo inside > made-inside && echo wrote; \
         (echo x >> {outside}) 2>/dev/null && echo outside-written || echo outside-refused; \
         (echo x > /tmp/{private} && echo tmp-ok) 2>/dev/null",
        outside = outside.path().display()
    );
    let out = match run_in_sandbox(ws.path(), &script) {
        Ok(o) => o,
        Err(Outcome::Skipped(why)) => return Ok(Outcome::Skipped(why)),
        Err(Outcome::Passed) => unreachable!(),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let say = |what: &str| {
        format!(
            "{what}; said {text:?}, stderr {:?}, status {:?}",
            String::from_utf8_lossy(&out.stderr),
            out.status
        )
    };
    if !out.status.success() {
        return Err(say("the command failed"));
    }
    let line = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    // Its own PID namespace: the shell is a low number, and few processes.
    let pid: u32 = line("pid=").parse().map_err(|_| say("no pid"))?;
    let procs: u32 = line("procs=")
        .parse()
        .map_err(|_| say("no process count"))?;
    if pid > 5 || procs > 6 {
        return Err(say("the command sees the host's processes"));
    }
    if line("net=") != "lo," {
        return Err(say("the network namespace has more than loopback"));
    }
    if line("CapEff:") != "0000000000000000" || line("CapBnd:") != "0000000000000000" {
        return Err(say("the command kept a capability"));
    }
    if line("Seccomp:") != "2" {
        return Err(say("no seccomp filter"));
    }
    if !text.contains("wrote\n") || !ws.path().join("made-inside").exists() {
        return Err(say("the workspace is not writable through its bind"));
    }
    if !text.contains("outside-refused") {
        return Err(say("a file outside the workspace was written"));
    }
    // Its /tmp is its own: writable, and nothing of it reaches the host's.
    if !text.contains("tmp-ok") || Path::new("/tmp").join(&private).exists() {
        return Err(say("/tmp is not the sandbox's own"));
    }
    Ok(Outcome::Passed)
}

fn nothing_outlives() -> Result<Outcome, String> {
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let marker = format!("ctm-sandbox-test-{}", std::process::id());
    // A background process and a session of its own, left running.
    let script = format!(
        "(exec -a {marker} sleep 300) & setsid sh -c 'exec -a {marker} sleep 300' & echo started"
    );
    let out = match run_in_sandbox(ws.path(), &script) {
        Ok(o) => o,
        Err(Outcome::Skipped(why)) => return Ok(Outcome::Skipped(why)),
        Err(Outcome::Passed) => unreachable!(),
    };
    if !String::from_utf8_lossy(&out.stdout).contains("started") {
        return Err(format!(
            "the command did not start: {:?}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The builder's PID 1 ended with the shell: every process of the
    // namespace went with it.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(&marker)
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    if left.is_empty() {
        Ok(Outcome::Passed)
    } else {
        Err(format!("processes outlived the sandbox: {left:?}"))
    }
}
