//! The receive side of a [`UdpEndpoint`]: one `recvmmsg` into a [`RecvBatch`] of preallocated,
//! cache-line-aligned buffers, each datagram's tag checked, and each datagram read back as [`Received`].

use std::fmt;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;

use socket2::SockAddr;

use super::send::iovec;
use super::*;
use crate::media::auth::AuthKey;

impl UdpEndpoint {
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
