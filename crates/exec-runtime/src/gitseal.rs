//! The git seal of safe mode (namespace tier): nothing a command writes
//! may run later, outside the sandbox, through the user's own git.
//!
//! A list of read-only paths loses to git's discovery (an invalid `HEAD`
//! makes the workspace root the repository; a renamed parent takes a
//! sealed hooks directory with it; an included config file lies outside the
//! list). So the seal is built from git's side:
//!
//! - **The git directory is copy-on-write.** Each command sees an overlay
//!   of the repository's git directory (lower: the real one; upper: a
//!   private directory of the server's that the command cannot reach). When
//!   the command's last process is gone, [`carry_back`] copies into the real
//!   directory only what git needs to record work, each file validated:
//!   loose objects whose content hashes to their name, packs indexed anew
//!   by `git index-pack`, refs and `HEAD` that name an id or a ref,
//!   `packed-refs`, reflogs, the index, and the merge and commit-message
//!   files. Config, hooks, `info/`, `modules/`, `worktrees/`, sequencer and
//!   rebase state, `commondir`, alternates and anything unknown never reach
//!   the real repository; the command's result names what was not kept. The
//!   real `.git` is therefore always the one the user had, so the workspace
//!   root never becomes the repository.
//! - **What git's configuration names inside the workspace is read-only.**
//!   The system, global, repository and worktree config files are read
//!   with gix-config, following every `include.path` and `includeIf.*.path`
//!   (whatever the condition): included files, `core.hooksPath` (with the
//!   directory husky 9's stubs run hooks from) and every program a config
//!   key runs (`core.fsmonitor`, `core.sshCommand`, drivers, filters,
//!   helpers, `!` aliases, ...) that lies inside the workspace is bound
//!   read-only, and every directory between it and the workspace root is a
//!   mount point (a parent cannot be renamed away). A named path that does
//!   not exist cannot be covered by a mount: it is reported as a gap, and
//!   the seal is then not called complete.
//! - **A `.git` file** (a linked worktree, a submodule's checkout) is bound
//!   read-only, so it cannot be pointed at a repository the command built.

use ctm_sandbox::namespace::Bind;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Files an agent's host or an IDE loads or runs from a project without
/// asking; commands of safe mode never write them. Each that exists is
/// bound read-only (a directory whole); each that is missing is watched: a
/// command that creates one is named in its result.
pub const NEVER_WRITABLE: [&str; 14] = [
    ".vscode",
    ".idea",
    ".mcp.json",
    ".claude",
    ".cursor",
    ".codex",
    ".gemini",
    ".husky",
    // What hook managers' hooks read from the working tree (pre-commit,
    // lefthook, husky 4).
    ".pre-commit-config.yaml",
    "lefthook.yml",
    ".lefthook.yml",
    "lefthook-local.yml",
    ".huskyrc",
    ".huskyrc.json",
];

/// The repository the workspace root is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repo {
    /// The git directory (`.git`, or what a `.git` file names).
    pub git_dir: PathBuf,
    /// `.git` is a file naming `git_dir`.
    pub via_file: bool,
}

/// What sealing the workspace's git takes, computed before each command
/// (the repository and its config may have changed since the last).
#[derive(Debug, Clone, Default)]
pub(crate) struct SealPlan {
    /// The git directory each command gets copy-on-write (inside the
    /// workspace; one outside is read-only through the host root already).
    pub overlay: Option<PathBuf>,
    /// Mounts, outermost first (a mount point before what lies below it).
    pub binds: Vec<(Bind, PathBuf)>,
    /// Why the seal is not complete (empty: it is).
    pub gaps: Vec<String>,
    /// The never-writable entries that do not exist now.
    pub missing_protected: Vec<PathBuf>,
    /// Never-writable entries that are symbolic links, and where each
    /// leads: the target is sealed, the link (in a writable directory) is
    /// not, so a command that replaces one is named in its result.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// The workspace root has no `.git` (one of `gaps` says so).
    pub no_repository: bool,
}

/// The repository git finds at the workspace root, if the root is one.
pub(crate) fn repo_at(workspace: &Path) -> Result<Option<Repo>, String> {
    let dot_git = workspace.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Ok(None);
    };
    if meta.is_dir() {
        return Ok(Some(Repo {
            git_dir: dot_git,
            via_file: false,
        }));
    }
    if meta.file_type().is_symlink() {
        return Err(".git is a symbolic link (a command could replace it)".into());
    }
    if !meta.is_file() {
        return Err(".git is neither a directory nor a file".into());
    }
    let target = ctm_workspace_fs::gitdir_link(&dot_git)
        .ok_or(".git is a file that names no git directory")?;
    let target = target.canonicalize().map_err(|e| {
        format!(
            ".git names {}, which cannot be resolved: {e}",
            target.display()
        )
    })?;
    Ok(Some(Repo {
        git_dir: target,
        via_file: true,
    }))
}

/// The seal for the workspace as it is now.
pub(crate) fn plan(workspace: &Path) -> SealPlan {
    let mut plan = SealPlan::default();
    let mut sealed: BTreeSet<PathBuf> = BTreeSet::new();
    let repo = match repo_at(workspace) {
        Ok(r) => r,
        Err(why) => {
            plan.gaps.push(why);
            None
        }
    };
    match &repo {
        None if plan.gaps.is_empty() => {
            plan.no_repository = true;
            plan.gaps.push(
                "the workspace root is not a repository (no .git): a command can make it one"
                    .into(),
            );
        }
        None => {}
        Some(r) => {
            if r.via_file {
                sealed.insert(workspace.join(".git"));
            }
            if r.git_dir.starts_with(workspace) {
                plan.overlay = Some(r.git_dir.clone());
            }
        }
    }
    // Submodules (the index's gitlinks): the user's `git status` descends
    // into each populated one and runs what its repository's config names.
    // Its `.git` (a file pointing into `.git/modules`, or an embedded
    // directory) is read-only, and one not checked out is kept empty.
    if let Some(r) = &repo {
        let links = read_index(&r.git_dir.join("index"))
            .and_then(|d| index_gitlinks(&d).ok())
            .unwrap_or_default();
        for link in links {
            let Ok(rel) = std::str::from_utf8(&link) else {
                continue;
            };
            let dir = normal(&workspace.join(rel));
            if !dir.starts_with(workspace) || dir == workspace {
                continue;
            }
            let dot_git = dir.join(".git");
            match std::fs::symlink_metadata(&dot_git) {
                Ok(m) if m.file_type().is_symlink() => plan.gaps.push(format!(
                    "{rel}/.git is a symbolic link (a command could replace it)"
                )),
                Ok(_) => {
                    sealed.insert(dot_git);
                }
                Err(_) if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) => {
                    sealed.insert(dir);
                }
                Err(_) => {}
            }
        }
    }
    // Hooks git runs from the real hooks directory: the seal cannot know
    // which workspace files they run or read (a hook that runs
    // `./scripts/lint.sh`). The hook managers' own files are sealed
    // (NEVER_WRITABLE); anything else such a hook reads is a gap, said.
    if let Some(r) = &repo {
        let active: Vec<String> = std::fs::read_dir(r.git_dir.join("hooks"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                use std::os::unix::fs::PermissionsExt;
                let n = e.file_name();
                !n.to_string_lossy().ends_with(".sample")
                    && e.metadata()
                        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !active.is_empty() {
            plan.gaps.push(format!(
                "hooks in .git/hooks ({}) run with the user's rights and may run or read workspace files commands can change; the seal covers the hook managers' own files (.pre-commit-config.yaml, lefthook.yml, .husky) only",
                active.join(", ")
            ));
        }
    }
    let (named, missing) = named_by_config(workspace, repo.as_ref());
    for p in named {
        if !is_within(&p, workspace) || p == workspace {
            continue;
        }
        // Inside the overlaid git directory the copy-on-write covers it.
        if plan.overlay.as_ref().is_some_and(|g| p.starts_with(g)) {
            continue;
        }
        sealed.insert(p);
    }
    for p in missing {
        if is_within(&p, workspace) && !plan.overlay.as_ref().is_some_and(|g| p.starts_with(g)) {
            plan.gaps.push(format!(
                "git's configuration names {}, which does not exist: a command could create it",
                p.display()
            ));
        }
    }
    for name in NEVER_WRITABLE {
        let p = workspace.join(name);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                // A link in a writable directory: the place it leads to is
                // sealed when inside (the link itself could be replaced, and
                // a command that does is named in its result).
                if let Ok(to) = std::fs::read_link(&p) {
                    plan.links.push((p.clone(), to));
                }
                if let Ok(t) = p.canonicalize()
                    && is_within(&t, workspace)
                    && t != workspace
                {
                    sealed.insert(t);
                }
            }
            Ok(_) => {
                sealed.insert(p);
            }
            Err(_) => plan.missing_protected.push(p),
        }
    }
    let mut binds: BTreeSet<(usize, Bind, PathBuf)> = BTreeSet::new();
    // A git directory deeper in the workspace (a `.git` file naming
    // `a/b/repo.git`): every directory above it is a mount point, so that
    // no command can move it — the overlay with it — and leave another in
    // its place for the next command's plan while it writes the real one.
    if let Some(rel) = plan
        .overlay
        .as_deref()
        .and_then(|g| g.strip_prefix(workspace).ok())
    {
        let mut above = workspace.to_path_buf();
        let comps: Vec<_> = rel.components().collect();
        for (depth, c) in comps.iter().enumerate().take(comps.len().saturating_sub(1)) {
            above.push(c);
            binds.insert((depth, Bind::MountPoint, above.clone()));
        }
    }
    for p in &sealed {
        let Ok(rel) = p.strip_prefix(workspace) else {
            continue;
        };
        let mut above = workspace.to_path_buf();
        let comps: Vec<_> = rel.components().collect();
        for (depth, c) in comps.iter().enumerate() {
            above.push(c);
            let kind = if depth + 1 == comps.len() {
                Bind::ReadOnly
            } else {
                Bind::MountPoint
            };
            binds.insert((depth, kind, above.clone()));
        }
    }
    // A path both sealed and above another sealed one: read-only wins, and
    // each path is mounted once.
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let ro: BTreeSet<PathBuf> = binds
        .iter()
        .filter(|(_, k, _)| *k == Bind::ReadOnly)
        .map(|(_, _, p)| p.clone())
        .collect();
    for (_, kind, p) in binds {
        if !seen.insert(p.clone()) {
            continue;
        }
        let kind = if ro.contains(&p) {
            Bind::ReadOnly
        } else {
            kind
        };
        // Below a read-only path everything is read-only already.
        if p.ancestors().skip(1).any(|a| ro.contains(a)) {
            continue;
        }
        plan.binds.push((kind, p));
    }
    plan
}

fn is_within(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

/// Lexically normal: `a/./b/../c` is `a/c` (a config path is resolved by
/// git as a string, before any link is followed).
fn normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Config keys whose value starts with a program git runs (`!` and
/// arguments stripped). `*` is any subsection.
const PROGRAM_KEYS: [(&str, &str); 24] = [
    ("core", "fsmonitor"),
    ("core", "sshcommand"),
    ("core", "pager"),
    ("core", "editor"),
    ("core", "askpass"),
    ("core", "gitproxy"),
    ("sequence", "editor"),
    ("diff", "external"),
    ("diff.*", "textconv"),
    ("diff.*", "command"),
    ("filter.*", "clean"),
    ("filter.*", "smudge"),
    ("filter.*", "process"),
    ("merge.*", "driver"),
    ("credential", "helper"),
    ("credential.*", "helper"),
    ("gpg", "program"),
    ("gpg.*", "program"),
    ("alias", "*"),
    ("pager", "*"),
    ("interactive", "difffilter"),
    ("difftool.*", "cmd"),
    ("mergetool.*", "cmd"),
    ("uploadpack", "packobjectshook"),
];

/// The config files git reads for this repository, in git's order:
/// system, global (XDG and `~/.gitconfig`), the repository's own and its
/// worktree's.
fn config_files(repo: Option<&Repo>) -> Vec<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut out = Vec::new();
    if env("GIT_CONFIG_NOSYSTEM").is_none() {
        out.push(
            env("GIT_CONFIG_SYSTEM").map_or_else(|| PathBuf::from("/etc/gitconfig"), PathBuf::from),
        );
    }
    if let Some(g) = env("GIT_CONFIG_GLOBAL") {
        out.push(PathBuf::from(g));
    } else {
        if let Some(x) = env("XDG_CONFIG_HOME") {
            out.push(Path::new(&x).join("git/config"));
        } else if let Some(h) = env("HOME") {
            out.push(Path::new(&h).join(".config/git/config"));
        }
        if let Some(h) = env("HOME") {
            out.push(Path::new(&h).join(".gitconfig"));
        }
    }
    if let Some(r) = repo {
        let common = ctm_workspace_fs::read_small(&r.git_dir.join("commondir"))
            .map_or_else(|| r.git_dir.clone(), |c| normal(&r.git_dir.join(c.trim())));
        out.push(common.join("config"));
        out.push(r.git_dir.join("config.worktree"));
    }
    out
}

/// Every path git's config names that a command could use to make git run
/// something: (existing paths, missing paths), both absolute and normal.
fn named_by_config(workspace: &Path, repo: Option<&Repo>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut named = Vec::new();
    let mut missing = Vec::new();
    let files = config_files(repo);
    // A config file git reads that lies in the workspace itself (a
    // workspace that is $HOME, a dotfiles repository): sealed like an
    // included one. The repository's own config is in the overlay.
    for f in &files {
        let f = normal(f);
        if f.starts_with(workspace) {
            if std::fs::symlink_metadata(&f).is_ok() {
                named.push(f);
            } else {
                missing.push(f);
            }
        }
    }
    let mut queue: Vec<(PathBuf, usize)> = files.into_iter().map(|p| (p, 0)).collect();
    let mut read: BTreeSet<PathBuf> = BTreeSet::new();
    let expand = |v: &str, base: &Path| -> PathBuf {
        let p = if let Some(rest) = v.strip_prefix("~/") {
            home.as_ref()
                .map_or_else(|| PathBuf::from(v), |h| h.join(rest))
        } else {
            PathBuf::from(v)
        };
        normal(&if p.is_absolute() { p } else { base.join(p) })
    };
    while let Some((file, depth)) = queue.pop() {
        if depth > 10 || !read.insert(file.clone()) {
            continue;
        }
        let Some(text) = read_config(&file) else {
            continue;
        };
        let Ok(cfg) = gix_config::File::from_bytes_no_includes(
            text.as_bytes(),
            gix_config::file::Metadata::from(gix_config::Source::Local),
            gix_config::file::init::Options::default(),
        ) else {
            continue;
        };
        let dir = file
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        for section in cfg.sections() {
            let name = section.header().name().to_string().to_ascii_lowercase();
            let sub = section.header().subsection_name().is_some();
            let body = section.body();
            for key in body.value_names() {
                let key = key.to_ascii_lowercase();
                let values = body.values(&key);
                let include = key == "path" && (name == "include" || (name == "includeif" && sub));
                for value in values {
                    let value = value.to_string();
                    let value = value.trim();
                    if value.is_empty() {
                        continue;
                    }
                    if include {
                        let p = expand(value, &dir);
                        if std::fs::symlink_metadata(&p).is_ok() {
                            named.push(p.clone());
                        } else {
                            missing.push(p.clone());
                        }
                        queue.push((p, depth + 1));
                        continue;
                    }
                    if name == "core" && !sub && key == "hookspath" {
                        let p = expand(value, workspace);
                        if std::fs::symlink_metadata(&p).is_ok() {
                            // husky 9: `core.hooksPath = .husky/_`, whose
                            // stubs run `.husky/<hook>`.
                            if p.file_name() == Some(OsStr::new("_"))
                                && let Some(parent) = p.parent()
                            {
                                named.push(parent.to_path_buf());
                            }
                            named.push(p);
                        } else {
                            missing.push(p);
                        }
                        continue;
                    }
                    let runs = PROGRAM_KEYS.iter().any(|(s, k)| {
                        let section_ok = match s.strip_suffix(".*") {
                            Some(base) => base == name && sub,
                            None => *s == name && !sub,
                        };
                        section_ok && (*k == "*" || *k == key)
                    });
                    if !runs {
                        continue;
                    }
                    let program = value.trim_start_matches('!').trim_start();
                    let first = program.split_whitespace().next().unwrap_or("");
                    let first = first.trim_matches(|c| c == '"' || c == '\'');
                    if !first.contains('/') {
                        continue;
                    }
                    let p = expand(first, workspace);
                    if std::fs::symlink_metadata(&p).is_ok() {
                        named.push(p);
                    } else {
                        missing.push(p);
                    }
                }
            }
        }
    }
    (named, missing)
}

/// A config file's text (at most 1 MiB, a regular file, never blocking).
fn read_config(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let mut s = String::new();
    f.take(1 << 20).read_to_string(&mut s).ok()?;
    Some(s)
}

/// One command's copy-on-write git directory: where its changes collect.
#[derive(Debug)]
pub(crate) struct SealJob {
    /// The real git directory (the overlay's lower layer and mount point).
    pub git_dir: PathBuf,
    /// The command's private directory, holding `u` (the upper layer) and
    /// `w` (overlayfs's work directory).
    pub scratch: PathBuf,
}

impl SealJob {
    /// Makes the command's upper and work directories below `seal_root`.
    pub(crate) fn new(seal_root: &Path, n: u64, git_dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let scratch = seal_root.join(format!("c{n}"));
        std::fs::DirBuilder::new().mode(0o700).create(&scratch)?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(scratch.join("u"))?;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(scratch.join("w"))?;
        Ok(Self {
            git_dir: git_dir.to_path_buf(),
            scratch,
        })
    }

    pub(crate) fn upper(&self) -> PathBuf {
        self.scratch.join("u")
    }

    /// The overlay's mount options, with `,`, `:` and `\` escaped.
    pub(crate) fn mount_data(&self) -> Vec<u8> {
        let esc = |p: &Path| {
            let mut v = Vec::new();
            for &b in p.as_os_str().as_bytes() {
                if matches!(b, b',' | b':' | b'\\') {
                    v.push(b'\\');
                }
                v.push(b);
            }
            v
        };
        let mut d = b"lowerdir=".to_vec();
        d.extend(esc(&self.git_dir));
        d.extend(b",upperdir=");
        d.extend(esc(&self.upper()));
        d.extend(b",workdir=");
        d.extend(esc(&self.scratch.join("w")));
        // `volatile`: no fsync of the upper layer (copy-up syncs each file
        // otherwise); it is scratch, carried back and removed.
        d.extend(b",userxattr,volatile");
        d
    }

    /// Removes the command's private directory (overlayfs leaves its work
    /// directory mode 000).
    pub(crate) fn remove(&self) {
        open_up(&self.scratch, 0);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn open_up(dir: &Path, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    if depth > 64 {
        return;
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&e.path(), depth + 1);
            }
        }
    }
}

/// The index file's bytes (at most 1 GiB), if it is a regular file.
fn read_index(path: &Path) -> Option<Vec<u8>> {
    let (mut f, len) = open_regular(path).ok()?;
    if len > 1 << 30 {
        return None;
    }
    let mut v = Vec::with_capacity(len as usize);
    f.read_to_end(&mut v).ok()?;
    Some(v)
}

/// The paths of an index's gitlink entries (mode 160000: submodules),
/// read with gix-index as git reads it; refused when git could not use it
/// as it stands (a split index whose shared part is not carried) or when
/// an entry's path is one git refuses to check out (`.git` in any case or
/// spelling HFS+ or NTFS fold to it, `.`, `..`, empty components): `git
/// restore .` of such an entry would write into `.git`.
pub(crate) fn index_gitlinks(data: &[u8]) -> Result<BTreeSet<Vec<u8>>, &'static str> {
    let (state, _) = gix_index::State::from_bytes(
        data,
        filetime::FileTime::zero(),
        gix_index::hash::Kind::Sha1,
        gix_index::decode::Options {
            alloc_limit_bytes: Some(1 << 30),
            ..Default::default()
        },
    )
    .map_err(|_| "not an index git can read")?;
    if state.link().is_some() {
        return Err(
            "a split index, whose shared part is not carried: run `git update-index --no-split-index` (or set core.splitIndex=false) and stage again",
        );
    }
    let opts = gix_index::validate::path::component::Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    let mut out = BTreeSet::new();
    for e in state.entries() {
        let path = e.path(&state);
        let symlink = e.mode == gix_index::entry::Mode::SYMLINK;
        for comp in path.split(|&b| b == b'/') {
            if comp.is_empty() || comp == b"." || comp == b".." {
                return Err("an entry's path is not one git checks out");
            }
            let mode = symlink.then_some(gix_index::validate::path::component::Mode::Symlink);
            if gix_index::validate::path::component(comp.into(), mode, opts).is_err() {
                return Err("an entry's path is not one git checks out (it names .git)");
            }
        }
        if e.mode == gix_index::entry::Mode::COMMIT {
            out.insert(path.to_vec());
        }
    }
    Ok(out)
}

/// Repositories directly below the workspace root (and the root itself):
/// IDEs run git in each one they find.
pub(crate) fn shallow_repos(workspace: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    if std::fs::symlink_metadata(workspace.join(".git")).is_ok() {
        out.insert(workspace.join(".git"));
    }
    if let Ok(rd) = std::fs::read_dir(workspace) {
        for e in rd.flatten().take(10_000) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let g = e.path().join(".git");
                if std::fs::symlink_metadata(&g).is_ok() {
                    out.insert(g);
                }
            }
        }
    }
    out
}

/// What came of one command's changes to the git directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Files written into (or removed from) the real git directory.
    pub kept: usize,
    /// Changes not kept: the path inside the git directory and why.
    pub not_kept: Vec<(String, &'static str)>,
    /// Never-writable entries the command created (workspace-relative).
    pub created_protected: Vec<String>,
    /// Repositories the command created at or directly below the
    /// workspace root (their config is the command's).
    pub created_repositories: Vec<String>,
    /// The paths the seal kept read-only, listed when the command's output
    /// says a write met a read-only file system.
    pub read_only: Vec<String>,
}

impl SealReport {
    /// One line for the command's result, when there is anything to say.
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.not_kept.is_empty() {
            let mut names: Vec<String> = self
                .not_kept
                .iter()
                .take(8)
                .map(|(p, why)| format!(".git/{p} ({why})"))
                .collect();
            if self.not_kept.len() > 8 {
                names.push(format!("and {} more", self.not_kept.len() - 8));
            }
            parts.push(format!(
                "git seal: the command's changes to {} were not kept in the repository: commands of safe mode change only objects, refs, reflogs, the index and HEAD (run other git changes yourself, or use --permission-mode trusted)",
                names.join(", ")
            ));
        }
        if !self.created_protected.is_empty() {
            parts.push(format!(
                "the command created {}, which IDEs and agents load or run without asking: review it before opening the project",
                self.created_protected.join(", ")
            ));
        }
        if !self.read_only.is_empty() {
            parts.push(format!(
                "\"Read-only file system\": safe mode keeps {} read-only for commands (git, hook managers or IDEs run or load them later, outside the sandbox; the host outside the workspace is read-only too): change them yourself, through apply_patch, or in --permission-mode trusted",
                self.read_only.join(", ")
            ));
        }
        if !self.created_repositories.is_empty() {
            parts.push(format!(
                "the command created the git repository {}: its config and hooks are the command's, and git run there (by you or an IDE) runs what they name; review or remove it",
                self.created_repositories.join(", ")
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// How a changed path of the upper layer is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// git's caches and markers (`.idx` made anew from its pack, `.rev`,
    /// bitmaps, the commit-graph): not carried, not worth a word.
    Cache,
    LooseObject,
    Pack,
    PackedRefs,
    Ref,
    Log,
    Index,
    Head,
    Ids,
    Text,
}

/// Decides what a path (relative to the git directory, `/`-separated) is.
fn classify(rel: &str) -> Result<Kind, &'static str> {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["objects", d, f] if is_hex(d, 2) && (is_hex(f, 38) || is_hex(f, 62)) => {
            Ok(Kind::LooseObject)
        }
        ["objects", "pack", f] if !f.ends_with(".pack") => Ok(Kind::Cache),
        [
            "objects",
            "info",
            "commit-graph" | "packs" | "multi-pack-index",
        ]
        | ["objects", "info", "commit-graphs", _]
        | ["info", "refs"]
        | ["gc.pid" | "gc.log" | "fsmonitor--daemon.ipc"] => Ok(Kind::Cache),
        ["objects", "pack", f] => {
            if f.ends_with(".pack")
                && f.strip_prefix("pack-")
                    .and_then(|s| s.strip_suffix(".pack"))
                    .is_some_and(|h| is_hex(h, 40) || is_hex(h, 64))
            {
                Ok(Kind::Pack)
            } else {
                // .idx is made anew from the pack; .rev, .bitmap, .mtimes
                // and .keep are git's caches and markers.
                Err("pack side file: made anew or not needed")
            }
        }
        ["objects", ..] => Err("object store metadata (alternates, commit-graph)"),
        ["packed-refs"] => Ok(Kind::PackedRefs),
        ["refs", "replace", ..] => Err("replace refs: they change what history git shows"),
        ["refs", ..] if valid_ref_name(rel) => Ok(Kind::Ref),
        ["logs", "HEAD"] => Ok(Kind::Log),
        ["logs", "refs", ..] if valid_ref_name(&rel["logs/".len()..]) => Ok(Kind::Log),
        ["index"] => Ok(Kind::Index),
        ["HEAD"] => Ok(Kind::Head),
        ["ORIG_HEAD" | "MERGE_HEAD" | "CHERRY_PICK_HEAD" | "REVERT_HEAD" | "AUTO_MERGE"] => {
            Ok(Kind::Ids)
        }
        ["MERGE_MSG" | "MERGE_MODE" | "SQUASH_MSG" | "COMMIT_EDITMSG" | "FETCH_HEAD"] => {
            Ok(Kind::Text)
        }
        ["config" | "config.worktree"] => Err("repository config"),
        ["hooks", ..] => Err("hooks"),
        ["info", ..] => Err("info: excludes, attributes, grafts"),
        ["modules", ..] => Err("submodule repositories"),
        ["worktrees", ..] => Err("linked worktrees"),
        ["rebase-merge" | "rebase-apply" | "sequencer", ..] => {
            Err("sequencer state: finish a rebase or cherry-pick within one command")
        }
        ["commondir" | "gitdir"] => Err("repository pointer"),
        ["refs", ..] | ["logs", ..] => Err("not a valid ref name"),
        _ => Err("not a file git needs to record work"),
    }
}

fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `refs/...` as `git check-ref-format` accepts it.
fn valid_ref_name(name: &str) -> bool {
    if !name.starts_with("refs/")
        || name.ends_with('/')
        || name.ends_with('.')
        || name.contains("@{")
    {
        return false;
    }
    name.split('/').all(|c| {
        !c.is_empty()
            && !c.starts_with('.')
            && !c.ends_with(".lock")
            && !c.contains("..")
            && c.bytes().all(|b| {
                b > b' '
                    && b != 0x7f
                    && !matches!(b, b'~' | b'^' | b':' | b'?' | b'*' | b'[' | b'\\')
            })
    })
}

fn is_id(s: &str) -> bool {
    is_hex(s, 40) || is_hex(s, 64)
}

/// The content rules: what each kind may hold.
fn valid_content(kind: Kind, data: &[u8]) -> Result<(), &'static str> {
    let text = || std::str::from_utf8(data).map_err(|_| "not text");
    match kind {
        Kind::Ref | Kind::Head => {
            let t = text()?;
            let t = t.strip_suffix('\n').unwrap_or(t);
            if is_id(t) {
                return Ok(());
            }
            match t.strip_prefix("ref: ") {
                Some(r) if valid_ref_name(r) => Ok(()),
                _ => Err("neither an object id nor a ref"),
            }
        }
        Kind::Ids => {
            let t = text()?;
            if t.lines().all(|l| is_id(l.trim_end())) {
                Ok(())
            } else {
                Err("not a list of object ids")
            }
        }
        Kind::PackedRefs => {
            let t = text()?;
            for (i, l) in t.lines().enumerate() {
                let ok = if let Some(id) = l.strip_prefix('^') {
                    is_id(id)
                } else if l.starts_with('#') {
                    i == 0
                } else {
                    l.split_once(' ')
                        .is_some_and(|(id, name)| is_id(id) && valid_ref_name(name))
                };
                if !ok {
                    return Err("a line that is not a packed ref");
                }
            }
            Ok(())
        }
        Kind::Log | Kind::Text => {
            if data.contains(&0) {
                Err("binary content")
            } else {
                Ok(())
            }
        }
        Kind::Index => {
            if data.starts_with(b"DIRC") {
                Ok(())
            } else {
                Err("not an index")
            }
        }
        Kind::LooseObject | Kind::Pack | Kind::Cache => Ok(()),
    }
}

/// Largest file of each kind that is carried back.
fn size_limit(kind: Kind) -> u64 {
    match kind {
        Kind::LooseObject | Kind::Pack | Kind::Cache => u64::MAX,
        Kind::Index => 1 << 30,
        Kind::PackedRefs | Kind::Log => 256 << 20,
        Kind::Ref | Kind::Head | Kind::Ids => 4096,
        Kind::Text => 1 << 20,
    }
}

/// One entry of the upper layer.
enum Change {
    /// A regular file written or changed.
    File(PathBuf),
    /// Removed (an overlayfs whiteout).
    Removed,
    /// A directory whose lower contents are hidden (removed and made anew).
    Opaque,
    /// A symbolic link, device or socket: never carried.
    Special,
}

fn changes(upper: &Path) -> Vec<(String, Change)> {
    let mut out = Vec::new();
    let mut stack = vec![(upper.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                out.push((
                    format!("{rel}{}", e.file_name().to_string_lossy()),
                    Change::Special,
                ));
                continue;
            };
            let r = format!("{rel}{name}");
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            let ft = meta.file_type();
            if ft.is_char_device() && meta.rdev() == 0 {
                out.push((r, Change::Removed));
            } else if ft.is_dir() {
                if xattr_is_y(&e.path(), "user.overlay.opaque") {
                    out.push((r.clone(), Change::Opaque));
                }
                if depth < 32 && out.len() < 1_000_000 {
                    stack.push((e.path(), format!("{r}/"), depth + 1));
                }
            } else if ft.is_file() {
                out.push((r, Change::File(e.path())));
            } else {
                out.push((r, Change::Special));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn xattr_is_y(path: &Path, name: &str) -> bool {
    let mut buf = [0u8; 4];
    matches!(rustix::fs::lgetxattr(path, name, &mut buf), Ok(n) if n >= 1 && buf[0] == b'y')
}

/// The order changes are applied in: objects before anything that names
/// them, the index and `HEAD` last.
fn rank(kind: Kind) -> u8 {
    match kind {
        Kind::Cache | Kind::LooseObject | Kind::Pack => 0,
        Kind::PackedRefs => 1,
        Kind::Ref => 2,
        Kind::Log => 3,
        Kind::Ids | Kind::Text => 4,
        Kind::Index => 5,
        Kind::Head => 6,
    }
}

/// Copies what git needs to record work from a finished command's upper
/// layer into the real git directory, each file validated; reports the
/// rest. The command's processes are all gone: nothing writes the upper
/// layer any more. `git` is the trusted git binary for indexing packs.
pub(crate) fn carry_back(job: &SealJob, git: Option<&Path>) -> SealReport {
    let mut report = SealReport::default();
    let links = read_index(&job.git_dir.join("index"))
        .and_then(|d| index_gitlinks(&d).ok())
        .unwrap_or_default();
    // Set when an object the command wrote is refused for what it would
    // make git do: nothing that could point at it is carried then.
    let mut blocked: Option<&'static str> = None;
    let upper = job.upper();
    let mut todo: Vec<(u8, String, Kind, Change)> = Vec::new();
    for (rel, change) in changes(&upper) {
        if matches!(change, Change::Opaque) {
            // Its new contents are listed on their own; deletions of what
            // the lower layer held there are not carried.
            if rel.starts_with("refs") || rel.starts_with("logs") {
                report
                    .not_kept
                    .push((format!("{rel}/"), "removal of a whole directory of refs"));
            }
            continue;
        }
        if matches!(change, Change::Special) {
            report.not_kept.push((rel, "not a regular file"));
            continue;
        }
        if matches!(change, Change::Removed)
            && std::fs::symlink_metadata(job.git_dir.join(&rel)).is_ok_and(|m| m.is_dir())
        {
            // A directory git emptied and removed (a ref namespace, an
            // objects fan-out directory after gc): an emptied ref directory
            // goes too; nothing else of the real repository is removed.
            if rel.starts_with("refs/") || rel.starts_with("logs/") {
                let _ = std::fs::remove_dir(job.git_dir.join(&rel));
            }
            continue;
        }
        // Directories themselves are not changes; their files are.
        match classify(&rel) {
            Ok(Kind::Cache) => {}
            Ok(kind) => todo.push((rank(kind), rel, kind, change)),
            Err(why) => report.not_kept.push((rel, why)),
        }
    }
    todo.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    for (_, rel, kind, change) in todo {
        if let Some(why) = blocked
            && !matches!(
                kind,
                Kind::LooseObject | Kind::Pack | Kind::Cache | Kind::Log | Kind::Text
            )
        {
            report.not_kept.push((rel, why));
            continue;
        }
        let r = match change {
            Change::Removed => remove(&job.git_dir, &rel, kind),
            Change::File(src) => install(&job.git_dir, &rel, kind, &src, git, &links),
            Change::Opaque | Change::Special => continue,
        };
        match r {
            Ok(true) => report.kept += 1,
            Ok(false) => {}
            Err(why) => {
                if kind == Kind::LooseObject
                    && (why == "a tree that adds a submodule" || why.contains("names .git"))
                {
                    blocked = Some("the command's commits hold a tree that was refused");
                }
                report.not_kept.push((rel, why));
            }
        }
    }
    report
}

fn remove(git_dir: &Path, rel: &str, kind: Kind) -> Result<bool, &'static str> {
    match kind {
        // Objects are never removed (a later gc does it); HEAD must exist.
        Kind::LooseObject | Kind::Pack | Kind::Cache => Ok(false),
        Kind::Head => Err("HEAD cannot be removed"),
        _ => {
            let p = git_dir.join(rel);
            safe_parent(git_dir, &p)?;
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_file() => {
                    std::fs::remove_file(&p).map_err(|_| "could not be removed")?;
                    Ok(true)
                }
                Ok(m) if m.is_dir() => {
                    let _ = std::fs::remove_dir(&p);
                    Ok(false)
                }
                Ok(_) => Err("not a regular file in the repository"),
                Err(_) => Ok(false),
            }
        }
    }
}

/// The directories from the git directory down to `p`'s parent are real
/// directories (no symlink leads the write elsewhere); missing ones are
/// made.
fn safe_parent(git_dir: &Path, p: &Path) -> Result<(), &'static str> {
    let rel = p
        .strip_prefix(git_dir)
        .map_err(|_| "outside the git directory")?;
    let mut at = git_dir.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err("a path component in the repository is not a directory"),
            Err(_) => std::fs::create_dir(&at).map_err(|_| "its directory could not be made")?,
        }
    }
    Ok(())
}

fn open_regular(src: &Path) -> Result<(std::fs::File, u64), &'static str> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(src)
        .map_err(|_| "unreadable")?;
    let m = f.metadata().map_err(|_| "unreadable")?;
    if !m.is_file() {
        return Err("not a regular file");
    }
    Ok((f, m.len()))
}

fn install(
    git_dir: &Path,
    rel: &str,
    kind: Kind,
    src: &Path,
    git: Option<&Path>,
    links: &BTreeSet<Vec<u8>>,
) -> Result<bool, &'static str> {
    let dest = git_dir.join(rel);
    safe_parent(git_dir, &dest)?;
    match kind {
        Kind::Cache => Ok(false),
        Kind::LooseObject => install_object(&dest, rel, src, links),
        Kind::Pack => install_pack(git_dir, &dest, src, git),
        _ => {
            let (mut f, len) = open_regular(src)?;
            if len > size_limit(kind) {
                return Err("larger than git writes it");
            }
            let mut data = Vec::with_capacity(len as usize);
            (&mut f)
                .take(size_limit(kind))
                .read_to_end(&mut data)
                .map_err(|_| "unreadable")?;
            valid_content(kind, &data)?;
            if kind == Kind::Index {
                let new = index_gitlinks(&data)?;
                let old = read_index(&dest)
                    .and_then(|d| index_gitlinks(&d).ok())
                    .unwrap_or_default();
                if !new.is_subset(&old) {
                    // A gitlink makes the user's git descend into a
                    // repository the command built.
                    return Err("it registers a new submodule: add submodules yourself");
                }
            }
            if std::fs::symlink_metadata(&dest).is_ok_and(|m| !m.is_file()) {
                return Err("not a regular file in the repository");
            }
            write_locked(&dest, &data)?;
            Ok(true)
        }
    }
}

/// Writes `dest` the way git does: `<dest>.lock` made exclusively (a git
/// of the user's running at the same moment holds it, and then this waits
/// briefly), written, renamed over `dest`.
fn write_locked(dest: &Path, data: &[u8]) -> Result<(), &'static str> {
    let mut lock = dest.as_os_str().to_os_string();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    let mut file = None;
    for _ in 0..50 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock)
        {
            Ok(f) => {
                file = Some(f);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(_) => return Err("its lock file could not be made"),
        }
    }
    let Some(mut f) = file else {
        return Err("locked by another git process");
    };
    // No fsync: git does not sync refs or the index either (its
    // `core.fsync` default covers packs only).
    let written = f.write_all(data);
    drop(f);
    if written.is_err() || std::fs::rename(&lock, dest).is_err() {
        let _ = std::fs::remove_file(&lock);
        return Err("could not be written");
    }
    Ok(())
}

/// Writes `data` as a new file `dest` (never over an existing one),
/// synced when `sync` (packs, as git syncs them; loose objects it does not).
fn write_new(dest: &Path, read: &mut dyn Read, sync: bool) -> Result<bool, &'static str> {
    let dir = dest.parent().ok_or("no directory")?;
    let tmp = dir.join(format!(
        ".ctm-seal-{}-{}",
        std::process::id(),
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|_| "could not be written")?;
    let ok = std::io::copy(read, &mut f).is_ok() && (!sync || f.sync_data().is_ok());
    drop(f);
    if !ok {
        let _ = std::fs::remove_file(&tmp);
        return Err("could not be written");
    }
    let r = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &tmp,
        rustix::fs::CWD,
        dest,
        rustix::fs::RenameFlags::NOREPLACE,
    );
    match r {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => {
            let _ = std::fs::remove_file(&tmp);
            Ok(false)
        }
        Err(_) => {
            let _ = std::fs::remove_file(&tmp);
            Err("could not be written")
        }
    }
}

/// A loose object is kept only when its content hashes to its name (so a
/// command cannot plant content under the id of a blob the user commits
/// later) and no object of that name is there yet.
fn install_object(
    dest: &Path,
    rel: &str,
    src: &Path,
    links: &BTreeSet<Vec<u8>>,
) -> Result<bool, &'static str> {
    if std::fs::symlink_metadata(dest).is_ok() {
        return Ok(false);
    }
    let name: String = rel["objects/".len()..]
        .chars()
        .filter(|c| *c != '/')
        .collect();
    let (f, _) = open_regular(src)?;
    let algo = if name.len() == 40 {
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY
    } else {
        &ring::digest::SHA256
    };
    let mut ctx = ring::digest::Context::new(algo);
    let mut z = flate2::read::ZlibDecoder::new(f);
    let mut buf = vec![0u8; 64 * 1024];
    // A tree is kept whole (up to 64 MiB) to read its entries.
    let mut tree: Option<Vec<u8>> = None;
    let mut first = true;
    loop {
        let n = z.read(&mut buf).map_err(|_| "not a valid object")?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
        if first {
            first = false;
            if buf[..n].starts_with(b"tree ") {
                tree = Some(Vec::new());
            }
        }
        if let Some(t) = tree.as_mut() {
            if t.len() + n > 64 << 20 {
                return Err("a tree too large to check");
            }
            t.extend_from_slice(&buf[..n]);
        }
    }
    let hex: String = ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if hex != name {
        return Err("its content does not hash to its name");
    }
    if let Some(t) = tree {
        check_tree(&t, name.len() / 2, links)?;
    }
    let (mut f, _) = open_regular(src)?;
    write_new(dest, &mut f, false)
}

/// A tree's entries: none names `.git` (git's own path rules), and a
/// gitlink (a submodule) only under a name a submodule of the real index
/// has — otherwise a commit of the command's would, once the user checks it
/// out or resets to it, make git descend into a repository the command built.
fn check_tree(obj: &[u8], id_len: usize, links: &BTreeSet<Vec<u8>>) -> Result<(), &'static str> {
    const BAD: &str = "a tree git would not check out";
    let body_at = obj.iter().position(|&b| b == 0).ok_or(BAD)? + 1;
    let mut rest = &obj[body_at..];
    let opts = gix_index::validate::path::component::Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    };
    while !rest.is_empty() {
        let sp = rest.iter().position(|&b| b == b' ').ok_or(BAD)?;
        let mode = &rest[..sp];
        let nul = rest.iter().position(|&b| b == 0).ok_or(BAD)?;
        let name = rest.get(sp + 1..nul).ok_or(BAD)?;
        rest = rest.get(nul + 1 + id_len..).ok_or(BAD)?;
        let symlink = mode == b"120000";
        let m = symlink.then_some(gix_index::validate::path::component::Mode::Symlink);
        if name.is_empty()
            || name == b"."
            || name == b".."
            || gix_index::validate::path::component(name.into(), m, opts).is_err()
        {
            return Err("a tree with an entry that names .git");
        }
        if mode == b"160000"
            && !links
                .iter()
                .any(|l| l.rsplit(|&b| b == b'/').next() == Some(name))
        {
            return Err("a tree that adds a submodule");
        }
    }
    Ok(())
}

/// A pack is kept with an index made anew by `git index-pack` from its
/// content (a command's own `.idx` could map any id to any object), under
/// the name git gives it.
fn install_pack(
    git_dir: &Path,
    dest: &Path,
    src: &Path,
    git: Option<&Path>,
) -> Result<bool, &'static str> {
    if std::fs::symlink_metadata(dest).is_ok() {
        return Ok(false);
    }
    let git = git.ok_or("no trusted git to index the pack with")?;
    let pack_dir = dest.parent().ok_or("no directory")?;
    let work = tempfile_dir(pack_dir)?;
    let copy = work.join("p.pack");
    let (mut f, _) = open_regular(src)?;
    let copied = write_new(&copy, &mut f, false);
    let result = copied.and_then(|_| index_pack(git, git_dir, &work, &copy, pack_dir));
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn tempfile_dir(in_dir: &Path) -> Result<PathBuf, &'static str> {
    use std::os::unix::fs::DirBuilderExt;
    for i in 0..100u32 {
        let p = in_dir.join(format!(".ctm-seal-{}-{i}", std::process::id()));
        if std::fs::DirBuilder::new().mode(0o700).create(&p).is_ok() {
            return Ok(p);
        }
    }
    Err("no temporary directory")
}

#[expect(
    clippy::disallowed_methods,
    reason = "the exec runtime runs git's own pack indexer on a pack a sealed command wrote"
)]
fn index_pack(
    git: &Path,
    git_dir: &Path,
    work: &Path,
    pack: &Path,
    pack_dir: &Path,
) -> Result<bool, &'static str> {
    // `index-pack` runs no hooks and no configured programs; it is what
    // git runs on packs received from the network. Run in a directory that
    // is no repository, with no config but git's defaults.
    let sha256 = ctm_workspace_fs::read_small(&git_dir.join("config"))
        .is_some_and(|c| c.to_ascii_lowercase().contains("objectformat = sha256"));
    let mut cmd = std::process::Command::new(git);
    cmd.current_dir(work)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", work)
        .arg("index-pack")
        // fsck's checks of every object: a tree naming `.git` is refused.
        .arg("--strict");
    if sha256 {
        cmd.arg("--object-format=sha256");
    }
    let out = cmd
        .arg(pack)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|_| "git index-pack could not run")?;
    if !out.status.success() {
        return Err("git index-pack refused the pack");
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let hash = line.split_whitespace().last().unwrap_or("");
    if !is_id(hash) {
        return Err("git index-pack named no pack");
    }
    let pack_dest = pack_dir.join(format!("pack-{hash}.pack"));
    let idx_dest = pack_dir.join(format!("pack-{hash}.idx"));
    let idx_src = work.join("p.idx");
    if std::fs::symlink_metadata(&idx_dest).is_ok() {
        return Ok(false);
    }
    // The pack first, its index last: git reads a pack once its index is there.
    let (mut p, _) = open_regular(pack)?;
    write_new(&pack_dest, &mut p, true)?;
    let (mut i, _) = open_regular(&idx_src)?;
    write_new(&idx_dest, &mut i, true)
}

/// Whether this host lets the supervisor make the seal's namespace and
/// overlay (user namespaces allowed, overlayfs mountable in one, the layers'
/// file system fit for it): one throwaway process does exactly what a
/// command's supervisor does, on directories below `scratch`.
#[expect(
    clippy::disallowed_methods,
    reason = "the exec runtime probes its own namespace set-up with a throwaway process"
)]
pub(crate) fn probe_overlay(scratch: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::process::CommandExt;
    let dir = scratch.join("probe");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let lower = dir.join("l");
    std::fs::create_dir(&lower).map_err(|e| e.to_string())?;
    std::fs::write(lower.join("f"), "x").map_err(|e| e.to_string())?;
    let job = SealJob::new(&dir, 0, &lower).map_err(|e| e.to_string())?;
    let ns = ctm_sandbox::process::NsSetup::new(vec![(lower.clone(), job.mount_data())])?;
    let mut cmd = std::process::Command::new("/bin/sh");
    // Inside: a write through the overlay lands in the upper layer only.
    cmd.arg("-c")
        .arg("echo y > \"$1/f\" && rm \"$1/f\" && echo z > \"$1/g\"")
        .arg("sh")
        .arg(&lower)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: `enter` makes only system calls on values prepared above;
    // the child is a fresh fork (single-threaded).
    #[expect(
        unsafe_code,
        reason = "pre_exec enters the namespaces between fork and exec"
    )]
    unsafe {
        cmd.pre_exec(move || ns.enter().map_err(std::io::Error::from_raw_os_error));
    }
    let result = match cmd.output() {
        Err(e) => Err(format!(
            "a user and mount namespace with an overlay cannot be made here: {e}"
        )),
        Ok(o) if !o.status.success() => Err(format!(
            "writes through the overlay failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => {
            let upper = job.upper();
            let whiteout = std::fs::symlink_metadata(upper.join("f"))
                .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == 0);
            let lower_kept = std::fs::symlink_metadata(lower.join("f")).is_ok()
                && std::fs::symlink_metadata(lower.join("g")).is_err();
            if whiteout && lower_kept && upper.join("g").is_file() {
                Ok(())
            } else {
                Err("the overlay did not keep the lower layer unchanged".into())
            }
        }
    };
    job.remove();
    open_up(&dir, 0);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The never-writable entries that exist now among `missing` (listed
/// before a command): what the command created, workspace-relative.
/// The links of `links` (path, where it led) that are no longer the same
/// link: replaced by a file or directory, removed, or leading elsewhere.
pub(crate) fn replaced_links(workspace: &Path, links: &[(PathBuf, PathBuf)]) -> Vec<String> {
    links
        .iter()
        .filter(|(p, to)| std::fs::read_link(p).ok().as_ref() != Some(to))
        .filter_map(|(p, _)| p.strip_prefix(workspace).ok())
        .map(|p| p.display().to_string())
        .collect()
}

pub(crate) fn created_since(workspace: &Path, missing: &[PathBuf]) -> Vec<String> {
    missing
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .filter_map(|p| p.strip_prefix(workspace).ok())
        .map(|p| p.display().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_records_work_is_carried() {
        for ok in [
            "HEAD",
            "index",
            "packed-refs",
            "refs/heads/main",
            "refs/heads/feature/x",
            "refs/stash",
            "logs/HEAD",
            "logs/refs/heads/main",
            "ORIG_HEAD",
            "MERGE_HEAD",
            "MERGE_MSG",
            "COMMIT_EDITMSG",
            "objects/ab/0123456789abcdef0123456789abcdef012345",
            "objects/pack/pack-0123456789abcdef0123456789abcdef01234567.pack",
        ] {
            assert!(classify(ok).is_ok(), "{ok}");
        }
        for no in [
            "config",
            "config.worktree",
            "hooks/pre-commit",
            "info/attributes",
            "info/exclude",
            "modules/sub/config",
            "worktrees/wt/HEAD",
            "rebase-merge/git-rebase-todo",
            "sequencer/todo",
            "commondir",
            "objects/info/alternates",
            "refs/heads/x.lock",
            "refs/heads/.hidden",
            "refs/heads/a..b",
            "description",
            "shallow",
        ] {
            assert!(classify(no).is_err(), "{no}");
        }
    }

    #[test]
    fn contents_are_what_git_writes() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert!(valid_content(Kind::Head, b"ref: refs/heads/main\n").is_ok());
        assert!(valid_content(Kind::Head, format!("{id}\n").as_bytes()).is_ok());
        assert!(valid_content(Kind::Head, b"x").is_err());
        assert!(valid_content(Kind::Head, b"ref: ../../config\n").is_err());
        assert!(valid_content(Kind::Ref, b"ref: HEAD\n").is_err());
        let packed =
            format!("# pack-refs with: peeled fully-peeled sorted \n{id} refs/heads/main\n^{id}\n");
        assert!(valid_content(Kind::PackedRefs, packed.as_bytes()).is_ok());
        assert!(valid_content(Kind::PackedRefs, b"[core]\n\tfsmonitor = x\n").is_err());
        assert!(valid_content(Kind::Ids, format!("{id}\n{id}\n").as_bytes()).is_ok());
        assert!(valid_content(Kind::Index, b"DIRC\0\0\0\x02").is_ok());
        assert!(valid_content(Kind::Index, b"[core]").is_err());
    }

    #[test]
    fn config_names_what_runs_inside_the_workspace() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join("tools/hooks")).unwrap();
        std::fs::write(ws.join("tools/fsmon"), "").unwrap();
        std::fs::write(ws.join(".gitconfig"), "[alias]\n\tst = !./tools/st.sh\n").unwrap();
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\thooksPath = tools/hooks\n\tfsmonitor = ./tools/fsmon --flag\n[include]\n\tpath = ../.gitconfig\n",
        )
        .unwrap();
        let plan = plan(&ws);
        assert_eq!(plan.overlay.as_deref(), Some(ws.join(".git").as_path()));
        let ro: Vec<_> = plan
            .binds
            .iter()
            .filter(|(k, _)| *k == Bind::ReadOnly)
            .map(|(_, p)| p.clone())
            .collect();
        assert!(ro.contains(&ws.join("tools/hooks")), "{ro:?}");
        assert!(ro.contains(&ws.join("tools/fsmon")), "{ro:?}");
        assert!(ro.contains(&ws.join(".gitconfig")), "{ro:?}");
        // The parent of the hooks directory cannot be renamed away, and it
        // is mounted before what lies below it.
        let at = |p: &Path| plan.binds.iter().position(|(_, b)| b == p).unwrap();
        assert_eq!(plan.binds[at(&ws.join("tools"))].0, Bind::MountPoint);
        assert!(at(&ws.join("tools")) < at(&ws.join("tools/hooks")));
        // The alias's script does not exist: a gap, said.
        assert!(
            plan.gaps.iter().any(|g| g.contains("tools/st.sh")),
            "{:?}",
            plan.gaps
        );
    }

    #[test]
    fn husky_hooks_are_sealed_with_the_directory_they_run_from() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .husky/_\n").unwrap();
        let plan = plan(&ws);
        assert!(plan.binds.contains(&(Bind::ReadOnly, ws.join(".husky"))));
        assert!(plan.gaps.is_empty(), "{:?}", plan.gaps);
    }

    #[test]
    fn a_workspace_that_is_no_repository_is_a_gap() {
        let t = tempfile::tempdir().unwrap();
        let plan = plan(t.path());
        assert!(plan.overlay.is_none());
        assert!(plan.gaps.iter().any(|g| g.contains("not a repository")));
    }

    #[test]
    #[expect(
        clippy::disallowed_methods,
        reason = "the test makes real indexes with git and reads them back"
    )]
    fn gitlinks_are_read_from_real_indexes_of_every_version() {
        for version in ["2", "3", "4"] {
            let t = tempfile::tempdir().unwrap();
            let ws = t.path();
            let git = |args: &[&str]| {
                let ok = std::process::Command::new("git")
                    .args(args)
                    .current_dir(ws)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("HOME", ws)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "git {args:?}");
            };
            git(&["init", "-q"]);
            std::fs::create_dir_all(ws.join("deep/dir")).unwrap();
            std::fs::write(ws.join("deep/dir/file-with-a-long-name.txt"), "x").unwrap();
            std::fs::write(ws.join("a"), "x").unwrap();
            git(&["add", "."]);
            let id = "0123456789abcdef0123456789abcdef01234567";
            git(&[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{id},deep/sub"),
            ]);
            git(&[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{id},z"),
            ]);
            git(&["update-index", "--index-version", version]);
            let data = std::fs::read(ws.join(".git/index")).unwrap();
            let links = index_gitlinks(&data).unwrap();
            let want: BTreeSet<Vec<u8>> = [b"deep/sub".to_vec(), b"z".to_vec()].into();
            assert_eq!(links, want, "index version {version}");
        }
        assert!(index_gitlinks(b"DIRC\0\0\0\x02\0\0\0\x05").is_err());
    }
}
