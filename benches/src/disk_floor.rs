//! This disk's own floors, measured in the run that measures the recorded log on it: how long an
//! `fdatasync` takes after a small append, how fast the disk takes sequential writes through the page
//! cache, and how many bytes per second writers that each append a batch and `fdatasync` it, one sync at a
//! time, get onto it. A recorder under `batch` does the last; no recorder can beat the disk at it.
//!
//! Files are written as the recorder writes its segments: appended at the end, disk space reserved ahead
//! (`fallocate` with `FALLOC_FL_KEEP_SIZE`, 8 MiB at a time), each writer its own file, removed after.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Disk space reserved ahead of the writes, as the recorder reserves it.
const RESERVE_STEP: u64 = 8 << 20;

/// `fdatasync` latency after an append.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncLatency {
    /// Bytes appended before each sync.
    pub append: usize,
    /// Writers syncing at once, each its own file.
    pub writers: usize,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Syncs measured.
    pub samples: u64,
}

/// Bytes per second written, and how.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteRate {
    /// Writers, each appending to a file of its own.
    pub writers: usize,
    /// Bytes of each write (and, when synced, of each batch before its `fdatasync`).
    pub block: usize,
    /// Bytes per second, all writers together.
    pub bytes_per_s: f64,
    /// `fdatasync` calls per second per writer (0 when not synced per block).
    pub syncs_per_s_each: f64,
    /// The writers' CPU time (user and system, `RUSAGE_THREAD`) per byte written, nanoseconds: what the
    /// page cache's copy costs, whatever share of the cores the writers got.
    pub cpu_ns_per_byte: f64,
}

/// This thread's CPU time (user and system), nanoseconds.
fn thread_cpu_ns() -> u64 {
    // SAFETY: getrusage fills the zeroed struct it is given and touches nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// A file appended to as a recorder appends to its segment.
struct Appender {
    file: File,
    path: PathBuf,
    length: u64,
    reserved: u64,
}

impl Appender {
    fn create(path: PathBuf) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path)?;
        Ok(Self { file, path, length: 0, reserved: 0 })
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let needed = self.length + bytes.len() as u64;
        if needed > self.reserved {
            self.reserved = needed.next_multiple_of(RESERVE_STEP);
            let length = libc::off_t::try_from(self.reserved).map_err(|_| io::ErrorKind::InvalidInput)?;
            // SAFETY: a plain syscall on this file's own open descriptor; it touches no memory.
            unsafe { libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, length) };
        }
        self.file.write_all_at(bytes, self.length)?;
        self.length = needed;
        Ok(())
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `fdatasync` after each append of `append` bytes, by `writers` threads each to a file of its own in
/// `dir` (so many syncs at once on the disk): `samples` syncs each, or as many as `time` allows.
pub fn sync_latency(
    dir: &Path,
    append: usize,
    writers: usize,
    samples: usize,
    time: Duration,
) -> io::Result<SyncLatency> {
    std::fs::create_dir_all(dir)?;
    let histograms: Vec<io::Result<Histogram<u64>>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let path = dir.join(format!("floor-sync-{w}.dat"));
                scope.spawn(move || -> io::Result<Histogram<u64>> {
                    let mut file = Appender::create(path)?;
                    let block = vec![0x5au8; append];
                    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
                    let end = Instant::now() + time;
                    for _ in 0..samples {
                        if Instant::now() > end {
                            break;
                        }
                        file.append(&block)?;
                        let started = Instant::now();
                        file.file.sync_data()?;
                        let _ = histogram.record(started.elapsed().as_nanos() as u64);
                    }
                    Ok(histogram)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err(io::Error::other("a writer panicked")))).collect()
    });
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    for h in histograms {
        histogram.add(h?).map_err(|e| io::Error::other(e.to_string()))?;
    }
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1e3;
    Ok(SyncLatency { append, writers, p50_us: us(0.5), p99_us: us(0.99), samples: histogram.len() })
}

/// `writers` threads, each appending `block` bytes at a time to a file of its own in `dir` for `time`;
/// with `synced`, each `fdatasync`s after every block (one sync in flight per writer), else once at the
/// end (counted in the time: the rate is what reached the disk; not in the CPU per byte, which is the
/// writes' own).
pub fn write_rate(dir: &Path, writers: usize, block: usize, synced: bool, time: Duration) -> io::Result<WriteRate> {
    std::fs::create_dir_all(dir)?;
    let started = Instant::now();
    let results: Vec<io::Result<(u64, u64, u64)>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..writers)
            .map(|w| {
                let path = dir.join(format!("floor-write-{w}.dat"));
                scope.spawn(move || -> io::Result<(u64, u64, u64)> {
                    let mut file = Appender::create(path)?;
                    let cpu = thread_cpu_ns();
                    let bytes = vec![0xa5u8; block];
                    let (mut written, mut syncs) = (0u64, 0u64);
                    let end = Instant::now() + time;
                    while Instant::now() < end {
                        file.append(&bytes)?;
                        written += block as u64;
                        if synced {
                            file.file.sync_data()?;
                            syncs += 1;
                        }
                    }
                    let cpu = thread_cpu_ns() - cpu;
                    if !synced {
                        file.file.sync_data()?;
                    }
                    Ok((written, syncs, cpu))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or_else(|_| Err(io::Error::other("a writer panicked")))).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let (mut written, mut syncs, mut cpu) = (0u64, 0u64, 0u64);
    for result in results {
        let (w, s, c) = result?;
        written += w;
        syncs += s;
        cpu += c;
    }
    Ok(WriteRate {
        writers,
        block,
        bytes_per_s: written as f64 / seconds,
        syncs_per_s_each: syncs as f64 / seconds / writers.max(1) as f64,
        cpu_ns_per_byte: cpu as f64 / written.max(1) as f64,
    })
}
