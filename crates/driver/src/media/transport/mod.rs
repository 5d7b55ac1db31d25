//! UDP sockets as the Sender and Receiver use them: non-blocking, fragmentation refused, and the three
//! ways of putting datagrams on the wire that the model compares.
//!
//! - [`UdpEndpoint::send`]: one `sendmsg` for one datagram (the `classic` mode the model describes);
//! - [`UdpEndpoint::send_mmsg`]: one `sendmmsg` for several (datagram, destination) pairs;
//! - [`UdpEndpoint::send_gso`]: one `sendmsg` whose `UDP_SEGMENT` control message lets the kernel cut
//!   a run of equal-length datagrams to one destination.
//!
//! Receiving is batched with `recvmmsg` into preallocated, cache-line-aligned buffers ([`RecvBatch`]).
//!
//! The publication and the Receiver reach the network through the [`Transport`] trait, which
//! [`UdpEndpoint`] implements (authentication included); they are generic over it, so the UDP path is
//! monomorphized and costs no indirection. Two other implementations sit beside it:
//! [`crate::media::transport::faulty::FaultyTransport`] wraps any transport to drop, duplicate and reorder datagrams, and
//! [`memory::MemoryNetwork`] connects endpoints in one process, so the send and receive paths can be
//! tested without sockets. A [`Network`] opens the endpoints ([`Udp`] for sockets).
//!
//! Every call returns what happened as a value ([`SendOutcome`]): `EAGAIN` and the transient errors that
//! a non-blocking UDP socket reports (`ECONNREFUSED` from an earlier ICMP, `EINTR`) are "nothing sent",
//! `EMSGSIZE` names the path MTU, everything else is a counted failure. This module is one of the two
//! boundaries where `unsafe` lives (the other is [`crate::shm::buffer`]): each syscall has its `SAFETY` note.

use std::fmt;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::str::FromStr;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::media::auth::{AuthKey, TAG_LENGTH};

pub mod faulty;
pub mod memory;
pub mod stream;

/// Most datagrams one `sendmmsg` or `recvmmsg` call handles here.
pub const MAX_BATCH: usize = 64;

/// Most segments the kernel accepts in one `UDP_SEGMENT` send (`UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most bytes one `UDP_SEGMENT` send carries in all: one IPv4 datagram's largest payload (65,535 bytes
/// less the IP and UDP headers), which the kernel holds a segmented send to as well.
pub const MAX_GSO_BYTES: usize = 65_507;

/// How a channel puts datagrams on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SendMode {
    /// One `sendmsg` per datagram per destination: a datagram to D destinations costs D syscalls.
    #[default]
    Classic,
    /// One `sendmmsg` carries each datagram to every destination, several datagrams per call.
    Mmsg,
    /// UDP generic segmentation offload: one syscall carries up to 64 equal-length datagrams to one destination.
    Gso,
}

impl SendMode {
    /// Every mode, in the order reports list them.
    pub const ALL: [SendMode; 3] = [SendMode::Classic, SendMode::Mmsg, SendMode::Gso];

    /// The mode's name as configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SendMode::Classic => "classic",
            SendMode::Mmsg => "mmsg",
            SendMode::Gso => "gso",
        }
    }
}

impl fmt::Display for SendMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SendMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "classic" => Ok(SendMode::Classic),
            "mmsg" => Ok(SendMode::Mmsg),
            "gso" => Ok(SendMode::Gso),
            other => Err(format!("unknown send mode '{other}': use classic, mmsg or gso")),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for SendMode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for SendMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Socket buffer sizes asked of the kernel (None keeps the system default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// `SO_SNDBUF` in bytes.
    /// Default: `None`.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF` in bytes.
    /// Default: `None`.
    pub receive_buffer: Option<usize>,
}

/// The result of one send call.
#[derive(Debug)]
pub enum SendOutcome {
    /// The kernel took this many datagrams (for `send` and `send_gso` all of them, or it is not `Sent`).
    Sent(usize),
    /// The socket buffer is full, or a transient error (`EAGAIN`, `ECONNREFUSED`, `EINTR`): nothing was
    /// sent and the same bytes should be offered again on a later duty cycle.
    WouldBlock,
    /// `EMSGSIZE`: the datagram is larger than the path can carry without fragmentation.
    TooLarge {
        /// Bytes in the datagram that was refused.
        datagram: usize,
        /// The path MTU the kernel knows for the destination, when it can tell.
        path_mtu: Option<usize>,
    },
    /// Any other error.
    Failed(io::Error),
}

/// Sends and receives datagrams: what a publication and the Receiver need of the network.
///
/// Implemented by [`UdpEndpoint`] (the production path), [`crate::media::transport::faulty::FaultyTransport`] (faults injected
/// around another transport) and [`memory::MemoryEndpoint`] (in-process, for tests). Destinations are
/// either the connected peer (`dest` of `None`) or an address per call; outcomes are those of
/// [`UdpEndpoint`]'s calls, whatever the implementation.
pub trait Transport: Send {
    /// The bound address (the source peers see).
    fn local_addr(&self) -> SocketAddr;

    /// Connects to `peer`: sends without an address go to it, and only its datagrams are received.
    fn connect(&mut self, peer: SocketAddr) -> io::Result<()>;

    /// Largest payload the path to the connected peer carries unfragmented, when it can be told.
    fn path_max_payload(&self) -> Option<usize> {
        None
    }

    /// Sends one datagram to the connected peer or to `dest` (see [`UdpEndpoint::send`]).
    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome;

    /// As [`send`](Self::send), with the datagram's authentication tag computed once by the caller (see
    /// [`UdpEndpoint::send_with_tag`]); a transport that does not authenticate ignores it.
    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome;

    /// Sends every datagram to every destination, datagram-major (see [`UdpEndpoint::send_mmsg`]); returns
    /// the outcome and the number of calls made.
    fn send_mmsg(&mut self, datagrams: &[&[u8]], dests: &[SockAddr], scratch: &mut MmsgScratch)
        -> (SendOutcome, usize);

    /// Sends a run of `segment`-byte datagrams to the connected peer in one call (see
    /// [`UdpEndpoint::send_gso`]).
    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome;

    /// Sends `datagrams`, in order, each to `dest`, in as few calls as the transport can make: over UDP,
    /// each run of equal-length datagrams (its last may be shorter) in one `sendmsg` the kernel cuts
    /// (`UDP_SEGMENT`, see [`UdpEndpoint::send_runs`]); elsewhere as [`send_mmsg`](Self::send_mmsg) to the
    /// one destination. Returns what `send_mmsg` returns.
    fn send_runs(&mut self, datagrams: &[&[u8]], dest: &SockAddr, scratch: &mut MmsgScratch) -> (SendOutcome, usize) {
        self.send_mmsg(datagrams, std::slice::from_ref(dest), scratch)
    }

    /// Receives what is waiting into `batch`, without blocking; returns how many datagrams arrived.
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize>;

    /// Sends what the transport held back (a reordered datagram), on a duty cycle with nothing else to
    /// send; returns the number of datagrams sent. Transports that hold nothing back do nothing.
    #[inline]
    fn flush(&mut self) -> usize {
        0
    }

    /// A descriptor that polls readable when a datagram waits, for parking in `epoll_wait`; `None` when the
    /// transport has none (a parked Receiver then sleeps out its timeout).
    fn readiness_fd(&self) -> Option<RawFd> {
        None
    }
}

/// Opens the [`Transport`] endpoints of publications and receivers.
pub trait Network {
    /// The endpoints it opens.
    type Endpoint: Transport;

    /// Binds an endpoint to `local` (port 0 picks one) as `binding` says. Returns the endpoint and the
    /// warnings to print.
    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(Self::Endpoint, Vec<String>)>;

    /// Whether `mode` works here (the kernel may refuse `mmsg` or `gso`).
    fn supports(&self, mode: SendMode) -> bool;

    /// Listens at `local` for byte streams (the catch-up connection). TCP unless a network says otherwise.
    fn listen(&mut self, local: SocketAddr) -> io::Result<Box<dyn stream::StreamListener>> {
        stream::tcp_listen(local)
    }

    /// Opens a byte stream to `peer`. TCP unless a network says otherwise.
    fn connect_stream(
        &mut self,
        peer: SocketAddr,
        options: &stream::StreamOptions,
    ) -> io::Result<Box<dyn stream::Stream>> {
        stream::tcp_connect(peer, options)
    }
}

/// A boxed transport is a transport: the endpoints of a network chosen at run time ([`SharedNetwork`]).
/// Each call costs one indirect call beside the system call it makes.
impl<T: Transport + ?Sized> Transport for Box<T> {
    fn local_addr(&self) -> SocketAddr {
        (**self).local_addr()
    }

    fn connect(&mut self, peer: SocketAddr) -> io::Result<()> {
        (**self).connect(peer)
    }

    fn path_max_payload(&self) -> Option<usize> {
        (**self).path_max_payload()
    }

    #[inline]
    fn send(&mut self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        (**self).send(datagram, dest)
    }

    #[inline]
    fn send_with_tag(
        &mut self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        (**self).send_with_tag(datagram, tag, dest)
    }

    #[inline]
    fn send_mmsg(
        &mut self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        (**self).send_mmsg(datagrams, dests, scratch)
    }

    #[inline]
    fn send_gso(&mut self, data: &[u8], segment: usize) -> SendOutcome {
        (**self).send_gso(data, segment)
    }

    #[inline]
    fn send_runs(&mut self, datagrams: &[&[u8]], dest: &SockAddr, scratch: &mut MmsgScratch) -> (SendOutcome, usize) {
        (**self).send_runs(datagrams, dest, scratch)
    }

    #[inline]
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> io::Result<usize> {
        (**self).recv_batch(batch)
    }

    #[inline]
    fn flush(&mut self) -> usize {
        (**self).flush()
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        (**self).readiness_fd()
    }
}

/// A [`Network`] that binds through a shared reference and boxes its endpoints: what [`SharedNetwork`]
/// holds. Every `Network` that is `Clone` (its clones binding on one network) is one.
pub trait DynNetwork: Send + Sync {
    /// Binds an endpoint, as [`Network::bind`].
    fn bind_boxed(&self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(Box<dyn Transport>, Vec<String>)>;

    /// As [`Network::supports`].
    fn supports_mode(&self, mode: SendMode) -> bool;

    /// As [`Network::listen`].
    fn listen_shared(&self, local: SocketAddr) -> io::Result<Box<dyn stream::StreamListener>>;

    /// As [`Network::connect_stream`].
    fn connect_shared(&self, peer: SocketAddr, options: &stream::StreamOptions) -> io::Result<Box<dyn stream::Stream>>;
}

impl<N> DynNetwork for N
where
    N: Network + Clone + Send + Sync,
    N::Endpoint: 'static,
{
    fn bind_boxed(&self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(Box<dyn Transport>, Vec<String>)> {
        let (endpoint, warnings) = self.clone().bind(local, binding)?;
        Ok((Box::new(endpoint), warnings))
    }

    fn supports_mode(&self, mode: SendMode) -> bool {
        self.supports(mode)
    }

    fn listen_shared(&self, local: SocketAddr) -> io::Result<Box<dyn stream::StreamListener>> {
        self.clone().listen(local)
    }

    fn connect_shared(&self, peer: SocketAddr, options: &stream::StreamOptions) -> io::Result<Box<dyn stream::Stream>> {
        self.clone().connect_stream(peer, options)
    }
}

/// The network a node binds every endpoint on (consensus, clients, the log's Sender and Receiver), chosen
/// at run time: UDP sockets in production, a simulated network under the node simulator. Clones share it.
#[derive(Clone)]
pub struct SharedNetwork {
    network: std::sync::Arc<dyn DynNetwork>,
    udp: bool,
}

impl fmt::Debug for SharedNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.udp { "SharedNetwork(Udp)" } else { "SharedNetwork(..)" })
    }
}

impl Default for SharedNetwork {
    fn default() -> Self {
        Self::udp()
    }
}

impl SharedNetwork {
    /// UDP sockets.
    pub fn udp() -> Self {
        Self { network: std::sync::Arc::new(Udp), udp: true }
    }

    /// Any other network.
    pub fn new(network: impl DynNetwork + 'static) -> Self {
        Self { network: std::sync::Arc::new(network), udp: false }
    }

    /// Whether this is [`Udp`] (whose endpoints a caller may take unboxed, as [`UdpEndpoint`]s).
    pub fn is_udp(&self) -> bool {
        self.udp
    }
}

impl Network for SharedNetwork {
    type Endpoint = Box<dyn Transport>;

    fn bind(&mut self, local: SocketAddr, binding: &Binding<'_>) -> io::Result<(Box<dyn Transport>, Vec<String>)> {
        self.network.bind_boxed(local, binding)
    }

    fn supports(&self, mode: SendMode) -> bool {
        self.network.supports_mode(mode)
    }

    fn listen(&mut self, local: SocketAddr) -> io::Result<Box<dyn stream::StreamListener>> {
        self.network.listen_shared(local)
    }

    fn connect_stream(
        &mut self,
        peer: SocketAddr,
        options: &stream::StreamOptions,
    ) -> io::Result<Box<dyn stream::Stream>> {
        self.network.connect_shared(peer, options)
    }
}

/// How a [`Network`] binds one endpoint.
#[derive(Clone, Copy, Debug)]
pub struct Binding<'a> {
    /// Socket buffers and options.
    pub socket: &'a SocketOptions,
    /// The key every datagram is tagged with and checked against (see [`crate::media::auth`]); `None`
    /// sends and accepts untagged datagrams.
    pub auth: Option<AuthKey>,
    /// Let several endpoints of this process share the address (see [`UdpEndpoint::bind_shared`]).
    pub shared: bool,
}

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
    auth: Option<AuthKey>,
    /// [`send_runs`](Self::send_runs) may hand the kernel a run to cut (`UDP_SEGMENT`); false once the
    /// kernel or the path refused one.
    segments: bool,
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

    /// Connects the socket to `peer`: sends need no address (10-25% cheaper per call, measured on
    /// loopback), only that peer's datagrams are received, and the path MTU can be read.
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

    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Sends one datagram with one `sendmsg`, to the connected peer or to `dest`.
    #[inline]
    pub fn send(&self, datagram: &[u8], dest: Option<&SockAddr>) -> SendOutcome {
        let tag = self.auth.map(|key| key.tag(datagram));
        self.send_with_tag(datagram, tag.as_ref(), dest)
    }

    /// As [`send`](Self::send), with the datagram's authentication tag computed by the caller, so that a
    /// datagram sent to several destinations is hashed once: `tag` must be this socket's key's tag of
    /// `datagram` ([`AuthKey::tag`]), and `None` only for a socket without a key.
    #[inline]
    pub fn send_with_tag(
        &self,
        datagram: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
        dest: Option<&SockAddr>,
    ) -> SendOutcome {
        debug_assert_eq!(tag.is_some(), self.auth.is_some(), "a tag exactly when the socket authenticates");
        let mut iov = [iovec(datagram), iovec(tag.map_or(&[][..], |t| &t[..]))];
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = if tag.is_some() { 2 } else { 1 };
        if let Some(addr) = dest {
            msg.msg_name = addr.as_ptr() as *mut libc::c_void;
            msg.msg_namelen = addr.len();
        }
        // SAFETY: msg points at the iovecs over `datagram` and its tag and, when given, at `dest`'s
        // address; all outlive the call, and sendmsg only reads them.
        let rc = unsafe { libc::sendmsg(self.fd(), &msg, 0) };
        self.outcome(rc as i64, datagram.len(), 1)
    }

    /// Sends a run of equal-length datagrams to the connected peer in one `sendmsg` with `UDP_SEGMENT`:
    /// the kernel cuts `data` every `segment` bytes (the last segment may be shorter).
    ///
    /// `data` must hold at most [`MAX_GSO_SEGMENTS`] segments.
    pub fn send_gso(&self, data: &[u8], segment: usize) -> SendOutcome {
        debug_assert!(segment > 0 && data.len().div_ceil(segment) <= MAX_GSO_SEGMENTS);
        let segments = data.len().div_ceil(segment);
        if segments <= 1 {
            return self.send(data, None);
        }
        if self.auth.is_some() {
            // Each datagram needs its own tag, which the kernel's segmentation cannot add: one send each.
            for chunk in data.chunks(segment) {
                if let other @ (SendOutcome::WouldBlock | SendOutcome::TooLarge { .. } | SendOutcome::Failed(_)) =
                    self.send(chunk, None)
                {
                    return other;
                }
            }
            return SendOutcome::Sent(segments);
        }
        let mut iov = iovec(data);
        let rc = self.send_segmented(std::slice::from_mut(&mut iov), None, segment);
        self.outcome(rc, segment, segments)
    }

    /// One `sendmsg` of the bytes of `iov`, one after the other, to the connected peer or to `dest`, with
    /// a `UDP_SEGMENT` control message that has the kernel cut them every `segment` bytes. Returns what
    /// `sendmsg` returned.
    fn send_segmented(&self, iov: &mut [libc::iovec], dest: Option<&SockAddr>, segment: usize) -> i64 {
        let mut control = CmsgBuffer::zeroed();
        // SAFETY: an all-zero msghdr is a valid empty header.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        if let Some(addr) = dest {
            msg.msg_name = addr.as_ptr() as *mut libc::c_void;
            msg.msg_namelen = addr.len();
        }
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure size computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        // SAFETY: msg_control points at a zeroed, aligned buffer of at least CMSG_SPACE(2) bytes, so
        // CMSG_FIRSTHDR is non-null and CMSG_DATA has room for a u16.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_UDP;
            (*cmsg).cmsg_type = libc::UDP_SEGMENT;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment as u16);
        }
        // SAFETY: msg points at the iovecs of `iov` (over memory the caller borrows for the call), at
        // `control` and, when given, at `dest`'s address; sendmsg only reads them.
        unsafe { libc::sendmsg(self.fd(), &msg, 0) as i64 }
    }

    /// Sends `datagrams`, in order, each to `dest`: each run of two or more that the kernel can cut from
    /// one buffer (`segment_run`) in one `sendmsg` with `UDP_SEGMENT`, the others together in
    /// `sendmmsg` calls. A client's poll seals many datagrams of one length (full of records of one
    /// size): on loopback this costs half the CPU per datagram of `sendmmsg` (657 against 1,319 ns per
    /// 1408-byte datagram in runs of 14, measured on the 2-core test host). The first run the kernel or
    /// the path refuses (no `UDP_SEGMENT`, a segment longer than the path's MTU) goes by `sendmmsg`, as
    /// every later one. A socket with a key (whose tags the kernel's cutting cannot add) sends as
    /// [`send_mmsg`](Self::send_mmsg).
    ///
    /// Returns the outcome of the first call that did not take everything, or `Sent(n)` with the
    /// datagrams sent, and the number of calls made.
    pub fn send_runs(
        &mut self,
        datagrams: &[&[u8]],
        dest: &SockAddr,
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        let dests = std::slice::from_ref(dest);
        if !self.segments || self.auth.is_some() {
            return self.send_mmsg(datagrams, dests, scratch);
        }
        let (mut sent, mut calls) = (0, 0);
        while sent < datagrams.len() {
            let rest = &datagrams[sent..];
            let run = segment_run(rest);
            let outcome = if run >= 2 {
                for (slot, datagram) in scratch.iov.iter_mut().zip(&rest[..run]) {
                    *slot = iovec(datagram);
                }
                let rc = self.send_segmented(&mut scratch.iov[..run], Some(dest), rest[0].len());
                calls += 1;
                let error = (rc < 0).then(|| io::Error::last_os_error().raw_os_error()).flatten();
                if matches!(error, Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT)) {
                    // The kernel or the path does not cut runs: this one and every later one by sendmmsg.
                    self.segments = false;
                    let (outcome, more) = self.send_mmsg(rest, dests, scratch);
                    calls += more;
                    outcome
                } else {
                    self.outcome(rc, rest[0].len(), run)
                }
            } else {
                // Datagrams that start no run, together.
                let singles = (1..rest.len()).find(|&i| segment_run(&rest[i..]) >= 2).unwrap_or(rest.len());
                let (outcome, more) = self.send_mmsg(&rest[..singles], dests, scratch);
                calls += more;
                outcome
            };
            match outcome {
                SendOutcome::Sent(n) => {
                    sent += n;
                    if n == 0 {
                        break;
                    }
                }
                other if sent == 0 => return (other, calls),
                _ => break,
            }
        }
        (SendOutcome::Sent(sent), calls)
    }

    /// Sends every datagram of `datagrams` to every destination of `dests` (or to the connected peer when
    /// `dests` is empty), datagram-major, with as few `sendmmsg` calls as [`MAX_BATCH`] allows.
    ///
    /// Returns the outcome of the first call that did not take everything, or `Sent(n)` with the number of
    /// datagrams sent (`datagrams.len() * max(1, dests.len())` when all went), and the number of syscalls made.
    pub fn send_mmsg(
        &self,
        datagrams: &[&[u8]],
        dests: &[SockAddr],
        scratch: &mut MmsgScratch,
    ) -> (SendOutcome, usize) {
        let fan = dests.len().max(1);
        let total = datagrams.len() * fan;
        let mut sent = 0;
        let mut calls = 0;
        let largest = datagrams.iter().map(|d| d.len()).max().unwrap_or(0);
        assert!(datagrams.len() <= scratch.tags.len(), "at most {} datagrams per send_mmsg", scratch.tags.len());
        let iov_per_msg = if self.auth.is_some() { 2 } else { 1 };
        if let Some(key) = self.auth {
            for (tag, datagram) in scratch.tags.iter_mut().zip(datagrams) {
                *tag = key.tag(datagram);
            }
        }
        while sent < total {
            let batch = (total - sent).min(MAX_BATCH);
            for i in 0..batch {
                let k = sent + i;
                let datagram = datagrams[k / fan];
                scratch.iov[2 * i] = iovec(datagram);
                scratch.iov[2 * i + 1] = iovec(&scratch.tags[k / fan]);
                let hdr = &mut scratch.msgs[i].msg_hdr;
                hdr.msg_iov = &mut scratch.iov[2 * i];
                hdr.msg_iovlen = iov_per_msg;
                match dests.get(k % fan) {
                    Some(addr) => {
                        hdr.msg_name = addr.as_ptr() as *mut libc::c_void;
                        hdr.msg_namelen = addr.len();
                    }
                    None => {
                        hdr.msg_name = std::ptr::null_mut();
                        hdr.msg_namelen = 0;
                    }
                }
            }
            // SAFETY: the first `batch` headers point at iovecs over slices of `datagrams` and their tags
            // (in `scratch`) and at addresses of `dests`, all borrowed for this call; sendmmsg reads them
            // and writes only `msg_len`.
            let rc = unsafe { libc::sendmmsg(self.fd(), scratch.msgs.as_mut_ptr(), batch as u32, 0) };
            calls += 1;
            match self.outcome(rc as i64, largest, rc.max(0) as usize) {
                SendOutcome::Sent(n) => {
                    sent += n;
                    if n < batch {
                        return (SendOutcome::Sent(sent), calls);
                    }
                }
                other if sent == 0 => return (other, calls),
                _ => return (SendOutcome::Sent(sent), calls),
            }
        }
        (SendOutcome::Sent(sent), calls)
    }

    /// Turns a syscall return (`ssize_t` of sendmsg or `int` of sendmmsg, widened) into an outcome.
    fn outcome(&self, rc: i64, datagram: usize, count: usize) -> SendOutcome {
        if rc >= 0 {
            return SendOutcome::Sent(count);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ECONNREFUSED) | Some(libc::EINTR) => SendOutcome::WouldBlock,
            Some(libc::EMSGSIZE) => SendOutcome::TooLarge { datagram, path_mtu: self.path_mtu().ok() },
            _ => SendOutcome::Failed(err),
        }
    }

    /// Receives up to `batch.capacity()` datagrams with one `recvmmsg`; returns how many arrived
    /// (0 when none was waiting). Their bytes and senders are read with [`RecvBatch::datagram`].
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.prepare();
        // SAFETY: every header points at its own buffer of `batch.datagram_capacity` bytes and its own
        // sockaddr_storage, owned by `batch` and alive for the call; recvmmsg writes within those bounds.
        let rc = unsafe {
            libc::recvmmsg(
                self.fd(),
                batch.msgs.as_mut_ptr(),
                batch.msgs.len() as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNREFUSED) => Ok(0),
                _ => Err(err),
            };
        }
        batch.count = rc as usize;
        if let Some(key) = self.auth {
            batch.authenticate(&key);
        }
        Ok(batch.count)
    }

    /// The socket, for registration with `mio` readiness polling.
    pub fn raw_fd(&self) -> RawFd {
        self.fd()
    }
}

fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() }
}

/// How many of `datagrams`, from the first, the kernel can cut from one buffer in one `UDP_SEGMENT`
/// send: as long as the first, but the last which may be shorter (not empty), at most
/// [`MAX_GSO_SEGMENTS`] and [`MAX_GSO_BYTES`] in all. 1 when the first starts no run (or 0 with no
/// datagram).
fn segment_run(datagrams: &[&[u8]]) -> usize {
    let Some(first) = datagrams.first().map(|d| d.len()) else {
        return 0;
    };
    if first == 0 {
        return 1;
    }
    let most = datagrams.len().min(MAX_GSO_SEGMENTS).min(MAX_GSO_BYTES / first);
    let mut run = 1;
    while run < most {
        let length = datagrams[run].len();
        if length == 0 || length > first {
            break;
        }
        run += 1;
        if length < first {
            break;
        }
    }
    run.max(1)
}

fn check_buffer(name: &str, asked: usize, got: usize, sysctl: &str, warnings: &mut Vec<String>) {
    if let Some(warning) = buffer_clamp(name, asked, got, sysctl) {
        warnings.push(warning);
    }
}

/// The warning for a socket buffer the kernel clamped, if it did. Linux stores (and reports) double the
/// size asked for, to account for its bookkeeping, and clamps the request to `net.core.[rw]mem_max`
/// before doubling: so a buffer was granted in full only when it reads back at least twice the request.
fn buffer_clamp(name: &str, asked: usize, got: usize, sysctl: &str) -> Option<String> {
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

/// Space for one control message carrying a u16, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuffer([u8; 32]);

impl CmsgBuffer {
    fn zeroed() -> Self {
        Self([0; 32])
    }
}

/// Sends every datagram to every destination, datagram-major, with one `send` per copy: what a transport
/// without `sendmmsg` does for [`Transport::send_mmsg`]. Stops at the first copy that does not go; returns
/// its outcome when it was the first copy, else `Sent` with the copies that went, and the copies tried.
pub fn send_each_copy(
    datagrams: &[&[u8]],
    dests: &[SockAddr],
    mut send: impl FnMut(&[u8], Option<&SockAddr>) -> SendOutcome,
) -> (SendOutcome, usize) {
    let fan = dests.len().max(1);
    let mut sent = 0;
    for k in 0..datagrams.len() * fan {
        match send(datagrams[k / fan], dests.get(k % fan)) {
            SendOutcome::Sent(_) => sent += 1,
            other if sent == 0 => return (other, 1),
            _ => return (SendOutcome::Sent(sent), k + 1),
        }
    }
    (SendOutcome::Sent(sent), sent)
}

/// Preallocated headers for [`UdpEndpoint::send_mmsg`], so that the hot path does not allocate.
pub struct MmsgScratch {
    msgs: Box<[libc::mmsghdr]>,
    /// Two per message: the datagram and its authentication tag (unused without a key).
    iov: Box<[libc::iovec]>,
    /// The tag of each datagram of a call, computed once for all its destinations.
    tags: Box<[[u8; TAG_LENGTH]]>,
}

// SAFETY: the raw pointers inside are only set and used within one `send_mmsg` call, which borrows the
// data they point at; between calls they dangle harmlessly and are never read.
unsafe impl Send for MmsgScratch {}

impl Default for MmsgScratch {
    fn default() -> Self {
        // SAFETY: all-zero mmsghdr and iovec values are valid (null pointers, zero lengths).
        let msgs = (0..MAX_BATCH).map(|_| unsafe { zeroed::<libc::mmsghdr>() }).collect();
        let iov = (0..2 * MAX_BATCH).map(|_| iovec(&[])).collect();
        let tags = vec![[0; TAG_LENGTH]; MAX_GSO_SEGMENTS.max(MAX_BATCH)].into_boxed_slice();
        Self { msgs, iov, tags }
    }
}

impl fmt::Debug for MmsgScratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MmsgScratch").field("capacity", &self.msgs.len()).finish()
    }
}

/// Preallocated receive buffers and headers for one `recvmmsg` call.
///
/// Each datagram buffer starts on a 64-byte boundary of one allocation (`rep movsb` copies between
/// buffers whose addresses differ by 1-31 bytes modulo 4096 run ~25x slower on a Zen 3 CPU).
pub struct RecvBatch {
    buffers: Box<[AlignedBlock]>,
    datagram_capacity: usize,
    addrs: Box<[libc::sockaddr_storage]>,
    iov: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    count: usize,
    /// Per datagram of the last call: its authentication tag was missing or wrong.
    forged: Box<[bool]>,
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct AlignedBlock([u8; 64]);

// SAFETY: the raw pointers in `iov` and `msgs` point into `buffers` and `addrs`, owned by the same value;
// moving the batch to another thread moves them all together (boxed slices do not move their heap data).
unsafe impl Send for RecvBatch {}

impl fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch").field("capacity", &self.msgs.len()).field("count", &self.count).finish()
    }
}

impl RecvBatch {
    /// Room for `capacity` datagrams (at most [`MAX_BATCH`]) of up to `datagram_capacity` bytes each.
    pub fn new(capacity: usize, datagram_capacity: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_BATCH);
        let stride = datagram_capacity.div_ceil(64);
        let buffers = vec![AlignedBlock([0; 64]); stride * capacity].into_boxed_slice();
        // SAFETY: all-zero sockaddr_storage, iovec and mmsghdr values are valid.
        let addrs = (0..capacity).map(|_| unsafe { zeroed::<libc::sockaddr_storage>() }).collect();
        let iov = (0..capacity).map(|_| iovec(&[])).collect();
        // SAFETY: as above.
        let msgs = (0..capacity).map(|_| unsafe { zeroed::<libc::mmsghdr>() }).collect();
        let forged = vec![false; capacity].into_boxed_slice();
        Self { buffers, datagram_capacity: stride * 64, addrs, iov, msgs, count: 0, forged }
    }

    /// How many datagrams one call can receive.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// How many datagrams the last call received.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes each datagram buffer holds (a longer datagram is cut and marked truncated).
    pub fn datagram_capacity(&self) -> usize {
        self.datagram_capacity
    }

    /// Empties the batch, for a transport that fills it with [`push`](Self::push) instead of `recvmmsg`.
    pub fn clear(&mut self) {
        self.count = 0;
    }

    /// Appends a copy of `datagram`, for transports that do not receive with `recvmmsg`: cut to the
    /// datagram capacity and marked truncated if longer, as the kernel does. Returns false, appending
    /// nothing, when the batch is full.
    pub fn push(&mut self, datagram: Received<'_>) -> bool {
        let Received { bytes, source, truncated, forged } = datagram;
        let i = self.count;
        if i == self.msgs.len() {
            return false;
        }
        let len = bytes.len().min(self.datagram_capacity);
        let start = i * self.datagram_capacity;
        bytemuck_bytes_mut(&mut self.buffers)[start..start + len].copy_from_slice(&bytes[..len]);
        // SAFETY: an all-zero sockaddr_storage is valid (family AF_UNSPEC: no source).
        self.addrs[i] = unsafe { zeroed() };
        let namelen = match source {
            Some(addr) => {
                let addr = SockAddr::from(addr);
                // SAFETY: `addr` holds `addr.len()` initialised bytes of a socket address, at most the size
                // of a sockaddr_storage, which `self.addrs[i]` is; the two do not overlap.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        addr.as_ptr().cast::<u8>(),
                        (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast::<u8>(),
                        addr.len() as usize,
                    );
                }
                addr.len()
            }
            None => 0,
        };
        let msg = &mut self.msgs[i];
        msg.msg_len = len as u32;
        msg.msg_hdr.msg_namelen = namelen;
        msg.msg_hdr.msg_flags = if truncated || len < bytes.len() { libc::MSG_TRUNC } else { 0 };
        self.forged[i] = forged;
        self.count += 1;
        true
    }

    fn prepare(&mut self) {
        let base = self.buffers.as_mut_ptr() as *mut u8;
        for i in 0..self.msgs.len() {
            // SAFETY: `i * datagram_capacity + datagram_capacity` is within `buffers` by construction.
            let ptr = unsafe { base.add(i * self.datagram_capacity) };
            self.iov[i] = libc::iovec { iov_base: ptr.cast(), iov_len: self.datagram_capacity };
            let hdr = &mut self.msgs[i].msg_hdr;
            hdr.msg_iov = &mut self.iov[i];
            hdr.msg_iovlen = 1;
            hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            hdr.msg_flags = 0;
            self.msgs[i].msg_len = 0;
            self.forged[i] = false;
        }
        self.count = 0;
    }

    /// Checks the tag of every datagram received: a good one is cut off (the datagram is its body), a bad
    /// one marks the datagram [`Received::forged`].
    fn authenticate(&mut self, key: &AuthKey) {
        for i in 0..self.count {
            let len = (self.msgs[i].msg_len as usize).min(self.datagram_capacity);
            let start = i * self.datagram_capacity;
            let verified = key.verify(&bytemuck_bytes(&self.buffers)[start..start + len]);
            match verified {
                Some(body) => self.msgs[i].msg_len = body as u32,
                None => self.forged[i] = true,
            }
        }
    }

    /// The `i`-th received datagram and its sender; `truncated` is true when it did not fit the buffer.
    pub fn datagram(&self, i: usize) -> Received<'_> {
        assert!(i < self.count, "datagram {i} of a batch of {}", self.count);
        let len = (self.msgs[i].msg_len as usize).min(self.datagram_capacity);
        let truncated = self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let start = i * self.datagram_capacity;
        let bytes: &[u8] = bytemuck_bytes(&self.buffers);
        let source = sockaddr_to_std(&self.addrs[i], self.msgs[i].msg_hdr.msg_namelen);
        Received { bytes: &bytes[start..start + len], source, truncated, forged: self.forged[i] }
    }
}

fn bytemuck_bytes(blocks: &[AlignedBlock]) -> &[u8] {
    // SAFETY: AlignedBlock is a plain array of bytes with no padding; the slice covers exactly its memory.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks)) }
}

fn bytemuck_bytes_mut(blocks: &mut [AlignedBlock]) -> &mut [u8] {
    // SAFETY: as `bytemuck_bytes`; the exclusive borrow of `blocks` is the only access for the result's life.
    unsafe { std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(blocks)) }
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and it is large and aligned enough.
            let sin = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6, and it is large and aligned enough.
            let sin6 = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// One datagram of a [`RecvBatch`].
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// Its bytes (at most the batch's datagram capacity).
    pub bytes: &'a [u8],
    /// Who sent it, when the kernel said.
    pub source: Option<SocketAddr>,
    /// True when the datagram was longer than the buffer and was cut.
    pub truncated: bool,
    /// True when the socket authenticates and the datagram's tag was missing or wrong: drop it unread.
    pub forged: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    fn endpoint() -> UdpEndpoint {
        UdpEndpoint::bind(loopback(), &SocketOptions::default()).unwrap().0
    }

    /// Receives until `want` datagrams arrived (loopback delivers synchronously, so a few polls suffice).
    fn drain(rx: &UdpEndpoint, want: usize) -> Vec<(Vec<u8>, Option<SocketAddr>)> {
        let mut batch = RecvBatch::new(16, 2048);
        let mut got = Vec::new();
        for _ in 0..10_000 {
            let n = rx.recv_batch(&mut batch).unwrap();
            for i in 0..n {
                let d = batch.datagram(i);
                assert!(!d.truncated);
                got.push((d.bytes.to_vec(), d.source));
            }
            if got.len() >= want {
                break;
            }
            std::thread::yield_now();
        }
        got
    }

    #[test]
    fn send_modes_parse_and_print() {
        for mode in SendMode::ALL {
            assert_eq!(mode.to_string().parse::<SendMode>().unwrap(), mode);
        }
        assert!("fast".parse::<SendMode>().unwrap_err().contains("classic, mmsg or gso"));
    }

    #[test]
    fn a_clamped_buffer_is_told_from_the_kernels_doubling() {
        assert_eq!(buffer_clamp("SO_RCVBUF", 4 << 20, 8 << 20, "net.core.rmem_max"), None, "granted in full");
        let clamped = buffer_clamp("SO_RCVBUF", 8 << 20, 8 << 20, "net.core.rmem_max").unwrap();
        assert!(clamped.contains("granted 4194304") && clamped.contains("rmem_max=8388608"), "{clamped}");
    }

    #[test]
    fn classic_send_to_connected_and_addressed_peers() {
        let rx = endpoint();
        let mut tx = endpoint();
        assert!(matches!(tx.send(b"addressed", Some(&SockAddr::from(rx.local_addr()))), SendOutcome::Sent(1)));
        tx.connect(rx.local_addr()).unwrap();
        assert!(matches!(tx.send(b"connected", None), SendOutcome::Sent(1)));
        let got = drain(&rx, 2);
        assert_eq!(got[0].0, b"addressed");
        assert_eq!(got[1].0, b"connected");
        assert_eq!(got[1].1, Some(tx.local_addr()));
        assert!(tx.path_max_payload().unwrap() >= 1408);
    }

    #[test]
    fn mmsg_fans_each_datagram_out_to_every_destination() {
        let (a, b) = (endpoint(), endpoint());
        let tx = endpoint();
        let dests = [SockAddr::from(a.local_addr()), SockAddr::from(b.local_addr())];
        let payloads: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 100 + i as usize]).collect();
        let datagrams: Vec<&[u8]> = payloads.iter().map(|p| p.as_slice()).collect();
        let mut scratch = MmsgScratch::default();
        let (outcome, calls) = tx.send_mmsg(&datagrams, &dests, &mut scratch);
        assert!(matches!(outcome, SendOutcome::Sent(80)), "{outcome:?}");
        assert_eq!(calls, 2, "80 messages need two calls of at most {MAX_BATCH}");
        for rx in [&a, &b] {
            let got: Vec<Vec<u8>> = drain(rx, 40).into_iter().map(|(d, _)| d).collect();
            assert_eq!(got, payloads);
        }
    }

    #[test]
    fn gso_cuts_a_run_into_equal_segments() {
        if !probe_gso() {
            eprintln!("skipped: this kernel refuses UDP_SEGMENT");
            return;
        }
        let rx = endpoint();
        let mut tx = endpoint();
        tx.connect(rx.local_addr()).unwrap();
        let data: Vec<u8> = (0..(5 * 1408 + 300)).map(|i| (i % 251) as u8).collect();
        assert!(matches!(tx.send_gso(&data, 1408), SendOutcome::Sent(6)));
        let got = drain(&rx, 6);
        assert_eq!(got.len(), 6);
        let joined: Vec<u8> = got.iter().flat_map(|(d, _)| d.clone()).collect();
        assert_eq!(joined, data);
        assert_eq!(got[5].0.len(), 300);
    }

    #[test]
    fn a_run_is_as_long_as_its_first_datagram_allows() {
        let d = |lengths: &[usize]| -> Vec<Vec<u8>> { lengths.iter().map(|&l| vec![1u8; l]).collect() };
        let run = |lengths: &[usize]| {
            let owned = d(lengths);
            let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            segment_run(&slices)
        };
        assert_eq!(run(&[]), 0);
        assert_eq!(run(&[100]), 1);
        assert_eq!(run(&[100, 100, 100]), 3);
        assert_eq!(run(&[100, 100, 60, 100]), 3, "a shorter datagram ends the run it joins");
        assert_eq!(run(&[100, 120, 100]), 1, "a longer one starts another");
        assert_eq!(run(&[100, 0]), 1, "an empty one is never cut from a buffer");
        assert_eq!(run(&[8192; 20]), MAX_GSO_BYTES / 8192, "at most 64 KiB in all");
        assert_eq!(run(&[16; 100]), MAX_GSO_SEGMENTS);
    }

    #[test]
    fn runs_go_in_one_call_each_and_arrive_whole_in_order() {
        let rx = endpoint();
        let dest = SockAddr::from(rx.local_addr());
        let mut tx = endpoint();
        // Two runs (each ending with a shorter datagram), then two datagrams that start none.
        let lengths = [1408, 1408, 1408, 1000, 1408, 1408, 700, 900, 1200];
        let owned: Vec<Vec<u8>> =
            lengths.iter().enumerate().map(|(i, &l)| (0..l).map(|j| (i * 7 + j) as u8).collect()).collect();
        let datagrams: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let (outcome, calls) = tx.send_runs(&datagrams, &dest, &mut MmsgScratch::default());
        assert!(matches!(outcome, SendOutcome::Sent(9)), "{outcome:?}");
        if probe_gso() {
            assert_eq!(calls, 3, "a call per run, one for the rest");
        }
        let got: Vec<Vec<u8>> = drain(&rx, 9).into_iter().map(|(d, _)| d).collect();
        assert_eq!(got, owned);
    }

    #[test]
    fn oversized_datagram_is_refused_not_fragmented() {
        let rx = endpoint();
        let mut tx = endpoint();
        tx.connect(rx.local_addr()).unwrap();
        let big = vec![0u8; 70_000];
        assert!(matches!(tx.send(&big, None), SendOutcome::TooLarge { datagram: 70_000, .. }));
    }

    #[test]
    fn empty_socket_receives_nothing_and_truncation_is_flagged() {
        let rx = endpoint();
        let mut batch = RecvBatch::new(4, 64);
        assert_eq!(rx.recv_batch(&mut batch).unwrap(), 0);
        let mut tx = endpoint();
        tx.connect(rx.local_addr()).unwrap();
        assert!(matches!(tx.send(&[7u8; 200], None), SendOutcome::Sent(1)));
        let mut n = 0;
        for _ in 0..1000 {
            n = rx.recv_batch(&mut batch).unwrap();
            if n > 0 {
                break;
            }
            std::thread::yield_now();
        }
        assert_eq!(n, 1);
        assert!(batch.datagram(0).truncated);
        assert_eq!(batch.datagram(0).bytes.len(), 64);
    }

    #[test]
    fn clamped_buffers_are_reported_with_the_sysctl() {
        let huge = 1 << 30;
        let options = SocketOptions { send_buffer: Some(huge), receive_buffer: Some(huge) };
        let (_e, warnings) = UdpEndpoint::bind(loopback(), &options).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("net.core.wmem_max"));
        assert!(warnings[1].contains("net.core.rmem_max"));
    }

    #[test]
    fn ipv6_loopback_works_when_available() {
        let Ok((rx, _)) = UdpEndpoint::bind("[::1]:0".parse().unwrap(), &SocketOptions::default()) else {
            eprintln!("skipped: no IPv6 loopback");
            return;
        };
        let (mut tx, _) = UdpEndpoint::bind("[::1]:0".parse().unwrap(), &SocketOptions::default()).unwrap();
        tx.connect(rx.local_addr()).unwrap();
        assert!(matches!(tx.send(b"six", None), SendOutcome::Sent(1)));
        let got = drain(&rx, 1);
        assert_eq!(got[0].0, b"six");
        assert_eq!(got[0].1, Some(tx.local_addr()));
    }
}

#[cfg(test)]
mod default_docs {
    #[test]
    fn every_documented_default_is_the_default() {
        crate::setting::documented_defaults::check(
            include_str!("mod.rs"),
            "SocketOptions",
            &super::SocketOptions::default(),
            &[],
        );
    }
}
