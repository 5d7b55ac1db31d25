//! The send calls of a [`UdpEndpoint`]: one datagram per `sendmsg`, several (datagram, destination)
//! pairs per `sendmmsg` (with their preallocated [`MmsgScratch`]), and runs of equal-length datagrams the
//! kernel cuts (`UDP_SEGMENT`); what each syscall's return means ([`SendOutcome`]).

use std::fmt;
use std::io;
use std::mem::{size_of, zeroed};

use socket2::SockAddr;

use super::*;
use crate::media::auth::TAG_LENGTH;

impl UdpEndpoint {
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
    /// size): on loopback the kernel's cutting costs less CPU per datagram than `sendmmsg` does. The
    /// first run the kernel or the path refuses (no `UDP_SEGMENT`, a segment longer than the path's
    /// MTU) goes by `sendmmsg`, as every later one. A socket with a key (whose tags the kernel's cutting
    /// cannot add) sends as [`send_mmsg`](Self::send_mmsg).
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
}

pub(super) fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() }
}

/// How many of `datagrams`, from the first, the kernel can cut from one buffer in one `UDP_SEGMENT`
/// send: as long as the first, but the last which may be shorter (not empty), at most
/// [`MAX_GSO_SEGMENTS`] and [`MAX_GSO_BYTES`] in all. 1 when the first starts no run (or 0 with no
/// datagram).
pub(super) fn segment_run(datagrams: &[&[u8]]) -> usize {
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
