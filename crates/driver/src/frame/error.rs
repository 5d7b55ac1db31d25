//! What is wrong with a frame that cannot be parsed ([`FrameError`]) or encoded ([`EncodeError`]).

use std::fmt;

use super::*;

/// What is wrong with a `frame_length` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthProblem {
    /// Negative: the reserved top bit is set (or the frame is still being written in a log).
    Negative,
    /// Shorter than the frame type's fixed part.
    BelowMinimum {
        /// Smallest valid length for the type.
        min: usize,
    },
    /// Longer than the bytes left in the datagram.
    BeyondDatagram {
        /// Bytes left in the datagram from the start of the frame.
        have: usize,
    },
    /// `term_offset + frame_length` does not fit in an i32.
    EndOverflows,
}

/// Why bytes could not be read as a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the frame's fixed part.
    Truncated {
        /// Bytes the fixed part needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A version other than [`CURRENT_VERSION`].
    BadVersion {
        /// The version found.
        version: u8,
    },
    /// A frame type quorumcast does not parse.
    UnknownType {
        /// The type found.
        frame_type: u16,
    },
    /// An invalid `frame_length`.
    BadLength {
        /// The frame's type.
        frame_type: u16,
        /// The length found.
        frame_length: i32,
        /// What is wrong with it.
        problem: LengthProblem,
    },
    /// A data or pad `term_offset` that is negative or not a multiple of [`FRAME_ALIGNMENT`].
    BadTermOffset {
        /// The offset found.
        term_offset: i32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { need, have } => {
                write!(f, "frame truncated: its fixed part needs {need} bytes but only {have} are left; the datagram was cut short")
            }
            Self::BadVersion { version } => {
                write!(f, "frame version {version} is not supported; the peer must send version {CURRENT_VERSION}")
            }
            Self::UnknownType { frame_type } => {
                write!(f, "frame type {frame_type:#06x} is not a type quorumcast parses; drop the datagram")
            }
            Self::BadLength { frame_type, frame_length, problem } => {
                write!(f, "frame type {frame_type:#06x} has invalid frame_length {frame_length}: ")?;
                match problem {
                    LengthProblem::Negative => write!(f, "it is negative (reserved top bit set)"),
                    LengthProblem::BelowMinimum { min } => write!(f, "it must be at least {min}"),
                    LengthProblem::BeyondDatagram { have } => {
                        write!(f, "it runs past the end of the datagram, which has {have} bytes left")
                    }
                    LengthProblem::EndOverflows => write!(f, "term_offset + frame_length overflows i32"),
                }
            }
            Self::BadTermOffset { term_offset } => {
                write!(f, "term_offset {term_offset} must be non-negative and a multiple of {FRAME_ALIGNMENT}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Why a frame could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The destination is shorter than the frame.
    BufferTooShort {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes in the destination.
        have: usize,
    },
    /// The frame length does not fit the i32 `frame_length` field.
    LengthOverflow {
        /// The frame length asked for.
        length: usize,
    },
    /// A PAD length below [`DATA_HEADER_LENGTH`] or not a multiple of [`FRAME_ALIGNMENT`].
    BadPadLength {
        /// The length asked for.
        length: usize,
    },
    /// A `term_offset` that is negative or not a multiple of [`FRAME_ALIGNMENT`].
    BadTermOffset {
        /// The offset asked for.
        term_offset: i32,
    },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BufferTooShort { need, have } => {
                write!(f, "destination has {have} bytes but the frame needs {need}; pass a larger buffer")
            }
            Self::LengthOverflow { length } => {
                write!(f, "frame length {length} does not fit in i32; send a shorter payload")
            }
            Self::BadPadLength { length } => write!(
                f,
                "pad length {length} must be at least {DATA_HEADER_LENGTH} and a multiple of {FRAME_ALIGNMENT}"
            ),
            Self::BadTermOffset { term_offset } => {
                write!(f, "term_offset {term_offset} must be non-negative and a multiple of {FRAME_ALIGNMENT}")
            }
        }
    }
}

impl std::error::Error for EncodeError {}
