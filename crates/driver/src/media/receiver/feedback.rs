//! What the Receiver sends its publishers for an image: status messages, NAKs and (on a follower's
//! channel) the layer above's acknowledgements.

use super::*;

/// Who a feedback frame is from and about, and (on a follower's channel) who writes its acknowledgements.
#[derive(Clone, Copy)]
pub(super) struct FeedbackIdentity<'a> {
    pub(super) session_id: i32,
    pub(super) stream_id: i32,
    pub(super) receiver_id: i64,
    pub(super) observer: Option<&'a dyn FollowerObserver>,
    pub(super) membership: Option<i64>,
}

pub(super) fn send_feedback_frame<T: Transport>(
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    id: FeedbackIdentity<'_>,
    feedback: Feedback,
) {
    let FeedbackIdentity { session_id, stream_id, receiver_id, observer, membership } = id;
    let mut bytes = [0u8; 64];
    let length = match feedback {
        Feedback::Status { term_id, term_offset, window } => {
            let mut sm = StatusMessageFrame {
                session_id,
                stream_id,
                consumption_term_id: term_id,
                consumption_term_offset: term_offset,
                receiver_window: window,
                ..StatusMessageFrame::default()
            };
            sm.set_receiver_id(receiver_id);
            counters.status_messages.increment();
            encode_status(&sm, membership, &mut bytes)
        }
        Feedback::Ack { position } => {
            // The layer above writes its acknowledgement: the media layer only says when and of what.
            let Some(observer) = observer else { return };
            counters.acknowledgements.increment();
            Ok(observer.encode_ack(session_id, stream_id, position, &mut bytes))
        }
        Feedback::Nak(gap) => {
            let nak = NakFrame {
                session_id,
                stream_id,
                term_id: gap.term_id,
                term_offset: gap.term_offset as i32,
                length: gap.length as i32,
                ..NakFrame::default()
            };
            counters.naks.increment();
            nak.encode(&mut bytes)
        }
    };
    if let Ok(length) = length {
        // A full socket loses this frame; the timers send the next one.
        if !matches!(endpoint.send(&bytes[..length], Some(&SockAddr::from(source))), SendOutcome::Sent(_)) {
            counters.feedback_send_failures.increment();
        }
    }
}

/// Writes a status message, with the member-list tag as its group tag when the channel has one (the
/// publisher refuses status messages of another cluster's members).
pub(super) fn encode_status(
    sm: &StatusMessageFrame,
    membership: Option<i64>,
    bytes: &mut [u8],
) -> Result<usize, frame::EncodeError> {
    match membership {
        Some(tag) => sm.encode_with_group_tag(bytes, tag),
        None => sm.encode(bytes),
    }
}
