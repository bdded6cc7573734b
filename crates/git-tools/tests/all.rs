//! The git tools against the git CLI on real repositories made with git.

#![expect(clippy::unwrap_used, clippy::disallowed_methods, reason = "test code")]

use std::path::Path;
use std::process::Command;

use ctm_git_tools::{BlameOptions, DiffOptions, GitRepo, LogOptions, StatusOptions};
use ctm_workspace_fs::Workspace;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn write(dir: &Path, rel: &str, body: impl AsRef<[u8]>) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// A history with a rename, a binary file, CRLF, unicode paths and a merge,
/// then a dirty tree: staged, unstaged and untracked changes.
fn fixture() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    git(d, &["init", "-q", "-b", "main"]);
    let lines: String = (1..=40).map(|i| format!("fn line_{i}() {{}}\n")).collect();
    write(d, "src/lib.rs", &lines);
    write(d, "README.md", "# Title\nintro\n");
    write(d, "crlf.txt", "one\r\ntwo\r\nthree\r\n");
    write(d, "bin.dat", b"\x00\x01\x02binary");
    write(d, "docs/caf\u{e9}.md", "unicode path\n");
    git(d, &["add", "-A"]);
    git(
        d,
        &["commit", "-q", "-m", "first commit", "-m", "with a body"],
    );
    write(
        d,
        "src/lib.rs",
        lines.replace("fn line_20() {}", "fn line_20() { changed(); }"),
    );
    git(d, &["mv", "README.md", "GUIDE.md"]);
    git(d, &["commit", "-qam", "rename and edit"]);
    git(d, &["checkout", "-q", "-b", "side"]);
    write(d, "side.txt", "side\n");
    git(d, &["add", "side.txt"]);
    git(d, &["commit", "-qm", "side work"]);
    git(d, &["checkout", "-q", "main"]);
    write(d, "crlf.txt", "one\r\nTWO\r\nthree\r\n");
    write(d, "bin.dat", b"\x00\x01\x02binary changed");
    git(d, &["commit", "-qam", "main work"]);
    git(d, &["merge", "-q", "--no-edit", "side"]);
    // Dirty tree.
    write(
        d,
        "src/lib.rs",
        lines
            .replace("fn line_5() {}", "fn line_5() { staged(); }")
            .replace("fn line_20() {}", "fn line_20() { changed(); }"),
    );
    git(d, &["add", "src/lib.rs"]);
    write(
        d,
        "src/lib.rs",
        lines
            .replace("fn line_5() {}", "fn line_5() { staged(); }")
            .replace("fn line_20() {}", "fn line_20() { changed(); }")
            .replace("fn line_35() {}", "fn line_35() { unstaged(); }"),
    );
    write(d, "new_staged.txt", "new\nfile\n");
    git(d, &["add", "new_staged.txt"]);
    std::fs::remove_file(d.join("side.txt")).unwrap();
    write(d, "untracked/u.txt", "u\n");
    write(d, "GUIDE.md", "# Title\nintro\nno newline at end");
    t
}

fn open(d: &Path) -> GitRepo {
    GitRepo::open(&Workspace::open(d).unwrap()).unwrap()
}

#[test]
fn status_matches_porcelain_v2() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    let s = repo
        .status(
            &StatusOptions::default()
                .include_untracked(true)
                .max_entries(1000),
        )
        .unwrap();
    // git's own order (changes by path, then untracked), and an untracked
    // directory collapsed to `dir/` as git shows it by default.
    let ours: Vec<String> = s
        .entries
        .iter()
        .map(|e| format!("{} {}", e.xy(), e.path))
        .collect();
    let theirs: Vec<String> = git(d, &["status", "--porcelain=v2"])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "1" => Some(format!("{} {}", f[1], f[8..].join(" "))),
                "2" => Some(format!(
                    "{} {}",
                    f[1],
                    f[9..].join(" ").split('\t').next().unwrap().to_owned()
                )),
                "?" => Some(format!("?? {}", f[1..].join(" "))),
                _ => None,
            }
        })
        .collect();
    assert!(theirs.contains(&"?? untracked/".to_owned()), "{theirs:?}");
    assert_eq!(ours, theirs);
    assert_eq!(s.branch.as_deref(), Some("main"));
    let capped = repo
        .status(
            &StatusOptions::default()
                .include_untracked(true)
                .max_entries(2),
        )
        .unwrap();
    assert!(capped.truncated && capped.entries.len() == 2);
    let tracked_only = repo
        .status(
            &StatusOptions::default()
                .include_untracked(false)
                .max_entries(1000),
        )
        .unwrap();
    assert!(tracked_only.entries.iter().all(|e| e.unstaged != '?'));
}

#[test]
fn diffs_are_byte_identical_to_git() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    for ctx in [0u32, 1, 3, 10] {
        let opts = DiffOptions::default().context_lines(ctx).max_bytes(1 << 20);
        let ours = repo.diff_unstaged(&[], opts).unwrap();
        assert_eq!(
            ours.text,
            git(d, &["diff", &format!("-U{ctx}")]),
            "git diff -U{ctx}"
        );
        let ours = repo.diff_staged(&[], opts).unwrap();
        assert_eq!(
            ours.text,
            git(d, &["diff", "--cached", &format!("-U{ctx}")]),
            "git diff --cached -U{ctx}"
        );
    }
    let opts = DiffOptions::default().context_lines(3).max_bytes(1 << 20);
    let only = repo.diff_unstaged(&["GUIDE.md".into()], opts).unwrap();
    assert_eq!(only.text, git(d, &["diff", "--", "GUIDE.md"]));
    let small = repo
        .diff_unstaged(&[], DiffOptions::default().context_lines(3).max_bytes(200))
        .unwrap();
    assert!(small.truncated && small.text.len() <= 200);
}

#[test]
fn show_matches_git_show_for_every_non_merge_commit() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    for line in git(d, &["log", "--format=%H %P"]).lines() {
        let mut parts = line.split(' ');
        let id = parts.next().unwrap();
        if parts.count() > 1 {
            continue; // merges: first-parent diff only, see docs/limitations.md
        }
        let (info, diff) = repo
            .diff_commit(
                id,
                &[],
                DiffOptions::default().context_lines(3).max_bytes(1 << 20),
            )
            .unwrap();
        assert_eq!(info.id, id);
        let theirs = git(d, &["show", "--format=", id]);
        assert_eq!(diff.text, theirs.trim_start_matches('\n'), "git show {id}");
    }
    assert_eq!(
        repo.file_at("HEAD~1", "crlf.txt").unwrap(),
        b"one\r\nTWO\r\nthree\r\n"
    );
}

#[test]
fn log_matches_git_log_with_paths_skip_and_count() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    let ids = |o: ctm_git_tools::LogOutcome| {
        o.commits
            .into_iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let all = repo
        .log("HEAD", &LogOptions::default().max_count(100))
        .unwrap();
    assert_eq!(ids(all.clone()), git(d, &["log", "--format=%H"]).trim());
    assert_eq!(all.commits.last().unwrap().subject, "first commit");
    assert_eq!(all.commits.last().unwrap().body, "with a body");
    assert_eq!(
        ids(repo
            .log(
                "HEAD",
                &LogOptions::default().path("src/lib.rs").max_count(100)
            )
            .unwrap()),
        git(d, &["log", "--format=%H", "--", "src/lib.rs"]).trim()
    );
    assert_eq!(
        ids(repo
            .log("HEAD", &LogOptions::default().skip(1).max_count(2))
            .unwrap()),
        git(d, &["log", "--format=%H", "--skip=1", "-n", "2"]).trim()
    );
    assert!(
        repo.log("HEAD", &LogOptions::default().max_count(2))
            .unwrap()
            .has_more
    );
    assert_eq!(
        ids(repo
            .log("side", &LogOptions::default().max_count(100))
            .unwrap()),
        git(d, &["log", "--format=%H", "side"]).trim()
    );
}

#[test]
fn blame_matches_git_blame() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    let b = repo
        .blame(
            "HEAD",
            "src/lib.rs",
            &BlameOptions::default().lines(15, Some(25)).max_lines(200),
        )
        .unwrap();
    let theirs: Vec<String> = git(
        d,
        &[
            "blame",
            "--porcelain",
            "-L",
            "15,25",
            "HEAD",
            "--",
            "src/lib.rs",
        ],
    )
    .lines()
    .filter(|l| l.len() > 40 && l.as_bytes()[..40].iter().all(u8::is_ascii_hexdigit))
    .map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        format!("{} {} {}", f[0], f[1], f[2])
    })
    .collect();
    let ours: Vec<String> = b
        .lines
        .iter()
        .map(|l| format!("{} {} {}", l.commit, l.original_line, l.line))
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(b.lines[5].content, "fn line_20() { changed(); }");
    assert_eq!(b.total_lines, 40);
    // The range asked for came back whole: nothing more of it to page.
    assert!(!b.has_more);
    // A max_lines shorter than the range pages within it, and without
    // end_line the range runs to the end of the file.
    assert!(
        repo.blame(
            "HEAD",
            "src/lib.rs",
            &BlameOptions::default().lines(15, Some(25)).max_lines(5)
        )
        .unwrap()
        .has_more
    );
    assert!(
        repo.blame(
            "HEAD",
            "src/lib.rs",
            &BlameOptions::default().lines(15, None).max_lines(5)
        )
        .unwrap()
        .has_more
    );
    assert!(
        !repo
            .blame(
                "HEAD",
                "src/lib.rs",
                &BlameOptions::default().lines(36, None).max_lines(5)
            )
            .unwrap()
            .has_more
    );
}

#[test]
fn errors_are_precise() {
    let t = fixture();
    let d = t.path();
    let repo = open(d);
    for bad in ["--output=/tmp/pwned", "no-such-branch", "HEAD~99"] {
        let e = repo
            .log(bad, &LogOptions::default().max_count(5))
            .unwrap_err();
        assert!(
            matches!(e, ctm_git_tools::GitError::UnknownRevision { .. }),
            "{bad}: {e}"
        );
    }
    assert!(!Path::new("/tmp/pwned").exists());
    assert!(matches!(
        repo.file_at("HEAD", "nope.txt"),
        Err(ctm_git_tools::GitError::PathNotInRevision { .. })
    ));
    assert!(matches!(
        repo.blame(
            "HEAD",
            "bin.dat",
            &BlameOptions::default().lines(1, None).max_lines(10)
        ),
        Err(ctm_git_tools::GitError::Binary(_))
    ));
    let not_repo = tempfile::tempdir().unwrap();
    assert!(matches!(
        GitRepo::open(&Workspace::open(not_repo.path()).unwrap()),
        Err(ctm_git_tools::GitError::NotARepository)
    ));
}

/// A repository whose config would run programs: nothing runs.
#[test]
fn repository_config_never_runs_programs() {
    let t = fixture();
    let d = t.path();
    let marker = d.join("MARKER");
    let cmd = format!("touch {}", marker.display());
    git(d, &["config", "core.fsmonitor", &cmd]);
    git(d, &["config", "diff.external", &cmd]);
    git(d, &["config", "core.pager", &cmd]);
    git(d, &["config", "diff.txt.textconv", &cmd]);
    write(d, ".gitattributes", "*.txt diff=txt\n");
    std::fs::create_dir_all(d.join(".git/hooks")).unwrap();
    for hook in [
        "post-checkout",
        "pre-commit",
        "post-index-change",
        "reference-transaction",
    ] {
        write(
            d,
            &format!(".git/hooks/{hook}"),
            format!("#!/bin/sh\n{cmd}\n"),
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            d.join(format!(".git/hooks/{hook}")),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    let repo = open(d);
    repo.status(
        &StatusOptions::default()
            .include_untracked(true)
            .max_entries(100),
    )
    .unwrap();
    repo.diff_unstaged(
        &[],
        DiffOptions::default().context_lines(3).max_bytes(1 << 20),
    )
    .unwrap();
    repo.diff_staged(
        &[],
        DiffOptions::default().context_lines(3).max_bytes(1 << 20),
    )
    .unwrap();
    repo.log("HEAD", &LogOptions::default().max_count(10))
        .unwrap();
    repo.diff_commit(
        "HEAD~1",
        &[],
        DiffOptions::default().context_lines(3).max_bytes(1 << 20),
    )
    .unwrap();
    repo.blame(
        "HEAD",
        "crlf.txt",
        &BlameOptions::default().lines(1, None).max_lines(10),
    )
    .unwrap();
    assert!(!marker.exists(), "a configured program ran");
}

#[test]
fn git_file_pointing_outside_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    git(outside.path(), &["init", "-q"]);
    let ws = tempfile::tempdir().unwrap();
    write(
        ws.path(),
        ".git",
        format!("gitdir: {}\n", outside.path().join(".git").display()),
    );
    let e = GitRepo::open(&Workspace::open(ws.path()).unwrap()).unwrap_err();
    assert!(matches!(e, ctm_git_tools::GitError::LinkOutside(_)), "{e}");
}

#[test]
fn working_diff_shares_one_budget_and_files_show_as_text() {
    use ctm_git_tools::{GitError, RepoCache, WorkingChanges};
    let t = fixture();
    let d = t.path();
    let cache = RepoCache::new(Workspace::open(d).unwrap());
    let whole = DiffOptions::default().max_bytes(1 << 20);
    let both = cache
        .with_repo(|r| r.diff_working(WorkingChanges::Both, &[], whole))
        .unwrap();
    let (u, s) = (both.unstaged.unwrap(), both.staged.unwrap());
    assert_eq!(u.text, git(d, &["diff"]));
    assert_eq!(s.text, git(d, &["diff", "--cached"]));
    assert!(s.text.len() > 10);
    // The staged diff gets what the unstaged one leaves of the budget.
    let tight = DiffOptions::default().max_bytes(u.text.len() + 10);
    let cut = cache
        .with_repo(|r| r.diff_working(WorkingChanges::Both, &[], tight))
        .unwrap();
    assert_eq!(cut.unstaged.unwrap().text, u.text);
    let staged = cut.staged.unwrap();
    assert!(staged.truncated && staged.text.len() <= 10);
    let only = cache
        .with_repo(|r| r.diff_working(WorkingChanges::Staged, &[], whole))
        .unwrap();
    assert!(only.unstaged.is_none() && only.staged.unwrap().text == s.text);
    // A file at a revision, cut at the budget; a binary one refused.
    let f = cache
        .with_repo(|r| r.show_file("HEAD~1", "crlf.txt", 5))
        .unwrap();
    assert_eq!(
        (f.content.as_str(), f.total_bytes, f.truncated),
        ("one\r\n", 17, true)
    );
    assert!(matches!(
        cache.with_repo(|r| r.show_file("HEAD", "bin.dat", 100)),
        Err(GitError::Binary(p)) if p == "bin.dat"
    ));
}
