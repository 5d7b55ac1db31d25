//! Labelled 64-bit counters in a shared-memory file, readable by other processes while a node runs.
//!
//! (Only [`Counter`] is here yet; the counters file, its allocator and reader are being built in issue 2.)

use crate::buffer::AtomicBuffer;

/// A handle to one 64-bit counter value, alone on its cache line.
///
/// A counter has one writer (the agent that owns it) unless documented otherwise; readers in any
/// process load it with acquire ordering. Updates are plain load + release store for the single writer,
/// which costs no locked instruction on the hot path; [`Counter::get_and_add`] is the atomic form for
/// counters that several threads update.
#[derive(Clone, Debug)]
pub struct Counter {
    value: AtomicBuffer,
    id: i32,
}

impl Counter {
    /// A counter over the first 8 bytes of `value` (which must be 8-byte aligned), with identity `id`.
    pub fn new(value: AtomicBuffer, id: i32) -> Self {
        assert!(value.len() >= 8, "a counter needs 8 bytes");
        Self { value, id }
    }

    /// A counter in private memory, for agents run without a counters file (tests, invoker mode).
    pub fn detached() -> Self {
        Self::new(AtomicBuffer::anonymous(8).expect("map 8 bytes"), -1)
    }

    /// The counter's identity in its file (-1 when detached).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Current value (acquire).
    #[inline]
    pub fn get(&self) -> i64 {
        self.value.get_i64_acquire(0)
    }

    /// Sets the value (release). Single writer.
    #[inline]
    pub fn set(&self, value: i64) {
        self.value.put_i64_release(0, value)
    }

    /// Adds `delta` (single writer: load + release store).
    #[inline]
    pub fn add(&self, delta: i64) {
        self.value.put_i64_release(0, self.value.get_i64(0) + delta)
    }

    /// Adds one (single writer).
    #[inline]
    pub fn increment(&self) {
        self.add(1)
    }

    /// Raises the value to `value` if it is higher (single writer).
    #[inline]
    pub fn set_max(&self, value: i64) {
        self.value.put_i64_max(0, value)
    }

    /// Atomically adds `delta` and returns the previous value, for counters with several writers.
    #[inline]
    pub fn get_and_add(&self, delta: i64) -> i64 {
        self.value.get_and_add_i64(0, delta)
    }
}
