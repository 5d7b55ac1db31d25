//! The simulated application: a [`StateMachine`] whose state is a digest of every entry it applied, in
//! order, so that the simulator can hand each entry to the checker, and check a snapshot's state (taken
//! by one member, installed by another after a catch-up, or restored after a restart) against the
//! committed order at its position.

use std::io::{self, Read, Write};

use quorumcast::{Entry, StateMachine};

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
}

/// The state after applying an entry whose bytes have digest `entry` to state `state`.
pub fn fold(state: u64, entry: u64) -> u64 {
    (state ^ entry).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(17)
}

impl StateMachine for SimState {
    fn apply_entry(&mut self, entry: &Entry<'_>, _response: &mut Vec<u8>) {
        self.digest = fold(self.digest, super::check::digest(entry.payload));
        self.position = entry.position;
        self.applied.push((entry.position, entry.payload.to_vec()));
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> io::Result<()> {
        writer.write_all(&self.position.to_le_bytes())?;
        writer.write_all(&self.digest.to_le_bytes())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> io::Result<()> {
        let mut bytes = [0; 16];
        reader.read_exact(&mut bytes)?;
        let position = i64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let digest = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        (self.position, self.digest) = (position, digest);
        self.applied.clear();
        self.loaded = Some((position, digest));
        Ok(())
    }
}
