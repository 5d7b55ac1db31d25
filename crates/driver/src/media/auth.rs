//! Datagram authentication for networks that are not isolated: a keyed BLAKE3 tag on every datagram.
//!
//! With a shared key configured, every datagram a node sends ends with a [`TAG_LENGTH`]-byte tag: the
//! first 16 bytes of BLAKE3 in keyed mode over the datagram's bytes. A receiver checks the tag before it
//! parses anything and drops (and counts) a datagram whose tag is missing or wrong, so a host that does
//! not hold the key can neither inject frames nor alter them. The tag does not hide the data, and it
//! does not stop a replay of a genuine datagram: the protocol already drops duplicates by position.
//!
//! The tag is added and checked in [`crate::media::transport`], below the Sender and the Receiver: they see the
//! datagrams without it. A `sendmsg` carries the tag as a second `iovec`, so the log bytes are still sent
//! straight from the term buffer without a copy.

use std::fmt;
use std::str::FromStr;

/// Bytes of the tag at the end of an authenticated datagram.
pub const TAG_LENGTH: usize = 16;

/// A 32-byte shared key. `Debug` and `Display` never show it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AuthKey([u8; 32]);

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

impl AuthKey {
    /// A key of these 32 bytes.
    pub const fn new(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// A new key of 32 random bytes from the kernel (`getrandom(2)`): what a harness or a test cluster uses
    /// when it has no key of its own to give.
    pub fn generate() -> std::io::Result<Self> {
        let mut key = [0u8; 32];
        fill_random(&mut key)?;
        Ok(Self(key))
    }

    /// The key as the 64 hexadecimal digits [`FromStr`] reads: for a key file a harness writes.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key's bytes, for the one place a key must travel: a session token sent to its client.
    pub fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// A key derived from `material` for one purpose, named by `context` (BLAKE3's key derivation: keys
    /// of different contexts are unrelated, so one secret can serve several uses).
    pub fn derive(context: &str, material: &[u8]) -> Self {
        Self(blake3::derive_key(context, material))
    }

    /// The keyed BLAKE3 hash of `parts`, one after the other: a pseudo-random function of them that only a
    /// holder of the key can compute.
    pub fn keyed_hash(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        for part in parts {
            hasher.update(part);
        }
        *hasher.finalize().as_bytes()
    }

    /// The tag of `datagram`.
    #[inline]
    pub fn tag(&self, datagram: &[u8]) -> [u8; TAG_LENGTH] {
        let hash = blake3::keyed_hash(&self.0, datagram);
        let mut tag = [0u8; TAG_LENGTH];
        tag.copy_from_slice(&hash.as_bytes()[..TAG_LENGTH]);
        tag
    }

    /// The length of `datagram` without its tag, when the tag is there and right; `None` otherwise.
    /// The comparison takes the same time wherever the tags differ.
    #[inline]
    pub fn verify(&self, datagram: &[u8]) -> Option<usize> {
        let length = datagram.len().checked_sub(TAG_LENGTH)?;
        let (body, tag) = datagram.split_at(length);
        self.verify_tag(body, tag).then_some(length)
    }

    /// True when `tag` is the tag of `body`. The comparison takes the same time wherever the tags differ.
    #[inline]
    pub fn verify_tag(&self, body: &[u8], tag: &[u8]) -> bool {
        constant_time_eq(&self.tag(body), tag)
    }
}

/// Fills `bytes` with random bytes from the kernel (`getrandom(2)`): keys and nonces.
pub fn fill_random(bytes: &mut [u8]) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: `rest` is a live, writable buffer of `rest.len()` bytes for the whole call.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if got < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        filled += got as usize;
    }
    Ok(())
}

/// True when `a` and `b` are equal, in a time that does not depend on where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromStr for AuthKey {
    type Err = String;

    /// Parses 64 hexadecimal digits (`openssl rand -hex 32` makes one).
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || {
            "an authentication key must be 64 hexadecimal digits (32 bytes); make one with `openssl rand -hex 32`"
                .to_string()
        };
        if text.len() != 64 || !text.is_ascii() {
            return Err(bad());
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn a_tagged_datagram_verifies_and_any_change_does_not() {
        let key: AuthKey = KEY.parse().unwrap();
        let mut datagram = b"a data frame".to_vec();
        datagram.extend_from_slice(&key.tag(b"a data frame"));
        assert_eq!(key.verify(&datagram), Some(12));
        for i in 0..datagram.len() {
            let mut changed = datagram.clone();
            changed[i] ^= 1;
            assert_eq!(key.verify(&changed), None, "byte {i} flipped");
        }
        assert_eq!(key.verify(&datagram[..10]), None, "shorter than a tag");
        let other: AuthKey = KEY.replace('0', "f").parse().unwrap();
        assert_eq!(other.verify(&datagram), None, "another key");
    }

    #[test]
    fn keys_parse_from_hex_only_and_never_print() {
        assert!("abc".parse::<AuthKey>().unwrap_err().contains("64 hexadecimal"));
        assert!(KEY.replace('a', "g").parse::<AuthKey>().is_err());
        assert_eq!(format!("{:?}", KEY.parse::<AuthKey>().unwrap()), "AuthKey(..)");
    }
}
