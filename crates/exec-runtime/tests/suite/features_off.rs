//! What a build without one of the default features does instead
//! (`cargo xtask features` runs these with the feature off; with the
//! defaults they are not compiled).

#[cfg(any(not(feature = "pty"), not(feature = "landlock")))]
use super::*;
#[cfg(any(not(feature = "pty"), not(feature = "landlock")))]
use std::time::Duration;

#[cfg(not(feature = "pty"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_off_pty_refuses_a_tty_request_and_runs_pipes() {
    let f = fixture(PermissionMode::Trusted);
    let tty = req("echo hi").with_tty(true);
    let e =
        f.rt.exec(
            tty,
            wait_opts(Duration::from_secs(10), 1 << 16),
            std::future::pending(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, ExecError::TtyUnavailable), "{e:?}");
    assert!(e.to_string().contains("`pty` feature"), "{e}");
    let s = run(&f, req("echo hi"), Duration::from_secs(10)).await;
    assert_eq!((s.status, s.stdout.text.as_str()), (Status::Exited, "hi\n"));
}

#[cfg(not(feature = "landlock"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_off_landlock_says_why_and_commands_still_run() {
    let support = landlock_support();
    assert!(!support.available);
    assert!(
        support
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("`landlock` feature")),
        "{support:?}"
    );
    let f = fixture(PermissionMode::Safe);
    assert_ne!(f.rt.tier().tier, "landlock");
    let s = run(
        &f,
        req("echo confined-by-policy-only"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        (s.status, s.stdout.text.as_str()),
        (Status::Exited, "confined-by-policy-only\n")
    );
}
