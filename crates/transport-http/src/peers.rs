//! Who may connect over loopback: the account that owns a client's socket.
//!
//! A server on `127.0.0.1` without a token is reachable by every local
//! account, and each would run commands as the server's user. On Linux the
//! kernel says which user owns the other end of a loopback TCP connection:
//! `/proc/net/tcp` (and `tcp6`) list every socket of the network namespace
//! with its owner's uid, so the client's socket is the one whose local
//! address is the connection's remote one and whose remote address is the
//! connection's local one. [`PeerPolicy::SameUser`] refuses a connection
//! whose socket belongs to another uid, or whose owner cannot be found.

use std::net::{IpAddr, SocketAddr};

/// Which local accounts may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PeerPolicy {
    /// Anyone who can reach the port (what [`crate::serve`] does).
    #[default]
    Anyone,
    /// Over loopback, only sockets owned by this uid (other peers are
    /// not loopback and pass: a non-loopback bind needs authentication).
    SameUser {
        /// The uid whose clients are served.
        uid: u32,
    },
}

/// Whether this host can tell the owner of a loopback connection's other
/// end (`/proc/net/tcp` readable).
pub fn peer_owner_known() -> bool {
    read_table("/proc/net/tcp").is_some()
}

/// The uid owning the client end of the loopback connection `remote` ->
/// `local`; `None` when it cannot be found.
pub fn loopback_peer_uid(remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    let tables: &[&str] = match remote.ip() {
        IpAddr::V4(_) => &["/proc/net/tcp", "/proc/net/tcp6"],
        IpAddr::V6(_) => &["/proc/net/tcp6"],
    };
    tables.iter().find_map(|t| {
        let text = read_table(t)?;
        find_owner(&text, remote, local)
    })
}

#[expect(
    clippy::disallowed_methods,
    reason = "the kernel's socket table, not a workspace file"
)]
fn read_table(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The `uid` column of the line whose local address is `remote` and whose
/// remote address is `local`.
fn find_owner(table: &str, remote: SocketAddr, local: SocketAddr) -> Option<u32> {
    let want_local = encode(remote)?;
    let want_remote = encode(local)?;
    table.lines().skip(1).find_map(|line| {
        let mut cols = line.split_whitespace();
        let _slot = cols.next()?;
        let l = cols.next()?;
        let r = cols.next()?;
        if !l.eq_ignore_ascii_case(&want_local) || !r.eq_ignore_ascii_case(&want_remote) {
            return None;
        }
        // st, tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
        cols.nth(4)?.parse().ok()
    })
}

/// An address as the kernel's table spells it: the IPv4 address as one
/// 32-bit word in host byte order, an IPv6 address as four, then the port
/// in hexadecimal. An IPv4 peer of a dual-stack socket appears in `tcp6`
/// as `::ffff:a.b.c.d`; both spellings are tried by the caller's tables.
fn encode(addr: SocketAddr) -> Option<String> {
    let port = addr.port();
    match addr.ip() {
        IpAddr::V4(v4) => Some(format!(
            "{:08X}:{port:04X}",
            u32::from_ne_bytes(v4.octets())
        )),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let mut s = String::with_capacity(37);
            for w in o.chunks_exact(4) {
                s.push_str(&format!(
                    "{:08X}",
                    u32::from_ne_bytes([w[0], w[1], w[2], w[3]])
                ));
            }
            Some(format!("{s}:{port:04X}"))
        }
    }
}

impl PeerPolicy {
    /// Whether a connection from `remote`, arrived on `local`, is served.
    pub fn admits(self, remote: SocketAddr, local: SocketAddr) -> bool {
        match self {
            PeerPolicy::Anyone => true,
            PeerPolicy::SameUser { uid } => {
                if !remote.ip().is_loopback() && !is_mapped_loopback(remote.ip()) {
                    return true;
                }
                let tried = loopback_peer_uid(remote, local).or_else(|| {
                    // A dual-stack listener sees IPv4 clients as mapped
                    // addresses; the client's own socket is plain IPv4.
                    let (r, l) = (unmap(remote)?, unmap(local)?);
                    loopback_peer_uid(r, l)
                });
                tried == Some(uid)
            }
        }
    }
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
}

fn unmap(a: SocketAddr) -> Option<SocketAddr> {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(|v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => None,
    }
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
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, remote) = listener.accept().unwrap();
        let local = server_side.local_addr().unwrap();
        assert_eq!(remote, client.local_addr().unwrap());
        let uid = own_uid();
        assert_eq!(loopback_peer_uid(remote, local), Some(uid));
        assert!(PeerPolicy::SameUser { uid }.admits(remote, local));
        assert!(!PeerPolicy::SameUser { uid: uid + 1 }.admits(remote, local));
        assert!(PeerPolicy::Anyone.admits(remote, local));
        // A connection that is not there has no owner.
        let gone = SocketAddr::new(remote.ip(), 1);
        assert_eq!(loopback_peer_uid(gone, local), None);
        assert!(!PeerPolicy::SameUser { uid }.admits(gone, local));
    }

    #[test]
    fn ipv6_loopback_too() {
        let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
            eprintln!("NOTE: no IPv6 loopback here");
            return;
        };
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, remote) = listener.accept().unwrap();
        let uid = own_uid();
        assert_eq!(
            loopback_peer_uid(remote, server_side.local_addr().unwrap()),
            Some(uid)
        );
    }

    #[test]
    fn the_uid_column_of_the_matching_line() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   2: 0100007F:BCAC 0100007F:AEE6 01 00000000:00000000 00:00000000 00000000     0        0 0 1 00000000e541d36e 20 0 0 10 -1\n  88: 0100007F:AEE6 0100007F:BCAC 01 00000000:00000000 00:00000000 00000000 65534        0 213026 1 0000000028a9a433 20 0 0 10 -1\n";
        let client: SocketAddr = "127.0.0.1:44774".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:48300".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(find_owner(table, client, server), Some(65534));
            assert_eq!(find_owner(table, server, client), Some(0));
        }
    }

    #[test]
    fn spelled_as_the_kernel_does() {
        let a: SocketAddr = "127.0.0.1:8000".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(encode(a).unwrap(), "0100007F:1F40");
        }
    }
}
