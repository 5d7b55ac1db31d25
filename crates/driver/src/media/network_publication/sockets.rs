//! A publication's sockets: one connected endpoint per destination, or one shared endpoint that
//! `sendmmsg`s to all of them; how they are opened, and the send mode they can do.

use super::*;

/// How the publication's sockets are arranged for its send mode.
pub(super) enum Sockets<T> {
    /// `classic` and `gso`: one socket connected to each destination (cheaper sends, readable path MTU).
    PerDestination(Vec<T>),
    /// `mmsg`: one unconnected socket, the destination named in each message.
    Shared { endpoint: T, addrs: Vec<SockAddr> },
}

impl<T: Transport> Sockets<T> {
    #[inline]
    pub(super) fn send(&mut self, destination: usize, bytes: &[u8]) -> SendOutcome {
        match self {
            Sockets::PerDestination(endpoints) => endpoints[destination].send(bytes, None),
            Sockets::Shared { endpoint, addrs } => endpoint.send(bytes, Some(&addrs[destination])),
        }
    }

    /// As [`send`](Self::send), with the authentication tag of `bytes` already computed (or `None`).
    #[inline]
    pub(super) fn send_with_tag(
        &mut self,
        destination: usize,
        bytes: &[u8],
        tag: Option<&[u8; TAG_LENGTH]>,
    ) -> SendOutcome {
        match self {
            Sockets::PerDestination(endpoints) => endpoints[destination].send_with_tag(bytes, tag, None),
            Sockets::Shared { endpoint, addrs } => endpoint.send_with_tag(bytes, tag, Some(&addrs[destination])),
        }
    }

    pub(super) fn endpoints(&self) -> &[T] {
        match self {
            Sockets::PerDestination(endpoints) => endpoints,
            Sockets::Shared { endpoint, .. } => std::slice::from_ref(endpoint),
        }
    }

    pub(super) fn endpoints_mut(&mut self) -> &mut [T] {
        match self {
            Sockets::PerDestination(endpoints) => endpoints,
            Sockets::Shared { endpoint, .. } => std::slice::from_mut(endpoint),
        }
    }
}

/// Sends `bytes` to destination `d`, counting the syscall on `syscalls` and its time (when timed) in
/// `class` of `timer`.
///
/// `tag` is `bytes`' authentication tag when the caller computed it once for several destinations (`None`:
/// the socket computes it, if it authenticates).
#[inline]
pub(super) fn transmit<T: Transport>(
    sockets: &mut Sockets<T>,
    d: usize,
    bytes: &[u8],
    tag: Option<&[u8; TAG_LENGTH]>,
    (syscalls, class): (&Counter, CallClass),
    timer: &mut CallTimer,
) -> SendOutcome {
    syscalls.increment();
    timer.time(class, || match tag {
        Some(tag) => sockets.send_with_tag(d, bytes, Some(tag)),
        None => sockets.send(d, bytes),
    })
}

/// Whether a failed GSO send means the kernel will not segment on this path (rather than a passing error).
pub(super) fn is_gso_refusal(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT))
}

/// Falls back to `classic` with a warning when the network (the kernel) refuses the asked mode.
pub(super) fn resolve_mode<N: Network>(asked: SendMode, network: &N, warnings: &mut Vec<String>) -> SendMode {
    if network.supports(asked) {
        asked
    } else {
        warnings.push(format!("send mode {asked} is not supported by this kernel: falling back to classic"));
        SendMode::Classic
    }
}

/// Opens the sockets of `mode` and checks that the MTU fits the path to every destination.
pub(super) fn open_sockets<N: Network>(
    config: &ChannelConfig,
    mode: SendMode,
    network: &mut N,
    warnings: &mut Vec<String>,
) -> Result<Sockets<N::Endpoint>, PublicationError> {
    let mut connected = Vec::with_capacity(config.destinations.len());
    for &destination in &config.destinations {
        let (mut endpoint, w) = bind_source(config, network, destination)?;
        warnings.extend(w);
        endpoint.connect(destination)?;
        if let Some(payload) = endpoint.path_max_payload() {
            config.validate_path(destination, payload)?;
        }
        connected.push(endpoint);
    }
    if mode != SendMode::Mmsg {
        return Ok(Sockets::PerDestination(connected));
    }
    let first = config.destinations.first().copied().unwrap_or_else(|| "0.0.0.0:0".parse().unwrap());
    let (endpoint, _) = bind_source(config, network, first)?;
    let addrs = config.destinations.iter().map(|&d| SockAddr::from(d)).collect();
    Ok(Sockets::Shared { endpoint, addrs })
}

/// A socket for sending to `destination`: on the channel's `source` (shared with the publication's other
/// sockets) when it has one, else on an ephemeral port of the destination's family.
pub(super) fn bind_source<N: Network>(
    config: &ChannelConfig,
    network: &mut N,
    destination: SocketAddr,
) -> std::io::Result<(N::Endpoint, Vec<String>)> {
    match config.source {
        Some(source) => network.bind(source, &config.binding(true)),
        None => network.bind(unspecified_like(destination), &config.binding(false)),
    }
}

/// The kernel's path MTU to `destination`, read through a socket connected for the purpose: the shared
/// socket of `mmsg` mode is not connected and cannot tell. Cold path: only when a channel stops.
pub(super) fn probe_path_mtu(destination: SocketAddr, config: &ChannelConfig) -> Option<usize> {
    let (mut endpoint, _) = UdpEndpoint::bind(unspecified_like(destination), &config.socket).ok()?;
    endpoint.connect(destination).ok()?;
    endpoint.path_mtu().ok()
}

/// Port 0 on the loopback or unspecified address of the destination's family.
pub(super) fn unspecified_like(destination: SocketAddr) -> SocketAddr {
    let ip: std::net::IpAddr = match destination {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, 0)
}
