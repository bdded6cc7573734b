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

/// `<base>/coding-tools-mcp/<workspace hash>/<random>/{home,tmp,cache}`,
/// mode 0700, removed on drop.
#[derive(Debug)]
pub struct RuntimeDirs {
    root: PathBuf,
}

fn random_hex() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

fn stable_hash(path: &Path) -> String {
    // FNV-1a: stable across processes, so one workspace always maps to one folder.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl RuntimeDirs {
    /// Creates the directories under the system temp directory.
    pub fn create(workspace: &Path) -> Result<Self, RuntimeDirError> {
        Self::create_in(&std::env::temp_dir(), workspace)
    }

    /// Creates the directories under `base`.
    pub fn create_in(base: &Path, workspace: &Path) -> Result<Self, RuntimeDirError> {
        let err = |source| RuntimeDirError {
            base: base.to_path_buf(),
            source,
        };
        let parent = base.join("coding-tools-mcp").join(stable_hash(workspace));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)
            .map_err(err)?;
        let root = parent.join(random_hex());
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(err)?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        let dirs = Self { root };
        for sub in ["home", "tmp", "cache"] {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dirs.root.join(sub))
                .map_err(err)?;
        }
        Ok(dirs)
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

impl Drop for RuntimeDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
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
        let a = RuntimeDirs::create_in(base.path(), Path::new("/w")).unwrap();
        let b = RuntimeDirs::create_in(base.path(), Path::new("/w")).unwrap();
        assert_ne!(a.root(), b.root());
        assert_eq!(a.root().parent(), b.root().parent());
        assert_eq!(std::fs::metadata(a.root()).unwrap().mode() & 0o777, 0o700);
        assert!(a.tmp().is_dir() && a.cache().is_dir());
        let root = a.root().to_path_buf();
        drop(a);
        assert!(!root.exists());
        assert!(b.root().exists());
    }
}
