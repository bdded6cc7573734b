//! The shell lexer's property (`check_shell_lexer`) over command lines
//! built from the shell's own tokens — quotes, escapes, here-documents,
//! substitutions, redirections, comments, separators — in random order:
//! a fuzz run in every CI, deterministic (a fixed seed), a few seconds.

const TOKENS: &[&str] = &[
    "'",
    "\"",
    "\\",
    "$'",
    "$(",
    "${",
    "`",
    ")",
    "(",
    "}",
    "{",
    "<<",
    "<<-",
    "<<<",
    "<",
    ">",
    ">>",
    "2>&1",
    ">&",
    "&>",
    "|",
    "||",
    "&&",
    "&",
    ";",
    "\n",
    "#",
    " ",
    "\t",
    "EOF",
    "X",
    "echo",
    "cat",
    "sh",
    "python3",
    "-c",
    "-",
    "curl",
    "/etc/shadow",
    "../up",
    "a",
    "=",
    "x=1",
    "é",
    "\\\n",
    "'EOF'",
    "\"EOF\"",
    "$",
    "!",
    "if",
    "then",
    "fi",
    "\r",
    "\u{a0}",
    "<<\\\n-",
    ". /dev/stdin",
    "eval",
    "$\\\n(",
];

#[test]
fn random_lines_of_shell_tokens_keep_the_lexer_property() {
    let mut state: u64 = 0x5eed_1e5e_2026_1202;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = (next() % 24) as usize;
        let mut line = String::new();
        for _ in 0..len {
            line.push_str(TOKENS[(next() % TOKENS.len() as u64) as usize]);
        }
        ctm_fuzz_checks::check_shell_lexer(line.as_bytes());
    }
}
