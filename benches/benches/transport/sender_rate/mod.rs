//! The transport bench's sender-rate part: our Sender's raw datagram rate in each send mode, to two
//! plain sockets drained on the second thread, beside bare `sendmsg` windows of the same rounds; its
//! table, its target and its `summary.json` entries.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quorumcast_bench::bench::{median, si, Cores, SetOnDrop};
use quorumcast_driver::frame::{StatusMessageFrame, DATA_HEADER_LENGTH};
use quorumcast_driver::media::channel::ChannelConfig;
use quorumcast_driver::media::network_publication::{NetworkPublication, SenderCounters};
use quorumcast_driver::media::sender::Sender;
use quorumcast_driver::media::transport::{RecvBatch, SendMode, SendOutcome, SocketOptions, UdpEndpoint};
use quorumcast_driver::shm::counters::Counter;
use quorumcast_driver::shm::log_buffer::{position_bits_to_shift, term_id, term_offset};
use quorumcast_driver::shm::log_buffer::{ExclusiveAppender, LogBuffer, LogConfig};
use serde_json::json;
use socket2::SockAddr;

use crate::{STREAM, TARGET_CLASSIC_OVER_BARE};

/// What the receivers' status messages say about the measured publication: its stream, its sender
/// position counter (`snd-pos`) and, per destination, the publication socket to answer.
#[derive(Clone, Debug)]
struct SmTarget {
    position: Counter,
    session_id: i32,
    stream_id: i32,
    initial_term_id: i32,
    term_length: usize,
    window: i32,
    answer_to: [SocketAddr; 2],
}

impl SmTarget {
    /// Sends, from each destination socket, a status message acknowledging the Sender's own position.
    ///
    /// The bench thread sends these itself, outside the measured time, about once a millisecond:
    /// acknowledging `snd-pos` keeps flow control out of the figure. (When the drain thread answered with
    /// what it had received, the host descheduling it for a few milliseconds, as other load on a small
    /// shared host does, closed the window and stalled the Sender, which a bare `sendmsg` loop never waits
    /// for.)
    fn acknowledge(&self, from: &[UdpEndpoint; 2]) {
        let bits = position_bits_to_shift(self.term_length);
        let acknowledged = self.position.get();
        for (i, endpoint) in from.iter().enumerate() {
            let mut sm = StatusMessageFrame {
                session_id: self.session_id,
                stream_id: self.stream_id,
                consumption_term_id: term_id(acknowledged, self.initial_term_id, bits),
                consumption_term_offset: term_offset(acknowledged, self.term_length) as i32,
                receiver_window: self.window,
                ..StatusMessageFrame::default()
            };
            sm.set_receiver_id(9000 + i as i64);
            let mut bytes = [0u8; 64];
            let length = sm.encode(&mut bytes).expect("a status message fits 64 bytes");
            let _ = endpoint.send(&bytes[..length], Some(&SockAddr::from(self.answer_to[i])));
        }
    }
}

/// Drains both destination sockets with `recvmmsg` until `stop`.
fn drain(endpoints: &[UdpEndpoint; 2], stop: &AtomicBool) {
    let mut batch = RecvBatch::new(64, 8192 + 64);
    while !stop.load(Ordering::Relaxed) {
        for endpoint in endpoints {
            let _ = endpoint.recv_batch(&mut batch);
        }
    }
}

/// One measured window of one point.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    datagrams: f64,
    syscalls: f64,
    data_syscalls: f64,
    control_syscalls: f64,
    /// Seconds spent sending: the window less the time the bench spent appending into the log and
    /// sending the receivers' status messages.
    send_seconds: f64,
    wall_seconds: f64,
}

impl Window {
    fn datagrams_per_s(&self) -> f64 {
        self.datagrams / self.send_seconds
    }
    fn syscalls_per_s(&self) -> f64 {
        self.syscalls / self.send_seconds
    }
}

/// A publication under measurement, with its own Sender, log appender and counters.
struct Measured {
    mode: SendMode,
    sender: Sender,
    appender: ExclusiveAppender,
    counters: SenderCounters,
    target: SmTarget,
    message: Vec<u8>,
    term_length: usize,
}

impl Measured {
    fn new(mode: SendMode, datagram: usize, destinations: [SocketAddr; 2], session_id: i32) -> Self {
        let term_length = 4 << 20;
        let log_config =
            LogConfig { session_id, stream_id: STREAM, initial_term_id: 3, ..LogConfig::new(term_length, datagram) };
        let log = LogBuffer::create_anonymous(log_config).expect("map a log");
        let mut appender = log.appender().expect("the log's appender");
        let counters = SenderCounters::detached();
        let config = ChannelConfig {
            destinations: destinations.to_vec(),
            mtu: datagram,
            term_length,
            send_mode: mode,
            receiver_window: term_length / 2,
            socket: SocketOptions { send_buffer: Some(4 << 20), receive_buffer: Some(4 << 20) },
            ..ChannelConfig::default()
        };
        let publication = NetworkPublication::new(log, config, counters.clone()).expect("open the publication");
        publication.warnings().iter().for_each(|w| eprintln!("warning: {w}"));
        assert_eq!(publication.send_mode(), mode, "the kernel refused send mode {mode}");
        let locals = publication.local_addrs();
        let local = |i: usize| {
            let port = locals[i.min(locals.len() - 1)].port();
            SocketAddr::new("127.0.0.1".parse().unwrap(), port)
        };
        let target = SmTarget {
            position: counters.position.clone(),
            session_id,
            stream_id: STREAM,
            initial_term_id: 3,
            term_length,
            window: (term_length / 2) as i32,
            answer_to: [local(0), local(1)],
        };
        appender.refresh_limit_from_consumers();
        // One frame of exactly `datagram` bytes per message, so that every data datagram is one frame.
        let message = vec![0x6Bu8; datagram - DATA_HEADER_LENGTH];
        Self { mode, sender: Sender::new(vec![publication]), appender, counters, target, message, term_length }
    }

    /// Appends whole frames up to the publication limit when less than a quarter term is buffered.
    #[inline]
    fn top_up(&mut self) -> bool {
        let buffered = self.appender.position() - self.sender.publications()[0].sender_position();
        if buffered >= (self.term_length / 4) as i64 {
            return false;
        }
        self.appender.refresh_limit_from_consumers();
        while self.appender.append(&self.message).is_ok() {}
        true
    }

    fn snapshot(&self) -> [i64; 3] {
        let c = &self.counters;
        [c.datagrams.get(), c.data_syscalls.get(), c.control_syscalls.get()]
    }

    /// Keeps the log topped up and the Sender busy for `seconds`; the counters' deltas over the window.
    fn window(&mut self, drains: &[UdpEndpoint; 2], seconds: f64) -> Window {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.sender.publications()[0].flow_control().live_count() < 2 {
            self.target.acknowledge(drains);
            self.top_up();
            self.sender.poll_once();
            assert!(Instant::now() < deadline, "the drain's status messages did not open flow control ({})", self.mode);
        }
        let warm = Instant::now();
        while warm.elapsed() < Duration::from_millis(20) {
            self.target.acknowledge(drains);
            self.top_up();
            self.sender.poll_once();
        }
        let before = self.snapshot();
        let start = Instant::now();
        let mut filling = Duration::ZERO;
        let mut cycles = 0u64;
        let mut next_ack = Instant::now();
        loop {
            let t = Instant::now();
            let mut outside = self.top_up();
            if t >= next_ack {
                self.target.acknowledge(drains);
                next_ack = t + Duration::from_millis(1);
                outside = true;
            }
            if outside {
                filling += t.elapsed();
            }
            self.sender.poll_once();
            cycles += 1;
            if cycles % 64 == 0 && start.elapsed().as_secs_f64() >= seconds {
                break;
            }
        }
        let wall = start.elapsed();
        let after = self.snapshot();
        if std::env::var_os("QC_BENCH_DIAG").is_some() {
            let c = &self.counters;
            println!(
                "  {} {}: after window: short sends {}, stalls {}, send errors {}, filling {:.0}% of {:.2} s, cycles {cycles}",
                self.mode,
                self.message.len() + DATA_HEADER_LENGTH,
                c.short_sends.get(),
                c.flow_control_stalls.get(),
                c.send_errors.get(),
                100.0 * filling.as_secs_f64() / wall.as_secs_f64(),
                wall.as_secs_f64()
            );
        }
        let delta = |i: usize| (after[i] - before[i]) as f64;
        assert!(self.sender.publications()[0].failure().is_none(), "{:?}", self.sender.publications()[0].failure());
        Window {
            datagrams: delta(0),
            syscalls: delta(1) + delta(2),
            data_syscalls: delta(1),
            control_syscalls: delta(2),
            send_seconds: (wall - filling).as_secs_f64(),
            wall_seconds: wall.as_secs_f64(),
        }
    }
}

/// Bare `sendmsg` of `datagram` bytes alternated over two connected sockets for `seconds`.
fn bare_window(endpoints: &[UdpEndpoint; 2], buffer: &[u8], seconds: f64) -> Window {
    let start = Instant::now();
    let (mut calls, mut sent) = (0u64, 0u64);
    loop {
        for endpoint in endpoints {
            calls += 1;
            if let SendOutcome::Sent(n) = endpoint.send(buffer, None) {
                sent += n as u64;
            }
        }
        if calls % 256 == 0 && start.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    Window {
        datagrams: sent as f64,
        syscalls: calls as f64,
        data_syscalls: calls as f64,
        control_syscalls: 0.0,
        send_seconds: wall,
        wall_seconds: wall,
    }
}

/// The median figures of one point of the sender-rate table.
pub struct RatePoint {
    mode: Option<SendMode>,
    datagram: usize,
    datagrams_per_s: f64,
    syscalls_per_s: f64,
    data_syscalls_per_s: f64,
    control_syscalls_per_s: f64,
    wall_datagrams_per_s: f64,
    bare_per_s: f64,
    /// Median over rounds of this point's window rate over the bare window of the same round.
    ratio: f64,
    windows: Vec<f64>,
}

/// For each datagram size: windows of bare `sendmsg` and of our Sender in each mode, interleaved round by
/// round (the host drifts), with the drain on the second thread.
pub fn sender_rates(cores: &Cores, seconds: f64, rounds: usize) -> Vec<RatePoint> {
    let options = SocketOptions { send_buffer: None, receive_buffer: Some(4 << 20) };
    let bind = || UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &options).expect("bind a drain socket").0;
    let drains = [bind(), bind()];
    let destinations = [drains[0].local_addr(), drains[1].local_addr()];
    let stop = AtomicBool::new(false);
    let (points, ()) = cores.run(
        || {
            // Stops the drain however this thread ends (a panic included), so the run never hangs.
            let _stop = SetOnDrop(&stop);
            let mut points = Vec::new();
            for (k, &datagram) in [1408usize, 8192].iter().enumerate() {
                let bare: [UdpEndpoint; 2] = [0, 1].map(|i| {
                    let (mut e, _) =
                        UdpEndpoint::bind("127.0.0.1:0".parse().unwrap(), &SocketOptions::default()).expect("bind");
                    e.connect(destinations[i]).expect("connect");
                    e
                });
                let buffer = vec![0u8; datagram + 64];
                let buffer = &buffer[buffer.as_ptr().align_offset(64)..][..datagram];
                let mut measured: Vec<Measured> = SendMode::ALL
                    .iter()
                    .enumerate()
                    .map(|(m, &mode)| Measured::new(mode, datagram, destinations, 100 + (k * 10 + m) as i32))
                    .collect();
                let mut bare_windows = Vec::new();
                let mut windows: Vec<Vec<Window>> = vec![Vec::new(); measured.len()];
                for _ in 0..rounds {
                    bare_windows.push(bare_window(&bare, buffer, seconds));
                    for (m, publication) in measured.iter_mut().enumerate() {
                        windows[m].push(publication.window(&drains, seconds));
                    }
                }
                let bare_per_s = median(bare_windows.iter().map(Window::datagrams_per_s).collect());
                points.push(RatePoint {
                    mode: None,
                    datagram,
                    datagrams_per_s: bare_per_s,
                    syscalls_per_s: median(bare_windows.iter().map(Window::syscalls_per_s).collect()),
                    data_syscalls_per_s: median(bare_windows.iter().map(Window::syscalls_per_s).collect()),
                    control_syscalls_per_s: 0.0,
                    wall_datagrams_per_s: bare_per_s,
                    bare_per_s,
                    ratio: 1.0,
                    windows: bare_windows.iter().map(Window::datagrams_per_s).collect(),
                });
                for (m, w) in windows.iter().enumerate() {
                    let per = |f: &dyn Fn(&Window) -> f64| median(w.iter().map(f).collect());
                    points.push(RatePoint {
                        mode: Some(measured[m].mode),
                        datagram,
                        datagrams_per_s: per(&Window::datagrams_per_s),
                        syscalls_per_s: per(&Window::syscalls_per_s),
                        data_syscalls_per_s: per(&|x| x.data_syscalls / x.send_seconds),
                        control_syscalls_per_s: per(&|x| x.control_syscalls / x.send_seconds),
                        wall_datagrams_per_s: per(&|x| x.datagrams / x.wall_seconds),
                        bare_per_s,
                        ratio: median(
                            w.iter()
                                .zip(&bare_windows)
                                .map(|(x, b)| x.datagrams_per_s() / b.datagrams_per_s())
                                .collect(),
                        ),
                        windows: w.iter().map(Window::datagrams_per_s).collect(),
                    });
                }
            }
            points
        },
        || drain(&drains, &stop),
    );
    points
}

pub fn print_rate_table(points: &[RatePoint]) -> bool {
    println!();
    println!(
        "Sender raw datagram rate, 2 destinations drained by the second thread (median of the windows; \
         'vs bare' is the median over rounds of each window over the bare window of the same round)"
    );
    println!(
        "| {:<8} | {:>6} | {:>12} | {:>11} | {:>10} | {:>10} | {:>12} | {:>8} | {:<28} |",
        "mode",
        "bytes",
        "datagrams/s",
        "syscalls/s",
        "data sc/s",
        "ctrl sc/s",
        "wall rate",
        "vs bare",
        "windows (datagrams/s)"
    );
    let mut pass = true;
    for p in points {
        let ratio = p.ratio;
        let verdict = match p.mode {
            Some(SendMode::Classic) => {
                let ok = ratio >= TARGET_CLASSIC_OVER_BARE;
                pass &= ok;
                if ok {
                    " PASS"
                } else {
                    " MISS"
                }
            }
            _ => "",
        };
        let windows: Vec<String> = p.windows.iter().map(|w| si(*w)).collect();
        println!(
            "| {:<8} | {:>6} | {:>12} | {:>11} | {:>10} | {:>10} | {:>12} | {:>7.2}x{} | {:<28} |",
            p.mode.map_or("bare".to_string(), |m| m.to_string()),
            p.datagram,
            si(p.datagrams_per_s),
            si(p.syscalls_per_s),
            si(p.data_syscalls_per_s),
            si(p.control_syscalls_per_s),
            si(p.wall_datagrams_per_s),
            ratio,
            verdict,
            windows.join(" ")
        );
    }
    pass
}

/// The sender-rate points as `summary.json`'s `sender_rate` array.
pub fn sender_rate_json(points: &[RatePoint]) -> serde_json::Value {
    points
        .iter()
        .filter_map(|p| {
            p.mode.map(|mode| {
                json!({
                    "send_mode": mode.as_str(),
                    "datagram_bytes": p.datagram,
                    "destinations": 2,
                    "datagrams_per_s": p.datagrams_per_s,
                    "syscalls_per_s": p.syscalls_per_s,
                    "bare_sendmsg_per_s": p.bare_per_s,
                })
            })
        })
        .collect()
}
