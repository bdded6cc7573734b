//! The opt-in JSON-lines trace (client contract notes §5).
//!
//! Off by default, and off records nothing. Lines go to stderr or a file,
//! never stdout. Raw header values, tokens, passwords and environment values
//! are never written; at `full`, previews of arguments pass through
//! [`redact`] first.

use std::io::Write;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::cli::TraceLevel;

/// Where trace lines go.
pub struct Trace {
    level: TraceLevel,
    started: Instant,
    sink: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("level", &self.level).finish()
    }
}

/// Words that make a key, a `name=value` or a `--flag value` secret.
const SECRET_WORDS: [&str; 12] = [
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "auth",
    "key",
    "cookie",
    "credential",
    "private",
    "session",
    "env",
];

/// The marker that replaces a secret.
const REDACTED: &str = "[REDACTED]";
/// Longest string a preview keeps, in bytes (cut on a character boundary).
const PREVIEW_STRING_BYTES: usize = 240;
/// Most array items a preview keeps.
const PREVIEW_ITEMS: usize = 50;
/// Deepest nesting a preview keeps.
const PREVIEW_DEPTH: usize = 8;

fn secret_name(name: &str) -> bool {
    // `author` (git's) is no secret; `authorization` is.
    let lower = name
        .to_ascii_lowercase()
        .replace("authoriz", "auth")
        .replace("author", "");
    SECRET_WORDS.iter().any(|w| lower.contains(w))
}

/// Whether `word` is a credential by its shape (the exec runtime's one
/// definition: provider token prefixes, AWS key ids, JWTs, ...).
fn secret_shaped(word: &str) -> bool {
    ctm_exec_runtime::credential_shaped(word)
}

/// `text` with every secret-looking part replaced by `[REDACTED]`: a
/// credential-shaped word, the value of `name=value` or `name: value` whose
/// name looks secret, the word after `Bearer`/`Basic`/`token` or after a
/// secret-named `--flag`, and the password of a URL. A private key block
/// makes the whole text `[REDACTED]`.
pub fn redact_text(text: &str) -> String {
    if text.contains("-----BEGIN") && text.contains("PRIVATE KEY") {
        return REDACTED.into();
    }
    // Only the start is ever shown: bound the work to it.
    let end = text.floor_char_boundary(REDACT_SCAN_BYTES);
    let text = &text[..end];
    let is_sep = |c: char| c.is_whitespace() || "\"'`,;()<>|&{}[]".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut redact_next = false;
    let mut after_user_flag = false;
    while !rest.is_empty() {
        let start = rest.find(|c: char| !is_sep(c)).unwrap_or(rest.len());
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(is_sep).unwrap_or(rest.len());
        let word = &rest[..end];
        rest = &rest[end..];
        if word.is_empty() {
            continue;
        }
        // `KEY = "x"`, `"password": "x"`: the value comes after these.
        if word == "=" || word == ":" {
            out.push_str(word);
            continue;
        }
        let bare = word.trim_start_matches('-').trim_end_matches([':', '=']);
        let lower = bare.to_ascii_lowercase();
        let scheme = ["bearer", "basic", "token"].contains(&lower.as_str());
        if std::mem::take(&mut redact_next) && !scheme {
            out.push_str(REDACTED);
            after_user_flag = false;
            continue;
        }
        let (shown, value_follows) = redact_word(word, std::mem::take(&mut after_user_flag));
        out.push_str(&shown);
        let key_like = !bare.is_empty()
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        after_user_flag = word == "-u" || word == "--user";
        redact_next =
            scheme || value_follows || (key_like && !word.contains('=') && names_a_secret(&lower));
    }
    out
}

/// Whether a word (lower case, no dashes) is the name of a secret whose
/// value comes next: `password X`, `--token X`, `-storepass X`,
/// `aws_secret_access_key X`. It must end like one: `keytool` is no key.
fn names_a_secret(word: &str) -> bool {
    const ENDINGS: [&str; 13] = [
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "token",
        "secret",
        "key",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "auth",
    ];
    let word = word.replace("authorization", "auth");
    ENDINGS.iter().any(|e| word.ends_with(e))
}

/// Longest start of a string that redaction looks at.
const REDACT_SCAN_BYTES: usize = 8192;

/// One word (no separators in it): the word as shown, and whether the
/// next word is a credential (`Authorization:Bearer` then the token).
fn redact_word(word: &str, after_user_flag: bool) -> (String, bool) {
    if secret_shaped(word) {
        return (REDACTED.into(), false);
    }
    // scheme://user:password@host...
    if let Some((scheme, after)) = word.split_once("://") {
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        if let Some(at) = after[..authority_end].rfind('@')
            && let Some(colon) = after[..at].find(':')
        {
            return (
                format!("{scheme}://{}:{REDACTED}{}", &after[..colon], &after[at..]),
                false,
            );
        }
        return (word.into(), false);
    }
    // curl -u user:password
    if after_user_flag && let Some((user, _)) = word.split_once(':') {
        return (format!("{user}:{REDACTED}"), false);
    }
    // mysql -pPASSWORD
    if word.len() > 2 && word.starts_with("-p") && !word.starts_with("--") {
        return (format!("-p{REDACTED}"), false);
    }
    // name=value, --name=value, name:value, and chains of them: a secret
    // name or any credential-shaped piece hides everything after the name.
    if let Some(i) = word.find(['=', ':']) {
        let (name, value) = (&word[..i], &word[i + 1..]);
        if value.is_empty() {
            return (word.into(), false);
        }
        // `Authorization:Bearer` then the token as the next word.
        let scheme = ["bearer", "basic", "token"].contains(&value.to_ascii_lowercase().as_str());
        if secret_name(name) || value.split(['=', ':']).any(secret_shaped) {
            return (format!("{name}{}{REDACTED}", &word[i..=i]), scheme);
        }
        return (word.into(), scheme);
    }
    (word.into(), false)
}

/// A bounded, redacted copy of tool arguments for the trace: values under
/// secret-looking keys become `[REDACTED]`, secret-looking parts of every
/// string too; strings are cut at 240 bytes (`...[truncated]`), arrays at
/// 50 items, nesting at 8 levels.
pub fn redact(value: &Value) -> Value {
    fn go(value: &Value, depth: usize) -> Value {
        if depth > PREVIEW_DEPTH {
            return json!("[truncated]");
        }
        match value {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| {
                        // Typed input (`write_stdin` chars, a command's
                        // stdin) is where passwords go at a prompt.
                        if secret_name(k) || matches!(k.as_str(), "chars" | "stdin") {
                            (k.clone(), json!(REDACTED))
                        } else {
                            (k.clone(), go(v, depth + 1))
                        }
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .take(PREVIEW_ITEMS)
                    .map(|v| go(v, depth + 1))
                    .collect(),
            ),
            Value::String(text) => {
                let clean = redact_text(text);
                if clean.len() <= PREVIEW_STRING_BYTES {
                    return json!(clean);
                }
                let cut = clean.floor_char_boundary(PREVIEW_STRING_BYTES);
                json!(format!("{}...[truncated]", &clean[..cut]))
            }
            other => other.clone(),
        }
    }
    go(value, 0)
}

impl Trace {
    /// A trace at `level` writing to `sink`.
    pub fn new(level: TraceLevel, sink: Box<dyn Write + Send>) -> Self {
        Self {
            level,
            started: Instant::now(),
            sink: Mutex::new(sink),
        }
    }

    /// A trace that records nothing.
    pub fn off() -> Self {
        Self::new(TraceLevel::Off, Box::new(std::io::sink()))
    }

    pub fn enabled(&self) -> bool {
        self.level != TraceLevel::Off
    }

    pub fn full(&self) -> bool {
        self.level == TraceLevel::Full
    }

    /// Milliseconds since the server started (monotonic, server-local).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Writes one event.
    pub fn event(&self, name: &str, fields: Map<String, Value>) {
        if !self.enabled() {
            return;
        }
        let mut obj = Map::new();
        obj.insert("event".into(), json!(name));
        obj.insert("t_ms".into(), json!(self.now_ms()));
        obj.extend(fields);
        let mut line = serde_json::to_vec(&Value::Object(obj)).unwrap_or_default();
        line.push(b'\n');
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        let _ = sink.write_all(&line);
        let _ = sink.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_redacted_wherever_they_are() {
        let ghp = format!("ghp_{}", "a1".repeat(18));
        let cases = [
            (
                format!("git push https://x:{ghp}@github.com/o/r"),
                "git push https://x:[REDACTED]@github.com/o/r",
            ),
            ("git log --author alice".into(), "git log --author alice"),
            (
                format!("GH_TOKEN={ghp} gh pr list"),
                "GH_TOKEN=[REDACTED] gh pr list",
            ),
            (format!("echo {ghp}"), "echo [REDACTED]"),
            (
                "curl -H 'Authorization: Bearer abc.def' x".into(),
                "curl -H 'Authorization: Bearer [REDACTED]' x",
            ),
            (
                "mysql --password hunter2 -e 'select 1'".into(),
                "mysql --password [REDACTED] -e 'select 1'",
            ),
            (
                "login --api-key=k123 now".into(),
                "login --api-key=[REDACTED] now",
            ),
            (
                "psql postgres://me:pw@db/x".into(),
                "psql postgres://me:[REDACTED]@db/x",
            ),
            (
                "aws --key AKIAABCDEFGHIJKLMNOP".into(),
                "aws --key [REDACTED]",
            ),
            ("echo AKIAABCDEFGHIJKLMNOP".into(), "echo [REDACTED]"),
            ("cargo test --workspace".into(), "cargo test --workspace"),
            (
                "mysql -pHunter2 -u root".into(),
                "mysql -p[REDACTED] -u root",
            ),
            (
                "keytool -storepass hunter2 -list".into(),
                "keytool -storepass [REDACTED] -list",
            ),
            (
                "curl -u bob:hunter2 https://x".into(),
                "curl -u bob:[REDACTED] https://x",
            ),
            (
                r#"{"password":"hunter2"}"#.into(),
                r#"{"password":"[REDACTED]"}"#,
            ),
            ("API_KEY = 'hunter2'".into(), "API_KEY = '[REDACTED]'"),
            (
                "machine h login u password hunter2".into(),
                "machine h login u password [REDACTED]",
            ),
            (
                "aws configure set aws_secret_access_key hunter2".into(),
                "aws configure set aws_secret_access_key [REDACTED]",
            ),
            (
                "curl -H Authorization:Bearer hunter2".into(),
                "curl -H Authorization:[REDACTED] [REDACTED]",
            ),
            (
                "curl -H X-Auth:Bearer hunter2 x".into(),
                "curl -H X-Auth:[REDACTED] [REDACTED] x",
            ),
            ("x=y=ghp_abcdefghijklmnop".into(), "x=[REDACTED]"),
            ("ls src/key_handling.rs".into(), "ls src/key_handling.rs"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_text(&input), want, "{input}");
        }
        assert_eq!(
            redact_text("x\n-----BEGIN OPENSSH PRIVATE KEY-----\nabc"),
            "[REDACTED]"
        );
    }

    #[test]
    fn long_chains_neither_recurse_nor_take_long() {
        let chain = "a=".repeat(200_000);
        let out = redact_text(&chain);
        assert!(out.len() <= REDACT_SCAN_BYTES + 16);
        let v = redact(&json!({"chars": "hunter2\n", "stdin": "pw"}));
        assert_eq!(
            (v["chars"].clone(), v["stdin"].clone()),
            (json!(REDACTED), json!(REDACTED))
        );
    }

    #[test]
    fn previews_are_bounded() {
        let long = "é".repeat(500);
        let v = redact(&json!({"cmd": long, "list": (0..80).collect::<Vec<_>>()}));
        let cmd = v["cmd"].as_str().unwrap();
        assert!(
            cmd.ends_with("...[truncated]") && cmd.len() <= 240 + 14,
            "{cmd}"
        );
        assert_eq!(v["list"].as_array().unwrap().len(), 50);
    }

    #[test]
    fn secrets_are_redacted_recursively() {
        let v = json!({"cmd": "ls", "env": {"A": "1"}, "nested": [{"api_key": "k", "path": "p"}], "Authorization": "Bearer x"});
        let r = redact(&v);
        assert_eq!(r["cmd"], "ls");
        assert_eq!(r["env"], "[REDACTED]");
        assert_eq!(r["nested"][0]["api_key"], "[REDACTED]");
        assert_eq!(r["nested"][0]["path"], "p");
        assert_eq!(r["Authorization"], "[REDACTED]");
    }

    #[test]
    fn off_writes_nothing() {
        let t = Trace::off();
        t.event("x", Map::new());
        assert!(!t.enabled());
    }
}
