//! Encoding: [`encode_data`], [`encode_pad`], [`encode_heartbeat`] and an `encode` method on every control
//! frame (the [`control_frame!`](crate::control_frame) macro) write one frame into a `&mut [u8]` and return
//! its length.

use super::parse::read_pod;
use super::*;

/// Copies `bytes` to the start of `dst`, returning their length.
pub fn write_bytes(dst: &mut [u8], bytes: &[u8]) -> Result<usize, EncodeError> {
    let have = dst.len();
    let slot = dst.get_mut(..bytes.len()).ok_or(EncodeError::BufferTooShort { need: bytes.len(), have })?;
    slot.copy_from_slice(bytes);
    Ok(bytes.len())
}

fn check_term_offset(term_offset: i32) -> Result<(), EncodeError> {
    if is_valid_term_offset(term_offset) {
        Ok(())
    } else {
        Err(EncodeError::BadTermOffset { term_offset })
    }
}

pub(super) const fn is_valid_term_offset(term_offset: i32) -> bool {
    term_offset >= 0 && term_offset % FRAME_ALIGNMENT as i32 == 0
}

/// Writes a data frame (`header` then `payload`) at the start of `dst` and returns its unaligned length,
/// `32 + payload.len()`.
///
/// `frame_length`, `version` and `frame_type` are set here; the other fields come from `header`. The
/// bytes after the frame up to the next 32-byte boundary are not touched.
pub fn encode_data(dst: &mut [u8], header: &DataHeader, payload: &[u8]) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    let length =
        DATA_HEADER_LENGTH.checked_add(payload.len()).ok_or(EncodeError::LengthOverflow { length: usize::MAX })?;
    let frame_length = i32::try_from(length).map_err(|_| EncodeError::LengthOverflow { length })?;
    if dst.len() < length {
        return Err(EncodeError::BufferTooShort { need: length, have: dst.len() });
    }
    let full = DataHeader { frame_length, version: CURRENT_VERSION, frame_type: TYPE_DATA, ..*header };
    let (head, body) = dst.split_at_mut(DATA_HEADER_LENGTH);
    write_bytes(head, bytemuck::bytes_of(&full))?;
    write_bytes(body, payload)?;
    Ok(length)
}

/// Writes the 32-byte header of a PAD frame covering `pad_length` bytes of term space and returns 32,
/// the bytes it occupies on the wire.
///
/// `pad_length` must be at least 32 and a multiple of [`FRAME_ALIGNMENT`].
pub fn encode_pad(dst: &mut [u8], header: &DataHeader, pad_length: usize) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    if pad_length < DATA_HEADER_LENGTH || pad_length % FRAME_ALIGNMENT != 0 {
        return Err(EncodeError::BadPadLength { length: pad_length });
    }
    let frame_length = i32::try_from(pad_length).map_err(|_| EncodeError::LengthOverflow { length: pad_length })?;
    let full = DataHeader { frame_length, version: CURRENT_VERSION, frame_type: TYPE_PAD, ..*header };
    write_bytes(dst, bytemuck::bytes_of(&full))
}

/// Writes a heartbeat (a data header with `frame_length` 0) and returns 32.
///
/// Aeron sends it with flags B|E, plus EOS once the publication is closed; `header.flags` is kept.
pub fn encode_heartbeat(dst: &mut [u8], header: &DataHeader) -> Result<usize, EncodeError> {
    check_term_offset(header.term_offset)?;
    let full = DataHeader { frame_length: 0, version: CURRENT_VERSION, frame_type: TYPE_DATA, ..*header };
    write_bytes(dst, bytemuck::bytes_of(&full))
}

/// Fixed-length control frames: their type, length, a template and an encoder (the consensus crate's frames
/// use it too, `quorumcast_consensus::frames`). The calling crate depends on `bytemuck`.
#[macro_export]
macro_rules! control_frame {
    ($t:ty, $frame_type:expr, $len:expr) => {
        impl $t {
            /// This frame's type code.
            pub const FRAME_TYPE: u16 = $frame_type;
            /// This frame's length on the wire.
            pub const LENGTH: usize = $len;

            /// Writes the frame as it is (no field is changed) at the start of `dst`; returns its length.
            pub fn encode(&self, dst: &mut [u8]) -> Result<usize, $crate::frame::EncodeError> {
                $crate::frame::write_bytes(dst, bytemuck::bytes_of(self))
            }
        }

        impl Default for $t {
            /// Zero fields under a valid common header: `frame_length` = the frame's length, version 0,
            /// no flags, the frame's type.
            fn default() -> Self {
                let mut frame = <$t as bytemuck::Zeroable>::zeroed();
                frame.frame_length = $len as i32;
                frame.version = $crate::frame::CURRENT_VERSION;
                frame.frame_type = $frame_type;
                frame
            }
        }
    };
}

control_frame!(SetupFrame, TYPE_SETUP, SETUP_LENGTH);
control_frame!(StatusMessageFrame, TYPE_SM, STATUS_MESSAGE_LENGTH);
control_frame!(NakFrame, TYPE_NAK, NAK_LENGTH);
control_frame!(RttmFrame, TYPE_RTTM, RTTM_LENGTH);
control_frame!(BehindRetainedFrame, TYPE_BEHIND_RETAINED, BEHIND_RETAINED_LENGTH);

impl SetupFrame {
    /// Writes the frame followed by `membership` (48 bytes, `frame_length` set to 48); returns 48.
    ///
    /// The membership tag is a hash of the cluster's member list: a receiver configured with another list
    /// refuses the stream instead of replicating a log it cannot take part in.
    pub fn encode_with_membership(&self, dst: &mut [u8], membership: i64) -> Result<usize, EncodeError> {
        let frame = Self { frame_length: SETUP_WITH_MEMBERSHIP_LENGTH as i32, ..*self };
        write_with_tail(dst, bytemuck::bytes_of(&frame), membership)
    }
}

/// The membership tag of the SETUP frame at the start of `datagram`, when its `frame_length` covers one
/// (see [`SetupFrame::encode_with_membership`]); `None` for a plain 40-byte SETUP or anything else.
pub fn setup_membership(datagram: &[u8]) -> Option<i64> {
    let setup: SetupFrame = read_pod(datagram).ok()?;
    if setup.frame_type != TYPE_SETUP || usize::try_from(setup.frame_length).ok()? < SETUP_WITH_MEMBERSHIP_LENGTH {
        return None;
    }
    let tag = datagram.get(SETUP_LENGTH..SETUP_WITH_MEMBERSHIP_LENGTH)?;
    Some(i64::from_le_bytes(tag.try_into().ok()?))
}

impl StatusMessageFrame {
    /// Writes the frame followed by `group_tag` (44 bytes, `frame_length` set to 44); returns 44.
    pub fn encode_with_group_tag(&self, dst: &mut [u8], group_tag: i64) -> Result<usize, EncodeError> {
        let frame = Self { frame_length: STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH as i32, ..*self };
        write_with_tail(dst, bytemuck::bytes_of(&frame), group_tag)
    }
}

/// Writes `frame` (whose `frame_length` already covers the tail) then the i64 `tail`; returns the length.
fn write_with_tail(dst: &mut [u8], frame: &[u8], tail: i64) -> Result<usize, EncodeError> {
    let need = frame.len() + 8;
    if dst.len() < need {
        return Err(EncodeError::BufferTooShort { need, have: dst.len() });
    }
    let (head, rest) = dst.split_at_mut(frame.len());
    write_bytes(head, frame)?;
    write_bytes(rest, &tail.to_le_bytes())?;
    Ok(need)
}
