//! The private runtime directory of one server process.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The runtime directory could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot create the runtime directory under {base}: {source}")]
pub struct RuntimeDirError {
    /// Where it was to be created.
    pub base: PathBuf,
    /// Why it failed.
    #[source]
    pub source: std::io::Error,
}

/// `<base>/<pid>-<random>/{home,tmp,cache}`, every level mode 0700 and
/// owned by this user, removed on drop.
///
/// The base is per user: `$XDG_RUNTIME_DIR/coding-tools-mcp` where that is
/// this user's private directory, else `$TMPDIR/coding-tools-mcp-<uid>`
/// (`/tmp/...` when `$TMPDIR` is inside the workspace), or the directory the
/// operator configured. A base another user owns, or can write into, is
/// never used: the default one is replaced by a fresh private base next to
/// it (and a warning), a configured one is an error.
#[derive(Debug)]
pub struct RuntimeDirs {
    root: PathBuf,
    /// Set when the per-user base had to be replaced.
    warning: Option<String>,
    /// The root, held open with an exclusive `flock` for the life of the
    /// process: a later server knows a directory nobody locks is left over.
    _lock: Option<std::os::fd::OwnedFd>,
}

/// Directories younger than this are never swept: a server locks its own
/// right after making it.
const SWEEP_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The same guard when the pid in the name is of no live process in our
/// PID namespace: such a directory is swept sooner, but never in the moment
/// between a server's `mkdir` and its lock (in another namespace a pid says
/// nothing, so the lock decides).
const SWEEP_MIN_AGE_DEAD_PID: std::time::Duration = std::time::Duration::from_secs(2);

fn pid_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Locks `dir` (exclusive, non-blocking); the descriptor holds the lock.
fn lock_dir(dir: &Path) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(fd)
}

/// Removes, in the background, the directories in `base` of servers that
/// are gone (killed, so their drop never ran): `<pid>-<hex>` entries older
/// than a minute that nobody holds locked. Works across PID namespaces
/// sharing one `/tmp`, where a pid says nothing.
fn sweep_leftovers(base: &Path, own: &Path) {
    let base = base.to_path_buf();
    let own = own.to_path_buf();
    let _ = std::thread::Builder::new()
        .name("ctm-runtime-sweep".into())
        .spawn(move || {
            // Beside start-up, which a small machine's cores are busy with.
            crate::background_priority();
            let Ok(entries) = std::fs::read_dir(&base) else {
                return;
            };
            for e in entries.flatten() {
                let path = e.path();
                let name = e.file_name();
                let pid = name.to_str().and_then(|n| {
                    let (pid, hex) = n.split_once('-')?;
                    let ok = hex.len() == 24 && hex.bytes().all(|b| b.is_ascii_hexdigit());
                    pid.parse::<u32>().ok().filter(|_| ok)
                });
                let Some(pid) = pid else { continue };
                let min_age = if pid_alive(pid) {
                    SWEEP_MIN_AGE
                } else {
                    SWEEP_MIN_AGE_DEAD_PID
                };
                let old = e
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= min_age);
                if !old || path == own || !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if let Some(_held) = lock_dir(&path) {
                    remove_tree(&path);
                }
            }
        });
}

fn random_hex() -> String {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 12];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        // No system randomness: still unique, and mkdir's O_EXCL guards the rest.
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default(),
        );
        b[..8].copy_from_slice(&h.finish().to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn refused(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)
}

/// Checks that `dir` (not followed if a symlink) is a directory only this
/// user can change; with `shared_ok`, a sticky directory (like `/tmp`) is
/// accepted too. Tightens a directory of ours that others could write.
fn check_private(dir: &Path, shared_ok: bool) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(refused(format!(
            "{} is not a directory (a symlink or a file stands there)",
            dir.display()
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    let sticky = meta.mode() & 0o1000 != 0;
    if meta.uid() != me {
        if shared_ok && sticky {
            return Ok(());
        }
        return Err(refused(format!(
            "{} belongs to uid {}, not to this user (uid {me}); remove it or set CODING_TOOLS_MCP_RUNTIME_ROOT",
            dir.display(),
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 && !(shared_ok && sticky) {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn make_base(base: &Path, shared_ok: bool) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(base)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    check_private(base, shared_ok)
}

impl RuntimeDirs {
    /// Creates the directories under the per-user base, or under
    /// `configured` (`CODING_TOOLS_MCP_RUNTIME_ROOT`), which must lie outside
    /// the workspace.
    pub fn create(workspace: &Path, configured: Option<&Path>) -> Result<Self, RuntimeDirError> {
        if let Some(base) = configured {
            let err = |source| RuntimeDirError {
                base: base.to_path_buf(),
                source,
            };
            let abs = std::path::absolute(base).map_err(err)?;
            let inside = abs.starts_with(workspace)
                || abs
                    .canonicalize()
                    .is_ok_and(|c| workspace.canonicalize().is_ok_and(|w| c.starts_with(w)));
            if inside {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "CODING_TOOLS_MCP_RUNTIME_ROOT must be outside the workspace",
                )));
            }
            make_base(&abs, true).map_err(err)?;
            return Self::create_beneath(&abs);
        }
        let uid = rustix::process::geteuid().as_raw();
        let xdg = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && check_private(d, false).is_ok());
        let mut base = match xdg {
            Some(d) => d.join("coding-tools-mcp"),
            None => std::env::temp_dir().join(format!("coding-tools-mcp-{uid}")),
        };
        if base.starts_with(workspace) {
            base = PathBuf::from("/tmp").join(format!("coding-tools-mcp-{uid}"));
        }
        match make_base(&base, false) {
            Ok(()) => Self::create_beneath(&base),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // Someone else holds the per-user name: never use it, and do
                // not let that stop this server either.
                let parent = base.parent().unwrap_or(Path::new("/tmp"));
                let fresh = parent.join(format!("coding-tools-mcp-{uid}.{}", random_hex()));
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&fresh)
                    .and_then(|()| check_private(&fresh, false))
                    .map_err(|source| RuntimeDirError {
                        base: fresh.clone(),
                        source,
                    })?;
                let mut dirs = Self::create_beneath(&fresh)?;
                dirs.warning = Some(format!("not using {}: {e}", base.display()));
                Ok(dirs)
            }
            Err(source) => Err(RuntimeDirError { base, source }),
        }
    }

    /// Creates the directories under `base` (created 0700 if missing; it
    /// must be this user's and private).
    pub fn create_in(base: &Path) -> Result<Self, RuntimeDirError> {
        make_base(base, false).map_err(|source| RuntimeDirError {
            base: base.to_path_buf(),
            source,
        })?;
        Self::create_beneath(base)
    }

    /// A new `<pid>-<random>` directory in `base`, made by `mkdir` (which
    /// fails on anything already there), then checked, with its three
    /// subdirectories made the same way.
    fn create_beneath(base: &Path) -> Result<Self, RuntimeDirError> {
        let err = |source| RuntimeDirError {
            base: base.to_path_buf(),
            source,
        };
        let mut attempts = 0;
        let root = loop {
            let root = base.join(format!("{}-{}", std::process::id(), random_hex()));
            match std::fs::DirBuilder::new().mode(0o700).create(&root) {
                Ok(()) => break root,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 8 => {
                    attempts += 1;
                }
                Err(e) => return Err(err(e)),
            }
        };
        let lock = lock_dir(&root);
        let dirs = Self {
            root,
            warning: None,
            _lock: lock,
        };
        check_private(&dirs.root, false).map_err(err)?;
        for sub in ["home", "tmp", "cache"] {
            let p = dirs.root.join(sub);
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&p)
                .and_then(|()| check_private(&p, false))
                .map_err(err)?;
        }
        sweep_leftovers(base, &dirs.root);
        Ok(dirs)
    }

    /// Why the per-user base was not used, if it was not.
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    /// The per-process root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `HOME` of commands.
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// `TMPDIR` of commands.
    pub fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// `XDG_CACHE_HOME` of commands.
    pub fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }
}

impl RuntimeDirs {
    /// Removes the directory now (server shutdown on a signal, when the
    /// process exits without dropping everything). Also run on drop; a
    /// second call finds nothing to do. Call it after the commands are
    /// killed: a live command could keep writing into it.
    pub fn remove(&self) {
        remove_tree(&self.root);
    }
}

impl Drop for RuntimeDirs {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `remove_dir_all`, also when a command left directories it made
/// unreadable or unwritable (`chmod 000 $TMPDIR/d`): those get mode 0700
/// back and removal is tried again. Every step goes through descriptors
/// opened without following links, so a directory a command swaps for a
/// symlink is never followed out (a `chmod` by path would be).
fn remove_tree(root: &Path) {
    if std::fs::remove_dir_all(root).is_ok() || std::fs::symlink_metadata(root).is_err() {
        return;
    }
    fn open_up(parent: rustix::fd::BorrowedFd<'_>, name: &std::ffi::OsStr, depth: usize) {
        use rustix::fs::{Mode, OFlags};
        if depth > 4096 {
            return;
        }
        // O_PATH | O_NOFOLLOW | O_DIRECTORY: a directory, never a link.
        let Ok(handle) = rustix::fs::openat(
            parent,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return;
        };
        // chmod of exactly that inode, through its descriptor.
        let _ = rustix::fs::chmod(
            format!("/proc/self/fd/{}", rustix::fd::AsRawFd::as_raw_fd(&handle)),
            Mode::from_raw_mode(0o700),
        );
        let Ok(dir) = rustix::fs::openat(
            &handle,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." || e.file_type() != rustix::fs::FileType::Directory {
                continue;
            }
            let child = std::ffi::OsStr::from_bytes(n).to_owned();
            open_up(rustix::fd::AsFd::as_fd(&dir), &child, depth + 1);
        }
    }
    use std::os::unix::ffi::OsStrExt;
    if let (Some(parent), Some(name)) = (root.parent(), root.file_name())
        && let Ok(p) = rustix::fs::open(
            parent,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
    {
        open_up(rustix::fd::AsFd::as_fd(&p), name, 0);
    }
    let _ = std::fs::remove_dir_all(root);
}

/// The static output-retention budget: per stream, a frozen head of 1/8 of the
/// buffer plus a rolling tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionBudget {
    /// Bytes kept per stream.
    pub buffer_bytes_per_stream: usize,
    /// Of which the frozen head.
    pub head_bytes_per_stream: usize,
    /// Finished commands kept for `read_output`.
    pub max_retained_commands: usize,
    /// How long a finished command stays readable.
    pub retained_ttl_secs: u64,
    /// Bytes kept across every command.
    pub max_total_bytes: usize,
    /// Commands running at once.
    pub max_active_commands: usize,
}

impl Default for RetentionBudget {
    fn default() -> Self {
        let buffer = 512 * 1024;
        Self {
            buffer_bytes_per_stream: buffer,
            head_bytes_per_stream: buffer / 8,
            max_retained_commands: 64,
            retained_ttl_secs: 3_600,
            max_total_bytes: 64 * 1024 * 1024,
            max_active_commands: 16,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn private_and_removed_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let a = RuntimeDirs::create_in(base.path()).unwrap();
        let b = RuntimeDirs::create_in(base.path()).unwrap();
        assert_ne!(a.root(), b.root());
        assert_eq!(a.root().parent(), b.root().parent());
        assert_eq!(std::fs::metadata(a.root()).unwrap().mode() & 0o777, 0o700);
        assert!(a.tmp().is_dir() && a.cache().is_dir());
        let root = a.root().to_path_buf();
        drop(a);
        assert!(!root.exists());
        assert!(b.root().exists());
    }

    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "ages test directories outside any workspace"
    )]
    fn leftovers_of_dead_servers_are_swept_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let dead = base.path().join("4242-0123456789abcdef01234567");
        std::fs::create_dir_all(dead.join("home")).unwrap();
        std::fs::File::open(&dead)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let alive = RuntimeDirs::create_in(base.path()).unwrap();
        std::fs::File::open(alive.root())
            .unwrap()
            .set_modified(old)
            .unwrap();
        let young = base.path().join("4243-0123456789abcdef01234567");
        std::fs::create_dir(&young).unwrap();
        let unrelated = base.path().join("notes");
        std::fs::create_dir(&unrelated).unwrap();
        std::fs::File::open(&unrelated)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let _next = RuntimeDirs::create_in(base.path()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while dead.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!dead.exists(), "a left-over directory was not swept");
        assert!(alive.root().exists(), "a live server's directory was swept");
        assert!(young.exists() && unrelated.exists());
    }
}
