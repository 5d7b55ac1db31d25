//! The `async` face of a [`ClusterClient`]: see [`AsyncClient`].

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::wire::RefusalCode;
use super::{ClientOfferError, ClosedReason, ClusterClient, Committed, Event};

quorumcast_driver::section! {
    /// The limits of an [`AsyncClient`].
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct AsyncConfig in pub(crate) mod async_settings, built as ("AsyncConfig::", ""),
        checked with () {
        /// Messages held at once, at most: queued for the driver, or sent and not yet answered (whether or
        /// not their futures are still awaited). An offer past it resolves at once to [`CommitError::Full`].
        /// Set it at or above [`ClientConfig::window`](super::ClientConfig::window) to keep the window full.
        pub max_pending: usize = 4096, shown "4096", unit "messages";
        /// A message not answered this long after its offer resolves to [`CommitError::TimedOut`] (one sent
        /// may still be applied, once; its answer is then discarded). `None` waits as long as the session
        /// lives; a runtime's own timeout around the future (dropping it) does the same from outside.
        pub timeout: Option<Duration> = None, shown "None";
    }
}

/// Why a [`CommitFuture`] resolved without a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitError {
    /// Longer than a datagram can carry; not queued.
    TooLong {
        /// The longest message.
        max: usize,
    },
    /// [`AsyncConfig::max_pending`] messages are held already; not queued (await earlier futures first).
    Full {
        /// The limit.
        max_pending: usize,
    },
    /// [`AsyncConfig::timeout`] passed. With `offered`, the message was sent and may still be applied
    /// (once); without, it never will be.
    TimedOut {
        /// Whether the message was sent before the timeout.
        offered: bool,
    },
    /// Not applied, and never will be (its session closed; see [`Event::NotApplied`]).
    NotApplied(RefusalCode),
    /// The session closed or moved to another client before the outcome was known: applied at most once,
    /// and this client will not learn whether (see [`Event::OutcomeUnknown`]).
    OutcomeUnknown,
    /// The session closed before the message was sent (or the handle was offered to after it closed):
    /// never applied. The handle takes no more messages.
    SessionClosed(ClosedReason),
    /// The leader refused to open the session; never applied. The handle takes no more messages.
    ConnectRefused(RefusalCode),
    /// The service refused to open the session (its `on_session_open`), with the application's code;
    /// never applied. The handle takes no more messages.
    RefusedByService {
        /// The application's reason.
        code: u32,
    },
    /// The handle was closed ([`AsyncClient::close`]) or its driver stopped. With `offered`, the
    /// message was sent and may have been applied (once); without, it never will be.
    Closed {
        /// Whether the message was sent before the close.
        offered: bool,
    },
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { max } => write!(f, "a client message is at most {max} bytes"),
            Self::Full { max_pending } => write!(f, "{max_pending} messages are pending already (max_pending)"),
            Self::TimedOut { offered: false } => f.write_str("timed out before the message could be sent"),
            Self::TimedOut { offered: true } => f.write_str("timed out waiting for the commit (it may still come)"),
            Self::NotApplied(code) => write!(f, "not applied: {code}"),
            Self::OutcomeUnknown => f.write_str("outcome unknown: the session closed or moved to another client"),
            Self::SessionClosed(reason) => write!(f, "the session closed ({reason:?}) before the message was sent"),
            Self::ConnectRefused(code) => write!(f, "the leader refused the session: {code}"),
            Self::RefusedByService { code } => write!(f, "the service refused the session (its code {code})"),
            Self::Closed { offered: false } => f.write_str("the client closed before the message was sent"),
            Self::Closed { offered: true } => f.write_str("the client closed waiting for the commit"),
        }
    }
}

impl std::error::Error for CommitError {}

type Outcome = Result<Committed, CommitError>;

/// One message's answer, shared by its future and the driver.
struct Completion {
    /// The future was dropped: a message not yet sent is withdrawn, and no answer is kept.
    abandoned: AtomicBool,
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    outcome: Option<Outcome>,
    waker: Option<Waker>,
}

impl Completion {
    fn new() -> Self {
        Self { abandoned: AtomicBool::new(false), slot: Mutex::new(Slot::default()) }
    }

    fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    /// Gives the future its outcome (kept only while the future lives) and wakes its task.
    fn resolve(&self, outcome: Outcome) {
        if self.is_abandoned() {
            return;
        }
        let waker = {
            let mut slot = lock(&self.slot);
            slot.outcome = Some(outcome);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A message queued by a handle for the driver.
struct Queued {
    bytes: Vec<u8>,
    completion: Arc<Completion>,
    deadline: Option<Instant>,
}

/// The handles' queue, and why the handle takes no more messages once it does not.
struct Queue {
    waiting: VecDeque<Queued>,
    /// Set once: every later offer resolves to it at once.
    terminal: Option<CommitError>,
}

/// What the handles, their futures and the driver share.
struct Shared {
    queue: Mutex<Queue>,
    /// Messages held (queued, or sent and unanswered): counted at the offer, under the queue's lock, and
    /// uncounted by the driver when it is done with them. Never above `max_pending`.
    pending: AtomicUsize,
    max_pending: usize,
    max_message: usize,
    timeout: Option<Duration>,
    /// Handles and unresolved futures: at 0 nobody can observe the driver any more, and it stops.
    users: AtomicUsize,
    /// The driver is asked to stop (a handle's close, or no users left).
    stop: AtomicBool,
    /// Messages ever queued: the driver does not block while it has not seen them all.
    offers: AtomicU64,
    /// The driver is blocked (or about to block) waiting for the client's socket. With `offers` and
    /// `stop` it forms a Dekker pair (each side writes its own, then reads the other's, all `SeqCst`),
    /// so an offer either is seen by the driver before it blocks or sends the wake datagram.
    parked: AtomicBool,
    /// A loopback socket, and the client's address it wakes the blocked driver through.
    wake: Option<(UdpSocket, SocketAddr)>,
}

impl Shared {
    /// Wakes the driver if it is blocked (one datagram per block, whoever clears `parked` first).
    fn wake_driver(&self) {
        if self.parked.load(Ordering::SeqCst) && self.parked.swap(false, Ordering::SeqCst) {
            if let Some((socket, to)) = &self.wake {
                // Non-blocking: a full socket buffer means datagrams are there to wake it anyway.
                let _ = socket.send_to(&[0], to);
            }
        }
    }

    /// One handle or unresolved future fewer; the last asks the driver to stop.
    fn release_user(&self) {
        if self.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.stop.store(true, Ordering::SeqCst);
            self.wake_driver();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind (no invariant spans a lock).
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `async` face of a [`ClusterClient`]: a cloneable [`AsyncClient`] whose
/// [`offer`](AsyncClient::offer) returns a [`CommitFuture`] that resolves to the message's committed
/// response, or to a [`CommitError`] that says why there is none. Runtime-agnostic: it uses only
/// [`Waker`]s, locks and atomics of the standard library, so it runs under tokio, async-std, smol or a
/// hand-written executor alike (the anchor is openraft's `Raft::client_write(..).await`).
///
/// ```no_run
/// use quorumcast::{AsyncClient, AsyncConfig, ClientConfig, ClusterClient, CommitError};
///
/// # fn main() -> std::io::Result<()> {
/// let members = vec![(0, "10.0.0.1:40300".parse().unwrap()), (1, "10.0.0.2:40300".parse().unwrap())];
/// // The driver runs on a thread of its own; it opens the session itself.
/// let client = AsyncClient::spawn(ClusterClient::new(ClientConfig::new(members))?, AsyncConfig::default())?;
///
/// // From any task of any runtime, through clones of the handle:
/// async fn set(client: &AsyncClient) -> Result<Vec<u8>, CommitError> {
///     let committed = client.offer(b"set x = 1").await?;
///     Ok(committed.response)
/// }
/// # let _ = set(&client);
/// # Ok(())
/// # }
/// ```
///
/// # How it works
///
/// One [`AsyncDriver`] owns the [`ClusterClient`]: it takes the messages the handles queued, offers them
/// in the order they were queued, polls the client, and completes each message's future with its
/// [`Event`] (waking the task that awaits it). [`AsyncClient::spawn`] runs the driver on a thread of its
/// own that blocks in [`ClusterClient::wait`] when there is nothing to do (no CPU spent while idle); an
/// offer made while it sleeps wakes it with a one-byte datagram from the loopback to the client's socket,
/// which the client drops as from no member. [`AsyncClient::with_driver`] hands the driver to the
/// application instead, to run [`AsyncDriver::drive`] in a loop of its own.
///
/// A message is queued when [`offer`](AsyncClient::offer) is called, not when its future is first
/// polled: messages offered one after another (from one task, or ordered between tasks) are sent, and
/// applied, in that order.
///
/// # Bounds
///
/// At most [`AsyncConfig::max_pending`] messages are held at once: queued for the driver, or sent and not
/// yet answered (at most [`ClientConfig::window`](super::ClientConfig::window) of those), whether or not
/// anyone still awaits them. An offer past that resolves at once to [`CommitError::Full`], and nothing is
/// queued: the caller awaits some of its earlier futures and offers again. There is no unbounded queue
/// and no waiting for room.
///
/// # Invariants
///
/// - Every future resolves exactly once, to the message's [`Committed`] or to a [`CommitError`]: an
///   [`Event::NotApplied`] or [`Event::OutcomeUnknown`] of the client becomes the same error, a session
///   closed before the message was sent becomes [`CommitError::SessionClosed`] (it never will be), and a
///   closed handle or a stopped driver [`CommitError::Closed`]. None waits forever on a live driver with
///   [`AsyncConfig::timeout`] set.
/// - Dropping a future never breaks the client: a message not yet sent is withdrawn (never sent), and one
///   already sent goes on as usual (applied at most once), its answer discarded.
/// - A session that closes ends the handle: every later offer resolves to
///   [`CommitError::SessionClosed`] (make a new client for a new session).
/// - The driver stops once [`AsyncClient::close`] is called, or when no handle and no unresolved future
///   is left; it then closes the session.
pub struct AsyncClient {
    shared: Arc<Shared>,
}

impl fmt::Debug for AsyncClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncClient")
            .field("pending", &self.pending())
            .field("max_pending", &self.shared.max_pending)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Clone for AsyncClient {
    fn clone(&self) -> Self {
        self.shared.users.fetch_add(1, Ordering::AcqRel);
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl Drop for AsyncClient {
    fn drop(&mut self) {
        self.shared.release_user();
    }
}

impl AsyncClient {
    /// A handle over `client`, its driver on a thread of its own (named `qc-async-client`), which opens
    /// the session unless `client` has one open or is opening one. The thread blocks in
    /// [`ClusterClient::wait`] while there is nothing to do, and ends when the driver stops (see the
    /// invariants above).
    ///
    /// `client` should have nothing in flight: answers to messages offered before are not anybody's.
    pub fn spawn(client: ClusterClient, config: AsyncConfig) -> io::Result<Self> {
        let (handle, driver) = Self::with_driver(client, config)?;
        std::thread::Builder::new().name("qc-async-client".into()).spawn(move || driver.run())?;
        Ok(handle)
    }

    /// A handle over `client` and the driver that serves it, for an application that runs
    /// [`AsyncDriver::drive`] (and [`AsyncDriver::wait`]) in a loop of its own, on any thread.
    pub fn with_driver(mut client: ClusterClient, config: AsyncConfig) -> io::Result<(Self, AsyncDriver)> {
        if config.max_pending == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "AsyncConfig::max_pending must be at least 1"));
        }
        if client.session_id().is_none() && !client.is_connecting() {
            client.start_connect();
        }
        let wake = match client.has_socket() {
            true => {
                let to = loopback_of(client.local_addr());
                let socket = UdpSocket::bind(SocketAddr::new(to.ip(), 0))?;
                socket.set_nonblocking(true)?;
                Some((socket, to))
            }
            false => None,
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { waiting: VecDeque::new(), terminal: None }),
            pending: AtomicUsize::new(0),
            max_pending: config.max_pending,
            max_message: client.max_message_length(),
            timeout: config.timeout,
            users: AtomicUsize::new(1),
            stop: AtomicBool::new(false),
            offers: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            wake,
        });
        let driver = AsyncDriver {
            client,
            shared: Arc::clone(&shared),
            backlog: VecDeque::new(),
            in_flight: VecDeque::new(),
            seen_offers: 0,
            finished: false,
        };
        Ok((Self { shared }, driver))
    }

    /// Queues `message` for the cluster; the future resolves to its [`Committed`] response once it is
    /// committed and applied, exactly once, or to a [`CommitError`]. Never blocks: a message too long, one
    /// past [`AsyncConfig::max_pending`], or one offered to a closed handle resolves at once.
    ///
    /// The message is queued now, not when the future is first polled: messages offered one after
    /// another are sent, and applied, in that order. Dropping the future withdraws the message if it
    /// was not sent yet, and discards its answer otherwise.
    pub fn offer(&self, message: &[u8]) -> CommitFuture {
        let shared = &self.shared;
        if message.len() > shared.max_message {
            return CommitFuture::ready(Err(CommitError::TooLong { max: shared.max_message }));
        }
        if shared.stop.load(Ordering::SeqCst) {
            return CommitFuture::ready(Err(CommitError::Closed { offered: false }));
        }
        let completion = {
            let mut queue = lock(&shared.queue);
            if let Some(terminal) = queue.terminal {
                return CommitFuture::ready(Err(terminal));
            }
            // Counted under the queue's lock, where the driver stops and drains: a message is either
            // queued before the terminal is set (and resolved by the driver) or refused here.
            if shared.pending.fetch_add(1, Ordering::AcqRel) >= shared.max_pending {
                shared.pending.fetch_sub(1, Ordering::AcqRel);
                return CommitFuture::ready(Err(CommitError::Full { max_pending: shared.max_pending }));
            }
            let completion = Arc::new(Completion::new());
            let deadline = shared.timeout.map(|t| Instant::now() + t);
            queue.waiting.push_back(Queued { bytes: message.to_vec(), completion: Arc::clone(&completion), deadline });
            shared.offers.fetch_add(1, Ordering::SeqCst);
            completion
        };
        shared.users.fetch_add(1, Ordering::AcqRel);
        shared.wake_driver();
        CommitFuture { state: FutureState::Waiting { completion, shared: Arc::clone(shared) } }
    }

    /// Stops the driver: messages not yet sent resolve to [`CommitError::Closed`] (never applied), those
    /// in flight to the same with `offered` (they may have been), and the session is closed. Every later
    /// offer resolves to it at once. Await the futures whose answers matter first.
    pub fn close(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake_driver();
    }

    /// Whether the handle takes no more messages (closed, its session closed or refused, or its driver
    /// stopped).
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.queue).terminal.is_some() || self.shared.stop.load(Ordering::SeqCst)
    }

    /// Messages held now: queued, or sent and not yet answered (at most [`AsyncConfig::max_pending`]).
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }
}

/// The future of one offered message: resolves to its [`Committed`] response, or to the
/// [`CommitError`] that says why there is none. See [`AsyncClient::offer`].
#[must_use = "a dropped CommitFuture withdraws its message, or discards its answer"]
pub struct CommitFuture {
    state: FutureState,
}

enum FutureState {
    /// Resolved at the offer (refused there), not yet taken.
    Ready(Outcome),
    /// Queued or sent; counted among the users of `shared`.
    Waiting { completion: Arc<Completion>, shared: Arc<Shared> },
    /// Its outcome was taken.
    Done,
}

impl fmt::Debug for CommitFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            FutureState::Ready(_) => "ready",
            FutureState::Waiting { .. } => "waiting",
            FutureState::Done => "done",
        };
        f.debug_struct("CommitFuture").field("state", &state).finish()
    }
}

impl CommitFuture {
    fn ready(outcome: Outcome) -> Self {
        Self { state: FutureState::Ready(outcome) }
    }
}

impl Future for CommitFuture {
    type Output = Result<Committed, CommitError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = match &self.state {
            FutureState::Ready(_) => None,
            FutureState::Waiting { completion, .. } => {
                let mut slot = lock(&completion.slot);
                match slot.outcome.take() {
                    Some(outcome) => Some(outcome),
                    None => {
                        match &mut slot.waker {
                            Some(waker) if waker.will_wake(cx.waker()) => {}
                            waker => *waker = Some(cx.waker().clone()),
                        }
                        return Poll::Pending;
                    }
                }
            }
            FutureState::Done => panic!("CommitFuture polled after it resolved"),
        };
        match std::mem::replace(&mut self.state, FutureState::Done) {
            FutureState::Ready(outcome) => Poll::Ready(outcome),
            FutureState::Waiting { shared, .. } => {
                shared.release_user();
                Poll::Ready(outcome.expect("taken above"))
            }
            FutureState::Done => unreachable!("checked above"),
        }
    }
}

impl Drop for CommitFuture {
    fn drop(&mut self) {
        if let FutureState::Waiting { completion, shared } = &self.state {
            completion.abandoned.store(true, Ordering::Release);
            // An outcome given meanwhile is dropped with the completion.
            lock(&completion.slot).waker = None;
            shared.release_user();
        }
    }
}

/// A message sent through the client, until its outcome is reported.
struct Sent {
    correlation_id: u64,
    /// `None` once resolved here (timed out) before its outcome was reported.
    completion: Option<Arc<Completion>>,
    deadline: Option<Instant>,
    /// Its outcome was reported (it leaves the front of the window then).
    answered: bool,
}

/// The driver of an [`AsyncClient`]: owns the [`ClusterClient`], offers what the handles queued and
/// completes their futures from its events. [`AsyncClient::spawn`] runs it on a thread of its own;
/// [`AsyncClient::with_driver`] gives it to the application.
pub struct AsyncDriver {
    client: ClusterClient,
    shared: Arc<Shared>,
    /// Taken from the handles' queue, not yet taken by the client (its window is full, or it is between
    /// leaders), in the order queued.
    backlog: VecDeque<Queued>,
    /// Sent, in correlation order (consecutive ids: every offer of the client is the driver's).
    in_flight: VecDeque<Sent>,
    /// `Shared::offers` when the driver last took the handles' queue.
    seen_offers: u64,
    finished: bool,
}

impl fmt::Debug for AsyncDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncDriver")
            .field("client", &self.client)
            .field("backlog", &self.backlog.len())
            .field("in_flight", &self.in_flight.len())
            .field("finished", &self.finished)
            .finish()
    }
}

impl AsyncDriver {
    /// One round: takes what the handles queued, offers it, polls the client (sending, reading, keeping
    /// the session alive) and resolves the futures whose outcomes came, and those past their timeout.
    /// Returns the work done (0: nothing happened; [`wait`](Self::wait) then).
    pub fn drive(&mut self) -> usize {
        if self.finished {
            return 0;
        }
        if self.shared.stop.load(Ordering::SeqCst) {
            self.finish(CommitError::Closed { offered: false });
            return 1;
        }
        let now = self.shared.timeout.map(|_| Instant::now());
        let mut work = self.take_queue();
        work += self.offer_backlog();
        let mut done = 0;
        let mut terminal = None;
        let (in_flight, pending) = (&mut self.in_flight, &self.shared.pending);
        // The message whose response was too long: its commit follows in the same poll.
        let mut too_long = None;
        work += self.client.poll(|event| {
            let (correlation_id, outcome) = match event {
                Event::ResponseTooLong { correlation_id } => {
                    too_long = Some(correlation_id);
                    return;
                }
                Event::Committed { correlation_id, position, response, duplicate } => {
                    (correlation_id, Ok((position, response, duplicate)))
                }
                Event::NotApplied { correlation_id, reason } => (correlation_id, Err(CommitError::NotApplied(reason))),
                Event::OutcomeUnknown { correlation_id } => (correlation_id, Err(CommitError::OutcomeUnknown)),
                Event::SessionClosed { reason } => {
                    terminal = Some(CommitError::SessionClosed(reason));
                    return;
                }
                Event::ConnectRefused { reason } => {
                    terminal = Some(CommitError::ConnectRefused(reason));
                    return;
                }
                Event::RefusedByService { code } => {
                    terminal = Some(CommitError::RefusedByService { code });
                    return;
                }
                // Pushes are not this face's to hand out yet: a ClusterClient polled directly reports them.
                Event::Connected { .. } | Event::Suspended { .. } | Event::Pushed { .. } => return,
            };
            let Some(front) = in_flight.front().map(|s| s.correlation_id) else { return };
            let Some(sent) = correlation_id.checked_sub(front).and_then(|i| in_flight.get_mut(i as usize)) else {
                return; // not a message of the driver's (offered before it had the client)
            };
            if sent.answered {
                return;
            }
            sent.answered = true;
            done += 1;
            // Uncounted before it is resolved: a task that sees its answer sees it uncounted.
            pending.fetch_sub(1, Ordering::AcqRel);
            if let Some(completion) = sent.completion.take() {
                // The response is copied only for a future still awaiting it.
                if !completion.is_abandoned() {
                    completion.resolve(outcome.map(|(position, response, duplicate)| Committed {
                        position,
                        response: response.to_vec(),
                        duplicate,
                        response_too_long: too_long == Some(correlation_id),
                    }));
                }
            }
        });
        while self.in_flight.front().is_some_and(|s| s.answered) {
            self.in_flight.pop_front();
        }
        if done > 0 {
            // Room in the window: offer what waits at once, not at the next round.
            work += done + self.offer_backlog();
        }
        if let Some(terminal) = terminal {
            self.finish(terminal);
            return work + 1;
        }
        if let Some(now) = now {
            work += self.expire(now);
        }
        work
    }

    /// Blocks until there may be work for [`drive`](Self::drive): a datagram for the client, an offer by
    /// a handle, the client's next timer or the next timeout of a message, or `timeout`, whichever is
    /// first. Returns at once when an offer came since the last round.
    pub fn wait(&mut self, timeout: Duration) {
        if self.finished {
            return;
        }
        let mut timeout = timeout;
        if let Some(deadline) = self.next_deadline() {
            timeout = timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        self.shared.parked.store(true, Ordering::SeqCst);
        let offered = self.shared.offers.load(Ordering::SeqCst) != self.seen_offers;
        if !offered && !self.shared.stop.load(Ordering::SeqCst) {
            // A failed wait is a failed socket: the next poll finds nothing either, and the caller's loop
            // goes on (its timers still run).
            let _ = self.client.wait(timeout);
        }
        self.shared.parked.store(false, Ordering::SeqCst);
    }

    /// Drives until the driver stops ([`AsyncClient::close`], a closed session, or no handle and no
    /// unresolved future left), waiting while there is nothing to do. What [`AsyncClient::spawn`]'s
    /// thread runs.
    pub fn run(mut self) {
        while !self.finished {
            if self.drive() == 0 {
                self.wait(Duration::from_secs(1));
            }
        }
    }

    /// Whether the driver has stopped (every future it had is resolved).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The client it drives (its session, leader and counts).
    pub fn client(&self) -> &ClusterClient {
        &self.client
    }

    /// Moves the handles' queue to the backlog.
    fn take_queue(&mut self) -> usize {
        self.seen_offers = self.shared.offers.load(Ordering::SeqCst);
        let mut queue = lock(&self.shared.queue);
        let taken = queue.waiting.len();
        if self.backlog.is_empty() {
            std::mem::swap(&mut self.backlog, &mut queue.waiting);
        } else {
            self.backlog.append(&mut queue.waiting);
        }
        drop(queue);
        taken
    }

    /// Offers the backlog, in order, while the client takes it.
    fn offer_backlog(&mut self) -> usize {
        let mut offered = 0;
        let mut withdrawn = 0;
        while let Some(queued) = self.backlog.front() {
            if queued.completion.is_abandoned() {
                // Its future was dropped before it was sent: never sent.
                self.backlog.pop_front();
                withdrawn += 1;
                continue;
            }
            match self.client.offer(&queued.bytes) {
                Ok(correlation_id) => {
                    let queued = self.backlog.pop_front().expect("checked");
                    self.in_flight.push_back(Sent {
                        correlation_id,
                        completion: Some(queued.completion),
                        deadline: queued.deadline,
                        answered: false,
                    });
                    offered += 1;
                }
                Err(ClientOfferError::NotConnected | ClientOfferError::BackPressured) => break,
                Err(ClientOfferError::TooLong { max }) => {
                    // Checked at the offer against the same limit; kept for a client whose limit shrank.
                    let queued = self.backlog.pop_front().expect("checked");
                    self.shared.pending.fetch_sub(1, Ordering::AcqRel);
                    queued.completion.resolve(Err(CommitError::TooLong { max }));
                    offered += 1;
                }
            }
        }
        if withdrawn > 0 {
            self.shared.pending.fetch_sub(withdrawn, Ordering::AcqRel);
        }
        offered + withdrawn
    }

    /// Resolves the messages past their deadline (queued ones leave the backlog; sent ones stay in the
    /// window until their outcome comes, which is then discarded).
    fn expire(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while self.backlog.front().is_some_and(|q| q.deadline.is_some_and(|d| d <= now)) {
            let queued = self.backlog.pop_front().expect("checked");
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            queued.completion.resolve(Err(CommitError::TimedOut { offered: false }));
            expired += 1;
        }
        // Deadlines grow with the order of offers; those resolved already are skipped.
        for sent in self.in_flight.iter_mut().filter(|s| s.completion.is_some()) {
            if sent.deadline.is_none_or(|d| d > now) {
                break;
            }
            if let Some(completion) = sent.completion.take() {
                completion.resolve(Err(CommitError::TimedOut { offered: true }));
                expired += 1;
            }
        }
        expired
    }

    /// The first deadline of a message still awaited, if any.
    fn next_deadline(&self) -> Option<Instant> {
        self.shared.timeout?;
        let queued = self.backlog.front().and_then(|q| q.deadline);
        let sent = self.in_flight.iter().find(|s| s.completion.is_some()).and_then(|s| s.deadline);
        match (queued, sent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Stops: the handle takes no more messages (they resolve to `terminal`), every message held is
    /// resolved, and the session is closed.
    fn finish(&mut self, terminal: CommitError) {
        let mut queue = lock(&self.shared.queue);
        // The first reason stands (a closed session before a later close).
        let terminal = *queue.terminal.get_or_insert(terminal);
        self.backlog.append(&mut queue.waiting);
        drop(queue);
        let unsent = match terminal {
            CommitError::Closed { .. } => CommitError::Closed { offered: false },
            other => other,
        };
        // Uncounted before they are resolved: a task that sees its answer sees it uncounted.
        let held = self.backlog.len() + self.in_flight.iter().filter(|s| !s.answered).count();
        self.shared.pending.fetch_sub(held, Ordering::AcqRel);
        for queued in self.backlog.drain(..) {
            queued.completion.resolve(Err(unsent));
        }
        for sent in self.in_flight.drain(..) {
            if let Some(completion) = sent.completion {
                completion.resolve(Err(CommitError::Closed { offered: true }));
            }
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        self.client.close();
        self.finished = true;
    }
}

impl Drop for AsyncDriver {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(CommitError::Closed { offered: false });
        }
    }
}

/// Where a datagram from this host reaches a socket bound at `local`: its own address, or the loopback
/// of its family when it is bound to every address.
fn loopback_of(local: SocketAddr) -> SocketAddr {
    let ip = match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, local.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wake_address_is_the_loopback_for_a_socket_bound_to_every_address() {
        assert_eq!(loopback_of("0.0.0.0:7".parse().unwrap()), "127.0.0.1:7".parse().unwrap());
        assert_eq!(loopback_of("[::]:7".parse().unwrap()), "[::1]:7".parse().unwrap());
        assert_eq!(loopback_of("10.1.2.3:7".parse().unwrap()), "10.1.2.3:7".parse().unwrap());
    }
}
