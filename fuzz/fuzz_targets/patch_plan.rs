//! Fuzz target `patch_plan`: the property is `ctm_fuzz_checks::check_patch_plan`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctm_fuzz_checks::check_patch_plan(data));
