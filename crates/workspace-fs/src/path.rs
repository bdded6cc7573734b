//! The workspace root and checked paths.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The caller gave an absolute path.
    #[error("absolute paths are not accepted: {0}")]
    Absolute(String),
    /// `..` leaves the workspace root.
    #[error("path leaves the workspace: {0}")]
    Outside(String),
    /// A symlink on the way points outside the workspace.
    #[error("path resolves through a symlink to outside the workspace: {0}")]
    SymlinkEscape(String),
    /// The path contains a NUL byte or is otherwise unusable.
    #[error("invalid path: {0}")]
    Invalid(String),
    /// The path does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// The root itself is unusable.
    #[error("workspace root {path}: {reason}")]
    Root {
        /// The root as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// One canonical workspace root.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// A path inside the workspace that passed every check of [`Workspace::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    relative: String,
    absolute: PathBuf,
}

impl WorkspacePath {
    /// The path relative to the root, as the caller should repeat it.
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// The canonical absolute path.
    pub fn absolute(&self) -> &Path {
        &self.absolute
    }
}

impl Workspace {
    /// Opens `root`, which must be an existing directory; it is canonicalized.
    pub fn open(root: &Path) -> Result<Self, PathError> {
        let err = |reason: String| PathError::Root {
            path: root.display().to_string(),
            reason,
        };
        let canonical = root.canonicalize().map_err(|e| err(e.to_string()))?;
        if !canonical.is_dir() {
            return Err(err("not a directory".into()));
        }
        Ok(Self { root: canonical })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves an existing workspace-relative path.
    pub fn resolve(&self, input: &str) -> Result<WorkspacePath, PathError> {
        let lexical = self.lexical(input)?;
        let absolute = self.root.join(&lexical);
        let canonical = match absolute.canonicalize() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A dangling link may still point outside: report the escape.
                if let Ok(target) = std::fs::read_link(&absolute) {
                    let joined = absolute.parent().unwrap_or(&self.root).join(target);
                    if !self.contains_lexically(&joined) {
                        return Err(PathError::SymlinkEscape(input.to_owned()));
                    }
                }
                return Err(PathError::NotFound(input.to_owned()));
            }
            Err(e) => return Err(PathError::Invalid(format!("{input}: {e}"))),
        };
        if !canonical.starts_with(&self.root) {
            return Err(PathError::SymlinkEscape(input.to_owned()));
        }
        Ok(WorkspacePath {
            relative: display_relative(&lexical),
            absolute: canonical,
        })
    }

    /// Lexical checks: no NUL, not absolute, `..` never above the root.
    fn lexical(&self, input: &str) -> Result<PathBuf, PathError> {
        if input.contains('\0') {
            return Err(PathError::Invalid("path contains a NUL byte".into()));
        }
        let p = Path::new(input);
        if p.is_absolute() || input.starts_with('~') || looks_like_windows_absolute(input) {
            return Err(PathError::Absolute(input.to_owned()));
        }
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                Component::Normal(s) => out.push(s),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(PathError::Outside(input.to_owned()));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PathError::Absolute(input.to_owned()));
                }
            }
        }
        Ok(out)
    }

    fn contains_lexically(&self, p: &Path) -> bool {
        let mut depth: Vec<Component<'_>> = Vec::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    depth.pop();
                }
                Component::CurDir => {}
                other => depth.push(other),
            }
        }
        let normalized: PathBuf = depth.iter().collect();
        normalized.starts_with(&self.root)
    }
}

fn looks_like_windows_absolute(s: &str) -> bool {
    let b = s.as_bytes();
    (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':') || s.starts_with("\\\\")
}

fn display_relative(p: &Path) -> String {
    let s = p.to_string_lossy().into_owned();
    if s.is_empty() { ".".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let w = Workspace::open(&root).unwrap();
        (parent, w)
    }

    #[test]
    fn resolves_inside() {
        let (_t, w) = ws();
        assert_eq!(w.resolve("a.txt").unwrap().relative(), "a.txt");
        assert_eq!(w.resolve("./sub/../a.txt").unwrap().relative(), "a.txt");
        assert_eq!(w.resolve(".").unwrap().relative(), ".");
    }

    #[test]
    fn refuses_escapes() {
        let (t, w) = ws();
        assert!(matches!(
            w.resolve("/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(w.resolve("~/x"), Err(PathError::Absolute(_))));
        assert!(matches!(w.resolve("C:\\x"), Err(PathError::Absolute(_))));
        assert!(matches!(
            w.resolve("\\\\srv\\share"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(w.resolve("../x"), Err(PathError::Outside(_))));
        assert!(matches!(
            w.resolve("sub/../../x"),
            Err(PathError::Outside(_))
        ));
        assert!(matches!(w.resolve("a\0b"), Err(PathError::Invalid(_))));
        // See: CVE-2025-53110 (prefix sibling).
        std::fs::create_dir(t.path().join("ws_evil")).unwrap();
        std::fs::write(t.path().join("ws_evil/s"), "x").unwrap();
        assert!(w.resolve("../ws_evil/s").is_err());
        // See: CVE-2025-53109 (symlink out), file and directory, and dangling.
        std::os::unix::fs::symlink(t.path().join("ws_evil/s"), w.root().join("lf")).unwrap();
        std::os::unix::fs::symlink(t.path().join("ws_evil"), w.root().join("ld")).unwrap();
        std::os::unix::fs::symlink(t.path().join("nowhere"), w.root().join("dangle")).unwrap();
        assert!(matches!(w.resolve("lf"), Err(PathError::SymlinkEscape(_))));
        assert!(matches!(
            w.resolve("ld/s"),
            Err(PathError::SymlinkEscape(_))
        ));
        assert!(matches!(
            w.resolve("dangle"),
            Err(PathError::SymlinkEscape(_))
        ));
        assert!(matches!(w.resolve("missing"), Err(PathError::NotFound(_))));
    }
}
