//! Golden scenarios: `tests/scenarios/NNN_name/{before/, patch.txt, after/ or
//! error.json}`, compared byte for byte and mode for mode. A failing scenario
//! must leave `before/` exactly as it was.

use std::path::Path;

use ctm_patch_engine::{ApplyOptions, PatchEngine, TEMP_PREFIX};
use ctm_workspace_fs::Workspace;

use super::{copy_tree, kind, tree};

#[test]
fn golden_scenarios() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 40, "scenarios missing");
    let mut failures = Vec::new();
    for scen in &names {
        let name = scen.file_name().unwrap().to_string_lossy().into_owned();
        if let Err(why) = run(scen) {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run(scen: &Path) -> Result<(), String> {
    let t = tempfile::tempdir().unwrap();
    let ws_root = t.path().join("ws");
    copy_tree(&scen.join("before"), &ws_root);
    let before = tree(&ws_root);
    let patch = std::fs::read_to_string(scen.join("patch.txt")).unwrap();
    let engine = PatchEngine::new(Workspace::open(&ws_root).unwrap()).with_protected_git_dir(true);
    let dry = engine.apply(&patch, &ApplyOptions::default().with_dry_run(true));
    if tree(&ws_root) != before {
        return Err("dry run changed the tree".into());
    }
    let result = engine.apply(&patch, &ApplyOptions::default());
    let leftovers: Vec<String> = tree(&ws_root)
        .into_keys()
        .filter(|k| k.contains(TEMP_PREFIX))
        .collect();
    if !leftovers.is_empty() {
        return Err(format!("temp files left: {leftovers:?}"));
    }
    let error_file = scen.join("error.json");
    if error_file.exists() {
        let want: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(error_file).unwrap()).unwrap();
        let want = want["error"].as_str().unwrap();
        let got = match (&dry, &result) {
            (Err(d), Err(e)) => {
                if kind(d) != kind(e) {
                    return Err(format!("dry run said {d}, apply said {e}"));
                }
                kind(e)
            }
            _ => {
                return Err(format!(
                    "expected error {want}, got dry={dry:?} apply={result:?}"
                ));
            }
        };
        if got != want {
            return Err(format!("expected {want}, got {got}: {:?}", result.err()));
        }
        if tree(&ws_root) != before {
            return Err("a failed patch changed the tree".into());
        }
        return Ok(());
    }
    let report = result.map_err(|e| format!("apply failed: {e}"))?;
    let dry = dry.map_err(|e| format!("dry run failed: {e}"))?;
    if dry.files.len() != report.files.len()
        || dry
            .files
            .iter()
            .zip(&report.files)
            .any(|(a, b)| a.new_sha256 != b.new_sha256)
    {
        return Err("dry run and apply disagree".into());
    }
    let after = tree(&scen.join("after"));
    let got = tree(&ws_root);
    if got != after {
        let show = |m: &std::collections::BTreeMap<String, (Vec<u8>, u32)>| {
            m.iter()
                .map(|(k, (b, mode))| format!("{k} {mode:o} {:?}", String::from_utf8_lossy(b)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "tree differs\n  want: {}\n  got:  {}",
            show(&after),
            show(&got)
        ));
    }
    Ok(())
}
