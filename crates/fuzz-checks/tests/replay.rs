//! Replays every seed and every input a fuzzer ever failed on through the
//! same property checks the fuzz targets run, so a fixed finding stays fixed.

use std::path::Path;

#[test]
fn every_seed_and_regression_still_holds() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut replayed = 0;
    for (target, check) in ctm_fuzz_checks::TARGETS {
        let mut inputs = 0;
        for kind in ["seeds", "regressions"] {
            let dir = fuzz.join(kind).join(target);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                #[expect(
                    clippy::disallowed_methods,
                    reason = "test inputs, not workspace files"
                )]
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| check(&data));
                assert!(outcome.is_ok(), "{target}: {} fails again", path.display());
                inputs += 1;
            }
        }
        assert!(inputs > 0, "{target} has no seeds");
        replayed += inputs;
    }
    eprintln!("replayed {replayed} inputs");
}

#[test]
fn the_exact_integer_oracle_reads_decimals_exactly() {
    use ctm_fuzz_checks::exact_integer;
    assert_eq!(exact_integer("12"), Some(12));
    assert_eq!(exact_integer("12.0"), Some(12));
    assert_eq!(exact_integer("1.2e1"), Some(12));
    assert_eq!(exact_integer("1200e-2"), Some(12));
    assert_eq!(exact_integer("-0"), Some(0));
    assert_eq!(exact_integer("0.0e5"), Some(0));
    assert_eq!(
        exact_integer("9007199254740991.0"),
        Some(9_007_199_254_740_991)
    );
    assert_eq!(exact_integer("1.5"), None);
    assert_eq!(exact_integer("-3"), None);
    assert_eq!(exact_integer("4503599627370496.5"), None);
    assert_eq!(exact_integer("1.00000000000000000001"), None);
    assert_eq!(exact_integer("1e400"), None);
    assert_eq!(exact_integer("18446744073709551616"), None);
}
