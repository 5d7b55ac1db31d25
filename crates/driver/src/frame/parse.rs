//! Parsing: [`parse`](fn@parse) reads the frame at the start of a datagram into a typed [`Frame`], [`data_run`] checks
//! a datagram of data frames in one walk, and [`frames`] walks every frame a datagram carries. All accept
//! any bytes at any alignment: they copy headers out with [`bytemuck::pod_read_unaligned`], use only
//! checked slicing and arithmetic, and report bad input as a [`FrameError`], never a panic.

use bytemuck::Pod;

use super::encode::is_valid_term_offset;
use super::*;

/// One frame read from a datagram. Headers are copies (so any alignment of the datagram is fine);
/// a data payload borrows the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A data frame with `header.frame_length - 32` bytes of payload.
    Data {
        /// The header; `frame_type` is [`TYPE_DATA`] and `frame_length >= 32`.
        header: DataHeader,
        /// The payload, `frame_length - 32` bytes of the datagram.
        payload: &'a [u8],
    },
    /// A PAD header; `frame_length` (at least 32) is the term space it covers, not bytes on the wire.
    Pad(PadHeader),
    /// A heartbeat: a data header with `frame_length` 0.
    Heartbeat(DataHeader),
    /// A SETUP frame.
    Setup(SetupFrame),
    /// A STATUS MESSAGE, with its group tag when `frame_length >= 44`.
    StatusMessage {
        /// The fixed 36 bytes.
        frame: StatusMessageFrame,
        /// The optional i64 at offset 36.
        group_tag: Option<i64>,
    },
    /// A NAK.
    Nak(NakFrame),
    /// An RTT measurement.
    Rttm(RttmFrame),
    /// An extension frame: its header, and its whole `frame_length` bytes (header included) for the layer
    /// above to read.
    Extension {
        /// The fixed part.
        header: ExtensionHeader,
        /// The frame's bytes, `frame_length` of them.
        bytes: &'a [u8],
    },
    /// The publisher no longer retains the receiver's position.
    BehindRetained(BehindRetainedFrame),
}

impl Frame<'_> {
    /// The frame's type code.
    pub const fn frame_type(&self) -> u16 {
        match self {
            Self::Data { .. } | Self::Heartbeat(_) => TYPE_DATA,
            Self::Pad(_) => TYPE_PAD,
            Self::Setup(_) => TYPE_SETUP,
            Self::StatusMessage { .. } => TYPE_SM,
            Self::Nak(_) => TYPE_NAK,
            Self::Rttm(_) => TYPE_RTTM,
            Self::Extension { header, .. } => header.frame_type,
            Self::BehindRetained(_) => TYPE_BEHIND_RETAINED,
        }
    }

    /// Bytes the frame occupies in its datagram before alignment padding: `frame_length` for data and
    /// control frames, 32 for a PAD header and a heartbeat. Never more than the bytes [`parse`](fn@parse) was given.
    pub fn wire_length(&self) -> usize {
        let length = match self {
            Self::Data { header, .. } => header.frame_length,
            Self::Pad(_) | Self::Heartbeat(_) => DATA_HEADER_LENGTH as i32,
            Self::Setup(f) => f.frame_length,
            Self::StatusMessage { frame, .. } => frame.frame_length,
            Self::Nak(f) => f.frame_length,
            Self::Rttm(f) => f.frame_length,
            Self::Extension { header, .. } => header.frame_length,
            Self::BehindRetained(f) => f.frame_length,
        };
        // Parsed frames have non-negative lengths; 0 only for hand-built values, which is harmless.
        usize::try_from(length).unwrap_or(0)
    }
}

/// Copies a `T` out of the start of `bytes`, whatever their alignment.
pub(super) fn read_pod<T: Pod>(bytes: &[u8]) -> Result<T, FrameError> {
    let need = std::mem::size_of::<T>();
    let slice = bytes.get(..need).ok_or(FrameError::Truncated { need, have: bytes.len() })?;
    Ok(bytemuck::pod_read_unaligned(slice))
}

/// Reads the 8-byte common header at the start of `datagram` and checks its version.
pub fn peek_header(datagram: &[u8]) -> Result<FrameHeader, FrameError> {
    let header: FrameHeader = read_pod(datagram)?;
    if header.version != CURRENT_VERSION {
        return Err(FrameError::BadVersion { version: header.version });
    }
    Ok(header)
}

/// Checks a `frame_length` against the type's minimum and, when `fits_datagram`, the bytes available.
fn check_length(header: &FrameHeader, min: usize, have: usize, fits_datagram: bool) -> Result<usize, FrameError> {
    let bad =
        |problem| FrameError::BadLength { frame_type: header.frame_type, frame_length: header.frame_length, problem };
    let length = usize::try_from(header.frame_length).map_err(|_| bad(LengthProblem::Negative))?;
    if length < min {
        return Err(bad(LengthProblem::BelowMinimum { min }));
    }
    if fits_datagram && length > have {
        return Err(bad(LengthProblem::BeyondDatagram { have }));
    }
    Ok(length)
}

/// Reads and checks a data, pad or heartbeat frame.
fn parse_data_like<'a>(datagram: &'a [u8], common: &FrameHeader) -> Result<Frame<'a>, FrameError> {
    let header: DataHeader = read_pod(datagram)?;
    if !is_valid_term_offset(header.term_offset) {
        return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
    }
    if header.frame_type == TYPE_DATA && header.frame_length == 0 {
        return Ok(Frame::Heartbeat(header));
    }
    let is_data = header.frame_type == TYPE_DATA;
    let length = check_length(common, DATA_HEADER_LENGTH, datagram.len(), is_data)?;
    if header.term_offset.checked_add(header.frame_length).is_none() {
        let problem = LengthProblem::EndOverflows;
        return Err(FrameError::BadLength {
            frame_type: header.frame_type,
            frame_length: header.frame_length,
            problem,
        });
    }
    if !is_data {
        return Ok(Frame::Pad(header));
    }
    let payload = datagram.get(DATA_HEADER_LENGTH..length).unwrap_or_default();
    Ok(Frame::Data { header, payload })
}

/// Reads and checks a fixed-length control frame of type `T`.
fn parse_control<T: Pod>(datagram: &[u8], common: &FrameHeader) -> Result<T, FrameError> {
    let frame: T = read_pod(datagram)?;
    check_length(common, std::mem::size_of::<T>(), datagram.len(), true)?;
    Ok(frame)
}

/// Reads and checks a STATUS MESSAGE and its optional group tag.
fn parse_status_message<'a>(datagram: &[u8], common: &FrameHeader) -> Result<Frame<'a>, FrameError> {
    let frame: StatusMessageFrame = parse_control(datagram, common)?;
    let length = usize::try_from(frame.frame_length).unwrap_or(0);
    let group_tag = if length >= STATUS_MESSAGE_WITH_GROUP_TAG_LENGTH {
        Some(i64::from_le_bytes(read_pod(datagram.get(STATUS_MESSAGE_LENGTH..).unwrap_or_default())?))
    } else {
        None
    };
    Ok(Frame::StatusMessage { frame, group_tag })
}

/// Reads the one frame at the start of `datagram`, checking it fully.
///
/// Checks, in order: at least 8 bytes; version; known type; the type's fixed part is present;
/// `frame_length` non-negative, at least the fixed part, and (except for PAD, whose length is term
/// space) within `datagram`; for data/pad/heartbeat, `term_offset` non-negative and 32-aligned and
/// `term_offset + frame_length` within i32. Bytes after the frame are ignored.
pub fn parse(datagram: &[u8]) -> Result<Frame<'_>, FrameError> {
    let common = peek_header(datagram)?;
    match common.frame_type {
        TYPE_DATA | TYPE_PAD => parse_data_like(datagram, &common),
        TYPE_SETUP => parse_control(datagram, &common).map(Frame::Setup),
        TYPE_SM => parse_status_message(datagram, &common),
        TYPE_NAK => parse_control(datagram, &common).map(Frame::Nak),
        TYPE_RTTM => parse_control(datagram, &common).map(Frame::Rttm),
        TYPE_EXTENSION_FIRST..=TYPE_EXTENSION_LAST => {
            let header: ExtensionHeader = parse_control(datagram, &common)?;
            let length = usize::try_from(header.frame_length).unwrap_or(0);
            Ok(Frame::Extension { header, bytes: datagram.get(..length).unwrap_or_default() })
        }
        TYPE_BEHIND_RETAINED => parse_control(datagram, &common).map(Frame::BehindRetained),
        frame_type => Err(FrameError::UnknownType { frame_type }),
    }
}

/// The data frames of one datagram, checked in one walk (see [`data_run`]): where they go in the log and
/// what a receiver needs from them, so that it never walks them again before its one copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRun {
    /// The first frame's header: session, stream, term id and term offset of the whole run.
    pub first: DataHeader,
    /// Bytes of log the run covers: its frames aligned, a PAD's whole padding included.
    pub span: usize,
    /// The highest reserved value of its data frames (a piggybacked commit position), if it has one.
    pub max_reserved: Option<i64>,
    /// The markers in the run ([`MARKER_FLAG`]), in order: `(term offset, value)`; the first
    /// `marker_count` are set.
    pub marker_slots: [(i32, i64); MAX_MARKERS_PER_RUN],
    /// How many of `marker_slots` are set.
    pub marker_count: usize,
}

/// Most markers one datagram may carry (a writer puts few into its log, so even a repair of a log with
/// many of them carries few per datagram); a run with more is malformed.
pub const MAX_MARKERS_PER_RUN: usize = 4;

impl DataRun {
    /// The markers of the run: `(term offset, value)`, in log order.
    pub fn markers(&self) -> &[(i32, i64)] {
        &self.marker_slots[..self.marker_count]
    }
}

/// The value a marker frame carries: its payload's first [`MARKER_LENGTH`] bytes, when `flags` mark one
/// ([`MARKER_FLAG`]) and they hold a value that is not negative; `None` otherwise (not a marker).
pub fn marker_of(flags: u8, payload: &[u8]) -> Option<i64> {
    if flags & MARKER_FLAG == 0 {
        return None;
    }
    let value = i64::from_le_bytes(payload.get(..MARKER_LENGTH)?.try_into().ok()?);
    (value >= 0).then_some(value)
}

/// Checks that `datagram` is a run of data frames as a Sender sends them, in one walk, and describes it.
///
/// The rules: every frame is a data frame (`frame_length` at least 32) or a PAD; all of one session,
/// stream and term; each at the term offset where the one before it ends, so the run is contiguous; each
/// data frame whole within the datagram, and frames 32-byte aligned in it; a PAD (its header alone on
/// the wire) only last, since it fills its term. So the datagram's bytes are the log's bytes from the
/// first term offset on, and a receiver can copy them in one piece.
pub fn data_run(datagram: &[u8]) -> Result<DataRun, FrameError> {
    let first = parse_run_header(datagram)?;
    let mut run =
        DataRun { first, span: 0, max_reserved: None, marker_slots: [(0, 0); MAX_MARKERS_PER_RUN], marker_count: 0 };
    let mut src = 0;
    while src < datagram.len() {
        let rest = &datagram[src..];
        let header = if src == 0 { first } else { parse_run_header(rest)? };
        let same = header.session_id == first.session_id
            && header.stream_id == first.stream_id
            && header.term_id == first.term_id;
        let expected = i64::from(first.term_offset) + run.span as i64;
        if !same || i64::from(header.term_offset) != expected {
            return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
        }
        let aligned = align_frame(header.frame_length as usize);
        run.span += aligned;
        if header.frame_type == TYPE_PAD {
            if rest.len() > DATA_HEADER_LENGTH {
                return Err(FrameError::BadLength {
                    frame_type: TYPE_PAD,
                    frame_length: header.frame_length,
                    problem: LengthProblem::BeyondDatagram { have: rest.len() },
                });
            }
            break;
        }
        run.max_reserved = Some(run.max_reserved.map_or(header.reserved_value, |m| m.max(header.reserved_value)));
        if header.flags & MARKER_FLAG != 0 {
            let payload = &rest[DATA_HEADER_LENGTH..header.frame_length as usize];
            let value = marker_of(header.flags, payload).ok_or(FrameError::BadLength {
                frame_type: TYPE_DATA,
                frame_length: header.frame_length,
                problem: LengthProblem::BelowMinimum { min: DATA_HEADER_LENGTH + MARKER_LENGTH },
            })?;
            if run.marker_count == MAX_MARKERS_PER_RUN {
                return Err(FrameError::BadTermOffset { term_offset: header.term_offset });
            }
            run.marker_slots[run.marker_count] = (header.term_offset, value);
            run.marker_count += 1;
        }
        src += aligned;
    }
    Ok(run)
}

/// Reads and checks the header of one frame of a data run: a data frame whole in `rest`, or a PAD.
fn parse_run_header(rest: &[u8]) -> Result<DataHeader, FrameError> {
    let common = peek_header(rest)?;
    if common.frame_type != TYPE_DATA && common.frame_type != TYPE_PAD {
        return Err(FrameError::UnknownType { frame_type: common.frame_type });
    }
    match parse_data_like(rest, &common)? {
        Frame::Data { header, .. } | Frame::Pad(header) => Ok(header),
        // A heartbeat (frame_length 0) stands alone; inside a run it is malformed.
        _ => Err(FrameError::BadLength {
            frame_type: common.frame_type,
            frame_length: common.frame_length,
            problem: LengthProblem::BelowMinimum { min: DATA_HEADER_LENGTH },
        }),
    }
}

/// Iterator over the frames of one datagram; see [`frames`].
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

/// Walks the frames of `datagram`: each frame starts at a multiple of 32 bytes from the start, and the
/// last may end unpadded. Yields `Ok` per frame; after the first `Err` it yields nothing more (the next
/// frame boundary is unknown). A datagram shorter than 8 bytes yields one [`FrameError::Truncated`];
/// an empty one yields nothing.
pub fn frames(datagram: &[u8]) -> Frames<'_> {
    Frames { rest: datagram }
}

impl<'a> Frames<'a> {
    /// The bytes not yet walked (empty after an error).
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match parse(self.rest) {
            Ok(frame) => {
                // wire_length <= rest.len(); the step is at least 1 so the walk always advances.
                let aligned = frame.wire_length().max(1).checked_next_multiple_of(FRAME_ALIGNMENT);
                let step = aligned.unwrap_or(usize::MAX).min(self.rest.len());
                self.rest = self.rest.get(step..).unwrap_or_default();
                Some(Ok(frame))
            }
            Err(error) => {
                self.rest = &[];
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for Frames<'_> {}
