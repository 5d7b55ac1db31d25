//! Who may speak for a client session: the members' session secret (session ids, tokens and
//! challenges derived from it), client keys, and the window that drops replayed datagrams.
//!
//! A session is bound to a 32-byte **token** that only the members can derive, from the session's id,
//! the client key it was opened under (if any) and the members' [`SessionSecret`]; the leader gives it
//! to the client in `OPENED` (wrapped with the client key, when there is one, so that it does not cross
//! the network in clear), and every datagram of the session, both ways, is tagged with it. Nothing of
//! the token is written to the log, a snapshot or a file: a member derives it again when it needs it,
//! so a new leader checks a session's datagrams without being told anything.
//!
//! Session ids come from the same secret: a pseudo-random function of the leadership term and a count,
//! so that no one without the secret can name a session that exists.
//!
//! # Invariants
//!
//! - [`SessionSecret`] derives everything from one root key, each use under a context of its own; the
//!   root is never stored by this module, and `Debug` never shows a key or a token.
//! - [`SessionSecret::token`] is a function of the session id and the client key only: the same on
//!   every member, for every leader.
//! - [`ReplayWindow::accept`] accepts a sequence number at most once.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::media::auth::AuthKey;

use super::wire::TOKEN_LENGTH;

/// How long a challenge stays valid: the period it is made in and the next.
pub const CHALLENGE_PERIOD_NS: u64 = 1_000_000_000;

/// The name of the key `[clients] auth_key` gives (a client holding it names it so: `qc-client
/// --client-key`'s default name).
pub const DEFAULT_CLIENT_KEY_NAME: &str = "default";

/// A key a client holds to be let in by a cluster that requires one (`[clients] auth_key`, or one of
/// `[[clients.keys]]`), with the name it is known by.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKey {
    name: String,
    key: AuthKey,
    id: u32,
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKey").field("name", &self.name).field("id", &self.id).finish_non_exhaustive()
    }
}

impl ClientKey {
    /// The key `key`, known as `name` (what the member's counters and logs call the client).
    pub fn new(name: impl Into<String>, key: AuthKey) -> Self {
        let name = name.into();
        let hash = blake3::hash(name.as_bytes());
        let id = u32::from_le_bytes(hash.as_bytes()[..4].try_into().expect("4 bytes")).max(1);
        Self { name, key, id }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id datagrams name it by (`DatagramHeader::key_id`): from its name, never 0.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The key itself.
    pub fn key(&self) -> &AuthKey {
        &self.key
    }
}

/// The members' secret for client sessions, from a root key every member holds.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecret {
    ids: AuthKey,
    tokens: AuthKey,
    challenges: AuthKey,
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

impl SessionSecret {
    /// The secret derived from `root` (`[clients] session_key`, or the channel's `auth_key`).
    pub fn new(root: &AuthKey) -> Self {
        let material = root.keyed_hash(&[b"quorumcast client sessions"]);
        Self {
            ids: AuthKey::derive("quorumcast 2026-12 client session ids", &material),
            tokens: AuthKey::derive("quorumcast 2026-12 client session tokens", &material),
            challenges: AuthKey::derive("quorumcast 2026-12 client address challenges", &material),
        }
    }

    /// The id of the `count`-th session a leader opens in leadership term `term`: unpredictable without
    /// the secret, never 0.
    pub fn session_id(&self, term: i64, count: u64) -> u64 {
        let hash = self.ids.keyed_hash(&[&term.to_le_bytes(), &count.to_le_bytes()]);
        u64::from_le_bytes(hash[..8].try_into().expect("8 bytes")).max(1)
    }

    /// The token of session `session_id`, opened under `key` (or none).
    pub fn token(&self, session_id: u64, key: Option<&ClientKey>) -> AuthKey {
        let (id, fingerprint) = key.map_or((0, [0; 32]), |k| (k.id, k.key.keyed_hash(&[b"fingerprint"])));
        AuthKey::new(self.tokens.keyed_hash(&[&session_id.to_le_bytes(), &id.to_le_bytes(), &fingerprint]))
    }

    /// The challenge that session `session_id`'s client at `source` must answer, in the period that
    /// `now_ns` (a member's monotonic clock) is in: never 0.
    pub fn challenge(&self, session_id: u64, source: SocketAddr, now_ns: u64) -> u64 {
        self.challenge_in(session_id, source, now_ns / CHALLENGE_PERIOD_NS)
    }

    /// True when `answer` is the challenge of `session_id` at `source` of this period or the last.
    pub fn answers_challenge(&self, session_id: u64, source: SocketAddr, now_ns: u64, answer: u64) -> bool {
        let period = now_ns / CHALLENGE_PERIOD_NS;
        answer == self.challenge_in(session_id, source, period)
            || (period > 0 && answer == self.challenge_in(session_id, source, period - 1))
    }

    fn challenge_in(&self, session_id: u64, source: SocketAddr, period: u64) -> u64 {
        let ip = match source.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let parts: [&[u8]; 4] = [&session_id.to_le_bytes(), &ip, &source.port().to_le_bytes(), &period.to_le_bytes()];
        let hash = self.challenges.keyed_hash(&parts);
        u64::from_le_bytes(hash[..8].try_into().expect("8 bytes")).max(1)
    }
}

/// The token as an `OPENED` record carries it: in clear without a client key, else XORed with a pad
/// that only a holder of the client key can make (for this session and this open).
pub fn wrap_token(token: &AuthKey, key: Option<&ClientKey>, session_id: u64, nonce: u64) -> [u8; TOKEN_LENGTH] {
    let mut bytes = token.to_bytes();
    xor_pad(&mut bytes, key, session_id, nonce);
    bytes
}

/// The token from the bytes an `OPENED` record carried (unwrapped with the client key, when the
/// session has one).
pub fn unwrap_token(carried: &[u8; TOKEN_LENGTH], key: Option<&ClientKey>, session_id: u64, nonce: u64) -> AuthKey {
    let mut bytes = *carried;
    xor_pad(&mut bytes, key, session_id, nonce);
    AuthKey::new(bytes)
}

fn xor_pad(bytes: &mut [u8; TOKEN_LENGTH], key: Option<&ClientKey>, session_id: u64, nonce: u64) {
    if let Some(key) = key {
        let pad = key.key.keyed_hash(&[b"token wrap", &session_id.to_le_bytes(), &nonce.to_le_bytes()]);
        for (byte, pad) in bytes.iter_mut().zip(pad) {
            *byte ^= pad;
        }
    }
}

/// The sequence numbers a receiver has accepted from one sender: the highest, and which of the 64
/// below it (IPsec's anti-replay window). A datagram older than the window is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    highest: u64,
    /// Bit `i`: `highest - i` was accepted.
    seen: u64,
}

impl ReplayWindow {
    /// Bits of the window.
    pub const WIDTH: u64 = 64;

    /// A window that has accepted nothing below `floor` + 1: every number up to `floor` is refused.
    pub fn starting_after(floor: u64) -> Self {
        Self { highest: floor, seen: u64::MAX }
    }

    /// True when `sequence` would be accepted (newer than the highest, or in the window and not seen).
    pub fn is_fresh(&self, sequence: u64) -> bool {
        if sequence > self.highest {
            return true;
        }
        let age = self.highest - sequence;
        age < Self::WIDTH && self.seen & (1 << age) == 0
    }

    /// Accepts `sequence` if it is fresh, and remembers it; false (and nothing changed) otherwise.
    pub fn accept(&mut self, sequence: u64) -> bool {
        if !self.is_fresh(sequence) {
            return false;
        }
        if sequence > self.highest {
            let shift = sequence - self.highest;
            self.seen = if shift >= Self::WIDTH { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.highest = sequence;
        } else {
            self.seen |= 1 << (self.highest - sequence);
        }
        true
    }

    /// The highest number accepted.
    pub fn highest(&self) -> u64 {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_accepts_each_number_once_and_nothing_older_than_it() {
        let mut window = ReplayWindow::starting_after(10);
        assert!(!window.accept(10) && !window.accept(3));
        assert!(window.accept(12));
        assert!(!window.accept(12), "a replay");
        assert!(window.accept(11), "late, in the window");
        assert!(!window.accept(11));
        assert!(window.accept(200));
        assert!(!window.accept(200 - 64), "older than the window");
        assert!(window.accept(200 - 63));
        assert_eq!(window.highest(), 200);
    }

    #[test]
    fn tokens_depend_on_the_session_the_key_and_the_secret() {
        let secret = SessionSecret::new(&AuthKey::new([1; 32]));
        let other = SessionSecret::new(&AuthKey::new([2; 32]));
        let key = ClientKey::new("billing", AuthKey::new([3; 32]));
        let renewed = ClientKey::new("billing", AuthKey::new([4; 32]));
        let tag = |k: AuthKey| k.tag(b"x");
        assert_eq!(tag(secret.token(5, None)), tag(secret.token(5, None)));
        let tags = [
            tag(secret.token(5, None)),
            tag(secret.token(6, None)),
            tag(secret.token(5, Some(&key))),
            tag(secret.token(5, Some(&renewed))),
            tag(other.token(5, None)),
        ];
        for (i, a) in tags.iter().enumerate() {
            for b in &tags[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_ne!(secret.session_id(1, 1), secret.session_id(1, 2));
        assert_ne!(secret.session_id(1, 1), other.session_id(1, 1));
    }

    #[test]
    fn a_wrapped_token_opens_only_with_its_client_key() {
        let secret = SessionSecret::new(&AuthKey::new([1; 32]));
        let key = ClientKey::new("a", AuthKey::new([3; 32]));
        let token = secret.token(9, Some(&key));
        let carried = wrap_token(&token, Some(&key), 9, 77);
        assert_ne!(carried, token.to_bytes(), "wrapped");
        assert_eq!(unwrap_token(&carried, Some(&key), 9, 77), token);
        let stranger = ClientKey::new("a", AuthKey::new([5; 32]));
        assert_ne!(unwrap_token(&carried, Some(&stranger), 9, 77), token);
        assert_ne!(unwrap_token(&carried, None, 9, 77), token);
        assert_ne!(unwrap_token(&carried, Some(&key), 9, 78), token, "another open's pad");
        // Without a client key the token travels in clear.
        let plain = secret.token(9, None);
        assert_eq!(unwrap_token(&wrap_token(&plain, None, 9, 77), None, 9, 77), plain);
    }

    #[test]
    fn a_challenge_holds_for_its_address_this_period_and_the_next() {
        let secret = SessionSecret::new(&AuthKey::new([1; 32]));
        let here: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let there: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let now = 5 * CHALLENGE_PERIOD_NS + 10;
        let challenge = secret.challenge(3, here, now);
        assert!(secret.answers_challenge(3, here, now, challenge));
        assert!(secret.answers_challenge(3, here, now + CHALLENGE_PERIOD_NS, challenge));
        assert!(!secret.answers_challenge(3, here, now + 2 * CHALLENGE_PERIOD_NS, challenge));
        assert!(!secret.answers_challenge(3, there, now, challenge));
        assert!(!secret.answers_challenge(4, here, now, challenge));
    }
}
