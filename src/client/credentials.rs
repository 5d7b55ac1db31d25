//! Who may speak for a client session: the members' session secret (session ids, tokens and
//! challenges derived from it), client keys, and the window that drops replayed datagrams.
//!
//! A session is bound to a 32-byte **token** that only the members can derive, from the session's id,
//! the client key it was opened under (if any) and the members' [`SessionSecret`]; the leader gives it
//! to the client in `OPENED`, wrapped under a key from an ephemeral X25519 exchange (the client's public
//! key in its `OPEN`, the leader's in `OPENED`: [`seal_token`], [`open_token`]), so that nothing that
//! crosses the network reveals it, to an observer holding the client key too; and every datagram of the
//! session, both ways, is tagged with it. Before any of that, an `OPEN` must carry a cookie the leader
//! gave its source address ([`SessionSecret::cookie`]): no state is kept for an address that cannot
//! receive there. Nothing of
//! the token is written to the log, a snapshot or a file: a member derives it again when it needs it,
//! so a new leader checks a session's datagrams without being told anything.
//!
//! Session ids come from the same secret: a pseudo-random function of the leadership term, the leader's
//! random value for its term and a count, so that no one without the secret can name a session that
//! exists, and ids (so tokens) never repeat across clusters made again with the same secret.
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
    cookies: AuthKey,
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
            cookies: AuthKey::derive("quorumcast 2026-12 client open cookies", &material),
        }
    }

    /// The cookie an `OPEN` from `source` with the client's public key `client` and `nonce` must carry,
    /// in the period `now_ns` is in: a stateless proof that the opener receives at `source` (QUIC's Retry,
    /// TCP's SYN cookies), made and checked without keeping anything.
    pub fn cookie(
        &self,
        source: SocketAddr,
        client: &[u8; PUBLIC_KEY_LENGTH],
        nonce: u64,
        now_ns: u64,
    ) -> [u8; COOKIE_LENGTH] {
        self.cookie_in(source, client, nonce, now_ns / CHALLENGE_PERIOD_NS)
    }

    /// True when `cookie` is the one of this period or the last for that open.
    pub fn accepts_cookie(
        &self,
        source: SocketAddr,
        client: &[u8; PUBLIC_KEY_LENGTH],
        nonce: u64,
        now_ns: u64,
        cookie: &[u8],
    ) -> bool {
        let period = now_ns / CHALLENGE_PERIOD_NS;
        cookie == self.cookie_in(source, client, nonce, period)
            || (period > 0 && cookie == self.cookie_in(source, client, nonce, period - 1))
    }

    fn cookie_in(
        &self,
        source: SocketAddr,
        client: &[u8; PUBLIC_KEY_LENGTH],
        nonce: u64,
        period: u64,
    ) -> [u8; COOKIE_LENGTH] {
        let ip = ip_octets(source);
        let parts: [&[u8]; 5] =
            [&ip, &source.port().to_le_bytes(), client, &nonce.to_le_bytes(), &period.to_le_bytes()];
        self.cookies.keyed_hash(&parts)[..COOKIE_LENGTH].try_into().expect("16 bytes")
    }

    /// The id of the `count`-th session a leader opens in leadership term `term`, whose random value for
    /// the term is `nonce`: unpredictable without the secret, never 0.
    pub fn session_id(&self, term: i64, nonce: u64, count: u64) -> u64 {
        let hash = self.ids.keyed_hash(&[&term.to_le_bytes(), &nonce.to_le_bytes(), &count.to_le_bytes()]);
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
        let ip = ip_octets(source);
        let parts: [&[u8]; 4] = [&session_id.to_le_bytes(), &ip, &source.port().to_le_bytes(), &period.to_le_bytes()];
        let hash = self.challenges.keyed_hash(&parts);
        u64::from_le_bytes(hash[..8].try_into().expect("8 bytes")).max(1)
    }
}

/// Bytes of an X25519 public key.
pub const PUBLIC_KEY_LENGTH: usize = 32;
/// Bytes of an address cookie.
pub const COOKIE_LENGTH: usize = 16;
/// Bytes of an `OPENED` record's payload: the leader's ephemeral public key, the token wrapped for the
/// client, and the proof that the unwrapped token is the session's.
pub const OPENED_LENGTH: usize = PUBLIC_KEY_LENGTH + TOKEN_LENGTH + 16;

/// One side's ephemeral X25519 key pair for one open: the secret is used for one exchange and dropped
/// (zeroed on drop).
pub struct Ephemeral {
    secret: x25519_dalek::StaticSecret,
    public: [u8; PUBLIC_KEY_LENGTH],
}

impl fmt::Debug for Ephemeral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ephemeral").field("public", &self.public).finish_non_exhaustive()
    }
}

impl Ephemeral {
    /// The pair whose secret is these 32 random bytes (clamped by X25519 itself). The public key comes
    /// from the base point's precomputed table (a fifth of a Montgomery ladder's time here).
    pub fn from_random(secret: [u8; 32]) -> Self {
        let secret = x25519_dalek::StaticSecret::from(secret);
        let public = x25519_dalek::PublicKey::from(&secret).to_bytes();
        Self { secret, public }
    }

    /// A pair from the kernel's randomness.
    pub fn generate() -> std::io::Result<Self> {
        let mut secret = [0u8; 32];
        crate::media::auth::fill_random(&mut secret)?;
        Ok(Self::from_random(secret))
    }

    /// Its public key (what crosses the wire).
    pub fn public(&self) -> [u8; PUBLIC_KEY_LENGTH] {
        self.public
    }

    /// The secret shared with the holder of `peer`'s secret; `None` for a peer key of small order (which
    /// would make it known to anyone).
    fn shared(&self, peer: &[u8; PUBLIC_KEY_LENGTH]) -> Option<[u8; 32]> {
        let shared = self.secret.diffie_hellman(&x25519_dalek::PublicKey::from(*peer));
        shared.was_contributory().then(|| shared.to_bytes())
    }
}

/// What an exchange binds: the session, the open's nonce, and both public keys.
struct Transcript<'a> {
    session_id: u64,
    nonce: u64,
    client: &'a [u8; PUBLIC_KEY_LENGTH],
    leader: &'a [u8; PUBLIC_KEY_LENGTH],
}

impl Transcript<'_> {
    fn wrap_key(&self, shared: &[u8; 32]) -> [u8; TOKEN_LENGTH] {
        let mut hasher = blake3::Hasher::new_derive_key("quorumcast 2026-12 session token wrap");
        for part in [&shared[..], self.client, self.leader, &self.session_id.to_le_bytes(), &self.nonce.to_le_bytes()] {
            hasher.update(part);
        }
        *hasher.finalize().as_bytes()
    }

    fn proof(&self, token: &AuthKey) -> [u8; 16] {
        let hash = token.keyed_hash(&[
            b"opened",
            &self.session_id.to_le_bytes(),
            &self.nonce.to_le_bytes(),
            self.client,
            self.leader,
        ]);
        hash[..16].try_into().expect("16 bytes")
    }
}

/// The leader's side of an open: the `OPENED` payload that gives `token` to the holder of the secret of
/// `client` (the client's ephemeral public key from its `OPEN`) and to no one else, made with the leader's
/// ephemeral pair `leader`. Whoever sees this payload, and the `OPEN` before it, learns nothing of the
/// token without one of the two ephemeral secrets (X25519), client key or not. `None` when `client` is
/// a key of small order.
pub fn seal_token(
    token: &AuthKey,
    leader: &Ephemeral,
    client: &[u8; PUBLIC_KEY_LENGTH],
    session_id: u64,
    nonce: u64,
) -> Option<[u8; OPENED_LENGTH]> {
    let shared = leader.shared(client)?;
    let transcript = Transcript { session_id, nonce, client, leader: &leader.public };
    let pad = transcript.wrap_key(&shared);
    let mut out = [0u8; OPENED_LENGTH];
    out[..PUBLIC_KEY_LENGTH].copy_from_slice(&leader.public);
    for (i, (byte, pad)) in token.to_bytes().iter().zip(pad).enumerate() {
        out[PUBLIC_KEY_LENGTH + i] = byte ^ pad;
    }
    out[PUBLIC_KEY_LENGTH + TOKEN_LENGTH..].copy_from_slice(&transcript.proof(token));
    Some(out)
}

/// The client's side: the token from an `OPENED` payload, with the client's ephemeral pair `client` of
/// the open it answers; `None` when the payload is not that open's (its proof fails).
pub fn open_token(opened: &[u8], client: &Ephemeral, session_id: u64, nonce: u64) -> Option<AuthKey> {
    let opened: &[u8; OPENED_LENGTH] = opened.try_into().ok()?;
    let leader: [u8; PUBLIC_KEY_LENGTH] = opened[..PUBLIC_KEY_LENGTH].try_into().expect("32 bytes");
    let shared = client.shared(&leader)?;
    let transcript = Transcript { session_id, nonce, client: &client.public, leader: &leader };
    let pad = transcript.wrap_key(&shared);
    let mut bytes = [0u8; TOKEN_LENGTH];
    for (i, pad) in pad.iter().enumerate() {
        bytes[i] = opened[PUBLIC_KEY_LENGTH + i] ^ pad;
    }
    let token = AuthKey::new(bytes);
    let proof = transcript.proof(&token);
    // Not secret: a wrong proof says only that this payload is not this open's.
    (proof[..] == opened[PUBLIC_KEY_LENGTH + TOKEN_LENGTH..]).then_some(token)
}

/// An address's 16 bytes (an IPv4 one as IPv4-mapped IPv6), as challenges and cookies bind it.
fn ip_octets(source: SocketAddr) -> [u8; 16] {
    match source.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
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
        assert_ne!(secret.session_id(1, 7, 1), secret.session_id(1, 7, 2));
        assert_ne!(secret.session_id(1, 7, 1), other.session_id(1, 7, 1));
        assert_ne!(secret.session_id(1, 7, 1), secret.session_id(1, 8, 1), "another incarnation's term 1");
    }

    /// Issue 51, item 3: from the `OPEN` and `OPENED` an observer captures, no one but the client that
    /// opened recovers the token, whatever key the observer holds; and the unwrap fails on any other
    /// open's payload.
    #[test]
    fn a_sealed_token_opens_only_with_the_clients_ephemeral_secret() {
        let secret = SessionSecret::new(&AuthKey::new([1; 32]));
        let key = ClientKey::new("a", AuthKey::new([3; 32]));
        let token = secret.token(9, Some(&key));
        let client = Ephemeral::from_random([7; 32]);
        let leader = Ephemeral::from_random([8; 32]);
        let opened = seal_token(&token, &leader, &client.public(), 9, 77).unwrap();
        assert!(!opened.windows(TOKEN_LENGTH).any(|w| w == token.to_bytes()), "the token is not in clear");
        assert_eq!(open_token(&opened, &client, 9, 77), Some(token));
        // An observer with its own pair (as another client of the same key is) gets nothing.
        let observer = Ephemeral::from_random([9; 32]);
        assert_eq!(open_token(&opened, &observer, 9, 77), None);
        assert_eq!(open_token(&opened, &client, 9, 78), None, "another open's nonce");
        assert_eq!(open_token(&opened, &client, 10, 77), None, "another session");
        let mut flipped = opened;
        flipped[40] ^= 1;
        assert_eq!(open_token(&flipped, &client, 9, 77), None, "a changed payload");
        // A small-order key would make the shared secret known to all: refused.
        assert!(seal_token(&token, &leader, &[0; 32], 9, 77).is_none());
    }

    #[test]
    fn a_cookie_holds_for_its_address_key_and_nonce_this_period_and_the_next() {
        let secret = SessionSecret::new(&AuthKey::new([1; 32]));
        let here: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let there: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let now = 5 * CHALLENGE_PERIOD_NS + 10;
        let cookie = secret.cookie(here, &[4; 32], 11, now);
        assert!(secret.accepts_cookie(here, &[4; 32], 11, now, &cookie));
        assert!(secret.accepts_cookie(here, &[4; 32], 11, now + CHALLENGE_PERIOD_NS, &cookie));
        assert!(!secret.accepts_cookie(here, &[4; 32], 11, now + 2 * CHALLENGE_PERIOD_NS, &cookie));
        assert!(!secret.accepts_cookie(there, &[4; 32], 11, now, &cookie));
        assert!(!secret.accepts_cookie(here, &[5; 32], 11, now, &cookie));
        assert!(!secret.accepts_cookie(here, &[4; 32], 12, now, &cookie));
        assert!(!secret.accepts_cookie(here, &[4; 32], 11, now, &cookie[..8]));
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
