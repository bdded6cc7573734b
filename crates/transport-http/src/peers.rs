//! Who may connect over loopback: the account that owns a client's socket.
//!
//! A server on `127.0.0.1` without a token is reachable by every local
//! account, and each would run commands as the server's user. On Linux the
//! kernel says which user owns the other end of a local TCP connection: a
//! `NETLINK_SOCK_DIAG` request for the exact four-tuple (the client's
//! address and port as source, the server's as destination) answers with
//! that one socket's state, owner uid and inode, found by the kernel's
//! connection hash, whatever the number of sockets on the host.
//! [`PeerPolicy::SameUser`] refuses a connection that arrived on a loopback
//! address (whatever the client's source address: a socket bound to any of
//! the host's addresses may connect to `127.0.0.1`) unless that socket is
//! alive (not in `TIME_WAIT`, whose entry carries no owner), has an inode
//! (a process holds it) and belongs to the uid.

use std::net::{IpAddr, SocketAddr};

/// Which local accounts may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PeerPolicy {
    /// Anyone who can reach the port (what [`crate::serve`] does).
    #[default]
    Anyone,
    /// A connection that arrived on a loopback address is served only when
    /// the client's socket belongs to this uid (one that arrived on another
    /// address passes: a non-loopback bind needs authentication).
    SameUser {
        /// The uid whose clients are served.
        uid: u32,
    },
}

/// The owner of a client socket, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSocket {
    /// The socket's owner.
    pub uid: u32,
    /// Its inode (0: no process holds it any more).
    pub inode: u32,
    /// Its TCP state (`TCP_ESTABLISHED` is 1, `TCP_TIME_WAIT` 6).
    pub state: u8,
}

impl PeerSocket {
    /// A socket a process still holds, with a real owner.
    pub fn is_held(&self) -> bool {
        const TCP_TIME_WAIT: u8 = 6;
        const TCP_CLOSE: u8 = 7;
        self.inode != 0 && self.state != TCP_TIME_WAIT && self.state != TCP_CLOSE
    }
}

/// Whether this host can tell the owner of a loopback connection's other
/// end (sock_diag answers).
pub fn peer_owner_known() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| {
        // Ask about a connection that does not exist: "not found" is an
        // answer; a refused socket or request is not.
        let nowhere: SocketAddr = ([127, 0, 0, 1], 1).into();
        matches!(lookup(nowhere, nowhere), Ok(None) | Ok(Some(_)))
    })
}

/// The client socket of the connection `remote` -> `local` (the accepted
/// socket's peer and local addresses); `None` when the kernel knows no
/// such socket or cannot be asked.
pub fn loopback_peer(remote: SocketAddr, local: SocketAddr) -> Option<PeerSocket> {
    let (remote, local) = match (unmap(remote), unmap(local)) {
        // A dual-stack listener sees IPv4 clients as mapped addresses; the
        // client's own socket is plain IPv4.
        (Some(r), Some(l)) => (r, l),
        _ => (remote, local),
    };
    lookup(remote, local).ok().flatten()
}

/// The uid owning the client end of `remote` -> `local`, if a process
/// holds it.
pub fn loopback_peer_uid(remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    loopback_peer(remote, local)
        .filter(PeerSocket::is_held)
        .map(|p| p.uid)
}

impl PeerPolicy {
    /// Whether a connection from `remote`, arrived on `local`, is served.
    pub fn admits(self, remote: SocketAddr, local: SocketAddr) -> bool {
        match self {
            PeerPolicy::Anyone => true,
            PeerPolicy::SameUser { uid } => {
                // The address the connection arrived on decides, not the
                // client's: a local socket bound to any host address can
                // reach 127.0.0.1.
                let arrived_on_loopback =
                    local.ip().is_loopback() || unmap(local).is_some_and(|l| l.ip().is_loopback());
                if !arrived_on_loopback {
                    return true;
                }
                loopback_peer_uid(remote, local) == Some(uid)
            }
        }
    }
}

fn unmap(a: SocketAddr) -> Option<SocketAddr> {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(|v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => None,
    }
}

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
/// `struct inet_diag_sockid`: ports, two addresses of four words, the
/// interface and the cookie.
const SOCKID_LEN: usize = 48;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, sockid.
const REQ_LEN: usize = 8 + SOCKID_LEN;
/// `struct inet_diag_msg` up to and including `idiag_inode`.
const MSG_LEN: usize = 4 + SOCKID_LEN + 4 * 5;

/// One exact sock_diag lookup of the TCP socket whose source is `src` and
/// destination `dst`: `Ok(None)` when the kernel has none.
fn lookup(src: SocketAddr, dst: SocketAddr) -> std::io::Result<Option<PeerSocket>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let family = match (src, dst) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => libc::AF_INET,
        (SocketAddr::V6(_), SocketAddr::V6(_)) => libc::AF_INET6,
        _ => return Ok(None),
    };
    let mut req = [0u8; NLMSG_HDRLEN + REQ_LEN];
    let total = req.len() as u32;
    req[0..4].copy_from_slice(&total.to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let r = &mut req[NLMSG_HDRLEN..];
    r[0] = family as u8;
    r[1] = libc::IPPROTO_TCP as u8;
    // Every state: the answer says which.
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = &mut r[8..8 + SOCKID_LEN];
    id[0..2].copy_from_slice(&src.port().to_be_bytes());
    id[2..4].copy_from_slice(&dst.port().to_be_bytes());
    put_addr(&mut id[4..20], src.ip());
    put_addr(&mut id[20..36], dst.ip());
    // No interface; INET_DIAG_NOCOOKIE.
    id[40..48].copy_from_slice(&[0xff; 8]);
    // SAFETY: a netlink socket owned by the OwnedFd made from it; send and
    // receive on buffers of this frame with their lengths.
    #[expect(unsafe_code, reason = "a netlink socket has no safe wrapper here")]
    let answer = unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let sent = libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        if sent != req.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
        let mut buf = [0u8; 1024];
        let n = libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        (buf, n as usize)
    };
    parse_answer(&answer.0[..answer.1])
}

fn put_addr(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out[0..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out[0..16].copy_from_slice(&v6.octets()),
    }
}

/// The socket of a sock_diag answer, `None` for "no such socket", an error
/// for any other failure.
fn parse_answer(msg: &[u8]) -> std::io::Result<Option<PeerSocket>> {
    let short = || std::io::Error::other("a short sock_diag answer");
    if msg.len() < NLMSG_HDRLEN {
        return Err(short());
    }
    let kind = u16::from_ne_bytes([msg[4], msg[5]]);
    let body = &msg[NLMSG_HDRLEN..];
    if kind == NLMSG_ERROR {
        let code = body
            .get(0..4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(short)?;
        return match -code {
            libc::ENOENT => Ok(None),
            0 => Ok(None),
            e => Err(std::io::Error::from_raw_os_error(e)),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY || body.len() < MSG_LEN {
        return Err(short());
    }
    let word = |at: usize| u32::from_ne_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
    Ok(Some(PeerSocket {
        state: body[1],
        // After family, state, timer, retrans, the sockid, expires, rqueue
        // and wqueue.
        uid: word(4 + SOCKID_LEN + 12),
        inode: word(4 + SOCKID_LEN + 16),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_uid() -> u32 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").unwrap().uid()
    }

    #[test]
    fn finds_the_client_socket_of_a_loopback_connection() {
        if !peer_owner_known() {
            eprintln!("NOTE: sock_diag does not answer here; nothing is checked");
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, remote) = listener.accept().unwrap();
        let local = server_side.local_addr().unwrap();
        assert_eq!(remote, client.local_addr().unwrap());
        let uid = own_uid();
        let peer = loopback_peer(remote, local).unwrap();
        assert!(
            peer.is_held() && peer.uid == uid && peer.state == 1,
            "{peer:?}"
        );
        assert!(PeerPolicy::SameUser { uid }.admits(remote, local));
        assert!(!PeerPolicy::SameUser { uid: uid + 1 }.admits(remote, local));
        assert!(PeerPolicy::Anyone.admits(remote, local));
        // A connection that is not there has no owner.
        let gone = SocketAddr::new(remote.ip(), 1);
        assert_eq!(loopback_peer_uid(gone, local), None);
        assert!(!PeerPolicy::SameUser { uid }.admits(gone, local));
        // Closed by the client: held by no process, so no owner.
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(server_side);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(loopback_peer_uid(remote, local), None);
    }

    #[test]
    fn ipv6_loopback_too() {
        let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
            eprintln!("NOTE: no IPv6 loopback here");
            return;
        };
        if !peer_owner_known() {
            return;
        }
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, remote) = listener.accept().unwrap();
        assert_eq!(
            loopback_peer_uid(remote, server_side.local_addr().unwrap()),
            Some(own_uid())
        );
    }

    #[test]
    fn an_answer_is_read_field_by_field() {
        let mut msg = vec![0u8; NLMSG_HDRLEN + MSG_LEN];
        msg[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let body = NLMSG_HDRLEN;
        msg[body + 1] = 1;
        msg[body + 4 + SOCKID_LEN + 12..body + 4 + SOCKID_LEN + 16]
            .copy_from_slice(&65534u32.to_ne_bytes());
        msg[body + 4 + SOCKID_LEN + 16..body + 4 + SOCKID_LEN + 20]
            .copy_from_slice(&4242u32.to_ne_bytes());
        assert_eq!(
            parse_answer(&msg).unwrap(),
            Some(PeerSocket {
                uid: 65534,
                inode: 4242,
                state: 1
            })
        );
        // A TIME_WAIT entry has no owner the policy can use.
        assert!(
            !PeerSocket {
                uid: 0,
                inode: 0,
                state: 6
            }
            .is_held()
        );
        let mut err = vec![0u8; NLMSG_HDRLEN + 4];
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[NLMSG_HDRLEN..].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(parse_answer(&err).unwrap(), None);
    }
}
