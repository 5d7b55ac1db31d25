//! The simulated application: a [`StateMachine`] whose state is a digest of every entry it applied, in
//! order, so that the simulator can hand each entry to the checker, and check a snapshot's state (taken
//! by one member, installed by another after a catch-up, or restored after a restart) against the
//! committed order at its position.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use quorumcast::{CloseReason, Cluster, Entry, SessionRefused, StateMachine};

/// The application of one simulated member.
#[derive(Debug, Default)]
pub struct SimState {
    /// Where the last entry applied ends.
    pub position: i64,
    /// The state: the running digest of every entry applied (see [`fold`]).
    pub digest: u64,
    /// Entries applied since the simulator last took them: where each ends, and its bytes.
    pub applied: Vec<(i64, Vec<u8>)>,
    /// A snapshot loaded since the simulator last looked: its position and state digest.
    pub loaded: Option<(i64, u64)>,
    /// Each remote client session's last message number applied (part of the state, and of snapshots).
    pub sessions: BTreeMap<u64, u64>,
    /// A client message applied out of its session's order since the simulator last looked:
    /// `(session, message number, the number expected)`.
    pub out_of_order: Option<(u64, u64, u64)>,
    /// The service's timers, sessions and own entries (with [`super::SimConfig::service`]): in its
    /// snapshots after the rest.
    pub service: Option<super::service::ServiceSim>,
}

/// The state after applying an entry whose bytes have digest `entry` to state `state`.
pub fn fold(state: u64, entry: u64) -> u64 {
    (state ^ entry).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(17)
}

impl SimState {
    /// An empty state; with the service's callbacks when `service`.
    pub fn new(service: bool) -> Self {
        Self { service: service.then(Default::default), ..Self::default() }
    }
}

impl StateMachine for SimState {
    fn on_message(&mut self, entry: &Entry<'_>, cluster: &mut Cluster<'_>) {
        self.apply_entry(entry, cluster.response());
        if let Some(service) = self.service.as_mut() {
            service.on_message(entry, super::check::digest(entry.payload), cluster);
        }
    }

    fn on_session_open(&mut self, session_id: u64, cluster: &mut Cluster<'_>) -> Result<(), SessionRefused> {
        match self.service.as_mut() {
            Some(service) => service.on_session_open(session_id, cluster),
            None => Ok(()),
        }
    }

    fn on_session_close(&mut self, session_id: u64, reason: CloseReason, cluster: &mut Cluster<'_>) {
        if let Some(service) = self.service.as_mut() {
            service.on_session_close(session_id, reason, cluster);
        }
    }

    fn on_timer(&mut self, correlation_id: u64, cluster: &mut Cluster<'_>) {
        if let Some(service) = self.service.as_mut() {
            service.on_timer(correlation_id, cluster);
        }
    }

    fn apply_entry(&mut self, entry: &Entry<'_>, response: &mut Vec<u8>) {
        self.digest = fold(self.digest, super::check::digest(entry.payload));
        self.position = entry.position;
        self.applied.push((entry.position, entry.payload.to_vec()));
        if let Some(message) = entry.client {
            // Every session's messages exactly once and in order, from 1.
            let last = self.sessions.entry(message.session_id).or_insert(0);
            if message.correlation_id != *last + 1 && self.out_of_order.is_none() {
                self.out_of_order = Some((message.session_id, message.correlation_id, *last + 1));
            }
            *last = message.correlation_id;
            // The response: the state after this message, which the client checks against the order's.
            response.extend_from_slice(&self.digest.to_le_bytes());
        }
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> io::Result<()> {
        writer.write_all(&self.position.to_le_bytes())?;
        writer.write_all(&self.digest.to_le_bytes())?;
        writer.write_all(&(self.sessions.len() as u64).to_le_bytes())?;
        for (session, last) in &self.sessions {
            writer.write_all(&session.to_le_bytes())?;
            writer.write_all(&last.to_le_bytes())?;
        }
        match &self.service {
            Some(service) => service.write(writer),
            None => Ok(()),
        }
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> io::Result<()> {
        let mut bytes = [0; 16];
        reader.read_exact(&mut bytes)?;
        let position = i64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let digest = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        (self.position, self.digest) = (position, digest);
        let mut count = [0; 8];
        reader.read_exact(&mut count)?;
        self.sessions.clear();
        for _ in 0..u64::from_le_bytes(count) {
            let mut pair = [0; 16];
            reader.read_exact(&mut pair)?;
            let session = u64::from_le_bytes(pair[..8].try_into().expect("8 bytes"));
            self.sessions.insert(session, u64::from_le_bytes(pair[8..].try_into().expect("8 bytes")));
        }
        if let Some(service) = self.service.as_mut() {
            service.read(reader)?;
        }
        self.applied.clear();
        self.loaded = Some((position, digest));
        Ok(())
    }
}
