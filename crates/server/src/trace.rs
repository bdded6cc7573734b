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

const SECRET_WORDS: [&str; 9] = [
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "key",
    "cookie",
    "credential",
    "env",
];

/// Replaces every value whose key looks secret with `"[REDACTED]"`, recursively.
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let lower = k.to_ascii_lowercase();
                    if SECRET_WORDS.iter().any(|w| lower.contains(w)) {
                        (k.clone(), json!("[REDACTED]"))
                    } else {
                        (k.clone(), redact(v))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
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
