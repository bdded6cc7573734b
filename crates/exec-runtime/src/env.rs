//! The child environment, built explicitly.

use std::collections::BTreeMap;

/// Which of the server's variables a command starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvInherit {
    /// `PATH`, locale, `TERM`, `GIT_CONFIG_GLOBAL`.
    Core,
    /// Everything (still filtered outside dangerous mode).
    All,
    /// Nothing.
    None,
}

const LOADER_VARS: [&str; 14] = [
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "NODE_OPTIONS",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    "PROMPT_COMMAND",
    "GIT_EXEC_PATH",
];

/// Words that make a variable's name secret wherever they appear in it
/// (lowercase). docs/security.md lists them.
pub const SECRET_NAME_WORDS: &[&str] = &[
    "token",
    "secret",
    "credential",
    "creds",
    "password",
    "passwd",
    "passphrase",
    "private",
    "privkey",
    "apikey",
    "api_key",
    "api-key",
    "auth",
    "bearer",
    "jwt",
    "cookie",
    "session",
    "signing",
    "dsn",
    "webhook",
    "connection_string",
    "connstr",
];

/// Parts of a name (split at `_` and `-`) that make it secret: `GH_PAT`,
/// `API_KEY`, `DB_PW`, `SMTP_PASS`, `STRIPE_SK`.
pub const SECRET_NAME_PARTS: &[&str] = &["pat", "key", "pw", "pwd", "pass", "sk"];

/// Prefixes of well-known credentials, whatever the variable is called.
pub const SECRET_VALUE_PREFIXES: &[&str] = &[
    // GitHub
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    // GitLab
    "glpat-",
    // Stripe (secret and restricted keys)
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    // Slack
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxs-",
    "xapp-",
    // npm, PyPI, Hugging Face, DigitalOcean, Shopify, SendGrid
    "npm_",
    "pypi-",
    "hf_",
    "dop_v1_",
    "shpat_",
    "SG.",
    // Google OAuth access tokens
    "ya29.",
];

/// Variables a caller may not set for a command (outside dangerous mode):
/// each makes a program run code it names (git's config from the
/// environment can set `core.fsmonitor`; a JVM option can load an agent),
/// which the command line's gates would have refused written out.
const STEERING_VARS: &[&str] = &[
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_TEMPLATE_DIR",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "PERLLIB",
    "NODE_PATH",
    "PYTHONHOME",
    "LESSOPEN",
    "LESSCLOSE",
];

/// Whether a caller-set variable makes a program run code it names (see
/// [`STEERING_VARS`]; also git's `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`).
pub fn steers_programs(name: &str) -> bool {
    STEERING_VARS.contains(&name)
        || LOADER_VARS.contains(&name)
        || name.starts_with("GIT_CONFIG_KEY_")
        || name.starts_with("GIT_CONFIG_VALUE_")
        || name.starts_with("DYLD_")
}

/// Names (prefixes) that carry a secret word but no secret: git's author
/// and its `GIT_CONFIG_KEY_<n>` (dropping a key but not its value breaks
/// every git command), and settings that merely mention a session or a
/// tokenizer.
pub const NOT_SECRET_NAME_PREFIXES: &[&str] = &[
    "GIT_AUTHOR_",
    "GIT_CONFIG_KEY_",
    "GIT_CONFIG_COUNT",
    "TOKENIZERS_",
    "XDG_SESSION_",
    "PASSWORD_STORE_DIR",
];

/// A name or value that looks secret, or a variable that loads code.
pub fn is_sensitive(name: &str, value: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let upper = name.to_ascii_uppercase();
    let named_harmless = NOT_SECRET_NAME_PREFIXES
        .iter()
        .any(|p| upper.starts_with(p));
    let secret_name = !named_harmless
        && (SECRET_NAME_WORDS.iter().any(|w| n.contains(w))
            || n.split(['_', '-'])
                .any(|part| SECRET_NAME_PARTS.contains(&part))
            || n.ends_with("_key")
            || n.ends_with("pass"));
    let loader = LOADER_VARS.contains(&name) || name.starts_with("DYLD_");
    let v = value.trim();
    let secret_value = url_carries_secret(v)
        // A key anywhere in the value (a service account's JSON), or
        // base64 of one (`-----BEGIN` encodes as `LS0tLS1CRUdJTi`).
        || v.contains("-----BEGIN") && v.contains("PRIVATE KEY")
        || v.starts_with("LS0tLS1CRUdJTi")
        // Connection strings and authorization headers.
        || ["AccountKey=", "SharedAccessKey=", "SharedAccessSignature="]
            .iter()
            .any(|k| v.contains(k))
        || ["Bearer ", "Basic "]
            .iter()
            .any(|p| v.starts_with(p) && v.len() >= p.len() + 8)
        || credential_shaped(v);
    secret_name || loader || secret_value
}

/// Whether `word` is a credential by its shape alone: a known provider
/// prefix ([`SECRET_VALUE_PREFIXES`]) with a body, an OpenAI/Anthropic
/// `sk-` key, an AWS access key id, a Google API key, a JWT. The one
/// definition the secret filter and the server's trace redaction share.
pub fn credential_shaped(word: &str) -> bool {
    let aws = |w: &str| {
        (w.starts_with("AKIA") || w.starts_with("ASIA"))
            && w.len() == 20
            && w[4..]
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    };
    SECRET_VALUE_PREFIXES
        .iter()
        .any(|p| word.starts_with(p) && word.len() >= p.len() + 8)
        || (word.starts_with("sk-") && word.len() >= 20)
        || aws(word)
        // A Google API key.
        || (word.starts_with("AIza") && word.len() == 39)
        || looks_like_jwt(word)
}

/// A URL with a password (`scheme://user:password@host`), a long token in
/// its path (Slack's and Discord's webhooks: `/services/T…/B…/<token>`) or
/// a credential in its query (`?token=`, `key=`, `sig=`, ...).
fn url_carries_secret(v: &str) -> bool {
    let Some((scheme, rest)) = v.split_once("://") else {
        return false;
    };
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    {
        return false;
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // A password, or a token as the user (`https://ghp_...@github.com`).
    if authority.rsplit_once('@').is_some_and(|(userinfo, _)| {
        userinfo.contains(':')
            || token_like(userinfo)
            || SECRET_VALUE_PREFIXES
                .iter()
                .any(|p| userinfo.starts_with(p))
    }) {
        return true;
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let path = path.split('#').next().unwrap_or_default();
    if path.split('/').any(token_like) {
        return true;
    }
    query.split(['&', '#']).any(|pair| {
        let (k, val) = pair.split_once('=').unwrap_or((pair, ""));
        let k = k.to_ascii_lowercase();
        !val.is_empty()
            && (SECRET_NAME_WORDS.iter().any(|w| k.contains(w))
                || matches!(
                    k.as_str(),
                    "key" | "sig" | "signature" | "code" | "pass" | "pwd"
                ))
    })
}

/// A path segment that is a token: 24 or more characters of `[A-Za-z0-9_-]`
/// mixing lower and upper case letters and digits (so not a commit id, a
/// content hash or a lower-case feed name in a URL).
fn token_like(seg: &str) -> bool {
    seg.len() >= 24
        && seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && seg.bytes().any(|b| b.is_ascii_digit())
        && seg.bytes().any(|b| b.is_ascii_lowercase())
        && seg.bytes().any(|b| b.is_ascii_uppercase())
}

/// Three base64url parts, the first a JSON header (`eyJ`).
fn looks_like_jwt(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && v.starts_with("eyJ")
        && parts.iter().all(|p| {
            p.len() >= 4
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'=')
        })
}

fn is_core(name: &str) -> bool {
    matches!(
        name,
        "PATH"
            | "LANG"
            | "LANGUAGE"
            | "TERM"
            | "TZ"
            | "GIT_CONFIG_GLOBAL"
            | "USER"
            | "LOGNAME"
            | "SHELL"
    ) || name.starts_with("LC_")
}

/// The operator's adjustments of the base set (`CODING_TOOLS_MCP_SHELL_ENV_*`),
/// as the reference implementation applies them: after the secret filter,
/// `exclude` drops the names matching any of its patterns, then a non-empty
/// `include_only` keeps only the names matching one of its; `set` is added
/// unfiltered (the operator chose it). Patterns are shell globs (`*`, `?`,
/// `[...]`, `[!...]`) compared without regard to case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    /// Patterns of names to keep (empty: keep all).
    pub include_only: Vec<String>,
    /// Patterns of names to drop.
    pub exclude: Vec<String>,
    /// Variables every command gets. `HOME`, `TMPDIR` and `XDG_CACHE_HOME`
    /// stay those of the runtime directory; the caller's `env` wins.
    pub set: BTreeMap<String, String>,
}

/// Whether `name` matches the shell glob `pattern`, ignoring ASCII case.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    fn upper(s: &str) -> Vec<char> {
        s.chars().map(|c| c.to_ascii_uppercase()).collect()
    }
    /// At `p[0] == '['`: whether `c` is in the set, and where the set ends;
    /// `None` when the bracket is not closed (then it is a literal `[`).
    fn class(p: &[char], c: char) -> Option<(bool, usize)> {
        let mut i = 1;
        let negate = matches!(p.get(i), Some('!' | '^'));
        if negate {
            i += 1;
        }
        let mut hit = false;
        let mut first = true;
        while i < p.len() && (first || p[i] != ']') {
            first = false;
            if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
                hit |= p[i] <= c && c <= p[i + 2];
                i += 3;
            } else {
                hit |= p[i] == c;
                i += 1;
            }
        }
        (i < p.len()).then_some((hit != negate, i + 1))
    }
    fn go(p: &[char], n: &[char]) -> bool {
        // Iterative with one backtrack point for the last `*`.
        let (mut pi, mut ni) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ni < n.len() {
            let step = match p.get(pi) {
                Some('*') => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                Some('?') => Some(1),
                Some('[') => match class(&p[pi..], n[ni]) {
                    Some((true, len)) => Some(len),
                    Some((false, _)) => None,
                    None => (n[ni] == '[').then_some(1),
                },
                Some(&c) => (c == n[ni]).then_some(1),
                None => None,
            };
            match step {
                Some(len) => {
                    pi += len;
                    ni += 1;
                }
                None => match star {
                    Some((sp, sn)) => {
                        pi = sp + 1;
                        ni = sn + 1;
                        star = Some((sp, sn + 1));
                    }
                    None => return false,
                },
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
    go(&upper(pattern), &upper(name))
}

fn matches_any(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob_matches(p, name))
}

/// Everything that shapes one command's environment.
#[derive(Debug, Clone)]
pub struct EnvSpec<'a> {
    /// The server's own variables.
    pub inherited: &'a [(String, String)],
    /// The base set.
    pub inherit: EnvInherit,
    /// Drop secret-looking and loader variables (outside dangerous mode).
    pub filter_sensitive: bool,
    /// `HOME`, `TMPDIR`, `XDG_CACHE_HOME` of the runtime directory.
    pub home: &'a str,
    /// Runtime temp dir.
    pub tmp: &'a str,
    /// Runtime cache dir.
    pub cache: &'a str,
    /// Under a PTY (`TERM` stays a real terminal type).
    pub tty: bool,
    /// Real toolchain locations (`RUSTUP_HOME`, `PYENV_ROOT`, ...), which the
    /// private `HOME` would otherwise hide.
    pub toolchain: &'a [(String, String)],
    /// The operator's include/exclude patterns and fixed variables.
    pub policy: &'a EnvPolicy,
    /// The caller's variables, applied last.
    pub caller: &'a BTreeMap<String, String>,
}

/// What every command gets so that nothing waits for a person: no pager,
/// no editor, no git prompt, no colour, CI behaviour.
pub const NON_INTERACTIVE_DEFAULTS: [(&str, &str); 7] = [
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_EDITOR", "true"),
    ("EDITOR", "true"),
    ("NO_COLOR", "1"),
    ("CI", "1"),
];

/// Builds the environment: base set, filter, runtime dirs, non-interactive
/// defaults, then the caller's variables.
pub fn build_env(spec: &EnvSpec<'_>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = spec
        .inherited
        .iter()
        .filter(|(k, _)| match spec.inherit {
            EnvInherit::All => true,
            EnvInherit::Core => is_core(k),
            EnvInherit::None => false,
        })
        .filter(|(k, v)| !(spec.filter_sensitive && is_sensitive(k, v)))
        // The server's own settings (its bearer token among them) are not
        // the command's, in any mode.
        .filter(|(k, _)| !k.starts_with("CODING_TOOLS_MCP_"))
        .filter(|(k, _)| !matches_any(&spec.policy.exclude, k))
        .filter(|(k, _)| {
            spec.policy.include_only.is_empty() || matches_any(&spec.policy.include_only, k)
        })
        .cloned()
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".into());
    for (k, v) in spec.toolchain {
        env.insert(k.clone(), v.clone());
    }
    env.insert("HOME".into(), spec.home.into());
    env.insert("TMPDIR".into(), spec.tmp.into());
    env.insert("XDG_CACHE_HOME".into(), spec.cache.into());
    for (k, v) in NON_INTERACTIVE_DEFAULTS {
        env.insert(k.into(), v.into());
    }
    env.insert(
        "TERM".into(),
        if spec.tty { "xterm" } else { "dumb" }.into(),
    );
    for (k, v) in &spec.policy.set {
        if !matches!(k.as_str(), "HOME" | "TMPDIR" | "XDG_CACHE_HOME") {
            env.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in spec.caller {
        if !(spec.filter_sensitive && is_sensitive(k, v)) {
            env.insert(k.clone(), v.clone());
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_overrides() {
        let inherited: Vec<(String, String)> = [
            ("PATH", "/bin"),
            ("GITHUB_TOKEN", "x"),
            ("LD_PRELOAD", "/evil.so"),
            ("LC_ALL", "C.UTF-8"),
            ("RANDOM_THING", "1"),
            ("HARMLESS", "ghp_abcdefabcdef"),
            ("DATABASE_URL", "postgres://u:pw@db/x"),
            ("GH_PAT", "x"),
            ("SENTRY_DSN", "x"),
            ("SIGNING_KEY_PEM", "x"),
            ("MY_CREDS", "x"),
            ("NPM_CONFIG__AUTH", "x"),
            ("PLAIN_URL", "https://example.com/a@b"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let caller: BTreeMap<String, String> = [
            ("PAGER".to_string(), "less".to_string()),
            ("MY_SECRET".into(), "s".into()),
        ]
        .into();
        let spec = EnvSpec {
            inherited: &inherited,
            inherit: EnvInherit::All,
            filter_sensitive: true,
            home: "/rt/home",
            tmp: "/rt/tmp",
            cache: "/rt/cache",
            tty: false,
            toolchain: &[],
            policy: &EnvPolicy::default(),
            caller: &caller,
        };
        let env = build_env(&spec);
        assert_eq!(env["HOME"], "/rt/home");
        assert_eq!(env["PAGER"], "less", "the caller overrides defaults");
        assert_eq!(env["GIT_TERMINAL_PROMPT"], "0");
        assert!(
            !env.contains_key("GITHUB_TOKEN")
                && !env.contains_key("LD_PRELOAD")
                && !env.contains_key("HARMLESS")
        );
        assert!(!env.contains_key("MY_SECRET"));
        assert!(env.contains_key("RANDOM_THING"));
        for k in [
            "DATABASE_URL",
            "GH_PAT",
            "SENTRY_DSN",
            "SIGNING_KEY_PEM",
            "MY_CREDS",
            "NPM_CONFIG__AUTH",
        ] {
            assert!(!env.contains_key(k), "{k}");
        }
        assert!(env.contains_key("PLAIN_URL"));
        let core = build_env(&EnvSpec {
            inherit: EnvInherit::Core,
            ..spec.clone()
        });
        assert!(!core.contains_key("RANDOM_THING") && core.contains_key("LC_ALL"));
        let dangerous = build_env(&EnvSpec {
            filter_sensitive: false,
            ..spec
        });
        assert!(dangerous.contains_key("GITHUB_TOKEN") && dangerous.contains_key("MY_SECRET"));
    }

    /// The secret filter, name by name and value by value (issue "the
    /// smaller holes": each of these reached commands before).
    #[test]
    fn secrets_by_name_and_by_value_shape() {
        for (name, value) in [
            ("DB_PASS", "hunter2"),
            ("SMTP_PASS", "x"),
            ("MYSQLPASS", "x"),
            ("GPG_PASSPHRASE", "x"),
            (
                "SLACK_WEBHOOK_URL",
                "https://hooks.slack.com/services/T0/B0/x",
            ),
            ("SSL_PRIVKEY", "x"),
            ("STRIPE_SK", "x"),
            ("BEARER", "x"),
            ("BEARER_HEADER", "x"),
            ("AZURE_CONNECTION_STRING", "x"),
            ("GITHUB_TOKEN", "x"),
            ("API_KEY", "x"),
            // By value, whatever the name.
            ("STRIPE", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            ("S", "rk_live_4eC39HqLyjWDarjtT1zdp7dc"),
            (
                "CHAT",
                "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy",
            ),
            ("GL", "glpat-xxxxxxxxxxxxxxxxxxxx"),
            ("NPMRC_VALUE", "npm_abcdefghijklmnopqrstuvwxyz0123456789"),
            ("UPLOAD", "pypi-AgEIcHlwaS5vcmcCJGRlYWRiZWVm"),
            ("G", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
            ("AWS_SESSION", "ASIAIOSFODNN7EXAMPLE"),
            (
                "ID",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU",
            ),
            (
                "HOOK",
                "https://hooks.slack.com/services/T00000000/B00000000/pdFZKVeTuE8sk7oOcBrzbqgy",
            ),
            (
                "DISCORD",
                "https://discord.com/api/webhooks/123456789012345678/aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
            ),
            ("FEED", "https://example.com/feed.xml?token=abc123"),
            (
                "BLOB",
                "https://acct.blob.core.windows.net/c/f?sv=2020&sig=abcdef",
            ),
            ("DATABASE_URL", "postgres://u:pw@db/x"),
            (
                "REPO",
                "https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r.git",
            ),
            (
                "SA_JSON",
                "{\"type\": \"service_account\", \"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMII\"}",
            ),
            ("CERT_B64", "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t"),
            (
                "STORAGE",
                "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc123==;EndpointSuffix=x",
            ),
            ("HEADER", "Bearer abcdefghijklmnop"),
        ] {
            assert!(is_sensitive(name, value), "{name}={value}");
        }
        for (name, value) in [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("EDITOR", "vim"),
            ("TASK_COUNT", "4"),
            ("KEYBOARD_LAYOUT", "us"),
            ("COMPASS_HOME", "/opt/c"),
            ("BYPASS_CACHE", "1"),
            ("SSL_CERT_FILE", "/etc/ssl/certs/ca.pem"),
            ("PIP_INDEX_URL", "https://pypi.org/simple"),
            (
                "REPO_URL",
                "https://github.com/o/r/commit/0123456789abcdef0123456789abcdef01234567",
            ),
            ("DOCS", "https://docs.rs/tokio/latest/tokio/index.html"),
            ("NODE_ENV", "production"),
            ("SKIP", "sk-short"),
            ("GIT_AUTHOR_NAME", "A U Thor"),
            ("GIT_AUTHOR_EMAIL", "a@example.org"),
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "user.name"),
            ("GIT_CONFIG_VALUE_0", "x"),
            ("TOKENIZERS_PARALLELISM", "false"),
            ("XDG_SESSION_TYPE", "tty"),
            ("PASSWORD_STORE_DIR", "/home/u/.password-store"),
            (
                "PIP_INDEX_URL",
                "https://pkgs.dev.azure.com/org/_packaging/python-internal-feed2024/pypi/simple/",
            ),
        ] {
            assert!(!is_sensitive(name, value), "{name}={value}");
        }
    }

    #[test]
    fn globs_as_fnmatch_without_case() {
        for (p, n) in [
            ("AWS_*", "aws_region"),
            ("*", ""),
            ("PATH", "path"),
            ("LC_?LL", "LC_ALL"),
            ("[A-C]X", "bx"),
            ("[!A]X", "BX"),
            ("*_HOME*", "JAVA_HOME"),
            ("a*b*c", "aXbYbc"),
            ("[", "["),
        ] {
            assert!(glob_matches(p, n), "{p} ~ {n}");
        }
        for (p, n) in [
            ("AWS_*", "XAWS_A"),
            ("PATH", "PATHS"),
            ("?", ""),
            ("[!A]X", "AX"),
            ("a*b*c", "aXbYb"),
        ] {
            assert!(!glob_matches(p, n), "{p} !~ {n}");
        }
    }

    #[test]
    fn operator_policy_after_the_filter() {
        let inherited: Vec<(String, String)> = [
            ("PATH", "/bin"),
            ("AWS_REGION", "eu"),
            ("AWS_PROFILE", "dev"),
            ("FOO", "1"),
            ("GITHUB_TOKEN", "x"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let policy = EnvPolicy {
            include_only: vec!["aws_*".into(), "PATH".into(), "GITHUB_*".into()],
            exclude: vec!["*PROFILE".into()],
            set: [
                ("PAGER".to_string(), "less".to_string()),
                ("HOME".into(), "/elsewhere".into()),
                ("API_TOKEN".into(), "chosen".into()),
            ]
            .into(),
        };
        let caller = BTreeMap::from([("PAGER".to_string(), "more".to_string())]);
        let spec = EnvSpec {
            inherited: &inherited,
            inherit: EnvInherit::All,
            filter_sensitive: true,
            home: "/rt/home",
            tmp: "/rt/tmp",
            cache: "/rt/cache",
            tty: false,
            toolchain: &[],
            policy: &policy,
            caller: &BTreeMap::new(),
        };
        let env = build_env(&spec);
        assert_eq!(env.get("AWS_REGION").map(String::as_str), Some("eu"));
        assert!(!env.contains_key("AWS_PROFILE"), "exclude");
        assert!(!env.contains_key("FOO"), "include_only");
        assert!(
            !env.contains_key("GITHUB_TOKEN"),
            "the filter still applies"
        );
        assert_eq!(env["PAGER"], "less", "set overrides the defaults");
        assert_eq!(env["API_TOKEN"], "chosen", "set is the operator's");
        assert_eq!(env["HOME"], "/rt/home");
        let env = build_env(&EnvSpec {
            caller: &caller,
            ..spec
        });
        assert_eq!(env["PAGER"], "more", "the caller wins");
    }
}
