//! Fuzz target `tool_arguments`: the property is `ctm_fuzz_checks::check_tool_arguments`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctm_fuzz_checks::check_tool_arguments(data));
