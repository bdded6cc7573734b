//! Where commands may read and execute outside the workspace: the system's
//! toolchain and configuration roots, the directories on `PATH`, and the
//! homes of the version managers whose shims are on it — and the variables
//! that let those toolchains find themselves under a private `HOME`.

use std::path::{Path, PathBuf};

/// Toolchains and the system files programs read at start.
pub const SYSTEM_READ_ROOTS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/npmrc",
    "/usr/local/sdkman/candidates",
    // The dynamic loader's cache and configuration.
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    // OS metadata.
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/lsb-release",
    // git's system configuration.
    "/etc/gitconfig",
    "/etc/gitconfig.d",
    // Name lookups (/etc/shadow stays closed).
    "/etc/passwd",
    "/etc/group",
    // The resolver.
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
    // The resolver's files, never their directories: systemd-resolved's
    // varlink socket sits beside them (a DNS channel out of a sandbox whose
    // network is closed).
    "/run/systemd/resolve/stub-resolv.conf",
    "/run/systemd/resolve/resolv.conf",
    "/run/resolvconf/resolv.conf",
    // Configuration that interpreters on Debian-like systems reach through
    // symlinks from /usr.
    "/etc/python3",
    "/etc/perl",
    "/etc/java-17-openjdk",
    "/etc/java-21-openjdk",
    "/etc/java-11-openjdk",
    "/etc/terminfo",
    "/etc/magic",
    "/etc/mime.types",
    // What a build asks of the machine (CPU count, memory), nothing per process.
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/sys/devices/system/cpu",
];

/// A version manager: its home (variable, default under `HOME`), the
/// variables to pass, and how to tell its shims are on `PATH`.
struct Manager {
    var: &'static str,
    default: &'static str,
    /// Only these parts of the home are readable (all of it when empty):
    /// `~/.cargo/credentials.toml` holds registry tokens.
    parts: &'static [&'static str],
    /// Also read (and passed with its real location), if present.
    companions: &'static [(&'static str, &'static str)],
}

const MANAGERS: &[Manager] = &[
    Manager {
        var: "CARGO_HOME",
        default: ".cargo",
        parts: &["bin", "registry", "git"],
        companions: &[("RUSTUP_HOME", ".rustup")],
    },
    Manager {
        var: "PYENV_ROOT",
        parts: &[],
        default: ".pyenv",
        companions: &[],
    },
    Manager {
        var: "NVM_DIR",
        parts: &[],
        default: ".nvm",
        companions: &[],
    },
    Manager {
        var: "SDKMAN_DIR",
        parts: &[],
        default: ".sdkman",
        companions: &[],
    },
    Manager {
        var: "ASDF_DATA_DIR",
        parts: &[],
        default: ".asdf",
        companions: &[],
    },
    // mise's configuration (which may set secret variables) stays closed.
    Manager {
        var: "MISE_DATA_DIR",
        default: ".local/share/mise",
        parts: &[],
        companions: &[],
    },
    Manager {
        var: "UV_PYTHON_INSTALL_DIR",
        parts: &[],
        default: ".local/share/uv/python",
        companions: &[("UV_TOOL_DIR", ".local/share/uv/tools")],
    },
];

/// The read roots and toolchain variables of one server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toolchains {
    /// Read and execute beneath these (canonical, existing).
    pub read_roots: Vec<PathBuf>,
    /// Variables every command gets, naming real toolchain locations.
    pub env: Vec<(String, String)>,
    /// `PATH` entries not made read roots, with the reason.
    pub skipped: Vec<(String, &'static str)>,
}

fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

fn canonical(p: &Path) -> Option<PathBuf> {
    p.canonicalize().ok()
}

/// Discovers the roots from the server's environment `env` and the
/// operator's extra roots (`--exec-allow-root`,
/// `CODING_TOOLS_MCP_EXEC_ALLOW_ROOTS`).
pub fn discover(env: &[(String, String)], extra: &[PathBuf]) -> Toolchains {
    let mut t = Toolchains::default();
    let home = get(env, "HOME").map(PathBuf::from);
    let home_c = home.as_deref().and_then(canonical);
    let add = |t: &mut Toolchains, p: PathBuf| {
        if !t.read_roots.contains(&p) {
            t.read_roots.push(p);
        }
    };
    // Both spellings of a root that is a symlink (`/etc/os-release` ->
    // `/usr/lib/os-release`): the kernel confines the file it resolves to,
    // the path gate reads the command line as written.
    for r in SYSTEM_READ_ROOTS {
        if let Some(p) = canonical(Path::new(r)) {
            add(&mut t, PathBuf::from(r));
            add(&mut t, p);
        }
    }
    // Never a root that holds a home directory (or is one).
    let too_wide =
        |p: &Path| p == Path::new("/") || home_c.as_deref().is_some_and(|h| h.starts_with(p));
    let path_dirs: Vec<(PathBuf, PathBuf)> = get(env, "PATH")
        .unwrap_or_default()
        .split(':')
        .filter_map(|d| {
            if !d.starts_with('/') {
                if !d.is_empty() {
                    t.skipped.push((d.to_owned(), "relative"));
                }
                return None;
            }
            canonical(Path::new(d))
                .filter(|p| p.is_dir())
                .map(|p| (PathBuf::from(d), p))
        })
        .collect();
    for (given, d) in &path_dirs {
        if too_wide(d) {
            t.skipped
                .push((given.display().to_string(), "a home directory or above one"));
        } else {
            add(&mut t, given.clone());
            add(&mut t, d.clone());
        }
    }
    let path_dirs: Vec<PathBuf> = path_dirs.into_iter().map(|(_, d)| d).collect();
    for m in MANAGERS {
        let root = get(env, m.var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(m.default)));
        let Some(root) = root.as_deref().and_then(canonical) else {
            continue;
        };
        if too_wide(&root) || !path_dirs.iter().any(|d| d.starts_with(&root)) {
            continue;
        }
        if m.parts.is_empty() {
            add(&mut t, root.clone());
        } else {
            for part in m.parts {
                if let Some(p) = canonical(&root.join(part)) {
                    add(&mut t, p);
                }
            }
        }
        t.env.push((m.var.to_owned(), root.display().to_string()));
        for (var, default) in m.companions {
            let c = get(env, var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)));
            if let Some(c) = c.as_deref().and_then(canonical).filter(|c| !too_wide(c)) {
                add(&mut t, c.clone());
                t.env.push(((*var).to_owned(), c.display().to_string()));
            }
        }
    }
    // An activated virtual environment or conda environment outside the
    // workspace: the whole environment (its `pyvenv.cfg` sits above `bin`)
    // and the base interpreter's prefix its `pyvenv.cfg` names (`home =
    // <prefix>/bin`), so that both tiers run it alike.
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        let Some(v) = get(env, var).and_then(|v| canonical(Path::new(v))) else {
            continue;
        };
        if too_wide(&v) || !v.is_dir() {
            continue;
        }
        if let Some(prefix) = base_interpreter_prefix(&v).filter(|p| !too_wide(p)) {
            add(&mut t, prefix);
        }
        add(&mut t, v);
    }
    if let Some(j) = get(env, "JAVA_HOME").and_then(|j| canonical(Path::new(j)))
        && !too_wide(&j)
    {
        add(&mut t, j.clone());
        t.env.push(("JAVA_HOME".into(), j.display().to_string()));
    }
    for e in extra {
        if let Some(p) = canonical(e) {
            add(&mut t, p);
        }
    }
    t
}

/// The prefix of the interpreter a virtual environment was made from: the
/// parent of the `home` directory its `pyvenv.cfg` names.
fn base_interpreter_prefix(venv: &Path) -> Option<PathBuf> {
    let cfg = ctm_workspace_fs::read_small(&venv.join("pyvenv.cfg"))?;
    let home = cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| v.trim().to_owned())
    })?;
    let home = canonical(Path::new(&home))?;
    let prefix = if home.ends_with("bin") {
        home.parent()?.to_path_buf()
    } else {
        home
    };
    prefix.is_dir().then_some(prefix)
}

/// Where a project's own virtual environment sits, at the workspace root.
const WORKSPACE_VENVS: [&str; 4] = [".venv", "venv", ".env", "env"];

/// Directories every local account may write: a prefix beneath one could
/// be anybody's, made to look like a Python installation.
const SHARED_DIRS: [&str; 5] = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/var/lock"];

/// Adds the base interpreter of the workspace's own virtual environments
/// (`.venv`, `venv`, `.env`, `env` with a `pyvenv.cfg`): `.venv/bin/python`
/// links to it, and a pyenv or uv interpreter under the home directory is
/// no system root. The workspace is written by commands (and comes from
/// whoever wrote the repository), so what its `pyvenv.cfg` names opens
/// little, and only when it is a Python installation the environment runs:
///
/// - the environment's `bin/python` (or `python3`) resolves into the named
///   `<prefix>/bin`, and `<prefix>/lib/python3.N/os.py` exists;
/// - the prefix is not `/`, holds neither the home directory nor the
///   workspace nor `also_not` (the runtime directory), lies neither in the
///   workspace nor in a directory every account may write, and the home
///   directory is known (`HOME`, else the account's entry);
/// - what is added is `<prefix>/bin`, `<prefix>/lib/python3.N` and the
///   `libpython3*` files beside it — not the rest of the prefix.
pub fn add_workspace_venvs(
    t: &mut Toolchains,
    ws: &ctm_workspace_fs::Workspace,
    env: &[(String, String)],
    also_not: &[&Path],
) {
    let workspace = ws.root();
    let Some(home) = get(env, "HOME")
        .map(PathBuf::from)
        .or_else(account_home)
        .and_then(|h| canonical(&h))
    else {
        return;
    };
    for name in WORKSPACE_VENVS {
        // Its `pyvenv.cfg` beneath the workspace, not through a link out.
        if ws.resolve_beneath(&format!("{name}/pyvenv.cfg")).is_err() {
            continue;
        }
        let venv = workspace.join(name);
        let Some(prefix) = base_interpreter_prefix(&venv) else {
            continue;
        };
        let holds = |p: &Path| p.starts_with(&prefix);
        if prefix == Path::new("/")
            || holds(&home)
            || holds(workspace)
            || also_not.iter().any(|p| holds(p))
            || prefix.starts_with(workspace)
            || SHARED_DIRS.iter().any(|d| prefix.starts_with(d))
        {
            continue;
        }
        let bin = prefix.join("bin");
        let runs_it = ["bin/python", "bin/python3"]
            .iter()
            .any(|p| canonical(&venv.join(p)).is_some_and(|target| target.starts_with(&bin)));
        let Some(lib) = python_lib(&prefix) else {
            continue;
        };
        if !runs_it {
            continue;
        }
        for root in [bin, lib].into_iter().chain(libpython_files(&prefix)) {
            if !t.read_roots.contains(&root) {
                t.read_roots.push(root);
            }
        }
    }
}

/// `prefix/lib/python3.N` holding `os.py` (canonical), for the first N.
fn python_lib(prefix: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(prefix.join("lib")).ok()?;
    entries
        .flatten()
        .take(64)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .find(|e| e.path().join("os.py").is_file())
        .and_then(|e| canonical(&e.path()))
        .filter(|l| l.starts_with(prefix))
}

/// The shared interpreter library of a prefix (`lib/libpython3*.so*`),
/// which its `python` loads.
fn libpython_files(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .take(256)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("libpython3") && n.contains(".so")
        })
        .filter_map(|e| canonical(&e.path()))
        .filter(|p| p.starts_with(prefix) && p.is_file())
        .take(8)
        .collect()
}

/// The home directory of the server's account (its passwd entry), for
/// when `HOME` is unset.
#[expect(unsafe_code, reason = "getpwuid_r has no safe wrapper here")]
fn account_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, both alive and sized
    // as passed; `found` points at `pwd` or is null.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir);
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
    }
}

/// Splits `CODING_TOOLS_MCP_EXEC_ALLOW_ROOTS` (`:`-separated).
pub fn split_allow_roots(value: &str) -> Vec<PathBuf> {
    value
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managers_on_path_and_never_a_home() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().canonicalize().unwrap();
        for d in [".cargo/bin", ".rustup/toolchains", ".pyenv/shims", ".nvm"] {
            std::fs::create_dir_all(h.join(d)).unwrap();
        }
        let env: Vec<(String, String)> = [
            ("HOME", h.display().to_string()),
            (
                "PATH",
                format!("{0}/.cargo/bin:{0}:/:relative/bin:/usr/bin", h.display()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let t = discover(&env, &[]);
        assert!(t.read_roots.contains(&h.join(".cargo/bin")));
        assert!(
            !t.read_roots.contains(&h.join(".cargo")),
            "credentials.toml lives there"
        );
        assert!(
            t.env
                .contains(&("CARGO_HOME".into(), h.join(".cargo").display().to_string()))
        );
        assert!(t.read_roots.contains(&h.join(".rustup")));
        assert!(
            !t.read_roots.contains(&h.join(".pyenv")),
            "pyenv is not on PATH"
        );
        assert!(!t.read_roots.contains(&h.join(".nvm")));
        assert!(!t.read_roots.iter().any(|r| r == &h || r == Path::new("/")));
        assert!(t.skipped.iter().any(|(d, _)| d == "relative/bin"));
        assert!(t.env.contains(&(
            "RUSTUP_HOME".into(),
            h.join(".rustup").display().to_string()
        )));
        assert!(!t.read_roots.iter().any(|r| r.starts_with("/etc/shadow")));
    }

    #[test]
    fn an_activated_venv_outside_is_readable_whole_with_its_base_interpreter() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().canonicalize().unwrap();
        let base = tempfile::tempdir().unwrap();
        let b = base.path().canonicalize().unwrap();
        std::fs::create_dir_all(b.join("bin")).unwrap();
        let venvs = tempfile::tempdir().unwrap();
        let v = venvs.path().canonicalize().unwrap().join("venv");
        std::fs::create_dir_all(v.join("bin")).unwrap();
        std::fs::write(
            v.join("pyvenv.cfg"),
            format!(
                "home = {}\ninclude-system-site-packages = false\n",
                b.join("bin").display()
            ),
        )
        .unwrap();
        let env: Vec<(String, String)> = [
            ("HOME", h.display().to_string()),
            ("PATH", format!("{}:/usr/bin", v.join("bin").display())),
            ("VIRTUAL_ENV", v.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let t = discover(&env, &[]);
        assert!(t.read_roots.contains(&v), "{t:?}");
        assert!(t.read_roots.contains(&b), "{t:?}");
        // A pyvenv.cfg naming the home directory (or /) widens nothing.
        std::fs::write(v.join("pyvenv.cfg"), format!("home = {}\n", h.display())).unwrap();
        let mut env = env;
        env[2].1 = v.display().to_string();
        let t = discover(&env, &[]);
        assert!(!t.read_roots.iter().any(|r| h.starts_with(r)), "{t:?}");
    }

    #[test]
    fn no_directory_under_run_is_a_read_root() {
        for r in SYSTEM_READ_ROOTS.iter().filter(|r| r.starts_with("/run")) {
            assert!(
                r.ends_with(".conf"),
                "{r} would bind a directory of sockets"
            );
        }
    }
}
