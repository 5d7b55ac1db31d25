//! Dispatch of one received datagram: data into its image, heartbeats, SETUPs, the layer above's frames,
//! BEHIND_RETAINED; what is foreign, malformed or for no image is counted and dropped.

use super::setup::{elicit_setup, on_setup};
use super::*;

/// Counts (by source kind and frame type) and drops a datagram from a source that is not a peer.
pub(super) fn on_foreign(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: Option<SocketAddr>,
    bytes: &[u8],
    now_ns: u64,
) {
    counters.foreign.increment();
    let member = source.is_some_and(|s| channel.config.members.contains(&s));
    if member {
        counters.foreign_members.increment();
    }
    let frame_type = bytes.get(frame::TYPE_OFFSET..frame::TYPE_OFFSET + 2).map(|t| u16::from_le_bytes([t[0], t[1]]));
    match frame_type {
        Some(frame::TYPE_DATA | frame::TYPE_PAD) => counters.foreign_data.increment(),
        Some(frame::TYPE_SETUP) => counters.foreign_setups.increment(),
        Some(frame::TYPE_EXTENSION_FIRST..=frame::TYPE_EXTENSION_LAST) => counters.foreign_commits.increment(),
        _ => {}
    }
    let stream = channel.config.stream_id;
    let kind = if member { "a member that is not the leader" } else { "a source that is not a member" };
    let peers = &channel.config.peers;
    channel.logs.foreign.warn(now_ns, || {
        let source = source.map_or("an unknown address".to_string(), |s| s.to_string());
        format!(
            "stream {stream}: dropped a datagram (type {}) from {source}, {kind}; only {peers:?} may send it",
            frame_type.map_or("unreadable".to_string(), |t| format!("{t:#04x}"))
        )
    });
}

/// Dispatches one datagram of channel `channel` (whose endpoint is `endpoint`) from `source`.
pub(super) fn on_datagram<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    bytes: &[u8],
    now_ns: u64,
) {
    match frame::parse(bytes) {
        Ok(Frame::Data { header, .. }) | Ok(Frame::Pad(header)) => {
            on_data(channel, endpoint, counters, source, &header, bytes, now_ns)
        }
        Ok(Frame::Heartbeat(header)) => {
            counters.heartbeats.increment();
            match find_image(channel, &header, source) {
                Some(image) => {
                    image.on_heartbeat(&header);
                }
                None => elicit_setup(channel, endpoint, counters, source, &header, now_ns),
            }
        }
        Ok(Frame::Setup(setup)) => on_setup(channel, counters, source, &setup, bytes, now_ns),
        Ok(Frame::Extension { header, bytes }) => match &channel.config.follower {
            Some(follower) if header.stream_id == channel.config.stream_id => {
                counters.commits.increment();
                // Only the image's own session speaks for its log: a commit of another log would let the
                // follower apply entries no quorum of this log has acknowledged.
                if channel.images.iter().any(|i| i.session_id() == header.session_id && i.source() == source) {
                    follower.observer.extension_frame(&header, bytes);
                } else {
                    counters.commits_refused.increment();
                }
            }
            _ => counters.unknown_stream.increment(),
        },
        Ok(Frame::BehindRetained(behind)) => on_behind_retained(channel, counters, source, &behind, now_ns),
        Ok(_) => counters.unknown_stream.increment(),
        Err(_) => counters.malformed.increment(),
    }
}

/// The publisher says it no longer retains this receiver's position: stop NAKing, and say so.
fn on_behind_retained(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    behind: &frame::BehindRetainedFrame,
    now_ns: u64,
) {
    let image = channel.images.iter_mut().find(|i| i.session_id() == behind.session_id && i.source() == source);
    let Some(image) = image.filter(|_| behind.stream_id == channel.config.stream_id) else {
        counters.unknown_stream.increment();
        return;
    };
    counters.behind_retained.increment();
    if image.on_behind_retained(behind.oldest_retained) {
        let (at, oldest, sender) = (image.rebuild_position(), behind.oldest_retained, behind.sender_position);
        channel.logs.behind.warn(now_ns, || {
            format!(
                "the publisher at {source} no longer holds this log in memory at position {at} (it holds it from \
                 {oldest} and has sent up to {sender}): a member that records its log fetches the rest from the \
                 publisher's recording next (a catch-up, logged when it starts and ends); one that does not record \
                 cannot go on from here"
            )
        });
    }
}

fn find_image<'a>(
    channel: &'a mut ReceiveChannel,
    header: &DataHeader,
    source: SocketAddr,
) -> Option<&'a mut PublicationImage> {
    channel
        .images
        .iter_mut()
        .find(|i| i.session_id() == header.session_id && i.stream_id() == header.stream_id && i.source() == source)
}

fn on_data<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    header: &DataHeader,
    bytes: &[u8],
    now_ns: u64,
) {
    if header.stream_id != channel.config.stream_id {
        counters.unknown_stream.increment();
        return;
    }
    // One walk checks every frame of the datagram (one session, stream and term, contiguous, whole) before
    // any of it is written, and tells where it goes and what commit it carries; then one copy.
    let Ok(run) = frame::data_run(bytes) else {
        counters.malformed.increment();
        return;
    };
    let follower = channel.config.follower.as_ref();
    let Some(image) = channel
        .images
        .iter_mut()
        .find(|i| i.session_id() == header.session_id && i.stream_id() == header.stream_id && i.source() == source)
    else {
        counters.unknown_stream.increment();
        elicit_setup(channel, endpoint, counters, source, header, now_ns);
        return;
    };
    match image.insert_run(&run, bytes) {
        InsertOutcome::Inserted => {
            if let Some(follower) = follower {
                follower.observer.run_inserted(image.log(), &run);
            }
        }
        InsertOutcome::Duplicate => counters.duplicates.increment(),
        InsertOutcome::OutOfWindow => counters.out_of_window.increment(),
        InsertOutcome::Malformed => counters.malformed.increment(),
    }
}
