//! A configuration entry: the membership a leader appends to its log when the cluster changes, with the
//! endpoints of every member it names, so that a member added while the cluster runs is reachable by
//! every other without a node file naming it.
//!
//! An entry is one unfragmented marker frame ([`crate::frame::MARKER_FLAG`]): its value is
//! [`CONFIGURATION_MARKER`] plus the configuration id (term-start markers, whose value is a leadership
//! term, stay below it), and its payload goes on after the value with the entry:
//!
//! ```text
//! 0   value      i64   CONFIGURATION_MARKER + membership id
//! 8   version    u8    CONFIGURATION_VERSION
//! 9   count      u8    endpoints that follow the membership
//! 10  length     u16   of the encoded membership
//! 12  membership       `Membership::encode` (its own version inside)
//! ..  endpoints        per member: id i32, then log, consensus and client addresses
//!                      (family u8 4 or 6, the address's 4 or 16 bytes, port u16)
//! ```
//!
//! Little-endian throughout. A member refuses an entry of a version it does not know, naming it: a cluster
//! is upgraded one member at a time before it uses a newer format (docs/operating.md, "Upgrades").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::consensus_core::{MemberId, Membership, MAX_MEMBERS};
use crate::frame::{MARKER_FLAG, MARKER_LENGTH};

/// The format of a configuration entry this build writes and reads.
pub const CONFIGURATION_VERSION: u8 = 1;

/// Marker values at and above this are configuration entries (a leadership term never reaches it).
pub const CONFIGURATION_MARKER: i64 = 1 << 62;

/// Where one member is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemberEndpoints {
    /// The member's id.
    pub id: MemberId,
    /// Where it receives the replicated log (and sends it from while it leads).
    pub log: SocketAddr,
    /// Its consensus endpoint (elections, heartbeats, catch-ups over TCP).
    pub consensus: SocketAddr,
    /// Its client endpoint.
    pub client: SocketAddr,
}

/// One configuration entry: a membership and the endpoints of its members.
///
/// Invariant (kept by [`Configuration::new`] and [`Configuration::decode`]): `endpoints` holds exactly
/// one entry per member of `membership`, sorted by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configuration {
    membership: Membership,
    endpoints: Vec<MemberEndpoints>,
}

impl Configuration {
    /// The entry of `membership`, with each member's endpoints looked up in `known`; refused when a member
    /// has none there.
    pub fn new(membership: Membership, known: &[MemberEndpoints]) -> Result<Self, String> {
        let mut endpoints = Vec::with_capacity(membership.voters.len() + membership.learners.len());
        for id in membership.members() {
            let found =
                known.iter().find(|e| e.id == id).ok_or_else(|| format!("no endpoints known for member {id}"))?;
            endpoints.push(*found);
        }
        endpoints.sort_unstable_by_key(|e| e.id);
        Ok(Self { membership, endpoints })
    }

    /// The membership.
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Every member's endpoints, by id.
    pub fn endpoints(&self) -> &[MemberEndpoints] {
        &self.endpoints
    }

    /// The marker value of this entry.
    pub fn marker_value(&self) -> i64 {
        CONFIGURATION_MARKER + (self.membership.id as i64 & (CONFIGURATION_MARKER - 1))
    }

    /// The frame payload of this entry (marker value first).
    pub fn encode(&self) -> Vec<u8> {
        let mut membership = vec![0u8; self.membership.encoded_length()];
        let length = self.membership.encode(&mut membership).expect("sized to fit");
        let mut out = Vec::with_capacity(12 + length + self.endpoints.len() * 61);
        out.extend_from_slice(&self.marker_value().to_le_bytes());
        out.push(CONFIGURATION_VERSION);
        out.push(self.endpoints.len() as u8);
        out.extend_from_slice(&(length as u16).to_le_bytes());
        out.extend_from_slice(&membership[..length]);
        for e in &self.endpoints {
            encode_endpoints(e, &mut out);
        }
        out
    }

    /// Decodes an entry's frame payload (marker value first), refusing an unknown version, a short or
    /// inconsistent payload, and endpoints that do not match the membership one for one.
    pub fn decode(payload: &[u8]) -> Result<Self, String> {
        let mut r = Reader { bytes: payload, at: 0, what: "a configuration entry" };
        let value = i64::from_le_bytes(r.take(MARKER_LENGTH)?.try_into().expect("8 bytes"));
        if value < CONFIGURATION_MARKER {
            return Err("not a configuration entry".into());
        }
        let version = r.take(1)?[0];
        if version != CONFIGURATION_VERSION {
            return Err(format!(
                "configuration entry version {version} is not known to this build (it reads version \
                 {CONFIGURATION_VERSION}): upgrade this member before the cluster uses the newer format"
            ));
        }
        let count = usize::from(r.take(1)?[0]);
        let length = usize::from(u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes")));
        let membership = Membership::decode(r.take(length)?)?;
        if count > MAX_MEMBERS {
            return Err(format!("a configuration entry lists {count} endpoints, more than {MAX_MEMBERS}"));
        }
        let mut endpoints = Vec::with_capacity(count);
        for _ in 0..count {
            endpoints.push(r.endpoints()?);
        }
        let ids: Vec<MemberId> = endpoints.iter().map(|e| e.id).collect();
        let mut members: Vec<MemberId> = membership.members().collect();
        members.sort_unstable();
        if ids != members {
            return Err(format!("a configuration entry's endpoints {ids:?} do not match its members {members:?}"));
        }
        Ok(Self { membership, endpoints })
    }
}

/// The configuration entry a data frame holds: its payload, when `flags` mark a marker whose value is a
/// configuration's; `None` for any other frame (a term start, a message).
pub fn configuration_of(flags: u8, payload: &[u8]) -> Option<&[u8]> {
    let value = payload.get(..MARKER_LENGTH)?;
    let value = i64::from_le_bytes(value.try_into().ok()?);
    (flags & MARKER_FLAG != 0 && value >= CONFIGURATION_MARKER).then_some(payload)
}

/// Appends `addr` as an entry carries it: family (4 or 6), the address's bytes, the port (little-endian).
pub fn encode_addr(addr: SocketAddr, out: &mut Vec<u8>) {
    match addr.ip() {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&addr.port().to_le_bytes());
}

/// Appends one member's endpoints as an entry carries them: its id (i32, little-endian), then its log,
/// consensus and client addresses ([`encode_addr`]).
pub fn encode_endpoints(endpoints: &MemberEndpoints, out: &mut Vec<u8>) {
    out.extend_from_slice(&endpoints.id.to_le_bytes());
    for addr in [endpoints.log, endpoints.consensus, endpoints.client] {
        encode_addr(addr, out);
    }
}

/// The endpoints [`encode_endpoints`] wrote at the start of `bytes`, and how many bytes they took; an error
/// names `what` holds them ("an introduction").
pub fn decode_endpoints(bytes: &[u8], what: &'static str) -> Result<(MemberEndpoints, usize), String> {
    let mut r = Reader { bytes, at: 0, what };
    let endpoints = r.endpoints()?;
    Ok((endpoints, r.at))
}

/// The address [`encode_addr`] wrote at the start of `bytes`, if one is there.
pub fn decode_addr(bytes: &[u8]) -> Option<SocketAddr> {
    Reader { bytes, at: 0, what: "an address" }.addr().ok()
}

/// Reads a payload front to back, refusing to run past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// What the payload is, for errors ("a configuration entry").
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let taken = self.bytes.get(self.at..self.at + n).ok_or_else(|| format!("{} ends early", self.what))?;
        self.at += n;
        Ok(taken)
    }

    fn endpoints(&mut self) -> Result<MemberEndpoints, String> {
        let id = i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
        let (log, consensus, client) = (self.addr()?, self.addr()?, self.addr()?);
        Ok(MemberEndpoints { id, log, consensus, client })
    }

    fn addr(&mut self) -> Result<SocketAddr, String> {
        let ip = match self.take(1)?[0] {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(self.take(4)?).expect("4 bytes"))),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(self.take(16)?).expect("16 bytes"))),
            family => return Err(format!("{} names address family {family}", self.what)),
        };
        let port = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes"));
        Ok(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus_core::MembershipChange;

    fn endpoints(id: MemberId) -> MemberEndpoints {
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        MemberEndpoints {
            id,
            log: at(40_000 + id as u16),
            consensus: at(40_100 + id as u16),
            client: at(40_200 + id as u16),
        }
    }

    #[test]
    fn an_entry_round_trips_with_every_members_endpoints() {
        let membership = Membership::initial(&[0, 1, 2]).apply(MembershipChange::AddLearner(7)).unwrap();
        let mut known: Vec<_> = [7, 2, 0, 1].into_iter().map(endpoints).collect();
        known[0].log = "[::1]:9000".parse().unwrap();
        let entry = Configuration::new(membership.clone(), &known).unwrap();
        let payload = entry.encode();
        assert_eq!(configuration_of(MARKER_FLAG, &payload), Some(&payload[..]));
        assert_eq!(Configuration::decode(&payload).unwrap(), entry);
        assert_eq!(entry.endpoints().iter().map(|e| e.id).collect::<Vec<_>>(), [0, 1, 2, 7]);
        assert_eq!(entry.membership(), &membership);
    }

    #[test]
    fn bad_entries_are_refused_never_a_panic() {
        let entry = Configuration::new(Membership::initial(&[0, 1]), &[endpoints(0), endpoints(1)]).unwrap();
        let payload = entry.encode();
        for cut in 0..payload.len() {
            assert!(Configuration::decode(&payload[..cut]).is_err(), "cut at {cut}");
        }
        let mut newer = payload.clone();
        newer[8] = CONFIGURATION_VERSION + 1;
        assert!(Configuration::decode(&newer).unwrap_err().contains("version 2 is not known"));
        let mut fewer = payload.clone();
        fewer[9] = 1;
        assert!(Configuration::decode(&fewer).is_err(), "endpoints must match the members");
        assert!(Configuration::new(Membership::initial(&[0, 5]), &[endpoints(0)]).is_err());
        assert_eq!(configuration_of(MARKER_FLAG, &7i64.to_le_bytes()), None, "a term start is not one");
        assert_eq!(configuration_of(0, &payload), None, "not a marker");
    }
}
