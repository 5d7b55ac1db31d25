//! SETUPs: asked for (a follower's channel without an image, data of an unknown session), accepted or
//! refused, and the images they make, on the receive loop or on a thread of their own.

use super::feedback::encode_status;
use super::*;

/// The first interval between a follower's SETUP requests (see [`ask_for_setup`]); it doubles up to the
/// status interval.
pub(super) const FIRST_ASK_RETRY_NS: u64 = 500_000;

/// A follower's channel told the session it is to follow (`session_id`, from `peers`) and holding no
/// image yet asks each peer for a SETUP: at once, then after [`FIRST_ASK_RETRY_NS`], doubling up to the
/// status interval. Without it the follower waits for the publisher's own SETUP retries, which double
/// from 1 ms: a follower whose Receiver binds just after one (a new leader announces its term before
/// its followers' Receivers exist) joined up to several milliseconds late, and a leader's first commit
/// of its term waited for it. Returns the requests sent.
pub(super) fn ask_for_setup<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    now_ns: u64,
) -> usize {
    let Some(session_id) = channel.config.session_id else {
        return 0;
    };
    if !channel.images.is_empty() || channel.pending.is_some() || now_ns < channel.next_ask_ns {
        return 0;
    }
    channel.next_ask_ns = now_ns + channel.ask_retry_ns;
    channel.ask_retry_ns = (channel.ask_retry_ns * 2).min(channel.timers.status_interval_ns.max(FIRST_ASK_RETRY_NS));
    let stream_id = channel.config.stream_id;
    for i in 0..channel.config.peers.len() {
        let peer = channel.config.peers[i];
        send_setup_request(channel, endpoint, counters, peer, session_id, stream_id, 0);
    }
    channel.config.peers.len()
}

/// Asks an unknown publisher for a SETUP, at most once per status interval per channel.
pub(super) fn elicit_setup<T: Transport>(
    channel: &mut ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    source: SocketAddr,
    header: &DataHeader,
    now_ns: u64,
) {
    if header.stream_id != channel.config.stream_id || now_ns < channel.next_elicit_ns {
        return;
    }
    channel.next_elicit_ns = now_ns + channel.timers.status_interval_ns;
    send_setup_request(channel, endpoint, counters, source, header.session_id, header.stream_id, header.term_id);
}

/// Sends `to` a status message that asks for a SETUP of session `session_id` (its position and window
/// mean nothing).
fn send_setup_request<T: Transport>(
    channel: &ReceiveChannel,
    endpoint: &mut T,
    counters: &ReceiverCounters,
    to: SocketAddr,
    session_id: i32,
    stream_id: i32,
    term_id: i32,
) {
    let mut sm = StatusMessageFrame {
        session_id,
        stream_id,
        consumption_term_id: term_id,
        consumption_term_offset: 0,
        receiver_window: 0,
        ..StatusMessageFrame::default()
    };
    sm.flags = SM_SEND_SETUP_FLAG;
    sm.set_receiver_id(channel.config.receiver_id);
    let mut bytes = [0u8; 64];
    if let Ok(length) = encode_status(&sm, channel.config.channel.membership, &mut bytes) {
        counters.status_messages.increment();
        if !matches!(endpoint.send(&bytes[..length], Some(&SockAddr::from(to))), SendOutcome::Sent(_)) {
            counters.feedback_send_failures.increment();
        }
    }
}

/// Why a SETUP is refused before any image is made for it, if it is.
fn refuse_setup(config: &ReceiveChannelConfig, setup: &SetupFrame, bytes: &[u8]) -> Option<String> {
    let c = &config.channel;
    if i64::from(setup.term_length) != c.term_length as i64 || i64::from(setup.mtu) != c.mtu as i64 {
        return Some(format!(
            "asks for term length {} and MTU {}, but this channel is configured for term length {} and MTU {}; \
             set the same [channel] term_length and mtu on every member",
            setup.term_length, setup.mtu, c.term_length, c.mtu
        ));
    }
    if let Some(mine) = c.membership {
        let theirs = frame::setup_membership(bytes);
        if theirs != Some(mine) {
            return Some(format!(
                "carries member-list tag {}, this node's is {mine:#018x}: the two nodes are configured with \
                 different `members`; give every node the same list",
                theirs.map_or("none".to_string(), |t| format!("{t:#018x}"))
            ));
        }
    }
    None
}

/// A follower's log holds one session. A receiver told which one (`session_id`: a cluster member knows
/// its leader's term's) refuses every other; one that was not refuses another session's SETUP once its
/// image has data, which would make it drop its log and rejoin a different one (re-applying from its join
/// position).
fn refuse_new_session(channel: &ReceiveChannel, setup: &SetupFrame) -> Option<String> {
    if let Some(expected) = channel.config.session_id.filter(|&s| s != setup.session_id) {
        return Some(format!(
            "is not the log this receiver was told to follow (session {expected}): the log of another \
             leadership term of the same leader"
        ));
    }
    channel.config.follower.as_ref()?;
    let image = channel.images.iter().find(|i| i.session_id() != setup.session_id && i.hwm() > i.join_position())?;
    Some(format!(
        "starts a new log (session {}) while this follower holds session {} up to position {}: refused, the \
         follower keeps its log",
        setup.session_id,
        image.session_id(),
        image.rebuild_position()
    ))
}

pub(super) fn on_setup(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    source: SocketAddr,
    setup: &SetupFrame,
    bytes: &[u8],
    now_ns: u64,
) {
    counters.setups.increment();
    if setup.stream_id != channel.config.stream_id {
        counters.unknown_stream.increment();
        return;
    }
    let log_config = LogConfig {
        term_length: setup.term_length.max(0) as usize,
        mtu: setup.mtu.max(0) as usize,
        initial_term_id: setup.initial_term_id,
        session_id: setup.session_id,
        stream_id: setup.stream_id,
        page_size: 4096,
        pre_touch: false,
    };
    if log_config.validate().is_err() || setup.term_offset < 0 || setup.term_offset as usize >= log_config.term_length {
        counters.malformed.increment();
        return;
    }
    let refused = match refuse_setup(&channel.config, setup, bytes) {
        Some(why) => Some((&counters.setups_refused, &mut channel.logs.setup, why)),
        None => {
            refuse_new_session(channel, setup).map(|why| (&counters.sessions_refused, &mut channel.logs.session, why))
        }
    };
    if let Some((counter, log, why)) = refused {
        counter.increment();
        let session = setup.session_id;
        log.warn(now_ns, || format!("SETUP from {source} (session {session}) refused: it {why}"));
        return;
    }
    let bits = log_config.term_length.trailing_zeros();
    let setup_position = position(setup.active_term_id, setup.term_offset as usize, setup.initial_term_id, bits);
    if let Some(image) = channel.images.iter_mut().find(|i| i.session_id() == setup.session_id && i.source() == source)
    {
        // An image that has received nothing moves up to a newer SETUP only when the stream has passed its
        // window since its first (its status message reached the publisher too late to hold the stream for
        // it); within the window it stays, and the publisher, which holds those bytes, sends or resends
        // them once the image's status message makes it live. One with data, or with a fixed join
        // position, stays.
        let untouched = image.hwm() == image.join_position() && channel.config.join_position.is_none();
        let passed = setup_position > image.join_position() + channel.timers.window;
        if !untouched || !passed {
            image.request_status();
            return;
        }
    }
    let join = channel.config.join_position.map_or(setup_position, |p| p.min(setup_position));
    let Some(dir) = channel.config.image_dir.as_ref() else {
        let made = LogBuffer::create_anonymous(log_config);
        install_image(channel, counters, NewImage { source, join, file: None }, made, now_ns);
        return;
    };
    if channel.pending.is_some() {
        return; // an image file is being made; the publisher repeats its SETUP until it is answered
    }
    // A file-backed image reserves its whole log on the file system (tens of milliseconds for 48 MiB):
    // that is done on a thread of its own, never on the receive loop; the image joins when it is made.
    let path = dir.join(format!("image-{}-{}.log", setup.stream_id, setup.session_id));
    if let Some(spare) = channel.spare_image.take() {
        // Made beforehand: the image joins now, under the name an image of this session has. A spare of
        // another length (or one that cannot be renamed) is dropped, and the image made below.
        if std::fs::rename(&spare.path, &path).is_ok() {
            if let Ok(made) = LogBuffer::create_in(spare.region, log_config, 0) {
                install_image(channel, counters, NewImage { source, join, file: Some(path) }, Ok(made), now_ns);
                return;
            }
            let _ = std::fs::remove_file(&path);
        } else {
            let _ = std::fs::remove_file(&spare.path);
        }
    }
    if channel.config.inline_image_files {
        let made = LogBuffer::create(&path, log_config);
        install_image(channel, counters, NewImage { source, join, file: Some(path) }, made, now_ns);
        return;
    }
    let (done, made) = mpsc::channel();
    let creating = path.clone();
    let spawned = std::thread::Builder::new()
        .name("image-create".into())
        .spawn(move || drop(done.send(LogBuffer::create(&creating, log_config))));
    match spawned {
        Ok(_) => {
            let image = NewImage { source, join, file: Some(path) };
            channel.pending = Some(PendingImage { image, made });
        }
        Err(e) => {
            counters.setups_refused.increment();
            channel.logs.setup.warn(now_ns, || format!("SETUP from {source}: cannot start making the image: {e}"));
        }
    }
}

/// Where a new image comes from, where it starts, and its file.
struct NewImage {
    source: SocketAddr,
    join: i64,
    file: Option<PathBuf>,
}

/// An image whose log file a thread of its own is making.
pub(super) struct PendingImage {
    image: NewImage,
    made: mpsc::Receiver<Result<LogBuffer, LogError>>,
}

/// Installs the image being made for `channel`, once its file is ready; returns whether it did.
pub(super) fn install_pending(channel: &mut ReceiveChannel, counters: &ReceiverCounters, now_ns: u64) -> bool {
    let Some(pending) = channel.pending.as_ref() else {
        return false;
    };
    let made = match pending.made.try_recv() {
        Ok(made) => made,
        Err(mpsc::TryRecvError::Empty) => return false,
        Err(mpsc::TryRecvError::Disconnected) => Err(LogError::NotALog {
            path: pending.image.file.clone().unwrap_or_default(),
            reason: "the thread making it stopped".into(),
        }),
    };
    let pending = channel.pending.take().expect("checked above");
    install_image(channel, counters, pending.image, made, now_ns);
    true
}

/// Makes `made` the channel's image (or counts and logs why it could not be made).
fn install_image(
    channel: &mut ReceiveChannel,
    counters: &ReceiverCounters,
    new: NewImage,
    made: Result<LogBuffer, LogError>,
    now_ns: u64,
) {
    let NewImage { source, join, file } = new;
    let log = match made {
        Ok(log) => log,
        Err(e) => {
            counters.setups_refused.increment();
            channel.logs.setup.warn(now_ns, || format!("SETUP from {source}: cannot make the image: {e}"));
            return;
        }
    };
    let mut image = PublicationImage::new(log, source, join, channel.timers, now_ns);
    if let Some(follower) = &channel.config.follower {
        image.acknowledge_every(nanos(follower.ack_interval), nanos(follower.ack_gap));
        if let Some(durable) = &follower.ack_up_to {
            image.acknowledge_up_to(durable.clone());
        }
    }
    let Some(consumer) = image.register_consumer() else {
        counters.malformed.increment();
        return;
    };
    let handoff = ImageHandoff {
        log: image.log().clone(),
        reader: LogReader::new(image.log()),
        consumer,
        position: join,
        file: file.clone(),
    };
    // Only the newest image of a channel is kept: an older session is over once its publisher restarted.
    // Its file goes with it (a subscription still reading it keeps its mapping; the name is freed).
    channel.images.clear();
    channel.images.push(image);
    if let Some(old) = std::mem::replace(&mut channel.image_file, file) {
        if channel.image_file.as_ref() != Some(&old) && std::fs::remove_file(&old).is_ok() {
            counters.images_removed.increment();
        }
    }
    *channel.shared.newest.lock().expect("image hand-off lock") = Some(handoff);
    channel.shared.generation.fetch_add(1, Ordering::Release);
    counters.images.increment();
}
