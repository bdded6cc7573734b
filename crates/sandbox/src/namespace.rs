//! The namespace tier: each command in a bubblewrap sandbox, with the
//! Landlock ruleset and the seccomp filter applied inside it.
//!
//! Landlock has no right for metadata writes (`chmod`, `chown`, `utimes`,
//! xattrs), pathname UNIX sockets or the process list; namespaces do. Where
//! the host allows unprivileged user namespaces and `bwrap` is installed, a
//! command runs below `bwrap` (an argument list built here, never a shell):
//! a new user, mount, PID, IPC, UTS and cgroup namespace, the host root
//! read-only, the workspace and the runtime directory read-write, a private
//! `/tmp`, an empty `/run`, a minimal `/dev` with a pseudo-terminal instance
//! of its own, a `/proc` of its own, and — when the network is closed — a
//! network namespace with nothing but loopback. When the command's first
//! process ends, bubblewrap's init ends every other process of it.
//!
//! bubblewrap mounts, and a Landlock-confined process may not: so the rules
//! and the filter are applied after it, by [`enter_if_requested`] — the host
//! program, started again inside the sandbox as the command's first process
//! (`<program> --ctm-sandbox-exec ...`), adds the rules for what exists only
//! inside (its `/proc`, `/tmp`, `/dev/pts`, `/dev/shm`), restricts itself,
//! installs the filter and execs `/bin/sh -c`. The ruleset itself was made
//! in the server from the host's inodes, which the bind mounts keep.
//!
//! Why bubblewrap rather than our own `clone(CLONE_NEWUSER|...)`: it is the
//! maintained, audited tool the best agents' sandboxes (and Flatpak) use for
//! exactly this — uid maps, `pivot_root`, recursive read-only remounts,
//! devpts instances, the PID-1 reaper, `PR_SET_PDEATHSIG` — and every one of
//! those is a place where a hand-written version could be subtly wrong.

use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How one path is kept from the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bind {
    /// Bound onto itself read-write: a mount point cannot be renamed or
    /// removed (the directories above a sealed path).
    MountPoint,
    /// Bound onto itself read-only.
    ReadOnly,
}

/// Size of a command's private `/tmp` (1 GiB) and `/dev/shm` (256 MiB).
const TMP_BYTES: &str = "1073741824";
const SHM_BYTES: &str = "268435456";

/// The first argument that makes the host program the sandbox's entry.
pub const ENTRY_FLAG: &str = "--ctm-sandbox-exec";

/// Which sandbox tier commands of safe and trusted mode get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TierChoice {
    /// The namespace tier where the host allows it, else Landlock alone.
    #[default]
    Auto,
    /// Landlock (and seccomp) alone, even where namespaces would work.
    Landlock,
    /// The namespace tier or nothing: a host without it is an error.
    Namespace,
}

/// How commands are sandboxed beyond the gates.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// The tier asked for.
    pub tier: TierChoice,
    /// Safe mode: the files that make git run programs are read-only to
    /// commands (`.git/config`, `hooks/`, `info/`, submodule and worktree
    /// configs), and `.git` cannot be renamed or removed.
    pub seal_git: bool,
    /// The program that calls [`enter_if_requested`] first thing in
    /// `main` (for the server, its own executable); without one there is no
    /// namespace tier.
    pub helper: Option<PathBuf>,
}

/// Whether the host can run the namespace tier, and if not, why and how to
/// fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSupport {
    /// The `bwrap` found (`CODING_TOOLS_MCP_BWRAP`, else on `PATH`).
    pub bwrap: Option<PathBuf>,
    /// Its version line.
    pub version: Option<String>,
    /// Why the tier is not available (`None`: it is).
    pub reason: Option<String>,
    /// The one-line fix, when there is one.
    pub fix: Option<String>,
}

impl NamespaceSupport {
    /// The tier can run here.
    pub fn available(&self) -> bool {
        self.reason.is_none()
    }

    /// The tier is built by the host program itself (`--ctm-namespace`),
    /// with no system `bwrap`.
    pub fn built_in(&self) -> bool {
        self.reason.is_none() && self.bwrap.is_none()
    }
}

/// What builds the namespace tier's sandbox, chosen by the operator
/// (`CODING_TOOLS_MCP_SANDBOX_BUILDER`): `auto` (the default) tries the
/// built-in builder, then a system `bwrap` (the one program Ubuntu's
/// AppArmor lets create user namespaces with capabilities); `builtin` and
/// `bwrap` try only the one.
pub const BUILDER_VAR: &str = "CODING_TOOLS_MCP_SANDBOX_BUILDER";

/// The version line the built-in builder reports.
pub const BUILT_IN: &str =
    "built-in (coding-tools-mcp: user, mount, PID, IPC, UTS and network namespaces)";

/// A program the server runs outside any sandbox, found where no command
/// can have put it: an absolute `PATH` entry (or the operator's variable),
/// the file and every directory above it owned by root or this user and
/// writable by no one else. The caller also refuses anything inside the
/// workspace or the runtime directory ([`inside_writable`]): a `PATH` with
/// `.venv/bin` or `node_modules/.bin` in it would otherwise let a command
/// plant the next server's sandbox.
pub fn trusted_program(name: &str, operator_var: Option<&str>) -> Result<PathBuf, String> {
    let untrusted = UNTRUSTED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let refs: Vec<&Path> = untrusted.iter().map(PathBuf::as_path).collect();
    let inside = |p: &Path| inside_writable(p, &refs);
    if let Some(p) = operator_var
        .and_then(std::env::var_os)
        .filter(|p| !p.is_empty())
    {
        let p = PathBuf::from(p);
        if inside(&p) {
            return Err(format!(
                "{} is not used: it lies where commands write",
                p.display()
            ));
        }
        return trusted_file(&p).map(|()| p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let mut refused = Vec::new();
    for dir in
        std::env::split_paths(&path).chain([PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
    {
        if !dir.is_absolute() {
            continue;
        }
        let p = dir.join(name);
        let exists = std::fs::metadata(&p).is_ok_and(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.is_file() && m.permissions().mode() & 0o111 != 0
        });
        if !exists {
            continue;
        }
        if inside(&p) {
            refused.push(format!(
                "{} is not used: it lies where commands write",
                p.display()
            ));
            continue;
        }
        match trusted_file(&p) {
            Ok(()) => return Ok(p),
            Err(e) => refused.push(e),
        }
    }
    Err(if refused.is_empty() {
        format!("{name} is not installed")
    } else {
        refused.join("; ")
    })
}

/// Directories commands write (the workspace, the runtime directory): no
/// program the server runs outside the sandbox is taken from them.
static UNTRUSTED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Adds `dirs` to the places [`trusted_program`] never takes a program
/// from; call it before the first [`support`] (the probe runs `bwrap`).
pub fn distrust_for_programs(dirs: &[&Path]) {
    let mut u = UNTRUSTED.lock().unwrap_or_else(|p| p.into_inner());
    for d in dirs {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        if !u.contains(&d) {
            u.push(d);
        }
    }
}

/// The file, resolved, and each directory above it: owned by root or this
/// user, not writable by group or others.
fn trusted_file(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let real = p
        .canonicalize()
        .map_err(|e| format!("{}: {e}", p.display()))?;
    let me = rustix::process::geteuid().as_raw();
    let mut at = Some(real.as_path());
    while let Some(x) = at {
        let m = std::fs::metadata(x).map_err(|e| format!("{}: {e}", x.display()))?;
        if m.uid() != 0 && m.uid() != me {
            return Err(format!(
                "{} is not used: {} belongs to uid {}",
                p.display(),
                x.display(),
                m.uid()
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} is not used: {} is writable by others",
                p.display(),
                x.display()
            ));
        }
        at = x.parent();
    }
    Ok(())
}

/// `p` (resolved) lies inside one of `dirs`, where commands write.
pub fn inside_writable(p: &Path, dirs: &[&Path]) -> bool {
    let real = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    dirs.iter().any(|d| {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        real.starts_with(d)
    })
}

#[expect(
    clippy::disallowed_methods,
    reason = "the kernel's user-namespace switches, not workspace files"
)]
fn sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(Path::new("/proc/sys").join(name))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Detected once per process: is `bwrap` there, and does a sandbox like a
/// command's start (user, PID and network namespaces, `/proc`, `/dev`)?
pub fn support() -> &'static NamespaceSupport {
    static SUPPORT: OnceLock<NamespaceSupport> = OnceLock::new();
    SUPPORT.get_or_init(probe)
}

fn probe() -> NamespaceSupport {
    let choice = std::env::var(BUILDER_VAR).unwrap_or_default();
    let choice = choice.trim();
    if !matches!(choice, "" | "auto" | "builtin" | "bwrap") {
        return NamespaceSupport {
            bwrap: None,
            version: None,
            reason: Some(format!(
                "{BUILDER_VAR}={choice:?} is none of auto, builtin, bwrap"
            )),
            fix: Some(format!("set {BUILDER_VAR} to auto, builtin or bwrap")),
        };
    }
    let mut built_in_failed = None;
    if choice != "bwrap" {
        match probe_built_in() {
            Ok(()) => {
                return NamespaceSupport {
                    bwrap: None,
                    version: Some(BUILT_IN.into()),
                    reason: None,
                    fix: None,
                };
            }
            Err(why) => built_in_failed = Some(why),
        }
    }
    if choice == "builtin" {
        let why = built_in_failed.unwrap_or_default();
        return NamespaceSupport {
            bwrap: None,
            version: None,
            fix: Some(userns_fix(&why).1.to_owned()),
            reason: Some(format!(
                "the built-in namespace builder cannot run here: {why}"
            )),
        };
    }
    let mut s = probe_bwrap();
    if let (Some(r), Some(b)) = (&mut s.reason, &built_in_failed) {
        *r = format!("{r}; the built-in builder: {b}");
    }
    s
}

/// The likely cause of a failed namespace set-up, and its fix.
fn userns_fix(err: &str) -> (&'static str, &'static str) {
    if sysctl("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        (
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        )
    } else if sysctl("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        (
            "AppArmor restricts unprivileged user namespaces",
            "apt-get install bubblewrap (Ubuntu's AppArmor profile lets /usr/bin/bwrap create them), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        )
    } else if sysctl("user/max_user_namespaces").as_deref() == Some("0") {
        (
            "user namespaces are disabled (user.max_user_namespaces=0)",
            "sysctl -w user.max_user_namespaces=10000",
        )
    } else if err.contains("mount_setattr") {
        (
            "the kernel lacks mount_setattr (Linux 5.12)",
            "apt-get install bubblewrap, or a kernel of 5.12 or later",
        )
    } else {
        (
            "namespaces cannot be created here (a container without them?)",
            "allow user namespaces in the container runtime (e.g. a seccomp profile that permits clone/unshare of namespaces), or run on the host",
        )
    }
}

/// The sandbox each builder's probe makes (a command's, in small): new
/// namespaces with the network closed, the host read-only, a private
/// `/tmp`, `/proc` and `/dev`; `/bin/true` inside.
const PROBE_PLAN: [&str; 16] = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--tmpfs",
    "/tmp",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--",
    "/bin/true",
];

/// Runs the built-in builder as a command's sandbox would (`/bin/true`
/// inside), when this program can be its own builder.
#[expect(
    clippy::disallowed_methods,
    reason = "the one-time probe of the sandbox builder belongs to the exec runtime"
)]
fn probe_built_in() -> Result<(), String> {
    if !ENTRY_INSTALLED.load(std::sync::atomic::Ordering::SeqCst) {
        return Err("the host program does not call enter_if_requested".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("its own executable: {e}"))?;
    let out = std::process::Command::new(exe)
        .arg(crate::builder::BUILDER_FLAG)
        .args(PROBE_PLAN)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot start it: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(format!("{}: {err:?}", userns_fix(&err).0))
}

#[expect(
    clippy::disallowed_methods,
    reason = "the one-time probe of bubblewrap belongs to the exec runtime"
)]
fn probe_bwrap() -> NamespaceSupport {
    let bwrap = match trusted_program("bwrap", Some("CODING_TOOLS_MCP_BWRAP")) {
        Ok(p) => p,
        Err(why) => {
            return NamespaceSupport {
                bwrap: None,
                version: None,
                reason: Some(if why.ends_with("not installed") {
                    "bubblewrap (bwrap) is not installed".into()
                } else {
                    why
                }),
                fix: Some(
                    "apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora); a bwrap owned by root or you, in directories only you or root can write"
                        .into(),
                ),
            };
        }
    };
    let version = std::process::Command::new(&bwrap)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let out = std::process::Command::new(&bwrap)
        .args(PROBE_PLAN)
        .stdin(std::process::Stdio::null())
        .output();
    let (reason, fix) = match out {
        Ok(o) if o.status.success() => (None, None),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            let (why, fix) = userns_fix(&err);
            (
                Some(format!("{why}: bwrap said {err:?}")),
                Some(fix.to_owned()),
            )
        }
        Err(e) => (
            Some(format!("bwrap could not be run: {e}")),
            Some("check the bwrap binary (CODING_TOOLS_MCP_BWRAP)".into()),
        ),
    };
    NamespaceSupport {
        bwrap: Some(bwrap),
        version,
        reason,
        fix,
    }
}

/// What one command's sandbox is made of (all paths absolute, canonical).
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// The system `bwrap`; `None`: the helper builds the sandbox itself.
    pub bwrap: Option<&'a Path>,
    /// The workspace, bound at its own path.
    pub workspace: &'a Path,
    /// Commands see the workspace read-only but for `write_paths`.
    pub workspace_read_only: bool,
    /// Directories writable inside a read-only workspace.
    pub write_paths: &'a [PathBuf],
    /// The server's runtime directory (the commands' `HOME` and `TMPDIR`).
    pub runtime: Option<&'a Path>,
    /// Read roots that the private `/tmp` and `/run` would hide.
    pub hidden_roots: &'a [PathBuf],
    /// A network namespace of its own (loopback only).
    pub unshare_net: bool,
    /// Safe mode without the overlay: the older list of read-only binds
    /// inside `.git` (see `git_seal`).
    pub legacy_git_seal: bool,
    /// The seal's read-only binds and mount points (outermost first).
    pub seal_binds: &'a [(crate::namespace::Bind, PathBuf)],
    /// The server's private directory of overlay layers, hidden from the
    /// command.
    pub hide: Option<&'a Path>,
    /// The helper, as `/proc/self/fd/<n>` of an inherited descriptor.
    pub helper_fd: RawFd,
    /// The Landlock ruleset the entry restricts itself with (-1: none).
    pub ruleset_fd: RawFd,
    /// Landlock rights for reading what exists only inside.
    pub read_access: u64,
    /// Landlock rights for writing what exists only inside.
    pub write_access: u64,
    /// Landlock rights on the command's terminal.
    pub terminal_access: u64,
    /// The command runs on a terminal.
    pub tty: bool,
    /// Build the workspace's shared namespaces only (see `crate::holder`):
    /// the entry hands them to the server on this socket and ends.
    pub hold: Option<RawFd>,
}

/// The `bwrap` argument list (program first), ending with the helper's
/// entry and `--`; the caller appends `/bin/sh -c <cmd>`.
pub fn argv(p: &Plan<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::with_capacity(64);
    let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
        for i in items {
            a.push(i.as_ref().to_os_string());
        }
    };
    match p.bwrap {
        Some(b) => push(&[&b]),
        None => push(&[
            &format!("/proc/self/fd/{}", p.helper_fd),
            &crate::builder::BUILDER_FLAG,
        ]),
    }
    push(&[
        &"--unshare-user",
        &"--unshare-pid",
        &"--unshare-ipc",
        &"--unshare-uts",
        &"--unshare-cgroup-try",
    ]);
    if p.unshare_net {
        push(&[&"--unshare-net"]);
    }
    push(&[
        &"--die-with-parent",
        &"--cap-drop",
        &"ALL",
        &"--ro-bind",
        &"/",
        &"/",
        // Memory-backed and owned by no process: bounded (and gone with
        // the command's mount namespace when it ends).
        &"--size",
        &TMP_BYTES,
        &"--tmpfs",
        &"/tmp",
        &"--size",
        &"1048576",
        &"--tmpfs",
        &"/run",
        &"--dev",
        &"/dev",
        &"--size",
        &SHM_BYTES,
        &"--tmpfs",
        &"/dev/shm",
        &"--proc",
        &"/proc",
    ]);
    for r in p.hidden_roots {
        push(&[&"--ro-bind-try", r, r]);
    }
    if let Some(rt) = p.runtime {
        push(&[&"--bind", &rt, &rt]);
    }
    if p.workspace_read_only {
        push(&[&"--ro-bind", &p.workspace, &p.workspace]);
        for w in p.write_paths {
            push(&[&"--bind", w, w]);
        }
    } else {
        push(&[&"--bind", &p.workspace, &p.workspace]);
    }
    if let Some(h) = p.hide {
        push(&[&"--size", &"4096", &"--tmpfs", &h, &"--remount-ro", &h]);
    }
    for (kind, path) in p.seal_binds {
        match kind {
            crate::namespace::Bind::MountPoint => push(&[&"--bind", path, path]),
            crate::namespace::Bind::ReadOnly => push(&[&"--ro-bind", path, path]),
        }
    }
    if p.legacy_git_seal {
        for (kind, path) in git_seal(p.workspace) {
            match kind {
                Seal::MountPoint => push(&[&"--bind", &path, &path]),
                Seal::ReadOnly => push(&[&"--ro-bind-try", &path, &path]),
                Seal::EmptyDir => push(&[&"--tmpfs", &path, &"--remount-ro", &path]),
            }
        }
    }
    if let Some(socket) = p.hold {
        push(&[
            &format!("/proc/self/fd/{}", p.helper_fd),
            &crate::holder::HOLD_FLAG,
            &socket.to_string(),
        ]);
        return a;
    }
    push(&[
        &format!("/proc/self/fd/{}", p.helper_fd),
        &ENTRY_FLAG,
        &p.ruleset_fd.to_string(),
        &p.read_access.to_string(),
        &p.write_access.to_string(),
        &p.terminal_access.to_string(),
        &(if p.tty { "tty" } else { "pipe" }),
        &"--",
    ]);
    a
}

/// How the older seal (bubblewrap's flags, no overlay) keeps one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// Bound onto itself: a mount point cannot be renamed or removed.
    MountPoint,
    /// Bound onto itself read-only.
    ReadOnly,
    /// A missing directory git would read, covered by an empty read-only
    /// one (bubblewrap makes the mount point: an empty directory).
    EmptyDir,
}

/// The repository directory of the workspace whose git files a command
/// must not change: `.git` itself, or the directory a `.git` file points to
/// when that lies inside the workspace (a submodule's checkout). Outside the
/// workspace the read-only host covers it.
pub fn sealed_git_dir(workspace: &Path) -> Option<PathBuf> {
    let dot_git = workspace.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git);
    }
    if !meta.is_file() {
        return None;
    }
    let target = ctm_workspace_fs::gitdir_link(&dot_git)?
        .canonicalize()
        .ok()?;
    (target.starts_with(workspace) && target.is_dir()).then_some(target)
}

/// The mounts that keep git from running programs a command planted: the
/// repository directory as a mount point (no rename, no removal); its
/// `config`, `config.worktree`, `commondir`, `gitdir`, `hooks/`, `info/`,
/// `modules/` (every submodule's repository) and `worktrees/` (every linked
/// worktree's) read-only, the missing directories among them covered by an
/// empty read-only one (so none can be made); and the hooks directory that
/// `core.hooksPath` names inside the workspace. A symlink among them is
/// followed to a directory inside the workspace, which is sealed instead
/// (the link itself, in a writable directory, could still be replaced: see
/// docs/security.md). Nothing here names a path that does not resolve, so a
/// strange `.git` never keeps bubblewrap from starting.
pub fn git_seal(workspace: &Path) -> Vec<(Seal, PathBuf)> {
    let Some(git) = sealed_git_dir(workspace) else {
        return Vec::new();
    };
    let meta = |p: &Path| std::fs::symlink_metadata(p).ok();
    let mut out = vec![(Seal::MountPoint, git.clone())];
    let inside_dir = |p: &Path| {
        p.canonicalize()
            .ok()
            .filter(|t| t.starts_with(workspace) && t.is_dir())
    };
    for f in ["config", "config.worktree", "commondir", "gitdir"] {
        let p = git.join(f);
        if meta(&p).is_some_and(|m| m.is_file()) {
            out.push((Seal::ReadOnly, p));
        }
    }
    for d in ["hooks", "info", "modules", "worktrees"] {
        let p = git.join(d);
        match meta(&p) {
            Some(m) if m.is_dir() => out.push((Seal::ReadOnly, p)),
            Some(m) if m.file_type().is_symlink() => {
                if let Some(t) = inside_dir(&p) {
                    out.push((Seal::ReadOnly, t));
                }
            }
            Some(_) => {}
            None => out.push((Seal::EmptyDir, p)),
        }
    }
    if let Some(hooks) = hooks_path(&git, workspace).and_then(|h| inside_dir(&h)) {
        out.push((Seal::ReadOnly, hooks));
    }
    out
}

/// `core.hooksPath` of the repository's own config, resolved as git does
/// (relative to the working tree); a plain reading of the one line.
fn hooks_path(git: &Path, workspace: &Path) -> Option<PathBuf> {
    let text = ctm_workspace_fs::read_small(&git.join("config"))?;
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_core = l
                .trim_start_matches('[')
                .trim_end_matches(']')
                .trim()
                .eq_ignore_ascii_case("core");
            continue;
        }
        if !in_core {
            continue;
        }
        if let Some((k, v)) = l.split_once('=')
            && k.trim().eq_ignore_ascii_case("hookspath")
        {
            found = Some(v.trim().trim_matches('"').to_owned());
        }
    }
    let v = found?;
    let p = PathBuf::from(&v);
    Some(if p.is_absolute() {
        p
    } else {
        workspace.join(p)
    })
}

/// Paths git would read that did not exist when a command started and that
/// no mount can cover while missing: removed when the command is gone
/// (`commondir` would point the user's git at another repository's config,
/// `config.worktree` is read when `extensions.worktreeConfig` is set).
pub fn watched_when_missing(workspace: &Path) -> Vec<PathBuf> {
    let Some(git) = sealed_git_dir(workspace) else {
        return Vec::new();
    };
    ["commondir", "config.worktree"]
        .iter()
        .map(|f| git.join(f))
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect()
}

/// Called first thing in the host program's `main`: when the process was
/// started as a sandbox's entry, finishes the sandbox and execs the
/// command — it never returns then; otherwise it returns at once.
///
/// Started as [`crate::BUILDER_FLAG`], it builds the namespace tier's
/// sandbox itself (no system `bwrap` needed) and runs the entry in it.
pub fn enter_if_requested() {
    ENTRY_INSTALLED.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut args = std::env::args_os();
    let _program = args.next();
    let first = args.next();
    if first.as_deref() == Some(std::ffi::OsStr::new(crate::builder::BUILDER_FLAG)) {
        let rest: Vec<OsString> = args.collect();
        crate::builder::run(&rest);
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(crate::holder::HOLD_FLAG)) {
        let rest: Vec<OsString> = args.collect();
        crate::holder::run_hold(&rest);
    }
    if first.as_deref() != Some(std::ffi::OsStr::new(ENTRY_FLAG)) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    run_entry(&rest)
}

/// Set by [`enter_if_requested`]: this program's `main` handles the
/// builder's and the entry's flags, so it can be its own sandbox builder.
static ENTRY_INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The entry's work (its arguments after [`ENTRY_FLAG`]); never returns.
pub fn run_entry(args: &[OsString]) -> ! {
    let code = match enter(args) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("coding-tools-mcp sandbox: {e}");
            126
        }
    };
    std::process::exit(code);
}

fn enter(args: &[OsString]) -> Result<std::convert::Infallible, String> {
    let num = |i: usize| -> Result<i64, String> {
        args.get(i)
            .and_then(|a| a.to_str())
            .and_then(|a| a.parse::<i64>().ok())
            .ok_or_else(|| format!("argument {i} is missing or not a number"))
    };
    let ruleset = num(0)?;
    let read = num(1)? as u64;
    let write = num(2)? as u64;
    let terminal = num(3)? as u64;
    let tty = args.get(4).and_then(|a| a.to_str()) == Some("tty");
    if args.get(5).and_then(|a| a.to_str()) != Some("--") || args.len() < 7 {
        return Err("no command after --".into());
    }
    let command = &args[6..];
    if ruleset >= 0 {
        let fd = RawFd::try_from(ruleset).map_err(|e| e.to_string())?;
        // SAFETY: the descriptor was left open for this process by the
        // server (the ruleset of this command), owned from here on.
        #[expect(
            unsafe_code,
            reason = "takes ownership of the descriptor the server left open for this process"
        )]
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd) };
        crate::confine::confine_inside(&ruleset, read, write, terminal, tty)?;
    }
    // bubblewrap ran with the group's signals ignored (see the
    // supervisor); the command gets the defaults.
    // SAFETY: resetting signal dispositions in a single-threaded process.
    #[expect(unsafe_code, reason = "signal(2) restores the default dispositions")]
    unsafe {
        for sig in crate::process::IGNORED {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    match crate::seccomp::program_namespaced() {
        Ok(prog) => crate::seccomp::enforce(prog).map_err(|e| format!("seccomp: {e}"))?,
        // The server reports seccomp as there: never run without it then.
        Err(e) if crate::seccomp::available().is_ok() => {
            return Err(format!("seccomp: the filter could not be built: {e}"));
        }
        Err(_) => {}
    }
    // Nothing of the server's reaches the command: the descriptor this
    // entry was started by names the server's binary on the host's
    // writable mount (reopened through /proc/self/fd it would allow
    // chmod 4755 of it), so every descriptor above stderr closes on exec.
    // SAFETY: a system call on this process's own descriptor table.
    #[expect(unsafe_code, reason = "the close_range system call")]
    let closed = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        )
    };
    if closed != 0 {
        return Err(format!(
            "cannot close inherited descriptors: {}",
            std::io::Error::last_os_error()
        ));
    }
    use std::os::unix::process::CommandExt;
    #[expect(
        clippy::disallowed_methods,
        reason = "the sandbox's entry execs the command it was started for"
    )]
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    Err(format!("cannot run {:?}: {err}", command[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_seal_covers_what_makes_git_run_programs() {
        let t = tempfile::tempdir().unwrap();
        let g = t.path().join(".git");
        std::fs::create_dir_all(g.join("hooks")).unwrap();
        std::fs::write(g.join("config"), "").unwrap();
        std::fs::create_dir_all(g.join("modules/sub/hooks")).unwrap();
        std::fs::write(g.join("modules/sub/config"), "").unwrap();
        std::fs::create_dir_all(t.path().join("tools/hooks")).unwrap();
        std::fs::write(g.join("config"), "[core]\n\thooksPath = tools/hooks\n").unwrap();
        let ws = t.path().canonicalize().unwrap();
        let g = ws.join(".git");
        let seal = git_seal(&ws);
        assert_eq!(seal[0], (Seal::MountPoint, g.clone()));
        assert!(seal.contains(&(Seal::ReadOnly, g.join("config"))));
        assert!(seal.contains(&(Seal::ReadOnly, g.join("hooks"))));
        assert!(seal.contains(&(Seal::EmptyDir, g.join("info"))));
        assert!(seal.contains(&(Seal::ReadOnly, g.join("modules"))));
        assert!(seal.contains(&(Seal::EmptyDir, g.join("worktrees"))));
        assert!(seal.contains(&(Seal::ReadOnly, ws.join("tools/hooks"))));
        assert_eq!(
            watched_when_missing(&ws),
            vec![g.join("commondir"), g.join("config.worktree")]
        );
        // A dangling hooks link seals nothing and breaks nothing.
        std::fs::remove_dir_all(g.join("hooks")).unwrap();
        std::os::unix::fs::symlink("/nowhere/at/all", g.join("hooks")).unwrap();
        let seal = git_seal(&ws);
        assert!(
            !seal
                .iter()
                .any(|(_, p)| p.ends_with("hooks") && p.starts_with(&g))
        );
        // No repository: nothing to seal.
        let none = tempfile::tempdir().unwrap();
        assert!(git_seal(none.path()).is_empty());
    }
}
