//! Byte streams between members: the catch-up connection, which carries a recorded log and a snapshot
//! from a leader to a follower far behind it.
//!
//! A [`Network`](super::Network) opens them beside its datagram endpoints: TCP in production (the
//! trait's default methods), an in-process stream under the node simulator, so that a catch-up runs over
//! the same simulated network, with its cuts and delays, as the log does.
//!
//! Both ends are used without blocking where the caller says so: a [`Stream`] read or write that cannot
//! move a byte now returns [`io::ErrorKind::WouldBlock`] (or `TimedOut` on a stream with a read time-out),
//! and `Ok(0)` from a read means the peer closed its side.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// One end of a byte stream between two members.
pub trait Stream: io::Read + io::Write + Send + fmt::Debug {
    /// The other end's address.
    fn peer_addr(&self) -> SocketAddr;
}

/// Where a member takes streams other members open to it.
pub trait StreamListener: Send + fmt::Debug {
    /// The next stream waiting, without blocking: `Ok(None)` when none waits. Every stream it returns is
    /// in non-blocking mode.
    fn accept(&mut self) -> io::Result<Option<(Box<dyn Stream>, SocketAddr)>>;

    /// The address it listens at.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// How a stream is opened ([`Network::connect_stream`](super::Network::connect_stream)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// The host it opens from (a simulated network needs it; TCP picks its own source address).
    pub local: IpAddr,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// `None`: a non-blocking stream. `Some(t)`: reads block for at most `t` and then fail with
    /// `WouldBlock` or `TimedOut`, writes for at most `t` (a caller on a thread of its own).
    pub blocking: Option<Duration>,
}

impl Stream for TcpStream {
    fn peer_addr(&self) -> SocketAddr {
        TcpStream::peer_addr(self).unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl StreamListener for TcpListener {
    fn accept(&mut self) -> io::Result<Option<(Box<dyn Stream>, SocketAddr)>> {
        match TcpListener::accept(self) {
            Ok((stream, peer)) => {
                stream.set_nonblocking(true)?;
                stream.set_nodelay(true)?;
                Ok(Some((Box::new(stream), peer)))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// A TCP listener at `local`, non-blocking.
pub fn tcp_listen(local: SocketAddr) -> io::Result<Box<dyn StreamListener>> {
    let listener = TcpListener::bind(local)?;
    listener.set_nonblocking(true)?;
    Ok(Box::new(listener))
}

/// A TCP stream to `peer`, with `Nagle` off, blocking or not as `options` say.
pub fn tcp_connect(peer: SocketAddr, options: &StreamOptions) -> io::Result<Box<dyn Stream>> {
    let stream = TcpStream::connect_timeout(&peer, options.connect_timeout)?;
    stream.set_nodelay(true)?;
    match options.blocking {
        Some(timeout) => {
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
        }
        None => stream.set_nonblocking(true)?,
    }
    Ok(Box::new(stream))
}

/// Whether a stream error only means "nothing can move now".
pub fn would_block(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_tcp_stream_carries_bytes_both_ways_without_blocking_the_listener() {
        let mut listener = tcp_listen(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        assert!(listener.accept().unwrap().is_none(), "nobody connected yet");
        let options = StreamOptions {
            local: IpAddr::from([127, 0, 0, 1]),
            connect_timeout: Duration::from_secs(5),
            blocking: Some(Duration::from_secs(5)),
        };
        let mut client = tcp_connect(listener.local_addr().unwrap(), &options).unwrap();
        let mut server = loop {
            if let Some((stream, _)) = listener.accept().unwrap() {
                break stream;
            }
            std::thread::yield_now();
        };
        client.write_all(b"hello").unwrap();
        let mut got = [0; 5];
        let mut at = 0;
        while at < 5 {
            match server.read(&mut got[at..]) {
                Ok(n) => at += n,
                Err(e) if would_block(&e) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(&got, b"hello");
        server.write_all(b"ok").unwrap();
        let mut answer = [0; 2];
        client.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"ok");
    }
}
