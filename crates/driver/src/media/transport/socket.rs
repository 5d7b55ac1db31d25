//! The UDP socket: [`Udp`] (the production [`Network`]) binds [`UdpEndpoint`]s, non-blocking, with
//! fragmentation refused and the buffer sizes asked for; connecting one, its path MTU, its [`Transport`]
//! implementation, and the probes of what the kernel supports. Its send calls are in `send`, its receive
//! calls in `recv`.

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::*;
use crate::media::auth::{AuthKey, TAG_LENGTH};

/// UDP sockets: the production [`Network`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Udp;

impl Network for Udp {
    type Endpoint = UdpEndpoint;

    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(UdpEndpoint, Vec<String>)> {
        let (mut endpoint, warnings) = if binding.shared {
            UdpEndpoint::bind_shared(local, binding.socket)?
        } else {
            UdpEndpoint::bind(local, binding.socket)?
        };
        endpoint.set_auth(binding.auth);
        Ok((endpoint, warnings))
    }

    fn supports(&self, mode: SendMode) -> bool {
        match mode {
            SendMode::Classic => true,
            SendMode::Mmsg => probe_mmsg(),
            SendMode::Gso => probe_gso(),
        }
    }
}

impl Transport for UdpEndpoint {
    #[inline]
    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        UdpEndpoint::connect(self, peer)
    }

    fn path_max_payload(&self) -> Option<usize> {
        UdpEndpoint::path_max_payload(self)
    }

    #[inline]
    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        UdpEndpoint::send(self, datagram, dest)
    }

    #[inline]
    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        UdpEndpoint::send_with_tag(self, datagram, tag, dest)
    }

    #[inline]
    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        UdpEndpoint::send_mmsg(self, datagrams, dests, scratch)
    }

    #[inline]
    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        UdpEndpoint::send_gso(self, data, segment)
    }

    #[inline]
    fn send_runs(&mut self, datagrams: &[&[u8]], dest: &SockAddr, scratch: &mut MmsgScratch) -> (SendOutcome, usize) {
        UdpEndpoint::send_runs(self, datagrams, dest, scratch)
    }

    #[inline]
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        UdpEndpoint::recv_batch(self, batch)
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        Some(self.fd())
    }
}

/// A non-blocking UDP socket with fragmentation refused, optionally connected to one peer.
#[derive(Debug)]
pub struct UdpEndpoint {
    socket: Socket,
    local: SocketAddr,
    peer: Option<SocketAddr>,
    pub(super) auth: Option<AuthKey>,
    /// [`send_runs`](Self::send_runs) may hand the kernel a run to cut (`UDP_SEGMENT`); false once the
    /// kernel or the path refused one.
    pub(super) segments: bool,
}

impl UdpEndpoint {
    /// Binds a non-blocking UDP socket to `local` (port 0 picks one), refuses IP fragmentation
    /// (`IP_PMTUDISC_DO` / `IPV6_PMTUDISC_DO`) and sets the buffer sizes.
    ///
    /// Returns the endpoint and the warnings to print: a buffer size the kernel clamped, with the sysctl
    /// that raises the ceiling.
    pub fn bind(local: SocketAddr, options: &SocketOptions) -> io::Result<(Self, Vec<String>)> {
        Self::bind_inner(local, options, false)
    }

    /// As [`bind`](Self::bind), with `SO_REUSEADDR` and `SO_REUSEPORT`, so that several sockets of this
    /// process share one local address: a node's Sender sends from its member endpoint, the one address its
    /// peers accept, with one socket connected to each follower. The kernel hands a datagram to the socket
    /// connected to its source before any unconnected one, so each follower's feedback reaches its own
    /// socket. Only sockets of the same user can join the group.
    pub fn bind_shared(local: SocketAddr, options: &SocketOptions) -> io::Result<(Self, Vec<String>)> {
        Self::bind_inner(local, options, true)
    }

    fn bind_inner(local: SocketAddr, options: &SocketOptions, shared: bool) -> io::Result<(Self, Vec<String>)> {
        let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        if shared {
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
        }
        socket.set_nonblocking(true)?;
        if local.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        let mut warnings = Vec::new();
        if let Some(bytes) = options.send_buffer {
            socket.set_send_buffer_size(bytes)?;
            check_buffer("SO_SNDBUF", bytes, socket.send_buffer_size()?, "net.core.wmem_max", &mut warnings);
        }
        if let Some(bytes) = options.receive_buffer {
            socket.set_recv_buffer_size(bytes)?;
            check_buffer("SO_RCVBUF", bytes, socket.recv_buffer_size()?, "net.core.rmem_max", &mut warnings);
        }
        refuse_fragmentation(&socket, local.is_ipv6())?;
        socket
            .bind(&SockAddr::from(local))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot bind UDP {local}: {e}")))?;
        let local = socket.local_addr()?.as_socket().expect("a UDP socket has an IP address");
        Ok((Self { socket, local, peer: None, auth: None, segments: true }, warnings))
    }

    /// Connects the socket to `peer`: sends need no address (cheaper per call), only that peer's datagrams
    /// are received, and the path MTU can be read.
    pub fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        self.socket.connect(&SockAddr::from(peer))?;
        self.peer = Some(peer);
        Ok(())
    }

    /// Tags every datagram this socket sends with `key`, and marks every datagram it receives whose tag
    /// is missing or wrong as [`Received::forged`] (see [`crate::media::auth`]); `None` turns that off.
    pub fn set_auth(&mut self, key: Option<AuthKey>) {
        self.auth = key;
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The connected peer, if any.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The kernel's path MTU to the connected peer (`IP_MTU` / `IPV6_MTU`): the largest IP packet, so a
    /// UDP payload of `path_mtu - 28` (IPv4) or `- 48` (IPv6) fits.
    pub fn path_mtu(&self) -> io::Result<usize> {
        let (level, name) =
            if self.local.is_ipv6() { (libc::IPPROTO_IPV6, libc::IPV6_MTU) } else { (libc::IPPROTO_IP, libc::IP_MTU) };
        let mut value: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for writes of the sizes given; the fd is open for `self`'s life.
        let rc = unsafe { libc::getsockopt(self.fd(), level, name, (&mut value as *mut libc::c_int).cast(), &mut len) };
        if rc == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(value as usize)
    }

    /// Largest UDP payload that fits in the path MTU to the connected peer.
    pub fn path_max_payload(&self) -> Option<usize> {
        let ip_overhead = if self.local.is_ipv6() { 48 } else { 28 };
        self.path_mtu().ok().map(|mtu| mtu.saturating_sub(ip_overhead))
    }

    pub(super) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The socket, for registration with `mio` readiness polling.
    pub fn raw_fd(&self) -> RawFd {
        self.fd()
    }
}

fn check_buffer(name: &str, asked: usize, got: usize, sysctl: &str, warnings: &mut Vec<String>) {
    if let Some(warning) = buffer_clamp(name, asked, got, sysctl) {
        warnings.push(warning);
    }
}

/// The warning for a socket buffer the kernel clamped, if it did. Linux stores (and reports) double the
/// size asked for, to account for its bookkeeping, and clamps the request to `net.core.[rw]mem_max`
/// before doubling: so a buffer was granted in full only when it reads back at least twice the request.
pub(super) fn buffer_clamp(name: &str, asked: usize, got: usize, sysctl: &str) -> Option<String> {
    let granted = got / 2;
    (granted < asked).then(|| {
        format!(
            "{name}: asked for {asked} bytes, the kernel granted {granted} (it reports {got}, double); raise the ceiling with `sysctl -w {sysctl}={asked}`"
        )
    })
}

fn refuse_fragmentation(socket: &Socket, ipv6: bool) -> io::Result<()> {
    let (level, name, value) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)
    };
    set_int_option(socket.as_raw_fd(), level, name, value)
}

fn set_int_option(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a valid c_int for the duration of the call, and its size is passed.
    let rc = unsafe {
        libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), size_of::<libc::c_int>() as u32)
    };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether this kernel accepts `UDP_SEGMENT` on a UDP socket (probed once, by the Sender at start).
pub fn probe_gso() -> bool {
    let Ok((endpoint, _)) = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()) else {
        return false;
    };
    let segment: libc::c_int = 1400;
    // SAFETY: `segment` is a valid c_int for the call.
    let rc = unsafe {
        libc::setsockopt(
            endpoint.fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&segment as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as u32,
        )
    };
    rc == 0
}

/// Whether `sendmmsg` is available (probed by sending an empty batch).
pub fn probe_mmsg() -> bool {
    let Ok((endpoint, _)) = UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()) else {
        return false;
    };
    // SAFETY: a zero-length vector is never dereferenced.
    let rc = unsafe { libc::sendmmsg(endpoint.fd(), std::ptr::null_mut(), 0, 0) };
    rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}
