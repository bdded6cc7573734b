//! What this engine wrote lately, so that a patch written against the text
//! before another patch (one that lost a race, or a repeat of one already
//! applied) is told apart from a patch that never fitted the file.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use crate::commit::Baseline;

/// Larger files are not remembered: a conflict on them reads as a context
/// error, as it would without this memory.
pub(crate) const MAX_REMEMBERED_BYTES: usize = 256 * 1024;
/// Files remembered, the most recently written ones.
const MAX_FILES: usize = 64;

/// One file's last write by this engine.
pub(crate) struct Written {
    /// The content before the write (`None`: the file did not exist).
    pub before: Option<Vec<u8>>,
    /// What the write left.
    pub after: Baseline,
}

/// The last write of each of the most recently written files.
#[derive(Default)]
pub(crate) struct Recent {
    files: VecDeque<(PathBuf, Written)>,
}

impl Recent {
    pub fn record(&mut self, path: PathBuf, written: Option<Written>) {
        self.files.retain(|(p, _)| *p != path);
        if let Some(w) = written {
            self.files.push_back((path, w));
            if self.files.len() > MAX_FILES {
                self.files.pop_front();
            }
        }
    }

    pub fn get(&self, path: &Path) -> Option<&Written> {
        self.files.iter().find(|(p, _)| p == path).map(|(_, w)| w)
    }
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("files", &self.files.len())
            .finish()
    }
}
