//! Guards of the house plan (`docs/architecture.md`): the layering arrows and
//! the crate docs. Here, in a default member, so plain `cargo test` runs them.

use std::collections::BTreeMap;

use super::harness::repo_root;

/// Which of our crates each crate may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    // Above the server: the fuzz properties, shared by fuzz/ and their replay test.
    (
        "ctm-fuzz-checks",
        &[
            "coding-tools-mcp",
            "ctm-protocol-eras",
            "ctm-patch-engine",
            "ctm-exec-runtime",
        ],
    ),
    ("coding-tools-mcp", &["*"]),
    ("ctm-transport-stdio", &["ctm-protocol-eras"]),
    ("ctm-transport-http", &["ctm-protocol-eras", "ctm-auth"]),
    ("ctm-patch-engine", &["ctm-workspace-fs"]),
    ("ctm-exec-runtime", &["ctm-workspace-fs", "ctm-sandbox"]),
    ("ctm-sandbox", &["ctm-workspace-fs"]),
    ("ctm-git-tools", &["ctm-workspace-fs"]),
    ("ctm-auth", &[]),
    ("ctm-workspace-fs", &[]),
    ("ctm-protocol-eras", &[]),
];

fn manifests() -> BTreeMap<String, (std::path::PathBuf, toml::Table)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(repo_root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let table: toml::Table = text.parse().unwrap();
        let name = table["package"]["name"].as_str().unwrap().to_owned();
        out.insert(name, (dir, table));
    }
    out
}

#[test]
fn crates_depend_only_along_the_layering() {
    let all = manifests();
    assert_eq!(all.len(), ALLOWED.len(), "crates/ holds {:?}", all.keys());
    for (name, (_, table)) in &all {
        let allowed = ALLOWED
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} is not in the house plan"))
            .1;
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = table.get(section).and_then(|d| d.as_table()) else {
                continue;
            };
            // A crate's dev-dependency on itself (its tests turning on a
            // feature, as patch-engine's `fault-injection`) crosses no layer.
            let own_tests = |d: &str| section == "dev-dependencies" && d == name;
            for dep in deps
                .keys()
                .filter(|d| all.contains_key(d.as_str()) && !own_tests(d))
            {
                assert!(
                    allowed.contains(&"*") || allowed.contains(&dep.as_str()),
                    "{name} depends on {dep} ({section}), which the layering forbids"
                );
            }
        }
    }
}

#[test]
fn every_library_has_crate_docs_and_uses_workspace_settings() {
    for (name, (dir, table)) in manifests() {
        let lib = dir.join("src/lib.rs");
        let main = dir.join("src/main.rs");
        let src = std::fs::read_to_string(if lib.exists() { lib } else { main }).unwrap();
        assert!(src.starts_with("//!"), "{name} has no crate docs");
        assert!(
            src.contains("\n#![deny(missing_docs)]\n"),
            "{name} must deny missing docs"
        );
        assert_eq!(
            table["lints"]["workspace"].as_bool(),
            Some(true),
            "{name} must inherit the workspace lints"
        );
        for key in ["edition", "rust-version", "license"] {
            assert_eq!(
                table["package"][key]["workspace"].as_bool(),
                Some(true),
                "{name} must take its {key} from the workspace"
            );
        }
    }
}

/// Each published crate is versioned on its own: the version in its
/// manifest, a section of its CHANGELOG.md for that version, a README.md,
/// and the workspace's requirement on it naming that version (so a
/// dependent's package asks for the version it was built with).
#[test]
fn every_published_crate_carries_its_own_version_changelog_and_readme() {
    let root: toml::Table = std::fs::read_to_string(repo_root().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let requirements = root["workspace"]["dependencies"].as_table().unwrap();
    let mut published = 0;
    for (name, (dir, table)) in manifests() {
        let package = table["package"].as_table().unwrap();
        if package.get("publish").and_then(|p| p.as_bool()) == Some(false) {
            continue;
        }
        published += 1;
        let version = package["version"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} must state its own version"));
        for key in ["description", "readme", "keywords", "categories"] {
            assert!(package.contains_key(key), "{name} has no {key}");
        }
        assert!(
            !package.contains_key("repository"),
            "{name}: no repository until there is a real one"
        );
        let readme = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{name}: README.md: {e}"));
        assert!(
            readme.starts_with(&format!("# {name}\n")),
            "{name}: README.md must open with the crate's name"
        );
        let changelog = std::fs::read_to_string(dir.join("CHANGELOG.md"))
            .unwrap_or_else(|e| panic!("{name}: CHANGELOG.md: {e}"));
        assert!(
            changelog.contains(&format!("\n## [{version}]")),
            "{name}: CHANGELOG.md has no section for {version}"
        );
        let wanted = requirements[&name]["version"].as_str();
        assert_eq!(
            wanted,
            Some(version),
            "the workspace's requirement on {name} must name its version"
        );
    }
    assert!(published >= 9, "only {published} published crates");
}

/// The semver lints exec-runtime warns instead of denying (its items that
/// moved to ctm-sandbox, which cargo-semver-checks cannot follow through a
/// re-export) hold only against the release from before the split: once
/// the baseline moves, the block must go and every lint deny again.
#[test]
fn exec_runtimes_semver_exception_expires_with_its_baseline() {
    let baseline = std::fs::read_to_string(repo_root().join("release/baseline")).unwrap();
    let manifest =
        std::fs::read_to_string(repo_root().join("crates/exec-runtime/Cargo.toml")).unwrap();
    let excepted = manifest.contains("[package.metadata.cargo-semver-checks.lints]");
    let before_the_split = baseline.contains("commit = 4bf929eba652413216f0f48fb5d9c64210f2383c");
    assert!(
        !excepted || before_the_split,
        "release/baseline moved past the sandbox split: remove exec-runtime's [package.metadata.cargo-semver-checks.lints]"
    );
}
