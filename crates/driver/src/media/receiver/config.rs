//! What a receive channel is configured with: its socket, stream and peers, and a follower's side of a
//! replicated log ([`FollowerSeam`], [`FollowerObserver`]).

use super::*;

/// A receive channel: a bound socket and the stream it accepts.
#[derive(Clone, Debug)]
pub struct ReceiveChannelConfig {
    /// Where to listen.
    pub bind: SocketAddr,
    /// The stream accepted; other streams are dropped and counted.
    pub stream_id: i32,
    /// Accepted sources (the publisher's address); empty accepts any source.
    pub peers: Vec<SocketAddr>,
    /// The other known endpoints (the cluster's members): a datagram from one of them that is not a peer is
    /// counted apart from a stranger's, and logged as a member that wrongly claims to lead.
    pub members: Vec<SocketAddr>,
    /// Timers, window, socket buffers and faults (`receive_faults` act on what this channel receives).
    pub channel: ChannelConfig,
    /// Where image logs are made (a node directory); `None` maps them anonymously.
    pub image_dir: Option<PathBuf>,
    /// Start images here instead of at the publisher's current position (a follower that already has
    /// the log up to this position asks for the rest by NAK).
    pub join_position: Option<i64>,
    /// Identity sent in status messages, unique per receiver start.
    pub receiver_id: i64,
    /// Accept only this publication session (a follower that knows which log it was told to follow); a
    /// SETUP of another is refused and counted (`receiver new sessions refused`). `None` accepts any.
    pub session_id: Option<i32>,
    /// Set when this channel carries a replicated log: acknowledge what is rebuilt (APPEND_POSITION), and
    /// hand what the media layer does not interpret (runs, commit frames) to the layer above.
    pub follower: Option<FollowerSeam>,
    /// Bind with `SO_REUSEPORT`, beside the sockets a cluster member sends the log from while it leads
    /// (on the same endpoint) and beside the Receiver of its previous term, until that one is dropped.
    pub reuse_port: bool,
    /// Make a file-backed image's log on the Receiver's thread, when its SETUP comes, instead of on a
    /// thread of its own: slower to join (tens of milliseconds on the receive loop for a large log), but
    /// deterministic, for the node simulator. Default: `false`.
    pub inline_image_files: bool,
    /// A log file made beforehand (reserved and pre-touched, all zeros, the length of this channel's
    /// logs) that the channel's first file-backed image takes instead of making one, so that a follower
    /// joins its leader's log at once. Default: `None`.
    pub spare_image: Option<SpareImage>,
}

/// A log file made beforehand for an image (see [`ReceiveChannelConfig::spare_image`]).
#[derive(Clone, Debug)]
pub struct SpareImage {
    /// Its file: the image's file once it is taken.
    pub path: PathBuf,
    /// Its mapping.
    pub region: Arc<crate::shm::buffer::Region>,
}

/// A follower's side of a replicated log, as the media layer sees it: how it acknowledges, and the
/// observer it reports to. What the reports mean (commit positions, term starts) is the cluster's.
#[derive(Clone, Debug)]
pub struct FollowerSeam {
    /// Acknowledge at least this often, even when the log does not move.
    pub ack_interval: Duration,
    /// Acknowledge an advance no sooner than this after the last acknowledgement (zero: at every advance).
    pub ack_gap: Duration,
    /// Acknowledge no further than this counter (a recording member: the recorder's durable position).
    pub ack_up_to: Option<Counter>,
    /// Told what the follower's image rebuilds and which commit frames of its session arrive.
    pub observer: Arc<dyn FollowerObserver>,
}

/// The layer above a follower's Receiver channel: told, on the Receiver's thread, what happened to the
/// image, without the media layer knowing what it means. Each call is on the Receiver's duty cycle, so an
/// implementation does no more than set counters or hand positions on.
pub trait FollowerObserver: Send + Sync + fmt::Debug {
    /// The image's rebuilt (contiguous) position, after each feedback pass (it only grows).
    fn rebuilt(&self, position: i64);
    /// A run of data frames was inserted into `log`: its markers and reserved values are in `run`.
    fn run_inserted(&self, log: &LogBuffer, run: &frame::DataRun);
    /// An extension frame ([`Frame::Extension`]: the layer above's control frames) of the image's own
    /// session and stream, from the image's source; its whole bytes.
    fn extension_frame(&self, header: &ExtensionHeader, bytes: &[u8]);
    /// Writes the acknowledgement of the image's rebuilt `position` (an extension frame of session
    /// `session_id` and stream `stream_id`) at the start of `dst`; returns its length (0: none is sent).
    fn encode_ack(&self, session_id: i32, stream_id: i32, position: i64, dst: &mut [u8]) -> usize;
}

impl ReceiveChannelConfig {
    /// A channel listening on `bind` for `stream_id`, with defaults for everything else.
    pub fn new(bind: SocketAddr, stream_id: i32) -> Self {
        Self {
            bind,
            stream_id,
            peers: Vec::new(),
            members: Vec::new(),
            channel: ChannelConfig::default(),
            image_dir: None,
            join_position: None,
            receiver_id: unique_receiver_id(),
            session_id: None,
            follower: None,
            reuse_port: false,
            inline_image_files: false,
            spare_image: None,
        }
    }
}

fn unique_receiver_id() -> i64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    (nanos ^ ((std::process::id() as u64) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9))
        as i64
}
