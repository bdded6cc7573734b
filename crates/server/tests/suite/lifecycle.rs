//! How the server stops, as real clients stop it: Claude Code sends SIGINT,
//! SIGTERM 100 ms later and SIGKILL 400 ms after that, all with stdin still
//! open; Gemini CLI sends SIGTERM only; a closed terminal sends SIGHUP.
//! Each stop must end every process of every command and remove the
//! runtime directory, before the client's SIGKILL; what a SIGKILLed server
//! leaves behind, the next server sweeps.

use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::*;
use super::sandbox::{
    LANDLOCK_TIER, all_gone, all_running, exec, layout, leave_background, sc, tag,
};

/// Claude Code's SIGKILL comes this long after its first signal: a server
/// still alive then loses its clean-up.
const CLIENT_KILLS_AFTER: Duration = Duration::from_millis(500);

fn signal(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} {pid}");
}

/// Polls (every 2 ms) until `child` exits; the exit status and how long it
/// took from `since`.
fn exit_of(child: &mut std::process::Child, since: Instant) -> (ExitStatus, Duration) {
    let deadline = since + ANSWER_TIMEOUT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s, since.elapsed());
        }
        assert!(Instant::now() < deadline, "the server did not exit");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// SIGHUP at its default in the server, as a terminal's child has it. A
/// test run started under `nohup` passes SIGHUP on ignored, and the server
/// rightly keeps a hangup its parent ignored (nohup's promise): without this
/// the SIGHUP case would wait for an exit that must not come.
fn with_default_hangup(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only signal(2), which is async-signal-safe, between fork and exec.
    #[expect(
        unsafe_code,
        reason = "pre_exec restores SIGHUP's default between fork and exec"
    )]
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

fn runtime_dir_of(report: &Value) -> PathBuf {
    let dir = report["runtime"]["runtime_dir"]
        .as_str()
        .unwrap_or_else(|| panic!("no runtime_dir in {report}"));
    let dir = PathBuf::from(dir);
    assert!(dir.join("tmp").is_dir(), "{}", dir.display());
    dir
}

/// A stdio server with background processes and a command still running,
/// stopped by `name` with stdin open.
fn stdio_server_stops_on(name: &str, n: u32, code: i32) {
    let l = layout();
    let t = tag(n);
    let mut marks = leave_background(&l.ws, &t);
    let mut s = StdioServer::start_with(with_default_hangup(
        command(&l.ws, LANDLOCK_TIER).arg("--stdio"),
    ));
    let r = exec(&mut s, "sh bg.sh");
    assert_eq!(sc(&r)["background_running"], true, "{r}");
    let r = s.request(&call(
        2,
        "exec_command",
        json!({"cmd": format!("sleep {t}4"), "yield_time_ms": 100}),
    ));
    assert_eq!(sc(&r)["status"], "running", "{r}");
    marks.push(vec!["sleep".to_owned(), format!("{t}4")]);
    assert!(all_running(&marks), "the commands did not start");
    let r = s.request(&call(
        3,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let dir = runtime_dir_of(sc(&r));
    // A file the command made unwritable does not keep the directory.
    let r = exec(
        &mut s,
        "mkdir -p \"$TMPDIR/locked/in\" && touch \"$TMPDIR/locked/in/f\" && chmod 000 \"$TMPDIR/locked/in\" \"$TMPDIR/locked\"",
    );
    assert_eq!(sc(&r)["exit_code"], 0, "{r}");

    let since = Instant::now();
    signal(s.child.id(), name);
    let (status, took) = exit_of(&mut s.child, since);
    eprintln!("SIG{name}: the stdio server exited after {took:?} with {status:?}");
    assert!(
        took < CLIENT_KILLS_AFTER,
        "SIG{name}: exit took {took:?}, the client would have sent SIGKILL"
    );
    assert_eq!(status.code(), Some(code), "SIG{name}: {status:?}");
    assert!(all_gone(&marks), "SIG{name}: a command's process survived");
    assert!(
        !dir.exists(),
        "SIG{name}: the runtime directory {} is left",
        dir.display()
    );
}

#[test]
fn sigint_with_stdin_open_stops_the_stdio_server_and_cleans_up() {
    stdio_server_stops_on("INT", 21, 130);
}

#[test]
fn sigterm_with_stdin_open_stops_the_stdio_server_and_cleans_up() {
    stdio_server_stops_on("TERM", 22, 143);
}

#[test]
fn sighup_stops_the_stdio_server_and_cleans_up() {
    stdio_server_stops_on("HUP", 23, 129);
}

#[test]
fn sigterm_stops_the_http_server_with_a_request_in_flight() {
    let l = layout();
    let t = tag(24);
    let mut marks = leave_background(&l.ws, &t);
    let mut s = HttpServer::start(&l.ws, LANDLOCK_TIER);
    let call_tool = |name: &str, arguments: Value| {
        s.post_modern("tools/call", json!({"name": name, "arguments": arguments}))
            .json()
    };
    let r = call_tool("exec_command", json!({"cmd": "sh bg.sh"}));
    assert_eq!(sc(&r)["background_running"], true, "{r}");
    let dir = runtime_dir_of(sc(&call_tool(
        "check_exec_environment",
        json!({"detail": "full"}),
    )));
    // A request waiting on a command when the signal comes.
    let client = s.client.clone();
    let sleeper = format!("sleep {t}4");
    let in_flight = std::thread::spawn(move || {
        client
            .post_modern(
                "tools/call",
                json!({"name": "exec_command", "arguments": {"cmd": sleeper, "yield_time_ms": 15000}}),
            )
            .status
    });
    marks.push(vec!["sleep".to_owned(), format!("{t}4")]);
    assert!(all_running(&marks), "the commands did not start");

    let since = Instant::now();
    signal(s.child.id(), "TERM");
    let (status, took) = exit_of(&mut s.child, since);
    eprintln!("SIGTERM: the HTTP server exited after {took:?} with {status:?}");
    assert!(took < CLIENT_KILLS_AFTER, "SIGTERM: exit took {took:?}");
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert_eq!(
        in_flight.join().unwrap(),
        200,
        "the request in flight got no answer"
    );
    assert!(all_gone(&marks), "a command's process survived");
    assert!(
        !dir.exists(),
        "the runtime directory {} is left",
        dir.display()
    );
}

#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "ages a runtime directory outside the workspace"
)]
fn the_next_server_sweeps_what_a_sigkilled_one_left() {
    let l = layout();
    let mut s = StdioServer::start(&l.ws, &[]);
    let r = s.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    let dir = runtime_dir_of(sc(&r));
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    assert!(dir.exists(), "SIGKILL ran no clean-up, the directory stays");
    // Seconds old, its pid gone: no need to wait the minute a directory
    // of a live pid gets.
    let old = std::time::SystemTime::now() - Duration::from_secs(10);
    std::fs::File::open(&dir)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let mut next = StdioServer::start(&l.ws, &[]);
    let r = next.request(&call(
        1,
        "check_exec_environment",
        json!({"detail": "full"}),
    ));
    assert_ne!(runtime_dir_of(sc(&r)), dir);
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while dir.exists() {
        assert!(
            Instant::now() < deadline,
            "the left-over {} was not swept",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
