//! Fuzz target `shell_lexer`: the property is `ctm_fuzz_checks::check_shell_lexer`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ctm_fuzz_checks::check_shell_lexer(data));
