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
//!
//! Files: this one holds the interfaces ([`Transport`], [`Network`], [`SharedNetwork`]) and the types they
//! speak in; `socket` the UDP socket (binding, options, the path MTU, the kernel probes), `send` its send
//! calls, `recv` its receive batches; `faulty`, `memory` and `stream` the other transports and the byte
//! streams.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::str::FromStr;

use socket2::SockAddr;

use crate::media::auth::{AuthKey, TAG_LENGTH};

pub mod faulty;
pub mod memory;
mod recv;
mod send;
mod socket;
pub mod stream;

pub use recv::{Received, RecvBatch};
pub use send::{send_each_copy, MmsgScratch};
pub use socket::{probe_gso, probe_mmsg, Udp, UdpEndpoint};

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

crate::section! {
    /// Socket buffer sizes asked of the kernel (None keeps the system default).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct SocketOptions in pub mod socket_settings, built as ("ChannelConfig::socket.", ""), checked with () {
        /// `SO_SNDBUF`.
        pub send_buffer: Option<usize> = None, shown "None", unit "bytes",
            key [channel] send_buffer, file Size;
        /// `SO_RCVBUF`.
        pub receive_buffer: Option<usize> = None, shown "None", unit "bytes",
            key [channel] receive_buffer, file Size;
    }
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

#[cfg(test)]
mod tests;
