//! A member's recorded log read back at start: the recording opened (its torn tail cut), the terms and
//! end a consensus core starts from, and the log's last bytes rebuilt in memory, so that if this member
//! leads it can serve them to followers behind it by NAK as from any previous log.
//!
//! The application's state is rebuilt separately: the node's reader replays the recording, from the
//! newest snapshot on, as the commit position allows (`Node::restore`, `Node::poll_committed`).

use crate::cluster::configuration::Configuration;
use crate::cluster::consensus_core::TermHistory;
use crate::shm::log_buffer::{position_bits_to_shift, term_id, term_offset, LogBuffer, LogConfig, TermRebuilder};
use crate::storage::recording::{OpenReport, Recording, RecordingConfig, RecordingIdentity};

use crate::node::{Environment, NodeConfig, NodeError};

/// A recording read back at start.
pub(crate) struct Recovered {
    pub(crate) recording: Recording,
    pub(crate) report: OpenReport,
    pub(crate) history: TermHistory,
    /// The last bytes of the recording, rebuilt in a log in memory from where it starts.
    pub(crate) tail: Option<(LogBuffer, i64)>,
    /// The configuration entries the recording's index holds, with where each ends, oldest first.
    pub(crate) configurations: Vec<(i64, Configuration)>,
}

/// The identity the recording of `config`'s node has.
pub(crate) fn identity(config: &NodeConfig) -> RecordingIdentity {
    RecordingIdentity {
        membership: config.membership(),
        stream_id: config.stream_id,
        term_length: config.channel.term_length as u32,
    }
}

/// Opens the node's recording (creating an empty one), or refuses to start with the file and what to do.
pub(crate) fn open(config: &NodeConfig, env: &Environment) -> Result<Recovered, NodeError> {
    let recording_config = RecordingConfig {
        dir: config.recording_dir_path(),
        segment_length: config.storage.segment_length,
        sync: config.storage.sync,
        page_cache_window: config.storage.page_cache_window,
    };
    let (recording, report) =
        Recording::open_on(env.disk.clone(), recording_config, identity(config)).map_err(NodeError::Recording)?;
    let history = recording.term_history().ok_or_else(|| {
        NodeError::Recording(crate::storage::recording::RecordingError {
            path: recording.dir().join("index.dat"),
            message: format!(
                "its terms ({:?} from {} in term {}) do not make a history ending at {}: delete index.dat to have \
                 it rebuilt from the segments",
                recording.index().terms,
                recording.start(),
                recording.index().start_term,
                recording.end()
            ),
        })
    })?;
    let tail = rebuild_tail(config, &recording).map_err(NodeError::Recording)?;
    let configurations = recording
        .index()
        .configurations
        .iter()
        .map(|(end, payload)| {
            Configuration::decode(payload).map(|c| (*end, c)).map_err(|why| {
                NodeError::Recording(crate::storage::recording::RecordingError {
                    path: recording.dir().join("index.dat"),
                    message: format!("its configuration entry ending at {end}: {why}"),
                })
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Recovered { recording, report, history, tail, configurations })
}

/// The recording's last bytes, from the start of the term before the one it ends in (as much as a leader's
/// log retains, so that a restarted member that leads next can resend what a follower a little behind it
/// lacks, instead of sending it to a catch-up), in a log in memory that starts at a block boundary;
/// `None` for an empty recording.
fn rebuild_tail(
    config: &NodeConfig,
    recording: &Recording,
) -> Result<Option<(LogBuffer, i64)>, crate::storage::recording::RecordingError> {
    let term_length = config.channel.term_length;
    let term = term_length as i64;
    let near = (recording.end() - recording.end() % term - term).max(recording.start());
    if recording.end() == recording.start() {
        return Ok(None);
    }
    let mut reader = recording.reader(near).reopen_from_block_with(near);
    let mut blocks = Vec::new();
    let mut start = None;
    while let Some((at, bytes, _)) = reader.next_block(recording.end())? {
        start.get_or_insert(at);
        blocks.push((at, bytes.to_vec()));
    }
    let Some(start) = start else {
        return Ok(None);
    };
    let log_config = LogConfig { stream_id: config.stream_id, ..LogConfig::new(term_length, config.channel.mtu) };
    let log =
        LogBuffer::create_anonymous_at(log_config, start).map_err(|e| crate::storage::recording::RecordingError {
            path: recording.dir().to_path_buf(),
            message: format!("cannot rebuild its tail in memory: {e}"),
        })?;
    let rebuilder = TermRebuilder::new(&log);
    let bits = position_bits_to_shift(term_length);
    let initial = log.config().initial_term_id;
    for (at, bytes) in blocks {
        // A block is whole frames of one term, a final PAD as its header alone: a run as a Receiver inserts.
        let term = term_id(at, initial, bits);
        rebuilder.insert_run(term, term_offset(at, term_length), &bytes).map_err(|e| {
            crate::storage::recording::RecordingError {
                path: recording.dir().to_path_buf(),
                message: format!("a recorded block at {at} does not fit a log: {e}"),
            }
        })?;
    }
    Ok(Some((log, start)))
}
