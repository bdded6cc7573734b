//! Fuzz target `mcp_name`: the property is `ctm_fuzz_checks::check_mcp_name`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctm_fuzz_checks::check_mcp_name(data));
