//! # quorumcast-driver
//!
//! The media driver under [quorumcast](https://docs.rs/quorumcast): the floors that know nothing of
//! consensus. Aeron's frames as they go on the wire and sit in the log ([`frame`]), shared memory (mapped
//! buffers, Aeron's three-term log buffers, ring buffers, counters: [`shm`]), duty-cycle agents and their
//! idle strategies ([`agent`]), and the media: transports, the Sender and the Receiver ([`media`]). The
//! hot send loop (append, Sender, `sendmmsg`) lives in this one crate, so nothing on it crosses a crate
//! boundary.
//!
//! Layers, bottom first, each importing only those before it: the foundation ([`frame`], [`event_log`],
//! [`setting`]), [`shm`], [`agent`], [`media`].
//!
//! **Not a promised API.** This crate is public so that the consensus crate, the engine, its benches,
//! fuzz targets and tools can reach these floors by name; an application embeds `quorumcast` and names
//! what it needs from that crate's root. Anything here may change in any release.
//!
//! Raw-pointer code is confined to `shm::buffer` (mapped memory and its atomic views) and
//! `media::transport` (the `sendmmsg`, `recvmmsg` and GSO calls); the other `unsafe` blocks are single
//! libc calls, each stating what makes it sound.

/// Declares a struct of test-only switches (bugs planted to prove the simulators catch them). With the
/// calling crate's `sim` feature it has a public `bool` field per switch; without it (an embedder's
/// build) it has none, and each switch reads as a constant `false`, so the product carries no test
/// branch. Read a switch with its method, `bugs.name()`.
#[macro_export]
macro_rules! planted_switches {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident: bool,)* }) => {
        #[cfg(feature = "sim")]
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: bool,)*
        }

        #[cfg(feature = "sim")]
        impl $name {
            $(
                #[inline]
                #[allow(dead_code)]
                pub(crate) fn $field(&self) -> bool {
                    self.$field
                }
            )*
        }

        #[cfg(not(feature = "sim"))]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub(crate) struct $name {
            _none: (),
        }

        #[cfg(not(feature = "sim"))]
        impl $name {
            $(
                #[inline]
                #[allow(dead_code)]
                pub(crate) const fn $field(&self) -> bool {
                    false
                }
            )*
        }
    };
}

pub mod event_log;
pub mod frame;
pub mod setting;

pub mod agent;
pub mod media;
pub mod shm;
