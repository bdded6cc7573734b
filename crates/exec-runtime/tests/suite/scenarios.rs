//! The scenarios of the exec-runtime research notes, with real processes.

use std::time::{Duration, Instant};

use ctm_exec_runtime::*;

use super::*;

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_command_exits_with_code_and_separate_streams() {
    let f = fixture(PermissionMode::Trusted);
    let t = Instant::now();
    let s = run(&f, req("echo out; echo err >&2; exit 3"), 10 * SEC).await;
    assert_eq!((s.status, s.exit_code), (Status::Exited, Some(3)));
    assert_eq!(
        (s.stdout.text.as_str(), s.stderr.text.as_str()),
        ("out\n", "err\n")
    );
    assert!(
        t.elapsed() < 5 * SEC,
        "returned at exit, not at the deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_exit_is_terminated() {
    let f = fixture(PermissionMode::Trusted);
    let s = run(&f, req("kill -9 $$"), 10 * SEC).await;
    assert_eq!(
        (s.status, s.signal),
        (Status::Terminated, Some(Signal::Kill))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_command_runs_then_polls_to_exit_with_all_output() {
    let f = fixture(PermissionMode::Safe);
    let s = run(
        &f,
        req("for i in 1 2 3; do echo $i; sleep 0.3; done"),
        Duration::from_millis(100),
    )
    .await;
    assert_eq!(s.status, Status::Running);
    let mut all = s.stdout.text.clone();
    let id = s.command_id.clone();
    loop {
        let p =
            f.rt.poll(
                &id,
                "",
                wait_opts(10 * SEC, 1 << 20),
                std::future::pending(),
            )
            .await
            .unwrap();
        all.push_str(&p.stdout.text);
        if p.status != Status::Running {
            assert_eq!(p.exit_code, Some(0));
            break;
        }
    }
    assert_eq!(all, "1\n2\n3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_delivered_then_closed() {
    let f = fixture(PermissionMode::Safe);
    let mut r = req("cat");
    r.stdin = "abc".into();
    let s = run(&f, r, 10 * SEC).await;
    assert_eq!((s.status, s.stdout.text.as_str()), (Status::Exited, "abc"));
    let s = run(&f, req("sleep 5"), Duration::from_millis(50)).await;
    let e =
        f.rt.poll(
            &s.command_id,
            "x",
            wait_opts(SEC, 100),
            std::future::pending(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::Closed(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_the_whole_group_without_polling() {
    let f = fixture(PermissionMode::Safe);
    let mut r = req("echo $$ > pid; sleep 100 & sleep 100 & sleep 100");
    r.timeout = Duration::from_millis(300);
    let s = run(&f, r, Duration::from_millis(100)).await;
    assert_eq!(s.status, Status::Running);
    let pgid = std::fs::read_to_string(f.ws.path().join("pid"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(group_alive(&pgid));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p =
        f.rt.poll(
            &s.command_id,
            "",
            wait_opts(SEC, 100),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert_eq!(p.status, Status::Timeout);
    assert!(p.timed_out);
    // The grandchildren went with the group (TERM, then KILL after the grace).
    assert!(
        !group_alive(&pgid),
        "background sleeps survived the timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_term_ignoring_process_escalates_and_reports_sigkill() {
    let f = fixture(PermissionMode::Safe);
    let marker = f.ws.path().join("pid");
    let s = run(
        &f,
        req("trap '' TERM; echo $$ > pid; sleep 100 & sleep 100"),
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(s.status, Status::Running);
    let pgid = std::fs::read_to_string(&marker).unwrap().trim().to_owned();
    assert!(group_alive(&pgid));
    let t = Instant::now();
    let k =
        f.rt.kill(
            &s.command_id,
            kill_opts(Signal::Term, Duration::from_millis(300), 2 * SEC, 100),
        )
        .await
        .unwrap();
    assert_eq!(k.status, KillStatus::Killed, "{k:?}");
    assert_eq!(k.signals_sent, [Signal::Term, Signal::Kill]);
    assert_eq!(k.snapshot.signal, Some(Signal::Kill));
    assert!(t.elapsed() < 3 * SEC);
    assert!(!group_alive(&pgid), "a grandchild survived the kill");
    // Killing again reports exited; an unknown id is not found.
    let again =
        f.rt.kill(&s.command_id, kill_opts(Signal::Term, SEC, SEC, 100))
            .await
            .unwrap();
    assert_eq!(again.status, KillStatus::Exited);
    assert!(!again.ended_by_kill, "nothing was running: {again:?}");
    assert!(matches!(
        f.rt.kill("nope", kill_opts(Signal::Term, SEC, SEC, 100))
            .await,
        Err(ExecError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_term_respecting_process_is_terminated() {
    let f = fixture(PermissionMode::Safe);
    let s = run(&f, req("exec sleep 100"), Duration::from_millis(100)).await;
    let k =
        f.rt.kill(&s.command_id, kill_opts(Signal::Term, 5 * SEC, SEC, 100))
            .await
            .unwrap();
    assert_eq!(
        (k.status, k.snapshot.signal),
        (KillStatus::Terminated, Some(Signal::Term))
    );
    assert_eq!(k.signals_sent, [Signal::Term]);
    assert_eq!(k.snapshot.signal_number, Some(15));
    assert!(k.ended_by_kill, "{k:?}");
}

#[cfg(feature = "pty")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pty_repl_over_several_writes() {
    let f = fixture(PermissionMode::Trusted);
    let mut r = req("sh");
    r.tty = true;
    let s = run(&f, r, Duration::from_millis(300)).await;
    assert!(s.tty);
    assert_eq!(s.status, Status::Running);
    let id = s.command_id;
    let p =
        f.rt.poll(
            &id,
            "X=41; echo tty:$(tty | cut -c1-8)\n",
            wait_opts(5 * SEC, 1 << 16),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(
        p.stdout.text.contains("tty:/dev/pts"),
        "{:?}",
        p.stdout.text
    );
    let p =
        f.rt.poll(
            &id,
            "echo value=$((X+1))\n",
            wait_opts(5 * SEC, 1 << 16),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(p.stdout.text.contains("value=42"), "{:?}", p.stdout.text);
    let p =
        f.rt.poll(
            &id,
            "exit 7\n",
            wait_opts(5 * SEC, 1 << 16),
            std::future::pending(),
        )
        .await
        .unwrap();
    let p = if p.status == Status::Running {
        f.rt.poll(&id, "", wait_opts(5 * SEC, 100), std::future::pending())
            .await
            .unwrap()
    } else {
        p
    };
    assert_eq!((p.status, p.exit_code), (Status::Exited, Some(7)));
}

#[cfg(feature = "pty")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tty_command_that_exits_at_once_is_exited() {
    let f = fixture(PermissionMode::Trusted);
    let mut r = req("echo hi");
    r.tty = true;
    let s = run(&f, r, 10 * SEC).await;
    assert_eq!(s.status, Status::Exited);
    assert!(s.stdout.text.contains("hi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_keeps_memory_bounded_and_read_output_clamps_the_gap() {
    let budget = RetentionBudget::default();
    let f = fixture_with(PermissionMode::Safe, budget);
    // 50 MB of output.
    let s = run(
        &f,
        req("head -c 52428800 /dev/zero | tr '\\0' 'x'; echo; echo END"),
        60 * SEC,
    )
    .await;
    assert_eq!(s.status, Status::Exited);
    assert!(s.stdout.truncated());
    assert!(s.stdout.text.len() < (1 << 20) + 200);
    assert!(s.stdout.text.ends_with("END\n"));
    assert!(s.stdout.text.starts_with("xxxx"));
    let page =
        f.rt.read_output(&s.command_id, Stream::Stdout, 1_000_000, 100)
            .unwrap();
    assert_eq!(page.total_bytes, 52_428_805);
    assert_eq!(page.head_retained_bytes, 65_536);
    assert!(page.evicted_gap_bytes > 50_000_000);
    assert_eq!(
        page.slice.offset,
        page.total_bytes - (budget.buffer_bytes_per_stream as u64 - 65_536)
    );
    assert_eq!(page.slice.omitted, page.slice.offset - 1_000_000);
    let head =
        f.rt.read_output(&s.command_id, Stream::Stdout, 0, 10)
            .unwrap();
    assert_eq!(
        (head.slice.bytes.as_slice(), head.slice.next_offset),
        (&b"xxxxxxxxxx"[..], Some(10))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_ends_the_wait_and_the_command_lives_on() {
    let f = fixture(PermissionMode::Safe);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rt = f.rt.clone();
    let call = tokio::spawn(async move {
        let t = Instant::now();
        let s = rt
            .exec(req("sleep 30"), wait_opts(30 * SEC, 100), async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        (s, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled_at = Instant::now();
    tx.send(()).unwrap();
    let (s, _) = call.await.unwrap();
    assert!(
        cancelled_at.elapsed() < Duration::from_millis(100),
        "the wait did not end at once"
    );
    assert_eq!(
        (s.status, s.wait_end),
        (Status::Running, WaitEnd::Cancelled)
    );
    let p =
        f.rt.poll(
            &s.command_id,
            "",
            wait_opts(Duration::from_millis(10), 100),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert_eq!(
        p.status,
        Status::Running,
        "the command outlives its request"
    );
    f.rt.kill(&s.command_id, kill_opts(Signal::Kill, SEC, SEC, 100))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_limit_is_enforced() {
    let budget = RetentionBudget {
        max_active_commands: 2,
        ..RetentionBudget::default()
    };
    let f = fixture_with(PermissionMode::Safe, budget);
    let a = run(&f, req("sleep 30"), Duration::from_millis(10)).await;
    let _b = run(&f, req("sleep 30"), Duration::from_millis(10)).await;
    let e =
        f.rt.exec(req("true"), wait_opts(SEC, 100), std::future::pending())
            .await
            .unwrap_err();
    assert!(
        matches!(e, ExecError::LimitReached { active: 2, max: 2 }),
        "{e:?}"
    );
    f.rt.kill(&a.command_id, kill_opts(Signal::Kill, SEC, SEC, 100))
        .await
        .unwrap();
    assert_eq!(run(&f, req("true"), 10 * SEC).await.status, Status::Exited);
    f.rt.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_refuse_in_safe_mode_and_open_in_dangerous() {
    let f = fixture(PermissionMode::Safe);
    let e =
        f.rt.exec(
            req("curl https://example.com"),
            wait_opts(SEC, 100),
            std::future::pending(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, ExecError::Permission(ref r) if r.permission == Permission::Network),
        "{e:?}"
    );
    let e =
        f.rt.exec(
            req("echo $(id)"),
            wait_opts(SEC, 100),
            std::future::pending(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, ExecError::Permission(ref r) if r.permission == Permission::ShellExpansion)
    );
    let d = fixture(PermissionMode::Dangerous);
    assert_eq!(
        run(&d, req("echo $(echo ok)"), 10 * SEC).await.stdout.text,
        "ok\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_private_and_non_interactive() {
    let f = fixture(PermissionMode::Trusted);
    let s = run(
        &f,
        req("echo $HOME; echo $TMPDIR; echo $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT"),
        10 * SEC,
    )
    .await;
    let lines: Vec<&str> = s.stdout.text.lines().collect();
    assert!(
        lines[0].starts_with(f.base.path().to_str().unwrap()) && lines[0].ends_with("/home"),
        "{lines:?}"
    );
    assert!(lines[1].ends_with("/tmp"));
    assert_eq!(lines[2], "cat cat 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pager_prone_git_log_returns() {
    let f = fixture(PermissionMode::Trusted);
    let script = "git init -q . && git -c user.email=a@b -c user.name=n commit -q --allow-empty -m one && for i in $(seq 2 300); do git -c user.email=a@b -c user.name=n commit -q --allow-empty -m c$i; done && git log --oneline | wc -l";
    let s = run(&f, req(script), 60 * SEC).await;
    assert_eq!(
        (s.status, s.stdout.text.trim()),
        (Status::Exited, "300"),
        "{s:?}"
    );
    let s = run(&f, req("git log"), 20 * SEC).await;
    assert_eq!(s.status, Status::Exited, "git log waited for a pager");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn landlock_confines_writes_to_the_workspace_and_runtime_dir() {
    let support = landlock_support();
    if !support.available {
        eprintln!(
            "Landlock is not available on this kernel ({:?}); confinement cannot be tested here",
            support.reason
        );
        return;
    }
    let f = fixture(PermissionMode::Trusted);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    // The path is computed by the shell, so the path gate cannot see it
    // (a plain `T=/outside` is refused before anything runs): Landlock is
    // the boundary.
    let cmd = format!(
        "echo inside > in.txt && echo $HOME > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && T=$(echo {}); echo x > $T ; echo rc=$?",
        target.display()
    );
    let d = fixture(PermissionMode::Dangerous);
    let s = run(&f, req(&cmd), 10 * SEC).await;
    assert!(f.ws.path().join("in.txt").exists(), "{s:?}");
    assert!(
        s.stdout.text.contains("rc=") && !s.stdout.text.contains("rc=0"),
        "{s:?}"
    );
    assert!(
        s.stderr.text.contains("ermission denied"),
        "{:?}",
        s.stderr.text
    );
    assert!(
        !target.exists(),
        "Landlock let a write out of the workspace"
    );
    // Dangerous mode is not confined.
    let s = run(&d, req(&cmd), 10 * SEC).await;
    assert!(s.stdout.text.contains("rc=0"), "{s:?}");
    assert!(target.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_forked_sleepers_are_all_gone_after_kill() {
    let f = fixture(PermissionMode::Trusted);
    let s = run(
        &f,
        req("echo $$ > pid; i=0; while [ $i -lt 100 ]; do sleep 100 & i=$((i+1)); done; echo forked; wait"),
        Duration::from_millis(300),
    )
    .await;
    assert_eq!(s.status, Status::Running, "{s:?}");
    let pgid = std::fs::read_to_string(f.ws.path().join("pid"))
        .unwrap()
        .trim()
        .to_owned();
    // Wait for the fork loop to finish (its output says so).
    let mut out = s.stdout.text.clone();
    while !out.contains("forked") {
        let p =
            f.rt.poll(
                &s.command_id,
                "",
                wait_opts(SEC, 1 << 16),
                std::future::pending(),
            )
            .await
            .unwrap();
        out.push_str(&p.stdout.text);
    }
    assert!(group_size(&pgid) >= 101, "{} processes", group_size(&pgid));
    let k =
        f.rt.kill(&s.command_id, kill_opts(Signal::Term, SEC, 2 * SEC, 100))
            .await
            .unwrap();
    assert_ne!(k.status, KillStatus::Terminating, "{k:?}");
    assert_eq!(group_size(&pgid), 0, "sleepers survived the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_that_closes_its_output_keeps_running_until_killed() {
    let f = fixture(PermissionMode::Safe);
    let s = run(
        &f,
        req("echo before; exec >&- 2>&-; echo $$ > pid; sleep 100"),
        Duration::from_millis(500),
    )
    .await;
    // Closed pipes are not an exit: it is still running, with its output.
    assert_eq!(
        (s.status, s.stdout.text.as_str()),
        (Status::Running, "before\n")
    );
    let p =
        f.rt.poll(
            &s.command_id,
            "",
            wait_opts(Duration::from_millis(300), 100),
            std::future::pending(),
        )
        .await
        .unwrap();
    assert_eq!(p.status, Status::Running);
    let pgid = std::fs::read_to_string(f.ws.path().join("pid"))
        .unwrap()
        .trim()
        .to_owned();
    let k =
        f.rt.kill(&s.command_id, kill_opts(Signal::Term, SEC, 2 * SEC, 100))
            .await
            .unwrap();
    assert_eq!(k.status, KillStatus::Terminated, "{k:?}");
    assert!(!group_alive(&pgid));
}

/// The command starts in its workdir, entered through a handle opened beneath
/// the root; a file or a link out is refused with the boundary's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workdir_is_entered_beneath_the_root() {
    let f = fixture(PermissionMode::Trusted);
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(f.ws.path().join("sub/deeper")).unwrap();
    std::fs::write(f.ws.path().join("file.txt"), "x").unwrap();
    std::os::unix::fs::symlink(outside.path(), f.ws.path().join("out")).unwrap();
    std::os::unix::fs::symlink("sub", f.ws.path().join("in")).unwrap();
    for (workdir, ends) in [("sub/deeper", "/sub/deeper\n"), ("in", "/sub\n")] {
        let mut r = req("pwd -P");
        r.workdir = workdir.into();
        let s = run(&f, r, 10 * SEC).await;
        assert!(
            s.stdout.text.ends_with(ends),
            "{workdir}: {:?}",
            s.stdout.text
        );
    }
    for (workdir, want) in [
        ("file.txt", "NotADirectory"),
        ("out", "SymlinkEscape"),
        ("missing", "NotFound"),
    ] {
        let mut r = req("pwd");
        r.workdir = workdir.into();
        let e =
            f.rt.exec(r, wait_opts(10 * SEC, 1 << 20), std::future::pending())
                .await
                .unwrap_err();
        assert!(format!("{e:?}").contains(want), "{workdir}: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_shutdown_nothing_starts_and_a_racing_start_ends() {
    let f = fixture(PermissionMode::Trusted);
    let rt = f.rt.clone();
    // Starts racing the shutdown: each either never starts or is killed.
    // The names carry this process's id: the same test running elsewhere on
    // the machine (another checkout) has sleepers of its own.
    let tag = std::process::id();
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let rt = rt.clone();
            tokio::spawn(async move {
                rt.exec(
                    req(&format!("sleep 30{i}.{tag}")),
                    wait_opts(Duration::from_millis(50), 1 << 10),
                    std::future::pending(),
                )
                .await
            })
        })
        .collect();
    tokio::task::spawn_blocking({
        let rt = rt.clone();
        move || rt.shutdown()
    })
    .await
    .unwrap();
    for r in racers {
        let _ = r.await.unwrap();
    }
    let e = run_err(&f, req("true")).await;
    assert!(e.to_string().contains("shutting down"), "{e}");
    // Nothing of any racer is left.
    let deadline = Instant::now() + 10 * SEC;
    loop {
        let left = std::process::Command::new("pgrep")
            .args(["-f", &format!("^sleep 30[0-7]\\.{tag}$")])
            .output()
            .unwrap();
        if left.stdout.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a racing command survived shutdown"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rt.active(), 0);
}

async fn run_err(f: &Fixture, r: ExecRequest) -> ExecError {
    f.rt.exec(r, wait_opts(SEC, 1 << 10), std::future::pending())
        .await
        .unwrap_err()
}
