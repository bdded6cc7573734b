//! One reading of a command line for every gate.
//!
//! The gates that look at a command before it runs (shell expansion,
//! inline code, destructive commands, network, path escape, set-id
//! executables) all read the same [`CommandLine`], lexed once the way a
//! POSIX shell reads it: quotes (single, double, `$'...'`), backslashes,
//! comments, here-documents (whose bodies are data unless their delimiter
//! is unquoted, when the shell expands them), command substitutions (whose
//! commands are commands too) and redirections (their targets are paths,
//! never the command's words). It is not a shell: control structures are
//! read as words, and aliases and functions are not followed. Landlock and
//! the namespaces are the boundary; the gates give a precise refusal
//! first, and must not read a command line differently from the shell in a
//! way that hides what it runs.

/// Substitutions nested deeper than this are not lexed for their commands
/// (their expansion is still reported): bounded stack and time on hostile
/// input.
const MAX_DEPTH: usize = 32;

/// A file redirection of a simple command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Redirect {
    /// `>`, `>>`, `>|`, `<>`, `&>`, `&>>` (or `>&` to a file): the target is
    /// written; `<`: read.
    pub output: bool,
    /// The target path, quotes removed.
    pub target: String,
}

/// One simple command: its words and its file redirections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The words, quotes removed, redirections left out (`VAR=x`
    /// assignments included, first).
    pub words: Vec<String>,
    /// File redirections (a descriptor duplication such as `2>&1`, a
    /// here-document and a here-string are not files).
    pub redirects: Vec<Redirect>,
    /// Its here-documents and here-strings: indexes into
    /// [`CommandLine::data`] (what the command reads on standard input).
    pub stdin_data: Vec<usize>,
    /// Whether a pipe feeds its standard input (`a | b`: `b`).
    pub piped: bool,
    /// Whether its standard output feeds a pipe (`a | b`: `a`).
    pub pipes_out: bool,
}

/// A command line as the gates read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// Every simple command, those inside command substitutions included.
    pub commands: Vec<SimpleCommand>,
    /// The first expansion the shell performs that runs or reads something:
    /// `$(`, `${` or a backtick, outside single quotes and comments, and in
    /// the body of a here-document whose delimiter is unquoted.
    pub expansion: Option<&'static str>,
    /// Text the commands get as data: here-document bodies and here-strings.
    pub data: Vec<String>,
    /// Whether the line ends inside a quote, a substitution, a pending
    /// here-document or after a line-continuing backslash (the shell then
    /// refuses it, or reads what follows as part of it).
    pub open: bool,
    /// Whether part of the line could not be read for sure: nesting past
    /// the lexer's depth, or a `${...}` in double quotes that shells close
    /// in different places. The gates refuse such a line rather than
    /// guess.
    pub unread: bool,
}

/// What the next completed word is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// A word of the command.
    Word,
    /// A redirection's target: written or read.
    Target { output: bool },
    /// A descriptor duplication's target (`>&2`, `<&0`, `>&-`), or a file
    /// when it is not a number (`>&file`).
    Dup,
    /// A here-document's delimiter (`<<`, `<<-`).
    Delimiter { strip_tabs: bool },
    /// A here-string's text (`<<<`).
    HereString,
}

struct Lexer<'a> {
    chars: &'a [char],
    i: usize,
    depth: usize,
    /// `$'...'` is a quote (bash's reading) rather than `$` and a quote.
    ansi_c: bool,
    /// Inside double quotes (where a `'` is no quote).
    in_double: bool,
    line: CommandLine,
    current: SimpleCommand,
    word: String,
    in_word: bool,
    /// The word had a quote or a backslash (a here-document delimiter
    /// written so turns its body's expansion off).
    quoted: bool,
    pending: Pending,
    /// Here-documents whose bodies start after the next newline:
    /// (delimiter, strip leading tabs, body expands, index in `data`).
    heredocs: Vec<(String, bool, bool, usize)>,
    /// The command being read follows a `|`.
    piped: bool,
    /// Open groups (`(`: true in `.0`; `{`, `if`, `while`, `case`, ...:
    /// false) and whether a pipe feeds each (`.1`).
    groups: Vec<(bool, bool)>,
}

impl CommandLine {
    /// Lexes `cmd` once for every gate. Where shells read a line
    /// differently, every reading is kept (the gates see the union): `$'`
    /// opens a quote in bash and is a `$` before a plain quote in dash.
    pub fn lex(cmd: &str) -> Self {
        // Nested readings re-read parts of the line; all of them together
        // may read at most 16 times the line and 1 MiB more.
        BUDGET.with(|b| b.set(cmd.len().saturating_mul(16).saturating_add(1 << 20)));
        Self::lex_on_budget(cmd)
    }

    /// Lexes `cmd` from what is left of the reading budget of the lexing
    /// under way (the programs a line hands on share one).
    pub(crate) fn lex_on_budget(cmd: &str) -> Self {
        let readings = |text: &str, line: &mut Option<CommandLine>| {
            let chars: Vec<char> = text.chars().collect();
            let mut variants = vec![false];
            if text.contains("$'") {
                variants.push(true);
            }
            for ansi_c in variants {
                let l = lex_chars(&chars, 0, ansi_c);
                match line {
                    Some(line) => line.absorb(l, true),
                    None => *line = Some(l),
                }
            }
        };
        let mut line = None;
        readings(cmd, &mut line);
        line.unwrap_or_default()
    }

    /// Adds another reading's commands, data and findings to this one;
    /// with `once`, a command this one has already (the same words,
    /// redirections, pipe and input) is not added again.
    fn absorb(&mut self, other: CommandLine, once: bool) {
        type Key = (Vec<String>, Vec<Redirect>, bool, Vec<String>);
        let key = |c: &SimpleCommand, data: &[String]| -> Key {
            (
                c.words.clone(),
                c.redirects.clone(),
                c.piped,
                c.stdin_data.iter().map(|&i| data[i].clone()).collect(),
            )
        };
        let mut seen: std::collections::HashSet<Key> = if once {
            self.commands.iter().map(|c| key(c, &self.data)).collect()
        } else {
            std::collections::HashSet::new()
        };
        let base = self.data.len();
        self.data.extend(other.data);
        for mut c in other.commands {
            for i in &mut c.stdin_data {
                *i += base;
            }
            if !once || seen.insert(key(&c, &self.data)) {
                self.commands.push(c);
            }
        }
        if self.expansion.is_none() {
            self.expansion = other.expansion;
        }
        self.open |= other.open;
        self.unread |= other.unread;
    }

    /// Every word of every command and every datum: what a scan for URLs
    /// and network modules reads.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.commands
            .iter()
            .flat_map(|c| c.words.iter().chain(c.redirects.iter().map(|r| &r.target)))
            .chain(&self.data)
            .map(String::as_str)
    }
}

thread_local! {
    /// Characters the lexing under way may still read (see
    /// [`CommandLine::lex`]).
    static BUDGET: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

/// Sets the reading budget of the lexings that follow on this thread.
pub(crate) fn set_budget(chars: usize) {
    BUDGET.with(|b| b.set(chars));
}

fn lex_chars(chars: &[char], depth: usize, ansi_c: bool) -> CommandLine {
    let within = BUDGET.with(|b| match b.get().checked_sub(chars.len()) {
        Some(left) => {
            b.set(left);
            true
        }
        None => false,
    });
    if !within {
        // Too much re-reading: what is left is not read, and the gates
        // refuse the line.
        return CommandLine {
            unread: true,
            ..CommandLine::default()
        };
    }
    let mut l = Lexer {
        chars,
        i: 0,
        depth,
        ansi_c,
        in_double: false,
        line: CommandLine::default(),
        current: SimpleCommand::default(),
        word: String::new(),
        in_word: false,
        quoted: false,
        pending: Pending::Word,
        heredocs: Vec::new(),
        piped: false,
        groups: Vec::new(),
    };
    l.run();
    l.line
}

impl Lexer<'_> {
    /// The raw index of the `ahead`-th character from here, line
    /// continuations (backslash-newline) skipped: the shell removes them
    /// before it reads operators, words and substitutions (not inside
    /// single quotes or a quoted here-document, which read raw text).
    fn index(&self, ahead: usize) -> usize {
        let mut i = self.i;
        let mut left = ahead;
        loop {
            while self.chars.get(i) == Some(&'\\') && self.chars.get(i + 1) == Some(&'\n') {
                i += 2;
            }
            if left == 0 {
                return i;
            }
            i += 1;
            left -= 1;
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.index(ahead)).copied()
    }

    /// Moves past `n` characters, and any line continuation before them.
    fn advance(&mut self, n: usize) {
        self.i = self.index(n).min(self.chars.len());
    }

    fn expansion(&mut self, what: &'static str) {
        self.line.expansion.get_or_insert(what);
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            self.advance(0);
            match c {
                '\'' => {
                    self.i += 1;
                    self.begin_quoted();
                    match self.chars[self.i..].iter().position(|&c| c == '\'') {
                        Some(end) => {
                            self.word.extend(&self.chars[self.i..self.i + end]);
                            self.i += end + 1;
                        }
                        None => {
                            self.word.extend(&self.chars[self.i..]);
                            self.i = self.chars.len();
                            self.line.open = true;
                        }
                    }
                }
                '"' => {
                    self.i += 1;
                    self.begin_quoted();
                    self.double_quoted();
                }
                '\\' => {
                    match self.chars.get(self.i + 1).copied() {
                        // A line continuation joins the lines.
                        Some('\n') => {}
                        Some(n) => {
                            self.begin_quoted();
                            self.word.push(n);
                        }
                        None => self.line.open = true,
                    }
                    self.i += 2;
                }
                '$' if self.ansi_c && self.peek(1) == Some('\'') => {
                    self.advance(2);
                    self.begin_quoted();
                    self.ansi_c_quoted();
                }
                '$' | '`' => self.substitution_or_char(),
                '#' if !self.in_word => {
                    // A comment, to the end of the line.
                    // Raw characters: a backslash before the newline that
                    // ends a comment continues nothing.
                    while self.chars.get(self.i).is_some_and(|&c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\n' => {
                    self.i += 1;
                    self.end_command();
                    self.heredoc_bodies();
                }
                '|' => {
                    self.i += 1;
                    // `||` joins commands; `|` pipes one into the next.
                    let pipe = self.peek(0) != Some('|');
                    if !pipe {
                        self.advance(1);
                    }
                    self.current.pipes_out = pipe;
                    self.end_command();
                    self.piped = pipe;
                }
                '(' => {
                    self.i += 1;
                    self.end_command();
                    // A group a pipe feeds: its commands read the pipe.
                    self.groups.push((true, self.piped));
                }
                ')' => {
                    self.i += 1;
                    self.end_command();
                    // A `case` pattern's `)` closes no group.
                    if self.groups.last().is_some_and(|g| g.0) {
                        self.groups.pop();
                    }
                }
                ';' => {
                    self.i += 1;
                    self.end_command();
                }
                // A separator, also before `>`: `&>` is bash's redirection
                // of both streams but dash's `&` then `>`, where what
                // follows is a command (the gates take dash's reading).
                '&' => {
                    self.i += 1;
                    self.end_command();
                }
                '<' | '>' => self.redirection(),
                // Blanks are space and tab only: a carriage return or any
                // other space is part of a word, as for the shell.
                ' ' | '\t' => {
                    self.i += 1;
                    self.end_word();
                }
                c => {
                    self.in_word = true;
                    self.word.push(c);
                    self.i += 1;
                }
            }
        }
        self.end_command();
        if !self.heredocs.is_empty() {
            // Delimited by the end of input: no body follows.
            self.line.open = true;
        }
    }

    fn begin_quoted(&mut self) {
        self.in_word = true;
        self.quoted = true;
    }

    /// After the opening `"`: to the closing one. `$(`, `${` and backticks
    /// expand here.
    fn double_quoted(&mut self) {
        self.in_double = true;
        self.double_quoted_body();
        self.in_double = false;
    }

    fn double_quoted_body(&mut self) {
        loop {
            if self.chars.get(self.i) == Some(&'\\') && self.chars.get(self.i + 1) == Some(&'\n') {
                self.i += 2;
                continue;
            }
            match self.peek(0) {
                None => {
                    self.line.open = true;
                    return;
                }
                Some('"') => {
                    self.i += 1;
                    return;
                }
                Some('\\') => {
                    // (A backslash-newline was skipped above.)
                    match self.chars.get(self.i + 1).copied() {
                        Some(n @ ('$' | '`' | '"' | '\\')) => self.word.push(n),
                        Some(n) => {
                            self.word.push('\\');
                            self.word.push(n);
                        }
                        None => {
                            self.line.open = true;
                            self.i = self.chars.len();
                            return;
                        }
                    }
                    self.i += 2;
                }
                Some('$' | '`') => self.substitution_or_char(),
                Some(c) => {
                    self.word.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// After `$'`: to the closing `'`, backslash escapes taken as written.
    fn ansi_c_quoted(&mut self) {
        loop {
            match self.chars.get(self.i).copied() {
                None => {
                    self.line.open = true;
                    return;
                }
                Some('\'') => {
                    self.i += 1;
                    return;
                }
                Some('\\') if self.i + 1 < self.chars.len() => {
                    self.word.push(self.chars[self.i + 1]);
                    self.i += 2;
                }
                Some(c) => {
                    self.word.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// At `$` or a backtick: a command substitution (`$(...)`, `` `...` ``,
    /// whose commands are lexed as commands), a parameter expansion
    /// (`${...}`), or a plain character. The word keeps the text as written.
    fn substitution_or_char(&mut self) {
        let start = self.i;
        let open = self.index(1) + 1;
        let (what, inner) = match (self.peek(0), self.peek(1)) {
            (Some('$'), Some('(')) => {
                let end = closing_paren(self.chars, open);
                ("$(", (open, end))
            }
            (Some('$'), Some('{')) => {
                let end = closing_brace(self.chars, open, self.in_double);
                // In double quotes, dash takes a `'` in `${x#'...'}` as a
                // quote and bash in `${x:-'...'}` too: where the two
                // readings end the expansion apart, the line is not read.
                if self.in_double && end != closing_brace(self.chars, open, false) {
                    self.line.unread = true;
                }
                ("${", (open, end))
            }
            (Some('`'), _) => {
                let end = closing(self.chars, self.i + 1, '`');
                ("`", (self.i + 1, end))
            }
            _ => {
                self.in_word = true;
                self.word.push(self.chars[self.i]);
                self.i += 1;
                return;
            }
        };
        self.expansion(what);
        let (from, end) = inner;
        let close = match end {
            Some(e) => e,
            None => {
                self.line.open = true;
                self.chars.len()
            }
        };
        if self.depth >= MAX_DEPTH {
            self.line.unread = true;
        } else {
            if what == "${" {
                // A parameter's word may hold substitutions: `${x:-$(...)}`.
                let inner: Vec<char> = self.chars[from..close].to_vec();
                self.substitutions_in(&inner);
            } else {
                let nested = lex_chars(&self.chars[from..close], self.depth + 1, self.ansi_c);
                self.line.absorb(nested, false);
            }
        }
        let stop = (close + 1).min(self.chars.len());
        self.in_word = true;
        self.word.extend(&self.chars[start..stop]);
        self.i = stop;
    }

    /// Lexes the command substitutions in `text` (a parameter's word, an
    /// expanding here-document's body) as commands of this line.
    fn substitutions_in(&mut self, text: &[char]) {
        let mut i = 0;
        while i < text.len() {
            let (from, end) = match (text[i], text.get(i + 1)) {
                ('\\', _) => {
                    i += 2;
                    continue;
                }
                ('$', Some('(')) => (i + 2, closing_paren(text, i + 2)),
                ('`', _) => (i + 1, closing(text, i + 1, '`')),
                _ => {
                    i += 1;
                    continue;
                }
            };
            let close = end.unwrap_or(text.len());
            let nested = lex_chars(&text[from..close], self.depth + 1, self.ansi_c);
            self.line.absorb(nested, false);
            i = close + 1;
        }
    }

    /// At `<` or `>`: a redirection operator. Digits just before it are
    /// its descriptor (`2>`), not a word; other text before it is a word.
    fn redirection(&mut self) {
        if self.in_word && !self.quoted && self.word.chars().all(|c| c.is_ascii_digit()) {
            self.word.clear();
            self.in_word = false;
        } else {
            self.end_word();
        }
        let c = self.chars[self.i];
        let next = self.peek(1);
        let (len, pending) = match (c, next) {
            ('<', Some('<')) => match (self.peek(2), self.peek(3)) {
                (Some('<'), _) => (3, Pending::HereString),
                (Some('-'), _) => (3, Pending::Delimiter { strip_tabs: true }),
                _ => (2, Pending::Delimiter { strip_tabs: false }),
            },
            ('<', Some('&')) | ('>', Some('&')) => (2, Pending::Dup),
            ('<', Some('>')) => (2, Pending::Target { output: true }),
            ('<', _) => (1, Pending::Target { output: false }),
            ('>', Some('>' | '|')) => (2, Pending::Target { output: true }),
            _ => (1, Pending::Target { output: true }),
        };
        self.advance(len);
        self.pending = pending;
    }

    fn end_word(&mut self) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        let quoted = std::mem::replace(&mut self.quoted, false);
        self.in_word = false;
        match std::mem::replace(&mut self.pending, Pending::Word) {
            Pending::Word => {
                // A brace group, like a `(` group, is fed by a pipe before it.
                if !quoted && self.current.words.is_empty() {
                    // So is a compound command (`| if ...; then sh; fi`,
                    // `| while ...; do sh; done`, `| case ... esac`).
                    match word.as_str() {
                        "{" | "if" | "while" | "until" | "for" | "case" | "select" => {
                            self.groups.push((false, self.piped));
                        }
                        "}" | "fi" | "done" | "esac"
                            if self.groups.last().is_some_and(|g| !g.0) =>
                        {
                            self.groups.pop();
                        }
                        _ => {}
                    }
                }
                self.current.words.push(word);
            }
            Pending::Target { output } => self.current.redirects.push(Redirect {
                output,
                target: word,
            }),
            Pending::Dup => {
                if !(word == "-" || word.chars().all(|c| c.is_ascii_digit())) {
                    self.current.redirects.push(Redirect {
                        output: true,
                        target: word,
                    });
                }
            }
            Pending::Delimiter { strip_tabs } => {
                // The body is read after the line ends; its slot now.
                let slot = self.line.data.len();
                self.line.data.push(String::new());
                self.current.stdin_data.push(slot);
                self.heredocs.push((word, strip_tabs, !quoted, slot));
            }
            Pending::HereString => {
                self.current.stdin_data.push(self.line.data.len());
                self.line.data.push(word);
            }
        }
    }

    fn end_command(&mut self) {
        self.end_word();
        self.pending = Pending::Word;
        let mut c = std::mem::take(&mut self.current);
        if !c.words.is_empty() || !c.redirects.is_empty() || !c.stdin_data.is_empty() {
            // A pipe feeds the next command that is one, across newlines,
            // comments and `(`, and every command of a group it feeds.
            c.piped = std::mem::replace(&mut self.piped, false) || self.groups.iter().any(|g| g.1);
            self.line.commands.push(c);
        }
    }

    /// After a newline: the bodies of the here-documents opened on the line
    /// just ended, each up to its delimiter line.
    fn heredoc_bodies(&mut self) {
        for (delimiter, strip_tabs, expands, slot) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            let mut closed = false;
            while self.i < self.chars.len() {
                let end = self.chars[self.i..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(self.chars.len(), |p| self.i + p);
                let mut line: String = self.chars[self.i..end].iter().collect();
                self.i = (end + 1).min(self.chars.len());
                // In a body the shell expands, a backslash-newline joins
                // the lines before the delimiter is looked for.
                while expands
                    && line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
                    && self.i < self.chars.len()
                {
                    line.pop();
                    let end = self.chars[self.i..]
                        .iter()
                        .position(|&c| c == '\n')
                        .map_or(self.chars.len(), |p| self.i + p);
                    line.extend(&self.chars[self.i..end]);
                    self.i = (end + 1).min(self.chars.len());
                }
                let text = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if text == delimiter {
                    closed = true;
                    break;
                }
                body.push_str(text);
                body.push('\n');
            }
            if !closed {
                self.line.open = true;
            }
            if expands && let Some(what) = body_expansion(&body) {
                self.expansion(what);
                // Its substitutions run whoever reads the body.
                if self.depth < MAX_DEPTH {
                    let chars: Vec<char> = body.chars().collect();
                    self.substitutions_in(&chars);
                } else {
                    self.line.unread = true;
                }
            }
            self.line.data[slot] = body;
        }
    }
}

/// The first `$(`, `${` or backtick of an expanding here-document body
/// (a backslash escapes them there).
fn body_expansion(body: &str) -> Option<&'static str> {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'`' => return Some("`"),
            b'$' if b.get(i + 1) == Some(&b'(') => return Some("$("),
            b'$' if b.get(i + 1) == Some(&b'{') => return Some("${"),
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the `)` closing a `$(` whose contents start at `from`:
/// nested parentheses, quotes and backslashes skipped over.
fn closing_paren(chars: &[char], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    // Open `case` statements: their patterns end in a `)` that closes
    // nothing (`$(case x in x) ... ;; esac)`).
    let mut cases = 0usize;
    let mut word = String::new();
    let mut i = from;
    while let Some(&c) = chars.get(i) {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            match word.as_str() {
                "case" => cases += 1,
                "esac" => cases = cases.saturating_sub(1),
                _ => {}
            }
            word.clear();
        }
        match c {
            '\\' => i += 1,
            '\'' => i = chars[i + 1..].iter().position(|&c| c == '\'')? + i + 1,
            '"' => i = closing(chars, i + 1, '"')?,
            '(' => depth += 1,
            ')' if depth == 0 && cases == 0 => return Some(i),
            ')' if depth == 0 => {}
            ')' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the unescaped `close` (a `"` or a backtick) ending a
/// string whose contents start at `from`.
fn closing(chars: &[char], from: usize, close: char) -> Option<usize> {
    let mut i = from;
    while let Some(&c) = chars.get(i) {
        if c == '\\' {
            i += 1;
        } else if c == close {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The index of the `}` closing a `${` whose contents start at `from`:
/// nested braces, quotes and backslashes skipped over (inside double
/// quotes a `'` is no quote).
fn closing_brace(chars: &[char], from: usize, in_double: bool) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = from;
    while let Some(&c) = chars.get(i) {
        match c {
            '\\' => i += 1,
            '\'' if !in_double => i = chars[i + 1..].iter().position(|&c| c == '\'')? + i + 1,
            '"' => i = closing(chars, i + 1, '"')?,
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &str) -> Vec<Vec<String>> {
        CommandLine::lex(cmd)
            .commands
            .into_iter()
            .map(|c| c.words)
            .collect()
    }

    fn w(list: &[&[&str]]) -> Vec<Vec<String>> {
        list.iter()
            .map(|c| c.iter().map(|s| (*s).to_owned()).collect())
            .collect()
    }

    #[test]
    fn separators_quotes_and_escapes() {
        assert_eq!(
            words("a 'b c' \"d e\" f\\ g; h | i && j || k & l\nm"),
            w(&[
                &["a", "b c", "d e", "f g"],
                &["h"],
                &["i"],
                &["j"],
                &["k"],
                &["l"],
                &["m"]
            ])
        );
        // `$'...'`: dash's reading (a `$`, then a plain quote) and bash's
        // (a quote with escapes), both kept.
        assert_eq!(
            words("echo \"a\\\"b\" $'c\\'d'"),
            w(&[&["echo", "a\"b", "$c\\d"], &["echo", "a\"b", "c'd"]])
        );
        assert_eq!(words("echo a\\\nb"), w(&[&["echo", "ab"]]));
        assert_eq!(
            words("(cd x) && { y; }"),
            w(&[&["cd", "x"], &["{", "y"], &["}"]])
        );
    }

    #[test]
    fn an_expansion_is_found_where_the_shell_expands() {
        for (cmd, found) in [
            ("echo $(id)", Some("$(")),
            ("echo ${HOME}", Some("${")),
            ("echo `id`", Some("`")),
            ("echo \"it's $(id)\"", Some("$(")),
            ("echo \\' $(id)", Some("$(")),
            ("echo '$(id)'", None),
            ("echo \\$(id)", None),
            ("echo \"\\$(id)\"", None),
            ("echo ok # $(id)", None),
            ("echo a#$(id)", Some("$(")),
            ("echo $HOME $1", None),
            ("cat <<EOF\n$(id)\nEOF", Some("$(")),
            ("cat <<'EOF'\n$(id)\nEOF", None),
            ("cat <<\"EOF\"\n`id`\nEOF", None),
            ("cat <<E\\OF\n$(id)\nEOF", None),
            ("cat <<EOF\n\\$(id)\nEOF", None),
            ("x=$'\\'' ; echo $(id)", Some("$(")),
        ] {
            assert_eq!(CommandLine::lex(cmd).expansion, found, "{cmd:?}");
        }
    }

    #[test]
    fn substitutions_are_commands_too() {
        assert_eq!(
            words("echo \"x $(curl -s http://a | sh)\" `nc h 1`"),
            w(&[
                &["curl", "-s", "http://a"],
                &["sh"],
                &["nc", "h", "1"],
                &["echo", "x $(curl -s http://a | sh)", "`nc h 1`"]
            ])
        );
        assert_eq!(
            words("echo $(a \"$(b ')')\")"),
            w(&[
                &["b", ")"],
                &["a", "$(b ')')"],
                &["echo", "$(a \"$(b ')')\")"]
            ])
        );
    }

    #[test]
    fn redirections_are_not_words() {
        let l = CommandLine::lex("2>&1 >/dev/null nc h 80 <in >>log 2>err >&file <&0 >&-");
        assert_eq!(l.commands[0].words, ["nc", "h", "80"]);
        let r: Vec<(bool, &str)> = l.commands[0]
            .redirects
            .iter()
            .map(|r| (r.output, r.target.as_str()))
            .collect();
        assert_eq!(
            r,
            [
                (true, "/dev/null"),
                (false, "in"),
                (true, "log"),
                (true, "err"),
                (true, "file")
            ]
        );
        // `&>` is dash's `&` then `>`: what follows is a command.
        let l = CommandLine::lex("echo &>/dev/stderr curl x");
        assert_eq!(l.commands[1].words, ["curl", "x"]);
        assert_eq!(l.commands[1].redirects[0].target, "/dev/stderr");
        // Quoted, they are words.
        assert_eq!(words("cat \"<<\" '>' x"), w(&[&["cat", "<<", ">", "x"]]));
        // Text just before an operator is a word of its own.
        let l = CommandLine::lex("echo a>b");
        assert_eq!(l.commands[0].words, ["echo", "a"]);
        assert_eq!(l.commands[0].redirects[0].target, "b");
    }

    #[test]
    fn here_documents_are_data_and_only_outside_quotes() {
        let l = CommandLine::lex("cat <<EOF >out\ncurl x\nEOF\nls\n");
        assert_eq!(
            l.commands
                .iter()
                .map(|c| c.words.clone())
                .collect::<Vec<_>>(),
            w(&[&["cat"], &["ls"]])
        );
        assert_eq!(l.data, ["curl x\n"]);
        assert!(!l.open);
        let l = CommandLine::lex("cat <<-X\n\tbody\n\tX\nls");
        assert_eq!(l.data, ["body\n"]);
        assert_eq!(l.commands[1].words, ["ls"]);
        // Two on one line, read in order.
        let l = CommandLine::lex("cat <<A <<B\n1\nA\n2\nB\nrm x");
        assert_eq!(l.data, ["1\n", "2\n"]);
        assert_eq!(l.commands[1].words, ["rm", "x"]);
        // `<<` in quotes opens nothing: the next line is a command.
        assert_eq!(
            words("echo \"<<X\"\ncat /etc/shadow"),
            w(&[&["echo", "<<X"], &["cat", "/etc/shadow"]])
        );
        assert_eq!(
            words("echo '<<X'\ncat /etc/shadow"),
            w(&[&["echo", "<<X"], &["cat", "/etc/shadow"]])
        );
        // A here-string is data.
        let l = CommandLine::lex("cat <<< 'hi there'");
        assert_eq!(l.data, ["hi there"]);
        assert_eq!(l.commands[0].words, ["cat"]);
        // Unterminated: open.
        assert!(CommandLine::lex("cat <<EOF\nbody").open);
    }

    #[test]
    fn what_feeds_a_command_is_known() {
        let l = CommandLine::lex(
            "cat x | sh -s; echo a || bash; sh <<EOF\nrm -rf x\nEOF\npython3 <<< 'print(1)'",
        );
        let fed: Vec<(&str, bool, Vec<&str>)> = l
            .commands
            .iter()
            .map(|c| {
                (
                    c.words[0].as_str(),
                    c.piped,
                    c.stdin_data.iter().map(|&i| l.data[i].as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            fed,
            [
                ("cat", false, vec![]),
                ("sh", true, vec![]),
                ("echo", false, vec![]),
                ("bash", false, vec![]),
                ("sh", false, vec!["rm -rf x\n"]),
                ("python3", false, vec!["print(1)"]),
            ]
        );
    }

    #[test]
    fn open_lines_are_reported() {
        for cmd in [
            "echo 'a", "echo \"a", "echo $(a", "echo `a", "echo a\\", "echo $'a",
        ] {
            assert!(CommandLine::lex(cmd).open, "{cmd:?}");
        }
        for cmd in ["echo 'a'", "a | b", "echo $(a)", "cat <<X\nX"] {
            assert!(!CommandLine::lex(cmd).open, "{cmd:?}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "$(".repeat(10_000) + &")".repeat(10_000);
        let l = CommandLine::lex(&deep);
        assert_eq!(l.expansion, Some("$("));
        let unclosed = "\"$(".repeat(5_000);
        assert!(CommandLine::lex(&unclosed).open);
    }
}
