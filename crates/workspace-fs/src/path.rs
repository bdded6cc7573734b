//! The workspace root, checked paths, and race-safe opening beneath the root.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::{FsError, IoCause};

/// Symlinks followed in one resolution before it is called a loop.
const MAX_SYMLINKS: usize = 40;

/// One canonical workspace root, held open so every path resolves beneath it.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    root_fd: Arc<OwnedFd>,
    /// Where lines begin in recently read files (paged reads).
    lines: Arc<crate::read::LineCache>,
}

/// A workspace-relative path that passed the lexical checks of
/// [`Workspace::resolve_lexically`] (and, from [`Workspace::resolve_beneath`],
/// the symlink verdict on its existing part). Opening it ([`Workspace::open_beneath`]) is the authority
/// on symlinks: it resolves beneath the root and cannot leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    input: String,
    relative: PathBuf,
}

impl WorkspacePath {
    /// The path as the caller gave it (continuations repeat it exactly).
    pub fn as_given(&self) -> &str {
        &self.input
    }

    /// The normalized relative path (`.` for the root).
    pub fn relative(&self) -> &Path {
        if self.relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.relative
        }
    }

    /// The normalized relative path as text, `/`-separated.
    pub fn display(&self) -> String {
        self.relative().to_string_lossy().into_owned()
    }

    /// A path produced by a walk below the root.
    pub(crate) fn from_walk(relative: PathBuf) -> Self {
        Self {
            input: relative.to_string_lossy().into_owned(),
            relative,
        }
    }

    /// Whether this is the root itself.
    pub fn is_root(&self) -> bool {
        self.relative.as_os_str().is_empty()
    }
}

/// What an open path turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// Anything else (FIFO, socket, device).
    Other,
}

impl Workspace {
    /// Opens `root`, which must be an existing directory; it is canonicalized
    /// and held open.
    pub fn open(root: &Path) -> Result<Self, FsError> {
        let err = |source: IoCause| FsError::Root {
            path: root.display().to_string(),
            source,
        };
        let canonical = root.canonicalize().map_err(|e| err(e.into()))?;
        let fd = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(e.into()))?;
        Ok(Self {
            root: canonical,
            root_fd: Arc::new(fd),
            lines: Arc::default(),
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Line positions of recently read files, shared by clones.
    pub(crate) fn line_cache(&self) -> &crate::read::LineCache {
        &self.lines
    }

    /// The root's directory handle.
    pub(crate) fn root_fd(&self) -> &OwnedFd {
        &self.root_fd
    }

    /// Opens the directory `path` beneath the root as an `O_PATH` handle, for
    /// `fchdir` and `*at` calls: the same verdicts as [`Self::open_beneath`],
    /// without needing read permission on the directory.
    pub fn open_dir_handle(&self, path: &WorkspacePath) -> Result<OwnedFd, FsError> {
        let fd = self.open_rel(path.relative(), OFlags::PATH | OFlags::CLOEXEC, path)?;
        match kind_of(&fd, path)? {
            Kind::Directory => Ok(fd),
            _ => Err(FsError::NotADirectory(path.as_given().to_owned())),
        }
    }

    /// Opens `rel` beneath the root: `openat2(RESOLVE_BENEATH)` where the
    /// kernel has it, the `O_NOFOLLOW` walk otherwise — and for an absolute
    /// symlink, which `RESOLVE_BENEATH` always refuses but may point inside.
    /// Errors name `shown`.
    fn open_rel(
        &self,
        rel: &Path,
        flags: OFlags,
        shown: &WorkspacePath,
    ) -> Result<OwnedFd, FsError> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        match open_beneath_kernel(&self.root_fd, rel, flags) {
            Err(Errno::NOSYS | Errno::XDEV) => open_beneath_walk(self, rel, flags),
            other => other.map_err(|e| errno_to_error(shown, e)),
        }
    }

    /// [`Self::open_dir_handle`] of a workspace-relative path found by a walk.
    pub(crate) fn dir_handle(&self, rel: &Path) -> Option<OwnedFd> {
        self.open_dir_handle(&WorkspacePath::from_walk(rel.to_path_buf()))
            .ok()
    }

    /// Lexical checks only, with no file system access: no NUL, not
    /// absolute (nor `~`, a drive letter, UNC), `..` never above the root.
    /// Comparison is by component. Symlinks are judged later, when the path
    /// is opened ([`Self::open_beneath`]); a caller that will not open the
    /// path itself wants [`Self::resolve_beneath`].
    pub fn resolve_lexically(&self, input: &str) -> Result<WorkspacePath, FsError> {
        if input.contains('\0') {
            return Err(FsError::InvalidPath("path contains a NUL byte".into()));
        }
        let p = Path::new(input);
        if p.is_absolute() || input.starts_with('~') || looks_like_windows_absolute(input) {
            return Err(FsError::Absolute(input.to_owned()));
        }
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                Component::Normal(s) => out.push(s),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(FsError::Outside(input.to_owned()));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(FsError::Absolute(input.to_owned()));
                }
            }
        }
        // `./~/x`, `./C:/x` and `a/../\\srv` read as the forms they reduce to,
        // so a path and its normal form always get the same verdict.
        let normal = out.to_string_lossy();
        if normal.starts_with('~') || looks_like_windows_absolute(&normal) {
            return Err(FsError::Absolute(input.to_owned()));
        }
        Ok(WorkspacePath {
            input: input.to_owned(),
            relative: out,
        })
    }

    /// The boundary verdict every tool gives a path it may not open itself
    /// (history filters, files to create, patch targets): [`Self::resolve_lexically`]'s
    /// lexical checks, then the part of the path that exists is resolved
    /// beneath the root exactly as [`Self::open_beneath`] resolves it. A
    /// symlink that leaves the root is `SymlinkEscape`, a loop `SymlinkLoop`;
    /// a path whose tail does not exist yet passes.
    pub fn resolve_beneath(&self, input: &str) -> Result<WorkspacePath, FsError> {
        let path = self.resolve_lexically(input)?;
        let mut probe = path.relative().to_path_buf();
        loop {
            match self.open_rel(&probe, OFlags::PATH | OFlags::CLOEXEC, &path) {
                Err(FsError::SymlinkEscape(_)) => {
                    return Err(FsError::SymlinkEscape(input.to_owned()));
                }
                Err(FsError::SymlinkLoop(_)) => return Err(FsError::SymlinkLoop(input.to_owned())),
                // Missing here: the verdict is the existing ancestor's.
                Err(FsError::NotFound(_) | FsError::NotADirectory(_)) if probe.pop() => {}
                _ => return Ok(path),
            }
        }
    }

    /// Opens `path` for reading beneath the root: `openat2(RESOLVE_BENEATH)`
    /// where the kernel has it, a component-by-component `O_NOFOLLOW` walk
    /// otherwise. Symlinks that stay inside are followed; one that leaves is
    /// `SymlinkEscape`, whatever happens to the tree meanwhile.
    pub fn open_beneath(&self, path: &WorkspacePath) -> Result<(File, Kind), FsError> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = self.open_rel(path.relative(), flags, path)?;
        let kind = kind_of(&fd, path)?;
        Ok((File::from(fd), kind))
    }

    /// Opens the parent directory of `path` beneath the root, for writing into
    /// it with `*at` calls, and returns it with the final component's name.
    /// With `create`, missing parent directories are made (mode 0755), each
    /// one beneath the root. The root itself has no parent and is refused.
    pub fn open_parent(
        &self,
        path: &WorkspacePath,
        create: bool,
    ) -> Result<(OwnedFd, OsString), FsError> {
        let shown = path.as_given().to_owned();
        let name = path
            .relative
            .file_name()
            .ok_or_else(|| {
                FsError::InvalidPath(format!("{shown}: names the workspace root, not a file"))
            })?
            .to_os_string();
        let parent = path.relative.parent().unwrap_or(Path::new(""));
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let open = |rel: &Path| -> Result<OwnedFd, FsError> {
            self.open_rel(rel, dir_flags, &WorkspacePath::from_walk(rel.to_path_buf()))
        };
        match open(parent) {
            Ok(fd) => return Ok((fd, name)),
            Err(FsError::NotFound(_)) if create => {}
            Err(e) => return Err(e),
        }
        // Create the missing directories one by one, each beneath its opened parent.
        let mut dir = open(Path::new(""))?;
        let mut walked = PathBuf::new();
        for comp in parent.components() {
            let Component::Normal(c) = comp else { continue };
            walked.push(c);
            match rustix::fs::mkdirat(&dir, c, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => {
                    return Err(FsError::Io {
                        path: walked.to_string_lossy().into_owned(),
                        source: e.into(),
                        transient: false,
                    });
                }
            }
            dir = open(&walked)?;
        }
        Ok((dir, name))
    }

    /// Opens a directory beneath the root and returns its canonical absolute
    /// path, checked to lie inside the root (for walkers that take paths).
    pub fn open_dir(&self, path: &WorkspacePath) -> Result<PathBuf, FsError> {
        let (_, kind) = self.open_beneath(path)?;
        if kind != Kind::Directory {
            return Err(FsError::NotADirectory(path.as_given().to_owned()));
        }
        let abs = self
            .root
            .join(path.relative())
            .canonicalize()
            .map_err(|e| FsError::io(path.as_given(), e))?;
        if !abs.starts_with(&self.root) {
            return Err(FsError::SymlinkEscape(path.as_given().to_owned()));
        }
        Ok(abs)
    }

    /// The workspace-relative form of an absolute path inside the root.
    pub fn relative_of(&self, abs: &Path) -> Option<PathBuf> {
        abs.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }
}

fn open_beneath_kernel(root: &OwnedFd, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// What an opened handle is.
fn kind_of(fd: &OwnedFd, path: &WorkspacePath) -> Result<Kind, FsError> {
    match rustix::fs::fstat(fd).map(|st| FileType::from_raw_mode(st.st_mode)) {
        Ok(FileType::RegularFile) => Ok(Kind::File),
        Ok(FileType::Directory) => Ok(Kind::Directory),
        Ok(_) => Ok(Kind::Other),
        Err(e) => Err(errno_to_error(path, e)),
    }
}

fn errno_to_error(path: &WorkspacePath, e: Errno) -> FsError {
    let p = path.as_given().to_owned();
    match e {
        Errno::XDEV => FsError::SymlinkEscape(p),
        Errno::LOOP => FsError::SymlinkLoop(p),
        Errno::NOENT => FsError::NotFound(p),
        Errno::NOTDIR => FsError::NotADirectory(p),
        other => FsError::Io {
            path: p,
            source: other.into(),
            transient: matches!(other, Errno::INTR | Errno::AGAIN),
        },
    }
}

/// The fallback for kernels without `openat2`: walk one component at a time
/// with `O_NOFOLLOW`, expanding symlinks ourselves and refusing any that
/// would leave the root. A swap between the check and the open makes the
/// `O_NOFOLLOW` open fail rather than follow.
pub(crate) fn open_beneath_walk(
    ws: &Workspace,
    rel: &Path,
    flags: OFlags,
) -> Result<OwnedFd, FsError> {
    let shown = rel.to_string_lossy().into_owned();
    let escape = || FsError::SymlinkEscape(shown.clone());
    let io = |e: Errno| FsError::Io {
        path: shown.clone(),
        source: e.into(),
        transient: true,
    };
    let mut queue: std::collections::VecDeque<OsString> = components(rel);
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut links = 0usize;
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            if stack.pop().is_none() {
                return Err(escape());
            }
            continue;
        }
        let cur = stack.last().map_or(ws.root_fd.as_fd(), AsFd::as_fd);
        let st =
            rustix::fs::statat(cur, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| match e {
                Errno::NOENT => FsError::NotFound(shown.clone()),
                Errno::NOTDIR => FsError::NotADirectory(shown.clone()),
                other => io(other),
            })?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(FsError::SymlinkLoop(shown.clone()));
            }
            let target = rustix::fs::readlinkat(cur, &name, Vec::new()).map_err(io)?;
            let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
            let mut expanded = if target.is_absolute() {
                let inside = target.strip_prefix(&ws.root).map_err(|_| escape())?;
                stack.clear();
                components(inside)
            } else {
                components(&target)
            };
            expanded.extend(queue.drain(..));
            queue = expanded;
            continue;
        }
        if queue.is_empty() {
            return rustix::fs::openat(cur, &name, flags | OFlags::NOFOLLOW, Mode::empty())
                .map_err(|e| if e == Errno::LOOP { escape() } else { io(e) });
        }
        let next =
            rustix::fs::openat(cur, &name, dir_flags, Mode::empty()).map_err(|e| match e {
                Errno::NOTDIR => FsError::NotADirectory(shown.clone()),
                other => io(other),
            })?;
        stack.push(next);
    }
    // The root itself (empty or all-`.` path).
    let cur = stack.last().map_or(ws.root_fd.as_fd(), AsFd::as_fd);
    rustix::fs::openat(cur, ".", flags, Mode::empty()).map_err(io)
}

fn components(p: &Path) -> std::collections::VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

fn looks_like_windows_absolute(s: &str) -> bool {
    let b = s.as_bytes();
    (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':') || s.starts_with("\\\\")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "inside").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/b.txt"), "inside b").unwrap();
        std::fs::create_dir(parent.path().join("ws_evil")).unwrap();
        std::fs::write(parent.path().join("ws_evil/s"), "SECRET").unwrap();
        let w = Workspace::open(&root).unwrap();
        (parent, w)
    }

    fn read(w: &Workspace, p: &str) -> Result<String, FsError> {
        let (mut f, _) = w.open_beneath(&w.resolve_lexically(p)?)?;
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    fn read_walk(w: &Workspace, p: &str) -> Result<String, FsError> {
        let wp = w.resolve_lexically(p)?;
        let fd = open_beneath_walk(w, wp.relative(), OFlags::RDONLY | OFlags::CLOEXEC)?;
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn resolve_beneath_judges_the_existing_part_of_a_path() {
        let (t, w) = ws();
        let root = w.root().to_path_buf();
        symlink(t.path().join("ws_evil"), root.join("out")).unwrap();
        symlink("/nonexistent/far", root.join("dangling_out")).unwrap();
        symlink("sub", root.join("in")).unwrap();
        symlink("loop2", root.join("loop1")).unwrap();
        symlink("loop1", root.join("loop2")).unwrap();
        for ok in [
            "a.txt",
            "missing/deeper/new.txt",
            "in/b.txt",
            "in/new.txt",
            "a.txt/x",
            ".",
        ] {
            assert!(w.resolve_beneath(ok).is_ok(), "{ok}");
        }
        for escape in [
            "out",
            "out/s",
            "out/new/new.txt",
            "dangling_out",
            "dangling_out/x",
        ] {
            assert!(
                matches!(w.resolve_beneath(escape), Err(FsError::SymlinkEscape(_))),
                "{escape}: {:?}",
                w.resolve_beneath(escape)
            );
        }
        assert!(matches!(
            w.resolve_beneath("loop1/x"),
            Err(FsError::SymlinkLoop(_))
        ));
        for absolute in ["./~/x", "sub/../C:/x", "./\\\\srv/x"] {
            assert!(
                matches!(w.resolve_beneath(absolute), Err(FsError::Absolute(_))),
                "{absolute}"
            );
        }
    }

    #[test]
    fn lexical_refusals() {
        let (_t, w) = ws();
        assert!(matches!(
            w.resolve_lexically("/etc/passwd"),
            Err(FsError::Absolute(_))
        ));
        assert!(matches!(
            w.resolve_lexically("~/x"),
            Err(FsError::Absolute(_))
        ));
        assert!(matches!(
            w.resolve_lexically("C:\\x"),
            Err(FsError::Absolute(_))
        ));
        assert!(matches!(
            w.resolve_lexically("\\\\srv\\share"),
            Err(FsError::Absolute(_))
        ));
        assert!(matches!(
            w.resolve_lexically("../x"),
            Err(FsError::Outside(_))
        ));
        assert!(matches!(
            w.resolve_lexically("sub/../../x"),
            Err(FsError::Outside(_))
        ));
        assert!(matches!(
            w.resolve_lexically("a\0b"),
            Err(FsError::InvalidPath(_))
        ));
        assert_eq!(
            w.resolve_lexically("./sub/../a.txt").unwrap().display(),
            "a.txt"
        );
        assert!(w.resolve_lexically(".").unwrap().is_root());
    }

    #[test]
    fn both_openers_agree() {
        let (t, w) = ws();
        symlink("sub/b.txt", w.root().join("in_link")).unwrap();
        symlink(w.root().join("sub"), w.root().join("abs_in_dir")).unwrap();
        symlink(t.path().join("ws_evil/s"), w.root().join("out_file")).unwrap();
        symlink(t.path().join("ws_evil"), w.root().join("out_dir")).unwrap();
        symlink("../ws_evil/s", w.root().join("rel_out")).unwrap();
        symlink("loop2", w.root().join("loop1")).unwrap();
        symlink("loop1", w.root().join("loop2")).unwrap();
        for reader in [read, read_walk] {
            assert_eq!(reader(&w, "a.txt").unwrap(), "inside");
            assert_eq!(reader(&w, "in_link").unwrap(), "inside b");
            assert_eq!(reader(&w, "abs_in_dir/b.txt").unwrap(), "inside b");
            assert!(matches!(
                reader(&w, "out_file"),
                Err(FsError::SymlinkEscape(_))
            ));
            assert!(matches!(
                reader(&w, "out_dir/s"),
                Err(FsError::SymlinkEscape(_))
            ));
            assert!(matches!(
                reader(&w, "rel_out"),
                Err(FsError::SymlinkEscape(_))
            ));
            assert!(matches!(reader(&w, "loop1"), Err(FsError::SymlinkLoop(_))));
            assert!(matches!(reader(&w, "missing"), Err(FsError::NotFound(_))));
        }
        // See: CVE-2025-53110 (prefix sibling): ../ws_evil is outside by component.
        assert!(matches!(
            w.resolve_lexically("../ws_evil/s"),
            Err(FsError::Outside(_))
        ));
    }
}
