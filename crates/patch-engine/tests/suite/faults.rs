//! Faults and races: a failing rename mid-commit, an outside writer between
//! plan and commit, a target created meanwhile, and many threads at once.

use std::sync::Arc;

use ctm_patch_engine::{ApplyOptions, Faults, PatchEngine, PatchError, TEMP_PREFIX};
use ctm_workspace_fs::Workspace;

use super::{kind, tree};

/// The text of `name` under `dir`.
fn content(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

fn setup(files: &[(&str, &str)]) -> (tempfile::TempDir, PatchEngine) {
    let t = tempfile::tempdir().unwrap();
    for (p, c) in files {
        let f = t.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    let e = PatchEngine::new(Workspace::open(t.path()).unwrap()).with_protected_git_dir(true);
    (t, e)
}

const THREE_FILES: &str = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Delete File: b.txt\n*** Add File: new/dir/c.txt\n+c\n*** Update File: d.txt\n*** Move to: moved/d.txt\n-d\n+D\n*** End Patch\n";

/// Failing the Nth rename of the commit, for every N: every file is as it was.
#[test]
fn failing_any_rename_rolls_everything_back() {
    // Five targets (update, delete, add, and a move's delete and add): five renames.
    for n in 1..=6 {
        let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n"), ("d.txt", "d\n")]);
        let before = tree(t.path());
        let opts = ApplyOptions::default().with_faults(Faults {
            before_replace: None,
            fail_rename_at: Some(n),
            before_commit: None,
        });
        let r = engine.apply(THREE_FILES, &opts);
        if n <= 5 {
            let e = r.expect_err("the injected fault must fail the patch");
            assert_eq!(kind(&e), "io", "rename {n}: {e}");
            assert_eq!(tree(t.path()), before, "rename {n} left a change behind");
            assert!(
                !t.path().join("new").exists(),
                "rename {n} left a created directory"
            );
        } else {
            // There is no sixth rename: the patch applies.
            r.unwrap();
            assert_eq!(content(t.path(), "moved/d.txt"), "D\n");
        }
        assert!(tree(t.path()).keys().all(|k| !k.contains(TEMP_PREFIX)));
    }
}

#[test]
fn outside_change_between_plan_and_commit_is_a_conflict() {
    let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let path = t.path().join("b.txt");
    let opts = ApplyOptions::default().with_faults(Faults {
        before_replace: None,
        fail_rename_at: None,
        before_commit: Some(Box::new(move || {
            std::fs::write(&path, "edited by someone\n").unwrap()
        })),
    });
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: b.txt\n-b\n+B\n*** End Patch";
    let e = engine.apply(patch, &opts).unwrap_err();
    assert!(
        matches!(e, PatchError::Conflict { ref path, .. } if path == "b.txt"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("a.txt")).unwrap(),
        "a\n",
        "a.txt must be rolled back"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("b.txt")).unwrap(),
        "edited by someone\n",
        "the outside edit survives"
    );
}

#[test]
fn target_created_meanwhile_is_never_overwritten() {
    let (t, engine) = setup(&[]);
    let path = t.path().join("new.txt");
    let opts = ApplyOptions::default().with_faults(Faults {
        before_replace: None,
        fail_rename_at: None,
        before_commit: Some(Box::new(move || std::fs::write(&path, "theirs\n").unwrap())),
    });
    let e = engine
        .apply(
            "*** Begin Patch\n*** Add File: new.txt\n+ours\n*** End Patch",
            &opts,
        )
        .unwrap_err();
    assert_eq!(kind(&e), "conflict");
    assert_eq!(content(t.path(), "new.txt"), "theirs\n");
}

#[test]
fn mode_change_is_a_conflict_too() {
    use std::os::unix::fs::PermissionsExt;
    let (t, engine) = setup(&[("a.txt", "a\n")]);
    let path = t.path().join("a.txt");
    let opts = ApplyOptions::default().with_faults(Faults {
        before_replace: None,
        fail_rename_at: None,
        before_commit: Some(Box::new(move || {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap()
        })),
    });
    let e = engine
        .apply(
            "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** End Patch",
            &opts,
        )
        .unwrap_err();
    assert_eq!(kind(&e), "conflict");
}

#[test]
fn git_dir_is_protected_and_symlinks_are_not_written_through() {
    let (t, engine) = setup(&[(".git/config", "[core]\n"), ("real.txt", "r\n")]);
    let e = engine
        .apply(
            "*** Begin Patch\n*** Update File: .git/config\n-[core]\n+[evil]\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap_err();
    assert_eq!(kind(&e), "git_dir");
    // Protected by default; a host that wants .git writable says so.
    assert!(PatchEngine::new(Workspace::open(t.path()).unwrap()).protects_git_dir());
    let open = PatchEngine::new(Workspace::open(t.path()).unwrap()).with_protected_git_dir(false);
    open.apply(
        "*** Begin Patch\n*** Update File: .git/config\n-[core]\n+[core2]\n*** End Patch",
        &ApplyOptions::default(),
    )
    .unwrap();
    std::os::unix::fs::symlink("real.txt", t.path().join("link.txt")).unwrap();
    let e = engine
        .apply(
            "*** Begin Patch\n*** Update File: link.txt\n-r\n+R\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap_err();
    assert_eq!(kind(&e), "not_regular");
    // A symlinked parent directory that leads outside is refused for a new file.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), t.path().join("out")).unwrap();
    let e = engine
        .apply(
            "*** Begin Patch\n*** Add File: out/x.txt\n+x\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            PatchError::Path(ctm_workspace_fs::FsError::SymlinkEscape(_))
        ),
        "{e}"
    );
    assert!(!outside.path().join("x.txt").exists());
}

/// Sixteen threads each rewrite their own line of one file, many times: the
/// lock serialises them and no update is lost.
#[test]
fn concurrent_patches_lose_nothing() {
    let lines: String = (0..16).map(|i| format!("slot {i}: 0\n")).collect();
    let (t, engine) = setup(&[("shared.txt", &lines)]);
    let engine = Arc::new(engine);
    let rounds = 20;
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for k in 0..rounds {
                    let patch = format!("*** Begin Patch\n*** Update File: shared.txt\n@@\n-slot {i}: {k}\n+slot {i}: {}\n*** End Patch", k + 1);
                    engine.apply(&patch, &ApplyOptions::default()).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let want: String = (0..16).map(|i| format!("slot {i}: {rounds}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(t.path().join("shared.txt")).unwrap(),
        want
    );
}

/// A commit across more directories than the engine keeps open (it reopens
/// evicted ones by path), failed at its last rename: every file, temp file
/// and created directory is gone again; without the fault it applies.
#[test]
fn a_failed_commit_across_many_directories_leaves_nothing_behind() {
    let dirs = 150;
    let mut patch = String::from("*** Begin Patch\n*** Update File: keep.txt\n-k\n+K\n");
    for i in 0..dirs {
        patch.push_str(&format!("*** Add File: d{i:03}/sub/f.txt\n+{i}\n"));
    }
    patch.push_str("*** End Patch\n");
    let renames = dirs + 1;
    for fail_at in [1, renames / 2, renames] {
        let (t, engine) = setup(&[("keep.txt", "k\n")]);
        let before = tree(t.path());
        let opts = ApplyOptions::default().with_faults(Faults {
            before_replace: None,
            fail_rename_at: Some(fail_at),
            before_commit: None,
        });
        let e = engine.apply(&patch, &opts).unwrap_err();
        assert_eq!(kind(&e), "io", "{e}");
        assert_eq!(tree(t.path()), before, "rename {fail_at}");
        let entries: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, ["keep.txt"], "rename {fail_at}");
    }
    let (t, engine) = setup(&[("keep.txt", "k\n")]);
    let r = engine.apply(&patch, &ApplyOptions::default()).unwrap();
    assert_eq!(r.files.len(), dirs + 1);
    assert_eq!(content(t.path(), "d149/sub/f.txt"), "149\n");
    assert!(tree(t.path()).keys().all(|k| !k.contains(TEMP_PREFIX)));
}

/// A file over the cap is refused from its metadata, unread: a 4 GiB sparse
/// file costs nothing. Update, delete and move alike; adds are not capped.
#[test]
fn a_file_over_the_size_cap_is_refused_before_it_is_read() {
    let (t, engine) = setup(&[("small.txt", "0123456789\n")]);
    let big = std::fs::File::create(t.path().join("huge.txt")).unwrap();
    big.set_len(4 << 30).unwrap();
    for patch in [
        "*** Begin Patch\n*** Update File: huge.txt\n@@\n-x\n+y\n*** End Patch",
        "*** Begin Patch\n*** Delete File: huge.txt\n*** End Patch",
        "*** Begin Patch\n*** Update File: huge.txt\n*** Move to: moved.txt\n*** End Patch",
    ] {
        let e = engine.apply(patch, &ApplyOptions::default()).unwrap_err();
        assert!(
            matches!(
                e,
                PatchError::TooLarge {
                    ref path,
                    size: 0x1_0000_0000,
                    max_bytes: ctm_patch_engine::DEFAULT_MAX_FILE_BYTES,
                } if path == "huge.txt"
            ),
            "{e:?}"
        );
    }
    let small = PatchEngine::new(Workspace::open(t.path()).unwrap())
        .with_protected_git_dir(true)
        .with_max_file_bytes(10);
    let e = small
        .apply(
            "*** Begin Patch\n*** Update File: small.txt\n@@\n-0123456789\n+x\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap_err();
    assert_eq!(kind(&e), "too_large");
    // At the cap exactly it is read; an Add of any size is not capped.
    let at_cap = PatchEngine::new(Workspace::open(t.path()).unwrap())
        .with_protected_git_dir(true)
        .with_max_file_bytes(11);
    at_cap
        .apply(
            "*** Begin Patch\n*** Update File: small.txt\n@@\n-0123456789\n+x\n*** Add File: long.txt\n+0123456789abcdef\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap();
    assert_eq!(content(t.path(), "small.txt"), "x\n");
}

/// One patch reads at most `max_patch_bytes` of files in all, each file
/// counted every time a section names it: hard links to one file cost no
/// disk but were once read and staged 60 times (2.2 GB for a 33 MB file).
/// The sum is taken from metadata before anything is read.
// See: target/attack-issue17.md M4
#[test]
fn a_patch_over_its_total_is_refused_before_any_file_is_read() {
    let line = format!("{}\n", "x".repeat(89));
    let body = format!("{line}UNIQUE\n"); // 97 bytes
    let (t, _) = setup(&[("big0", &body)]);
    for i in 1..4 {
        std::fs::hard_link(t.path().join("big0"), t.path().join(format!("big{i}"))).unwrap();
    }
    let engine = PatchEngine::new(Workspace::open(t.path()).unwrap())
        .with_protected_git_dir(true)
        .with_max_file_bytes(100)
        .with_max_patch_bytes(250);
    assert_eq!(engine.max_patch_bytes(), 250);
    let patch = |n: usize| {
        let mut p = String::from("*** Begin Patch\n");
        for i in 0..n {
            p.push_str(&format!("*** Update File: big{i}\n@@\n-UNIQUE\n+CHANGED\n"));
        }
        p + "*** End Patch\n"
    };
    // Two files (194 bytes) fit; three (291) do not.
    let ok = engine
        .apply(&patch(2), &ApplyOptions::default().with_dry_run(true))
        .unwrap();
    assert_eq!(ok.files.len(), 2);
    let f = engine
        .apply_detailed(&patch(4), &ApplyOptions::default())
        .unwrap_err();
    assert!(
        matches!(
            f.error,
            PatchError::PatchTooLarge {
                ref path,
                needed_bytes: 388,
                max_bytes: 250,
            } if path == "big2"
        ),
        "{:?}",
        f.error
    );
    // Refused up front: no operation was planned.
    assert!(f.planned.is_empty());
    assert_eq!(f.unplanned.len(), 4);
    assert_eq!(
        std::fs::read_to_string(t.path().join("big0")).unwrap(),
        body
    );
    // At the cap exactly, the patch is read.
    let at_cap = PatchEngine::new(Workspace::open(t.path()).unwrap())
        .with_protected_git_dir(true)
        .with_max_patch_bytes(2 * 97);
    at_cap.apply(&patch(2), &ApplyOptions::default()).unwrap();
}

/// Content staged by an earlier operation counts again when a later one
/// names its path: metadata cannot see it, so planning checks as it goes.
#[test]
fn content_staged_earlier_in_the_patch_counts_each_time_it_is_named() {
    let (t, _) = setup(&[]);
    let engine = PatchEngine::new(Workspace::open(t.path()).unwrap())
        .with_protected_git_dir(true)
        .with_max_patch_bytes(250);
    let line = "y".repeat(99); // 100 bytes with its newline
    let mut p = format!("*** Begin Patch\n*** Add File: n.txt\n+{line}\n");
    for _ in 0..3 {
        p.push_str(&format!("*** Update File: n.txt\n@@\n {line}\n+more\n"));
    }
    p.push_str("*** End Patch\n");
    let f = engine
        .apply_detailed(&p, &ApplyOptions::default())
        .unwrap_err();
    assert_eq!(kind(&f.error), "patch_too_large", "{:?}", f.error);
    let PatchError::PatchTooLarge { needed_bytes, .. } = f.error else {
        unreachable!()
    };
    // 100 + 105 + 110 bytes read by the three updates.
    assert_eq!(needed_bytes, 315);
    assert_eq!((f.planned.len(), f.unplanned.len()), (3, 1));
    assert!(!t.path().join("n.txt").exists());
}

/// A cancelled call, or one past its deadline, stops between operations
/// and writes nothing.
#[test]
fn cancellation_and_the_deadline_stop_planning_and_write_nothing() {
    let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let before = tree(t.path());
    let patch =
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Delete File: b.txt\n*** End Patch\n";
    let cancelled = ApplyOptions::default().with_cancelled(|| true);
    let f = engine.apply_detailed(patch, &cancelled).unwrap_err();
    assert!(
        matches!(
            f.error,
            PatchError::Stopped {
                reason: ctm_patch_engine::StopReason::Cancelled
            }
        ),
        "{:?}",
        f.error
    );
    assert_eq!(f.unplanned.len(), 2);
    let late = ApplyOptions::default().with_deadline(std::time::Instant::now());
    let f = engine.apply_detailed(patch, &late).unwrap_err();
    assert!(
        matches!(
            f.error,
            PatchError::Stopped {
                reason: ctm_patch_engine::StopReason::DeadlineExceeded
            }
        ),
        "{:?}",
        f.error
    );
    assert_eq!(tree(t.path()), before);
    // A signal that never fires and a deadline far away change nothing.
    let patient = ApplyOptions::default()
        .with_cancelled(|| false)
        .with_deadline(std::time::Instant::now() + std::time::Duration::from_secs(600));
    engine.apply(patch, &patient).unwrap();
    assert_eq!(content(t.path(), "a.txt"), "A\n");
}

/// A big stale hunk costs file lines × hunk lines to match: cancellation
/// and the deadline are looked at while it is matched, not only between
/// files, and a patch waiting for the engine gives up at its deadline
/// (`busy`) instead of waiting out the other one.
// See: target/attack-session3.md M1
#[test]
fn matching_a_big_stale_hunk_stops_and_waiting_patches_give_up() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let big = "a\n".repeat(40_000);
    let (t, engine) = setup(&[("big.txt", big.as_str()), ("small.txt", "x\n")]);
    let engine = Arc::new(engine);
    let stale = format!(
        "*** Begin Patch\n*** Update File: big.txt\n@@\n{}-b\n+c\n*** End Patch\n",
        " a\n".repeat(4000)
    );
    // Stopped from inside the matching: the third look at the signal is
    // the second one the matcher takes.
    let looks = Arc::new(AtomicUsize::new(0));
    let counter = looks.clone();
    let opts =
        ApplyOptions::default().with_cancelled(move || counter.fetch_add(1, Ordering::SeqCst) >= 2);
    let f = engine.apply_detailed(&stale, &opts).unwrap_err();
    assert!(
        matches!(
            f.error,
            PatchError::Stopped {
                reason: ctm_patch_engine::StopReason::Cancelled
            }
        ),
        "{:?}",
        f.error
    );
    assert!(looks.load(Ordering::SeqCst) >= 3);
    // While that hunk is matched (and the engine held), a small patch with
    // a deadline gives up at it.
    let entered = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (e, r) = (entered.clone(), release.clone());
    let slow = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            let n = AtomicUsize::new(0);
            let opts = ApplyOptions::default().with_cancelled(move || {
                if n.fetch_add(1, Ordering::SeqCst) >= 1 {
                    e.store(true, Ordering::SeqCst);
                }
                r.load(Ordering::SeqCst)
            });
            engine.apply_detailed(&stale, &opts).unwrap_err().error
        })
    };
    while !entered.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let small = "*** Begin Patch\n*** Update File: small.txt\n-x\n+y\n*** End Patch\n";
    let soon = ApplyOptions::default()
        .with_deadline(std::time::Instant::now() + std::time::Duration::from_millis(200));
    let f = engine.apply_detailed(small, &soon).unwrap_err();
    assert!(
        matches!(
            f.error,
            PatchError::Stopped {
                reason: ctm_patch_engine::StopReason::Busy
            }
        ),
        "{:?}",
        f.error
    );
    release.store(true, Ordering::SeqCst);
    assert!(matches!(slow.join().unwrap(), PatchError::Stopped { .. }));
    // Free again: the small patch applies.
    engine.apply(small, &ApplyOptions::default()).unwrap();
    assert_eq!(content(t.path(), "small.txt"), "y\n");
}

/// Faults that run `hook` with a target's path just before it is replaced.
fn before_replace(hook: impl Fn(&std::path::Path) + Send + Sync + 'static) -> ApplyOptions {
    ApplyOptions::default().with_faults(Faults {
        fail_rename_at: None,
        before_commit: None,
        before_replace: Some(Box::new(hook)),
    })
}

/// A target replaced by another file (an editor saving by rename) after its
/// baseline was checked and before the patch replaced it: the exchange
/// moves the wrong file aside, notices, and puts everything back. The
/// outside file survives under its name, the earlier file of the patch is
/// rolled back, and nothing of the patch is left.
#[test]
fn a_target_swapped_just_before_its_replacement_is_a_conflict_and_survives() {
    let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = t.path().to_path_buf();
    let opts = before_replace(move |p| {
        if p == std::path::Path::new("b.txt") {
            std::fs::write(root.join("theirs.tmp"), "theirs\n").unwrap();
            std::fs::rename(root.join("theirs.tmp"), root.join("b.txt")).unwrap();
        }
    });
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: b.txt\n-b\n+B\n*** End Patch";
    let e = engine.apply(patch, &opts).unwrap_err();
    assert!(
        matches!(e, PatchError::Conflict { ref path, .. } if path == "b.txt"),
        "{e}"
    );
    assert_eq!(content(t.path(), "a.txt"), "a\n");
    assert_eq!(content(t.path(), "b.txt"), "theirs\n");
    let names: Vec<String> = tree(t.path()).into_keys().collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
}

/// A directory put in a target's place in that same window: the exchange
/// would move it aside; it is exchanged back, whole, and the patch fails.
/// A deleted target swapped for a directory likewise.
#[test]
fn a_directory_swapped_in_for_a_target_is_put_back() {
    for patch in [
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: b.txt\n-b\n+B\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Delete File: b.txt\n*** End Patch",
    ] {
        let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
        let root = t.path().to_path_buf();
        let opts = before_replace(move |p| {
            if p == std::path::Path::new("b.txt") {
                std::fs::remove_file(root.join("b.txt")).unwrap();
                std::fs::create_dir(root.join("b.txt")).unwrap();
                std::fs::write(root.join("b.txt/inside"), "kept\n").unwrap();
            }
        });
        let e = engine.apply(patch, &opts).unwrap_err();
        assert_eq!(kind(&e), "conflict", "{e}");
        assert_eq!(content(t.path(), "a.txt"), "a\n");
        assert_eq!(content(t.path(), "b.txt/inside"), "kept\n");
        let names: Vec<String> = tree(t.path()).into_keys().collect();
        assert_eq!(names, ["a.txt", "b.txt/inside"], "{patch}");
    }
}

/// Replaced files are closed after the commit (off the caller's path), but
/// their names are gone when `apply` returns, every time, and the new
/// content is in place.
#[test]
fn replaced_files_leave_no_name_behind() {
    let files: Vec<(String, String)> = (0..40)
        .map(|i| (format!("f{i:02}.txt"), format!("{i}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let (t, engine) = setup(&refs);
    for round in 0..5 {
        let mut patch = String::from("*** Begin Patch\n");
        for i in 0..40 {
            let (from, to) = if round % 2 == 0 {
                (format!("{i}"), format!("{i} changed"))
            } else {
                (format!("{i} changed"), format!("{i}"))
            };
            patch.push_str(&format!("*** Update File: f{i:02}.txt\n-{from}\n+{to}\n"));
        }
        patch.push_str("*** Delete File: gone.txt\n*** End Patch\n");
        std::fs::write(t.path().join("gone.txt"), "x\n").unwrap();
        engine.apply(&patch, &ApplyOptions::default()).unwrap();
        let all = tree(t.path());
        assert_eq!(all.len(), 40, "round {round}: {:?}", all.keys());
        let want = if round % 2 == 0 { "0 changed\n" } else { "0\n" };
        assert_eq!(all["f00.txt"].0, want.as_bytes());
    }
}

/// What a patch learned about a directory's git status does not outlive
/// it: a directory that becomes a repository after one patch is refused to
/// the next, and one that becomes a repository between planning and
/// committing is refused by the commit, which judges the directory it
/// opened itself.
#[test]
fn git_dir_verdicts_do_not_outlive_the_patch() {
    let (t, engine) = setup(&[("sub/a.txt", "a\n"), ("sub/b.txt", "b\n")]);
    engine
        .apply(
            "*** Begin Patch\n*** Update File: sub/a.txt\n-a\n+A\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap();
    std::fs::create_dir(t.path().join("sub/objects")).unwrap();
    std::fs::create_dir(t.path().join("sub/refs")).unwrap();
    let e = engine
        .apply(
            "*** Begin Patch\n*** Update File: sub/b.txt\n-b\n+B\n*** End Patch",
            &ApplyOptions::default(),
        )
        .unwrap_err();
    assert_eq!(kind(&e), "git_dir", "{e}");
    std::fs::remove_dir(t.path().join("sub/objects")).unwrap();
    std::fs::remove_dir(t.path().join("sub/refs")).unwrap();
    // Planned while `sub` is an ordinary directory, committed after it
    // became a repository: refused, nothing written.
    let root = t.path().to_path_buf();
    let opts = ApplyOptions::default().with_faults(Faults {
        fail_rename_at: None,
        before_commit: Some(Box::new(move || {
            std::fs::create_dir(root.join("sub/objects")).unwrap();
            std::fs::create_dir(root.join("sub/refs")).unwrap();
        })),
        before_replace: None,
    });
    std::fs::write(t.path().join("top.txt"), "t\n").unwrap();
    let before = tree(t.path());
    let e = engine
        .apply(
            "*** Begin Patch\n*** Update File: top.txt\n-t\n+T\n*** Update File: sub/b.txt\n-b\n+B\n*** End Patch",
            &opts,
        )
        .unwrap_err();
    assert_eq!(kind(&e), "git_dir", "{e}");
    assert_eq!(tree(t.path()), before);
}

/// A repository beside the patched files, for the `.git` tests below.
const REPO: [(&str, &str); 4] = [
    (".git/HEAD", "ref: refs/heads/main\n"),
    (".git/config", "[core]\n\tbare = false\n"),
    (".git/objects/.keep", ""),
    (".git/refs/.keep", ""),
];

/// A directory renamed into `.git` after the commit opened and judged it
/// (its temp file is written) and before its file is installed: the verdict
/// is given again on that handle right before the change, so nothing lands
/// in `.git/hooks`.
#[test]
fn a_directory_moved_into_git_before_its_file_is_installed_is_refused() {
    let mut files = REPO.to_vec();
    files.extend([
        ("a/one.txt", "one\n"),
        ("x/pre-commit", "#!/bin/sh\ntrue\n"),
    ]);
    let (t, engine) = setup(&files);
    let root = t.path().to_path_buf();
    let opts = before_replace(move |p| {
        if p == std::path::Path::new("a/one.txt") {
            std::fs::rename(root.join("x"), root.join(".git/hooks")).unwrap();
        }
    });
    let patch = "*** Begin Patch\n*** Update File: a/one.txt\n-one\n+ONE\n*** Update File: x/pre-commit\n-true\n+echo planted\n*** End Patch";
    let e = engine.apply(patch, &opts).unwrap_err();
    assert!(matches!(e, PatchError::GitDirProtected(_)), "{e}");
    assert_eq!(
        content(t.path(), ".git/hooks/pre-commit"),
        "#!/bin/sh\ntrue\n"
    );
    assert_eq!(content(t.path(), "a/one.txt"), "one\n");
}

/// A patch over more directories than the commit keeps open, whose first
/// directory is replaced by a link into `.git` once its file is installed,
/// and which then fails: the rollback reopens that directory by its path,
/// finds another directory there, and touches nothing in it (it would have
/// removed or exchanged `.git/config`), reporting what it left.
#[test]
fn a_rollback_touches_no_directory_but_the_one_it_wrote_in() {
    for first in [
        "*** Add File: a/config\n+mine\n",
        "*** Update File: a/config\n-old\n+new\n",
    ] {
        let mut files = REPO.to_vec();
        files.extend([("zz/last.txt", "last\n"), ("a/config", "old\n")]);
        if first.starts_with("*** Add") {
            files.pop();
            files.push(("a/.keep", ""));
        }
        let (t, engine) = setup(&files);
        let mut patch = format!("*** Begin Patch\n{first}");
        for i in 0..70 {
            patch.push_str(&format!("*** Add File: d{i:02}/f.txt\n+x\n"));
        }
        patch.push_str("*** Update File: zz/last.txt\n-last\n+LAST\n*** End Patch");
        let root = t.path().to_path_buf();
        let opts = before_replace(move |p| {
            if p == std::path::Path::new("zz/last.txt") {
                // Someone's file under the backup's name in `.git`, ready
                // to be exchanged with `.git/config`.
                if let Some(backup) = std::fs::read_dir(root.join("a"))
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .find(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
                {
                    std::fs::write(root.join(".git").join(backup), "[core]\n\tplanted\n").unwrap();
                }
                std::fs::rename(root.join("a"), root.join("a-moved")).unwrap();
                std::os::unix::fs::symlink(".git", root.join("a")).unwrap();
                // And zz/last.txt saved by an editor: the commit fails.
                std::fs::write(root.join("zz/tmp"), "theirs\n").unwrap();
                std::fs::rename(root.join("zz/tmp"), root.join("zz/last.txt")).unwrap();
            }
        });
        let e = engine.apply(&patch, &opts).unwrap_err();
        match &e {
            PatchError::RollbackFailed { errors, .. } => {
                assert!(
                    errors
                        .iter()
                        .any(|m| m.starts_with("a/config: its directory was moved")),
                    "{e}"
                );
            }
            other => panic!("expected RollbackFailed, got {other}"),
        }
        assert_eq!(
            content(t.path(), ".git/config"),
            "[core]\n\tbare = false\n",
            "{first}"
        );
        assert_eq!(content(t.path(), "zz/last.txt"), "theirs\n");
    }
}

/// A file the patch installed and someone else then replaced (here by a
/// directory with their work in it), rolled back because a later file
/// conflicts: the old file comes back, and what replaced the patch's file
/// is kept under the backup's name and reported, not removed.
#[test]
fn a_rollback_keeps_what_replaced_the_patched_file_and_says_where() {
    let (t, engine) = setup(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let root = t.path().to_path_buf();
    let opts = before_replace(move |p| {
        if p == std::path::Path::new("b.txt") {
            std::fs::remove_file(root.join("a.txt")).unwrap();
            std::fs::create_dir(root.join("a.txt")).unwrap();
            std::fs::write(root.join("a.txt/theirs"), "their work\n").unwrap();
            std::fs::write(root.join("b.tmp"), "b edited\n").unwrap();
            std::fs::rename(root.join("b.tmp"), root.join("b.txt")).unwrap();
        }
    });
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Update File: b.txt\n-b\n+B\n*** End Patch";
    let e = engine.apply(patch, &opts).unwrap_err();
    let PatchError::RollbackFailed { backups, .. } = &e else {
        panic!("expected RollbackFailed, got {e}");
    };
    assert_eq!(backups.len(), 1, "{e}");
    assert_eq!(backups[0].0, "a.txt");
    assert_eq!(content(t.path(), "a.txt"), "a\n");
    assert_eq!(
        content(t.path(), &format!("{}/theirs", backups[0].1)),
        "their work\n"
    );
    assert_eq!(content(t.path(), "b.txt"), "b edited\n");
}
