//! Housekeeping threads: work beside the agents (unmapping a retired log, making a spare one) that must
//! not take a core from them.
//!
//! Such a thread is spawned by whichever thread needs the work done, often an agent pinned to its core,
//! and would inherit that pin. It runs instead with two changes, made on itself before its work
//! ([`spawn`]):
//!
//! - its affinity is the process's (the main thread's mask, what the operator gave the process), not the
//!   spawner's, so that it runs on whichever allowed core is idle;
//! - it is scheduled `SCHED_IDLE` (Linux): any normal thread made runnable on its core preempts it at
//!   once, at its next return to user space or `cond_resched` point, rather than waiting for the tick.
//!
//! Why, measured on the AMD guest of 2026-12-05 (client bench, MTU 8192, rho 0.1, in process, with
//! `perf record -a -e cpu-clock,sched:sched_switch` and a probe logging each harness cycle over 1 ms): the
//! three members' `log-spare` threads, spawned from the harness thread and so pinned to its core at nice
//! 10, ran beside it for 0.6 s of the 3 s point and were what ran instead of the harness in 62 of its 71
//! cycles over 1 ms, 13 of them about a whole 4 ms tick (HZ 250): a nice-10 thread inside a long
//! `fallocate` or a burst of page faults keeps the core until the tick, however often the agent's timer
//! fires meanwhile. With this module and paced page allocation ([`Pacing`](crate::shm::buffer::Pacing)):
//! 5 to 7 cycles over 1 ms in the same point, none with a housekeeping thread on the core (in-process
//! p99 533 and 574 us against 2,783 and 3,910 before).
//!
//! The cost: when every allowed core is busy, a `SCHED_IDLE` thread gets a sliver of one (a weight of 3
//! against 1024), so its work takes longer; what it does is never on a path that waits for it (the
//! unmapped memory stays counted a little longer; a term that finds no spare ready makes its own).

/// Spawns a housekeeping thread named `name` that runs `work` on the process's cores at idle priority
/// (see the module docs); `Err` when the thread cannot be spawned.
pub(crate) fn spawn<F, T>(name: &str, work: F) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().name(name.into()).spawn(move || {
        run_beside_agents();
        work()
    })
}

/// Moves the calling thread to the process's cores and to idle priority. What the kernel refuses is left
/// as it was: a housekeeping thread that stays pinned, or at normal priority, still does its work.
#[cfg(target_os = "linux")]
fn run_beside_agents() {
    // SAFETY: `sched_getaffinity` writes at most `size_of::<cpu_set_t>()` bytes into `cores`, a valid,
    // zeroed `cpu_set_t`; `sched_setaffinity` and `sched_setscheduler` only read theirs (pid 0: the
    // calling thread). A failure leaves the thread as it was.
    unsafe {
        let mut cores: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut cores) == 0 {
            libc::sched_setaffinity(0, size, &cores);
        }
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
        }
    }
    // A new thread often starts on its spawner's core, ahead of it, and the change of policy does not make
    // the kernel reschedule: without this, the spawner (an agent) waited for the next tick while this
    // thread reserved its first pages (4 ms, seen in `perf sched` on the AMD guest).
    std::thread::yield_now();
}

/// Elsewhere the thread stays as spawned.
#[cfg(not(target_os = "linux"))]
fn run_beside_agents() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_housekeeping_thread_spawned_by_a_pinned_thread_runs_unpinned_at_idle_priority() {
        let process_cores = affinity_count(0);
        let seen = std::thread::spawn(move || {
            // Pinned to one core, as an agent is; the housekeeping thread it spawns must not inherit it.
            let pinned = crate::agent::pin_current_thread(first_core()).is_ok();
            let (policy, cores) = spawn("qc-test-bg", || {
                // SAFETY: reads the calling thread's scheduling policy; no memory is passed.
                let policy = unsafe { libc::sched_getscheduler(0) };
                (policy, affinity_count(0))
            })
            .unwrap()
            .join()
            .unwrap();
            (pinned, policy, cores)
        })
        .join()
        .unwrap();
        let (pinned, policy, cores) = seen;
        assert!(pinned, "the spawning thread could not be pinned");
        assert_eq!(policy, libc::SCHED_IDLE, "the housekeeping thread runs SCHED_IDLE");
        assert_eq!(cores, process_cores, "the housekeeping thread has the process's cores, not its spawner's");
    }

    /// How many cores the thread `tid` (0: the caller) may run on.
    fn affinity_count(tid: libc::pid_t) -> usize {
        // SAFETY: `set` is a valid, zeroed `cpu_set_t` that `sched_getaffinity` fills; `CPU_COUNT` reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            libc::CPU_COUNT(&set) as usize
        }
    }

    /// The lowest core the process may run on.
    fn first_core() -> usize {
        // SAFETY: as in `affinity_count`; `CPU_ISSET` reads the set for an index below `CPU_SETSIZE`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).unwrap_or(0)
        }
    }
}
