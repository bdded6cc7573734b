//! The confinement of coding-tools-mcp's commands, below the exec runtime:
//! what a command's process is allowed once it runs.
//!
//! * [`seccomp`]: the system calls refused to every command (compiled once,
//!   a binary search over the call number), attached before `exec`.
//! * [`confine`]: Landlock rulesets — what a command may read, write,
//!   execute, connect to and signal.
//! * [`namespace`]: the namespace tier — its plan (bubblewrap's option
//!   syntax), the probe of the host, the programs trusted by location, and
//!   the entry a sandbox runs before the command.
//! * [`builder`]: the namespace tier built by the host program itself
//!   (user, mount, PID, IPC, UTS, cgroup and network namespaces, binds made
//!   read-only, `pivot_root`) when it is started as [`BUILDER_FLAG`].
//! * [`holder`]: namespaces made once per workspace and handed to the host
//!   as descriptors; each command's supervisor joins them, and PID 1 of the
//!   command's own PID namespace starts it.
//! * [`process`]: the steps of a forked child (signals, capabilities,
//!   descriptors, the git seal's user and mount namespace).
//!
//! The program that hosts it must call [`enter_if_requested`] first thing
//! in `main`: the sandbox re-executes that program as its builder, holder
//! and entry. Nothing here knows about MCP or about the command pool; the
//! exec runtime (`ctm-exec-runtime`) decides when a command gets which.
//!
//! ```no_run
//! // First thing in `main`: returns at once unless this process is one of
//! // the sandbox's.
//! ctm_sandbox::enter_if_requested();
//! let support = ctm_sandbox::namespace::support();
//! // stderr: the host may speak a protocol on stdout.
//! eprintln!("namespace tier: {}", support.available());
//! eprintln!("Landlock ABI: {}", ctm_sandbox::confine::support().abi);
//! ```

#![deny(missing_docs)]

pub mod builder;
pub mod confine;
pub mod holder;
pub mod namespace;
pub mod process;
pub mod seccomp;

pub use builder::BUILDER_FLAG;
pub use namespace::{ENTRY_FLAG, enter_if_requested};
