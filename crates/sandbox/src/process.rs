//! Steps of a forked child on its way into the sandbox: the signals it
//! ignores, its capabilities dropped, its descriptors closed, and the user
//! and mount namespace (with the git seal's overlays) it may enter first.
//! System calls only: these run between fork and exec.

use std::ffi::CString;

/// Signals the supervisor ignores (terminal and job control, and those a
/// kill sends to a whole group); the shell gets them back as default.
pub const IGNORED: [libc::c_int; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGPIPE,
];

/// A user and mount namespace of the supervisor's own, entered before the
/// command starts, with overlays mounted in it: bubblewrap (0.8) mounts no
/// overlay and a sandboxed process may not, so the git directory's
/// copy-on-write view is made one namespace up and inherited (locked) by
/// the sandbox. Only the server's own ids are mapped, so nothing gains a
/// privilege on the host; the namespace ends with the command's last
/// process, and the overlay with it.
pub struct NsSetup {
    uid_map: CString,
    gid_map: CString,
    /// (mount point, options) of each overlay.
    mounts: Vec<(CString, CString)>,
}

impl NsSetup {
    /// Overlays at each `(mount point, overlayfs options)`.
    pub fn new(mounts: Vec<(std::path::PathBuf, Vec<u8>)>) -> Result<Self, String> {
        use std::os::unix::ffi::OsStrExt;
        let nul = |_| "a mount path contains a NUL byte".to_owned();
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let mut m = Vec::with_capacity(mounts.len());
        for (target, data) in mounts {
            m.push((
                CString::new(target.as_os_str().as_bytes()).map_err(nul)?,
                CString::new(data).map_err(nul)?,
            ));
        }
        Ok(Self {
            uid_map: CString::new(format!("{uid} {uid} 1\n")).map_err(nul)?,
            gid_map: CString::new(format!("{gid} {gid} 1\n")).map_err(nul)?,
            mounts: m,
        })
    }

    /// Enters the namespaces and mounts; system calls only (it runs between
    /// fork and exec). Returns the errno of the step that failed.
    ///
    /// # Safety
    /// Only in a single-threaded process (a fork child): `unshare` of a user
    /// namespace requires it.
    #[expect(
        unsafe_code,
        reason = "unshare, /proc writes and mount between fork and exec"
    )]
    pub unsafe fn enter(&self) -> Result<(), i32> {
        // SAFETY: system calls on strings owned by `self`.
        unsafe {
            let errno = || *libc::__errno_location();
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err(errno());
            }
            let write = crate::holder::write_proc;
            write(c"/proc/self/setgroups", b"deny")?;
            write(c"/proc/self/uid_map", self.uid_map.as_bytes())?;
            write(c"/proc/self/gid_map", self.gid_map.as_bytes())?;
            crate::holder::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
            for (target, data) in &self.mounts {
                crate::holder::mount(
                    Some(c"overlay"),
                    target,
                    Some(c"overlay"),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(data),
                )?;
            }
            Ok(())
        }
    }
}

/// Empties the bounding, ambient, effective, permitted and inheritable
/// capability sets: a command of a server run as root keeps uid 0 (files
/// stay its own) but loses every capability (raw sockets, mknod, network
/// and host configuration, the kernel log, immutable flags, ...), and no
/// exec gives one back. System calls only. False when any capability is
/// left after it.
#[expect(
    unsafe_code,
    reason = "the capget/capset system calls have no safe wrapper here"
)]
pub fn drop_all_capabilities() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capset with structs on this stack frame.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr());
        // Checked, not assumed: dropping never needs a privilege, so
        // anything left is an error the caller fails on.
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut left = [Data {
            effective: 1,
            permitted: 1,
            inheritable: 1,
        }; 2];
        let got = libc::syscall(
            libc::SYS_capget,
            &header as *const Header,
            left.as_mut_ptr(),
        );
        got == 0
            && left
                .iter()
                .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0)
    }
}

/// Closes this process's descriptors `first..=last`.
///
/// # Safety
/// Only in a forked, single-threaded child: descriptors others own (the
/// runtime's, a library's) are closed under them.
#[expect(unsafe_code, reason = "the close_range system call")]
pub unsafe fn close_range(first: u32, last: u32) {
    if first > last {
        return;
    }
    // SAFETY: closes descriptors of this (forked, single-threaded) process.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
            // Kernels before 5.9: close what is plausibly open.
            for fd in first..=last.min(65_535) {
                libc::close(fd as libc::c_int);
            }
        }
    }
}

/// Size of a stack [`clone_stack`] maps.
pub const CLONE_STACK_BYTES: usize = 256 * 1024;

/// The top of a fresh private stack for a process `clone`d on this one's
/// memory (it is never unmapped: it goes with the last process using it).
#[expect(unsafe_code, reason = "mmap of an anonymous stack")]
pub fn clone_stack() -> std::io::Result<*mut libc::c_void> {
    // SAFETY: an anonymous private mapping; nothing else refers to it.
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            CLONE_STACK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stack.cast::<u8>().add(CLONE_STACK_BYTES).cast())
    }
}
