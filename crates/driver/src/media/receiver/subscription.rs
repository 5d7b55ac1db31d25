//! How an image reaches the channel's subscriptions: the hand-off the Receiver makes ([`ImageHandoff`])
//! and the [`Subscription`] that reads whole messages from the newest image.

use super::*;

/// An image handed from the Receiver to the channel's subscriptions.
pub struct ImageHandoff {
    /// The image's log.
    pub log: LogBuffer,
    /// A reader of it.
    pub reader: LogReader,
    /// The consumer slot registered for the subscription, at `position`.
    pub consumer: ConsumerPosition,
    /// Where the image starts.
    pub position: i64,
    /// Its file (`None` for an image mapped anonymously).
    pub file: Option<PathBuf>,
}

/// What the Receiver and a channel's subscriptions share: the newest image, behind a generation number
/// so that a subscription takes the lock only when an image was added.
#[derive(Default)]
pub(super) struct ChannelShared {
    pub(super) generation: AtomicU64,
    pub(super) newest: Mutex<Option<ImageHandoff>>,
}

/// Reads whole messages from the images of one receive channel.
///
/// A subscription follows the newest image (a publisher restart, or a new leader, makes a new session);
/// the Receiver registered the image's consumer position for it, so the sender never gets more than a
/// window ahead of what this subscription has read.
pub struct Subscription {
    shared: Arc<ChannelShared>,
    generation: u64,
    current: Option<MessageReader>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").field("position", &self.position()).finish()
    }
}

impl Subscription {
    pub(super) fn new(shared: Arc<ChannelShared>) -> Self {
        Self { shared, generation: 0, current: None }
    }

    /// Whether an image is connected.
    pub fn is_connected(&mut self) -> bool {
        self.refresh();
        self.current.is_some()
    }

    /// The position read up to, if connected.
    pub fn position(&self) -> Option<i64> {
        self.current.as_ref().map(MessageReader::position)
    }

    fn refresh(&mut self) {
        if let Some(handoff) = self.take_handoff() {
            self.current = Some(MessageReader::new(handoff.reader, handoff.consumer, handoff.position));
        }
    }

    /// The image the Receiver handed over since the last look, if any (the lock is taken only then).
    fn take_handoff(&mut self) -> Option<ImageHandoff> {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation == self.generation {
            return None;
        }
        self.generation = generation;
        self.shared.newest.lock().expect("image hand-off lock").take()
    }

    /// Takes the newest image, to read its log with a reader of the caller's. `None` until an image is
    /// made (or when this image was already taken). A subscription that hands its image out reads nothing
    /// itself.
    pub fn take_image(&mut self) -> Option<ImageHandoff> {
        let handoff = self.take_handoff()?;
        self.current = None;
        Some(handoff)
    }

    /// Hands up to `fragment_limit` fragments' worth of whole messages to `handler`; returns the number
    /// of fragments read. The position is published once per call.
    pub fn poll(&mut self, fragment_limit: usize, handler: impl FnMut(&[u8])) -> usize {
        self.poll_bounded(i64::MAX, fragment_limit, handler)
    }

    /// As [`poll`](Self::poll), reading nothing beyond `limit_position` (a follower applies only what the
    /// leader has committed).
    pub fn poll_bounded(&mut self, limit_position: i64, fragment_limit: usize, handler: impl FnMut(&[u8])) -> usize {
        self.refresh();
        match self.current.as_mut() {
            Some(reader) => reader.poll_bounded(limit_position, fragment_limit, handler),
            None => 0,
        }
    }
}
