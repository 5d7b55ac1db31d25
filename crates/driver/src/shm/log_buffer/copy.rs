//! Copying a range of one log into another at the same positions: how a new leader puts the part of the
//! log it holds in a previous leader's image into the log it publishes, so that a follower behind it can
//! still repair that part by NAK.

use super::descriptor::{position, position_bits_to_shift};
use super::{AppendError, ExclusiveAppender, LogBuffer, LogReader};

/// Why a copy stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyError {
    /// The destination's appender is not at the position the copy starts from.
    NotAligned {
        /// Where the copy was asked to start.
        from: i64,
        /// Where the destination's appender is.
        appender: i64,
    },
    /// The destination refused a frame (back pressure, or a frame it cannot take).
    Append(AppendError),
    /// The source ended (a gap, or not written yet) before `to`.
    SourceEnds {
        /// Where the source's frames stop.
        at: i64,
    },
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAligned { from, appender } => {
                write!(f, "the copy starts at {from} but the destination's appender is at {appender}")
            }
            Self::Append(e) => write!(f, "the destination refused a frame: {e}"),
            Self::SourceEnds { at } => write!(f, "the source has no frame at {at}"),
        }
    }
}

impl std::error::Error for CopyError {}

/// Copies the frames of `source` from `from` up to `to` (frame boundaries of `source`) into `appender`,
/// which must be at `from`: each frame with its fragment flags and reserved value, a gap that padding
/// filled in `source` as padding, so that every frame lands at the position it has in `source`. Returns the
/// position copied up to (`to`).
pub fn copy_frames(source: &LogBuffer, from: i64, to: i64, appender: &mut ExclusiveAppender) -> Result<i64, CopyError> {
    if appender.position() != from {
        return Err(CopyError::NotAligned { from, appender: appender.position() });
    }
    let reader = LogReader::new(source);
    let (initial, bits) = (source.config().initial_term_id, position_bits_to_shift(source.term_length()));
    let mut at = from;
    let mut failed = None;
    while at < to && failed.is_none() {
        let next = reader.poll_bounded(at, to, 256, |payload, header| {
            if failed.is_some() {
                return;
            }
            let frame_at = position(header.term_id, header.term_offset as usize, initial, bits);
            // A PAD the reader stepped over (one that ends a term, or an abandoned claim inside one) is
            // copied as one: the copy's next frame must land where the source's is, not where it fits.
            if let Err(e) = pad_to(appender, frame_at, bits) {
                failed = Some(CopyError::Append(e));
                return;
            }
            if let Err(e) = appender.append_frame(payload, header.flags, header.reserved_value) {
                failed = Some(CopyError::Append(e));
            }
        });
        if next == at {
            break;
        }
        at = next;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if at < to {
        return Err(CopyError::SourceEnds { at });
    }
    // The reader steps over a PAD that ends the copy (the one that ends a term) without handing it out:
    // end the copy the same way, so that the appender is where the copy says it reached.
    pad_to(appender, at, bits).map_err(CopyError::Append)?;
    Ok(at)
}

/// Pads `appender` up to `target`: to the end of its term first when `target` is in a later one (a source
/// that padded a term's end because a whole fragmented message did not fit, where the copy's first
/// fragment alone would), then within the term `target` is in.
fn pad_to(appender: &mut ExclusiveAppender, target: i64, bits: u32) -> Result<(), AppendError> {
    while appender.position() < target {
        let here = appender.position();
        let term_end = ((here >> bits) + 1) << bits;
        appender.append_padding((target.min(term_end) - here) as usize)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::log_buffer::LogConfig;

    fn log(session_id: i32, start: i64) -> LogBuffer {
        let config = LogConfig { initial_term_id: 9, session_id, ..LogConfig::new(65536, 1408) };
        LogBuffer::create_anonymous_at(config, start).unwrap()
    }

    /// The frames of `log` in `[from, to)` as (position, flags, reserved, payload).
    fn frames(log: &LogBuffer, from: i64, to: i64) -> Vec<(i64, u8, i64, Vec<u8>)> {
        let reader = LogReader::new(log);
        let bits = position_bits_to_shift(log.term_length());
        let mut out = Vec::new();
        let mut at = from;
        while at < to {
            let next = reader.poll_bounded(at, to, 1000, |payload, h| {
                let p = position(h.term_id, h.term_offset as usize, 9, bits);
                out.push((p, h.flags, h.reserved_value, payload.to_vec()));
            });
            if next == at {
                break;
            }
            at = next;
        }
        out
    }

    #[test]
    fn frames_land_at_their_source_positions_across_terms_fragments_and_abandoned_claims() {
        let source = log(1, 0);
        let mut appender = source.appender().unwrap();
        appender.set_limit(i64::MAX);
        let mut marks = Vec::new();
        for i in 0..600u32 {
            if i % 97 == 0 {
                drop(appender.try_claim(100).unwrap()); // abandoned: padding inside a term
            }
            let size = if i % 50 == 0 { 3000 } else { 40 + (i as usize * 7) % 300 }; // some fragmented
            appender.append_with_reserved(&vec![i as u8; size], i as i64).unwrap();
            marks.push(appender.position());
        }
        let end = appender.position();
        // A message boundary in the second term: the appender, now in the third, has been zeroing the
        // first term's partition ahead of the fourth.
        let from = *marks.iter().find(|&&m| m > 70_000).unwrap();
        let copy = log(2, from);
        let mut to = copy.appender().unwrap();
        to.set_limit(i64::MAX);
        assert_eq!(copy_frames(&source, from, end, &mut to), Ok(end));
        assert_eq!(to.position(), end);
        assert_eq!(frames(&copy, from, end), frames(&source, from, end), "same frames at the same positions");
        assert!(from >> 16 < end >> 16, "the copy crossed a term boundary");
        let mut other = log(3, 64).appender().unwrap();
        assert_eq!(copy_frames(&source, 0, end, &mut other), Err(CopyError::NotAligned { from: 0, appender: 64 }));
    }

    /// Found by the node simulator (seed 5088): a new leader's log continued up to a term boundary whose
    /// term ended with a PAD; the reader stepped over the PAD, the appender stayed before it, and the new
    /// term started 64 bytes early, so every follower refused its log.
    #[test]
    fn a_copy_that_ends_at_a_term_boundary_after_a_pad_leaves_the_appender_there() {
        let source = log(1, 0);
        let mut appender = source.appender().unwrap();
        appender.set_limit(i64::MAX);
        while appender.position() < 65_536 {
            appender.append(&[7; 1000]).unwrap();
        }
        let boundary = 65_536;
        assert!(frames(&source, 0, boundary).last().is_some_and(|f| f.0 + 1032 <= boundary), "a PAD ends the term");
        let copy = log(2, 0);
        let mut to = copy.appender().unwrap();
        to.set_limit(boundary);
        assert_eq!(copy_frames(&source, 0, boundary, &mut to), Ok(boundary));
        assert_eq!(to.position(), boundary, "the appender is at the copy's end, past the PAD");
    }

    /// Found by the node simulator (soak seed 1796318283008271339): the source padded the end of a term
    /// because a whole fragmented message did not fit there, though its first fragment would; the copy
    /// put the fragments where they fit, before the term's end, so a follower joining the new leader's
    /// log there applied the message at another position than the leader (a broken committed order).
    #[test]
    fn a_fragmented_message_after_a_term_ending_pad_lands_where_the_source_has_it() {
        let source = log(1, 0);
        let mut appender = source.appender().unwrap();
        appender.set_limit(i64::MAX);
        while 65_536 - appender.position() > 2 * 1408 + 200 {
            appender.append(&[5; 600]).unwrap();
        }
        let before = appender.position();
        let split = vec![6u8; 3000]; // 3104 bytes of frames: more than is left, its first fragment fits
        appender.append(&split).unwrap();
        appender.append(&[7; 40]).unwrap();
        let end = appender.position();
        assert!(frames(&source, before, end)[0].0 == 65_536, "the source padded the term's end");
        let copy = log(2, before);
        let mut to = copy.appender().unwrap();
        to.set_limit(i64::MAX);
        assert_eq!(copy_frames(&source, before, end, &mut to), Ok(end));
        assert_eq!(frames(&copy, before, end), frames(&source, before, end), "same frames at the same positions");
    }

    #[test]
    fn a_reader_goes_on_in_the_next_log_and_a_message_split_across_the_switch_arrives_whole() {
        use crate::shm::log_buffer::MessageReader;
        let old = log(1, 0);
        let mut appender = old.appender().unwrap();
        appender.set_limit(i64::MAX);
        appender.append(&[1u8; 500]).unwrap();
        let split_message = vec![2u8; 3000]; // three fragments of at most 1376 B
        appender.append(&split_message).unwrap();
        appender.append(&[3u8; 40]).unwrap();
        let end = appender.position();
        // The switch falls after the split message's first fragment: 544 B for the first message, then
        // one 1408 B frame.
        let switch = 544 + 1408;
        let new = log(2, switch);
        let mut new_appender = new.appender().unwrap();
        new_appender.set_limit(i64::MAX);
        copy_frames(&old, switch, end, &mut new_appender).unwrap();

        let mut reader = MessageReader::new(LogReader::new(&old), old.register_consumer(0).unwrap(), 0);
        let mut got: Vec<Vec<u8>> = Vec::new();
        reader.poll_bounded(switch, 100, |m| got.push(m.to_vec()));
        assert_eq!(got, vec![vec![1u8; 500]], "the split message is not delivered from half of it");
        assert_eq!(reader.position(), switch);
        reader.continue_in(LogReader::new(&new), new.register_consumer(switch).unwrap());
        reader.poll_bounded(end, 100, |m| got.push(m.to_vec()));
        assert_eq!(got, vec![vec![1u8; 500], split_message, vec![3u8; 40]]);
        assert_eq!(reader.position(), end);
    }
}
