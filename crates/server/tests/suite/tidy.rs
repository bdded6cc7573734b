//! Guards of the house plan (`docs/architecture.md`): the layering arrows and
//! the crate docs. Here, in a default member, so plain `cargo test` runs them.

use std::collections::BTreeMap;

use super::harness::repo_root;

/// Which of our crates each crate may depend on.
const ALLOWED: &[(&str, &[&str])] = &[
    // Above the server: the fuzz properties, shared by fuzz/ and their replay test.
    (
        "ctm-fuzz-checks",
        &["coding-tools-mcp", "ctm-protocol-eras", "ctm-patch-engine"],
    ),
    ("coding-tools-mcp", &["*"]),
    ("ctm-transport-stdio", &["ctm-protocol-eras"]),
    ("ctm-transport-http", &["ctm-protocol-eras", "ctm-auth"]),
    ("ctm-patch-engine", &["ctm-workspace-fs"]),
    ("ctm-exec-runtime", &["ctm-workspace-fs"]),
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
        assert_eq!(
            table["lints"]["workspace"].as_bool(),
            Some(true),
            "{name} must inherit the workspace lints"
        );
        assert_eq!(
            table["package"]["version"]["workspace"].as_bool(),
            Some(true),
            "{name} must take its version from the workspace"
        );
    }
}
