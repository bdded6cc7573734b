//! Releases of the crates, one by one: `cargo xtask package` (each
//! publishable crate packaged and built from its `.crate` file, a dry-run
//! publish, and a host outside the workspace built against the packages),
//! `cargo xtask release-check` (cargo-semver-checks against the last
//! release) and `cargo xtask features` (each documented feature combination
//! builds, lints clean and passes its tests).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, phase, plain_output, root, run_cmd, target_dir};

/// cargo-semver-checks, pinned: 0.51 reads the rustdoc JSON of Rust 1.95
/// (its own minimum Rust is 1.93). Built from crates.io once, ~6 minutes on
/// two cores.
const SEMVER_CHECKS: &str = "0.51.0";

/// Where the last release is written down: its tag, and the commit the tag
/// names, for a clone that has no tags.
const BASELINE_FILE: &str = "release/baseline";

/// The crates the outside host uses (ctm-sandbox through ctm-exec-runtime),
/// and the examples of theirs it runs.
const HOST_CRATES: [&str; 4] = [
    "ctm-workspace-fs",
    "ctm-sandbox",
    "ctm-patch-engine",
    "ctm-exec-runtime",
];

/// The feature combinations the crates document, besides their defaults
/// (which every other phase builds): crate, then `--features` (empty: none).
const FEATURE_MATRIX: [(&str, &str); 5] = [
    ("ctm-sandbox", ""),
    ("ctm-exec-runtime", ""),
    ("ctm-exec-runtime", "pty"),
    ("ctm-exec-runtime", "landlock"),
    ("ctm-workspace-fs", ""),
];

/// One of our packages, as `cargo metadata` tells it.
struct Package {
    name: String,
    version: String,
    /// Its manifest, relative to the workspace root.
    manifest: PathBuf,
}

/// The workspace's publishable packages (those without `publish = false`).
fn publishable() -> Result<Vec<Package>> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root())
        .output()?;
    if !out.status.success() {
        bail!("cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    }
    let meta: Value = serde_json::from_slice(&out.stdout)?;
    let mut list = Vec::new();
    for p in meta["packages"].as_array().into_iter().flatten() {
        // `publish: []` is `publish = false`; null is any registry.
        if p["publish"].as_array().is_some_and(|r| r.is_empty()) {
            continue;
        }
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
        list.push(Package {
            name: p["name"].as_str().unwrap_or_default().to_owned(),
            version: p["version"].as_str().unwrap_or_default().to_owned(),
            manifest: manifest
                .strip_prefix(root())
                .map(Path::to_path_buf)
                .unwrap_or(manifest),
        });
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(list)
}

fn package_args(packages: &[Package]) -> Vec<String> {
    packages
        .iter()
        .flat_map(|p| ["-p".to_owned(), p.name.clone()])
        .collect()
}

/// Runs `what`, then says how long it took.
fn timed<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let value = f()?;
    eprintln!("xtask: {what}: {:.0} s", t.elapsed().as_secs_f64());
    Ok(value)
}

/// Removes what earlier `cargo package` runs unpacked of these packages
/// from their temporary registry (any registry source directory but
/// crates.io's).
fn forget_unpacked(packages: &[Package]) -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if registry
            .file_name()
            .to_string_lossy()
            .starts_with("index.crates.io")
        {
            continue;
        }
        for p in packages {
            let unpacked = registry.path().join(format!("{}-{}", p.name, p.version));
            if unpacked.is_dir() {
                std::fs::remove_dir_all(&unpacked)?;
            }
        }
    }
    Ok(())
}

/// `cargo xtask package`.
pub fn package(_args: &[String]) -> Result<()> {
    let packages = publishable()?;
    let names = package_args(&packages);
    timed("cargo package", || {
        phase(
            "cargo package: every publishable crate packaged, then built from its .crate file (dependencies on each other from the packages)",
        );
        // The packages' builds of each other are registry builds, which
        // cargo never rebuilds for a changed source: a crate changed
        // without a new version (an unreleased one) would be checked
        // against its old build. Their artifacts go first.
        run_cmd(cargo().args(["clean", "--profile", "dev"]).args(&names))?;
        // Nor does it extract a package of the same version again: the
        // sources an earlier run unpacked from the temporary registry stay
        // under $CARGO_HOME/registry/src and would be built instead of the
        // new .crate files. They go too.
        forget_unpacked(&packages)?;
        // --allow-dirty: a developer packages the work in progress too; CI's
        // clone is clean anyway.
        run_cmd(
            cargo()
                .args(["package", "--locked", "--allow-dirty"])
                .args(&names),
        )
    })?;
    timed("cargo publish --dry-run", || {
        phase("cargo publish --dry-run (the packages above, checked as an upload would be)");
        run_cmd(
            cargo()
                .args([
                    "publish",
                    "--dry-run",
                    "--locked",
                    "--allow-dirty",
                    "--no-verify",
                ])
                .args(&names),
        )
    })?;
    eprintln!("packaged (target/package):");
    for p in &packages {
        let file = format!("{}-{}.crate", p.name, p.version);
        let bytes = std::fs::metadata(target_dir().join("package").join(&file))
            .with_context(|| format!("{file} is missing"))?
            .len();
        eprintln!("  {file:<34} {bytes:>7} bytes");
    }
    timed("cargo install", || install_server(&packages))?;
    timed("outside host", || outside_host(&packages))
}

/// `cargo install --locked --path crates/server` as README.md tells it
/// (`--debug`, into a scratch root, sharing the build of the tests: the
/// release build is the same recipe, minutes longer), then `--version` must
/// name the crate's own version.
fn install_server(packages: &[Package]) -> Result<()> {
    phase("cargo install --locked --path crates/server, and its --version");
    let server = packages
        .iter()
        .find(|p| p.name == "coding-tools-mcp")
        .context("coding-tools-mcp is not publishable")?;
    let scratch = tempfile::tempdir()?;
    run_cmd(
        cargo()
            .args(["install", "--locked", "--debug", "--quiet", "--path"])
            .arg(root().join("crates/server"))
            .arg("--root")
            .arg(scratch.path())
            .env("CARGO_TARGET_DIR", target_dir()),
    )?;
    let said =
        stdout_of(Command::new(scratch.path().join("bin/coding-tools-mcp")).arg("--version"))?;
    let wanted = format!("coding-tools-mcp {}", server.version);
    if said.trim() != wanted {
        bail!("--version said {said:?}, expected {wanted:?}");
    }
    Ok(())
}

/// Unpacks the `.crate` files the host needs, builds the host of
/// `tests/outside-host` against them (a copy, with the workspace's lock file
/// so the versions are the ones already downloaded, offline), runs it, and
/// runs the packaged crates' own examples the same way.
fn outside_host(packages: &[Package]) -> Result<()> {
    phase(
        "an outside host (tests/outside-host) built against the packaged ctm-patch-engine and ctm-exec-runtime, and their examples",
    );
    // Sources outside this repository (cargo would take them for members of
    // our workspace otherwise); the build cache stays in target/.
    let outside = tempfile::tempdir()?;
    let unpacked = outside.path().join("crates");
    let host = outside.path().join("host");
    std::fs::create_dir_all(&unpacked)?;
    let build_dir = target_dir().join("outside-host");
    let mut patches = Vec::new();
    let mut dirs = std::collections::BTreeMap::new();
    for name in HOST_CRATES {
        let p = packages
            .iter()
            .find(|p| p.name == name)
            .with_context(|| format!("{name} is not publishable"))?;
        let file = target_dir()
            .join("package")
            .join(format!("{}-{}.crate", p.name, p.version));
        run_cmd(
            Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&unpacked),
        )?;
        let dir = unpacked.join(format!("{}-{}", p.name, p.version));
        patches.push("--config".to_owned());
        patches.push(format!("patch.crates-io.{name}.path={}", toml_string(&dir)));
        dirs.insert(name, dir);
    }
    let source = root().join("tests/outside-host");
    std::fs::create_dir_all(host.join("src"))?;
    for file in ["Cargo.toml", "src/main.rs"] {
        std::fs::copy(source.join(file), host.join(file))?;
    }
    let host_run = |manifest_dir: &Path, extra: &[&str], args: &[&str]| -> Result<String> {
        std::fs::copy(root().join("Cargo.lock"), manifest_dir.join("Cargo.lock"))?;
        let mut c = cargo();
        c.args(["run", "--quiet", "--offline", "--manifest-path"])
            .arg(manifest_dir.join("Cargo.toml"))
            .args(&patches)
            .args(extra)
            .arg("--")
            .args(args)
            .env("CARGO_TARGET_DIR", &build_dir)
            // No debug info: 0.4 GB of builds instead of 2 GB, and sooner built.
            .env("CARGO_PROFILE_DEV_DEBUG", "false");
        stdout_of(&mut c)
    };
    let said = host_run(&host, &[], &[])?;
    expect(&said, "patch-engine: update app.py +1 -1")?;
    expect(&said, "exec-runtime: exited exit=Some(0)")?;
    expect(&said, "exec-runtime without pty:")?;
    expect(&said, "outside host: all checks passed")?;

    // The examples as packaged, from their unpacked crates.
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("app.py"), "def main():\n    return 1\n")?;
    let patch = ws.path().join("change.patch");
    std::fs::write(
        &patch,
        "*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    return 1\n+    return 2\n*** End Patch\n",
    )?;
    let ws_arg = ws.path().to_string_lossy().into_owned();
    let patch_arg = patch.to_string_lossy().into_owned();
    let said = host_run(
        &dirs["ctm-patch-engine"],
        &["--example", "apply"],
        &[&ws_arg, &patch_arg],
    )?;
    expect(&said, "update app.py: +1 -1")?;
    expect(&said, "applied")?;
    let said = host_run(
        &dirs["ctm-exec-runtime"],
        &["--example", "run"],
        &[&ws_arg, "echo hi; grep -c 'return 2' app.py"],
    )?;
    if said != "hi\n1\n" {
        bail!("the packaged exec-runtime example printed {said:?}");
    }
    eprintln!("the packaged examples: apply and run behaved");
    Ok(())
}

/// A path as a TOML string for `--config`.
fn toml_string(p: &Path) -> String {
    let s = p.to_string_lossy();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Runs a command, echoing it and passing its stderr through; fails when it
/// fails; returns its stdout (and prints it).
fn stdout_of(cmd: &mut Command) -> Result<String> {
    eprintln!("$ {cmd:?}");
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{text}");
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    Ok(text)
}

fn expect(text: &str, wanted: &str) -> Result<()> {
    if !text.contains(wanted) {
        bail!("expected {wanted:?} in:\n{text}");
    }
    Ok(())
}

/// `cargo xtask release-check`: every publishable crate against the last
/// release with cargo-semver-checks, then a deliberate break that it must
/// catch.
pub fn release_check(_args: &[String]) -> Result<()> {
    let tool = timed("cargo-semver-checks install (once)", || {
        crate::ci::cargo_tool("cargo-semver-checks", SEMVER_CHECKS)
    })?;
    let packages = publishable()?;
    let rev = baseline_rev()?;
    timed("semver check", || {
        phase(&format!(
            "cargo semver-checks: each publishable crate against the last release ({rev})"
        ));
        // A crate the last release did not have has no promise to keep yet.
        let (released, new): (Vec<Package>, Vec<Package>) = packages
            .into_iter()
            .partition(|p| in_revision(&rev, &p.manifest));
        for p in &new {
            eprintln!(
                "xtask: {} is new since the last release ({rev}): semver-checked from the next release on",
                p.name
            );
        }
        let (tests_only, promised): (Vec<Package>, Vec<Package>) = released
            .into_iter()
            .partition(|p| TESTS_ONLY_FEATURES.iter().any(|(k, _)| *k == p.name));
        run_cmd(
            Command::new(&tool)
                .args(["semver-checks", "--baseline-rev", &rev])
                .args(package_args(&promised))
                .env("CARGO_TARGET_DIR", semver_target()),
        )?;
        for (krate, feature) in TESTS_ONLY_FEATURES {
            if !tests_only.iter().any(|p| p.name == *krate) {
                bail!("{krate}, named in TESTS_ONLY_FEATURES, is not a publishable package");
            }
            phase(&format!(
                "{krate}: its default features only (`{feature}` is for its own tests and outside the semver promise)"
            ));
            run_cmd(
                Command::new(&tool)
                    .args(["semver-checks", "--baseline-rev", &rev, "-p", krate])
                    .arg("--default-features")
                    .env("CARGO_TARGET_DIR", semver_target()),
            )?;
        }
        Ok(())
    })?;
    timed("semver self-check", || deliberate_break(&tool))
}

/// Whether `path` exists in the commit `rev`.
fn in_revision(rev: &str, path: &Path) -> bool {
    Command::new("git")
        .args(["cat-file", "-e"])
        .arg(format!("{rev}:{}", path.display()))
        .current_dir(root())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Features only a crate's own tests turn on, left out of its semver check
/// (every other crate is checked with all its features): their API may
/// change in any release, as the crate's README says. A crate named here is
/// checked with its default features, which must then be all its others.
const TESTS_ONLY_FEATURES: &[(&str, &str)] = &[("ctm-patch-engine", "fault-injection")];

/// One target directory for every crate cargo-semver-checks builds, current
/// and baseline: dependencies are documented once instead of once per crate
/// (a third of the time), and apart from `target/debug`, whose profile
/// settings its placeholder crates do not share.
fn semver_target() -> PathBuf {
    target_dir().join("semver")
}

/// The baseline of the last release: its tag when this clone has it (and it
/// names the recorded commit), else the recorded commit.
fn baseline_rev() -> Result<String> {
    let text = std::fs::read_to_string(root().join(BASELINE_FILE))
        .with_context(|| format!("reading {BASELINE_FILE}"))?;
    let (tag, commit) = parse_baseline(&text)?;
    let resolve = |rev: &str| -> Option<String> {
        let out = Command::new("git")
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{rev}^{{commit}}"))
            .current_dir(root())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    match (resolve(&tag), resolve(&commit)) {
        (Some(tagged), Some(recorded)) if tagged == recorded => {
            eprintln!("release baseline: tag {tag} ({recorded})");
            Ok(tag)
        }
        (Some(tagged), _) => bail!(
            "tag {tag} names {tagged}, but {BASELINE_FILE} records {commit}: one of them is wrong"
        ),
        (None, Some(recorded)) => {
            eprintln!(
                "release baseline: this clone has no tag {tag}; using the commit {BASELINE_FILE} records ({recorded})"
            );
            Ok(recorded)
        }
        (None, None) => bail!(
            "neither tag {tag} nor commit {commit} is in this clone (a shallow clone? `git fetch --unshallow --tags`)"
        ),
    }
}

/// The `tag = ...` and `commit = ...` lines of the baseline file (`#`
/// comments allowed); the commit must be a whole SHA-1.
fn parse_baseline(text: &str) -> Result<(String, String)> {
    let field = |key: &str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().to_owned())
            .with_context(|| format!("{BASELINE_FILE} has no `{key} =`"))
    };
    let (tag, commit) = (field("tag")?, field("commit")?);
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{BASELINE_FILE}: `commit = {commit}` is not a whole commit id");
    }
    Ok((tag, commit))
}

/// Proves the check can fail: a copy of the workspace's sources in which
/// `ctm-auth` loses a public function (`bearer_credential` becomes
/// crate-private), checked against the real sources, must be reported as a
/// breaking change (`function_missing`) with a non-zero exit.
fn deliberate_break(tool: &Path) -> Result<()> {
    phase(
        "cargo semver-checks must catch a deliberate break: ctm-auth without its public fn bearer_credential",
    );
    let copy = tempfile::tempdir()?;
    for entry in ["Cargo.toml", "Cargo.lock", "rust-toolchain.toml"] {
        std::fs::copy(root().join(entry), copy.path().join(entry))?;
    }
    for dir in ["crates", "xtask"] {
        copy_tree(&root().join(dir), &copy.path().join(dir))?;
    }
    let lib = copy.path().join("crates/auth/src/lib.rs");
    let src = std::fs::read_to_string(&lib)?;
    let public = "pub fn bearer_credential(";
    if !src.contains(public) {
        bail!("crates/auth/src/lib.rs has no `{public}`: choose another item to break");
    }
    std::fs::write(
        &lib,
        src.replacen(public, "pub(crate) fn bearer_credential(", 1),
    )?;
    let mut c = Command::new(tool);
    c.args(["semver-checks", "-p", "ctm-auth", "--manifest-path"])
        .arg(copy.path().join("Cargo.toml"))
        .arg("--baseline-root")
        .arg(root())
        // Shares the rustdoc builds of the check above.
        .env("CARGO_TARGET_DIR", semver_target());
    let out: Output = plain_output(&mut c).output()?;
    let said = crate::strip_ansi(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ));
    let caught = !out.status.success()
        && said.contains("function_missing")
        && said.contains("bearer_credential");
    for line in said.lines().filter(|l| {
        l.contains("FAIL")
            || l.contains("function_missing")
            || l.contains("bearer_credential")
            || l.contains("Summary")
    }) {
        eprintln!("  | {}", line.trim_end());
    }
    if !caught {
        bail!(
            "cargo-semver-checks did not report the removed public function ({}):\n{said}",
            out.status
        );
    }
    eprintln!(
        "cargo-semver-checks caught the deliberate break ({})",
        out.status
    );
    Ok(())
}

/// Copies a source tree (no `target/`).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst): (PathBuf, PathBuf) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            if entry.file_name() != "target" {
                copy_tree(&src, &dst)?;
            }
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// `cargo xtask features`: each documented combination of the capability
/// crates' features, besides the defaults, lints clean (every target) and
/// passes the crate's tests.
pub fn features(_args: &[String]) -> Result<()> {
    for (krate, features) in FEATURE_MATRIX {
        let shown = if features.is_empty() {
            "no default features".to_owned()
        } else {
            format!("only `{features}`")
        };
        timed(&format!("{krate} with {shown}"), || {
            phase(&format!("{krate} with {shown}: clippy and tests"));
            let run = |sub: &str, tail: &[&str]| -> Result<()> {
                let mut c = cargo();
                c.args([sub, "-p", krate, "--no-default-features"]);
                if !features.is_empty() {
                    c.args(["--features", features]);
                }
                run_cmd(c.args(tail))
            };
            run("clippy", &["--all-targets", "--", "-D", "warnings"])?;
            run("test", &["--quiet"])
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_baseline_names_a_tag_and_a_whole_commit() {
        let text = std::fs::read_to_string(root().join(BASELINE_FILE)).unwrap();
        let (tag, commit) = parse_baseline(&text).unwrap();
        assert!(tag.starts_with('v'), "{tag}");
        assert_eq!(commit.len(), 40);
    }

    #[test]
    fn a_baseline_without_a_whole_commit_is_refused() {
        assert!(parse_baseline("tag = v1.0.0\ncommit = 4bf929e\n").is_err());
        assert!(parse_baseline("# tag = v1\ncommit = 4bf929e\n").is_err());
        let whole = "tag = v1.0.0\n# note\ncommit = 4bf929eba652413216f0f48fb5d9c64210f2383c\n";
        assert_eq!(
            parse_baseline(whole).unwrap(),
            (
                "v1.0.0".to_owned(),
                "4bf929eba652413216f0f48fb5d9c64210f2383c".to_owned()
            )
        );
    }
}
