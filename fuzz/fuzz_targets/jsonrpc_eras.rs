//! Fuzz target `jsonrpc_eras`: the property is `ctm_fuzz_checks::check_jsonrpc_eras`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctm_fuzz_checks::check_jsonrpc_eras(data));
