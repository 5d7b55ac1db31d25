//! Where each layout puts the cluster's threads: the sweep's for 1, 2 and 4 cores, the C probe's two, the
//! cluster bench's split and the whole-cluster-on-one-thread layout; what each says of itself, and how a
//! layout moves onto a process's own cores.

use super::*;

#[test]
fn the_c_probe_gives_the_consensus_agent_a_core_of_its_own_and_nothing_else_spins() {
    let two = Layout::for_cores(2).for_c_probe();
    assert!(!two.invoked, "the consensus agent runs its own duty cycle");
    assert_eq!((two.consensus, two.sender, two.followers, two.harness), (Some(1), Some(0), Some(0), Some(0)));
    let noop: IdleStrategyConfig = "noop".parse().unwrap();
    assert_eq!(two.sender_idle(noop), IdleStrategyConfig::default(), "a Sender sharing a core backs off");
    let four = Layout::for_cores(4);
    assert_eq!(four.for_c_probe(), four, "with 4 cores the consensus agent has core 2 already");
    assert_eq!(four.sender_idle(noop), noop, "a Sender alone on its core may spin");
    let one = Layout::for_cores(1);
    assert_eq!(one.for_c_probe(), one, "one core: nothing to pin");
}

#[test]
fn the_shared_c_probe_puts_the_whole_leader_on_the_sender_s_core_and_invokes_the_followers() {
    let two = Layout::for_cores(2).for_c_probe_shared();
    assert!(two.leader_shared && two.invoked, "the harness runs the followers");
    assert_eq!((two.sender, two.harness), (Some(1), Some(0)));
    let text = two.describe(IdleStrategyConfig::NoOp);
    assert!(text.contains("consensus+sender+receiver thread (one thread, idle under test): core 1"), "{text}");
    assert!(text.contains("yielding") && text.contains("invokers by the harness thread: core 0"), "{text}");
    let four = Layout::for_cores(4).for_c_probe_shared();
    assert!(four.leader_shared && !four.invoked, "with 4 cores the followers keep their own threads");
    assert!(four
        .describe(IdleStrategyConfig::NoOp)
        .contains("followers (shared mode, backoff, one thread each): core 3"));
    let split = Layout::split(true);
    assert_eq!(split.for_c_probe_shared(), split, "the split layout invokes the whole leader already");
}

#[test]
fn two_cores_give_the_sender_core_one_alone_and_invoke_the_rest() {
    let layout = Layout::for_cores(2);
    assert_eq!(layout.sender, Some(1));
    assert!(layout.invoked);
    assert_eq!((layout.harness, layout.consensus, layout.followers), (Some(0), Some(0), Some(0)));
    let text = layout.describe(IdleStrategyConfig::NoOp);
    assert!(text.contains("core 1 alone") && text.contains("through their invokers"), "{text}");
    assert_eq!(layout.sender_idle(IdleStrategyConfig::NoOp), IdleStrategyConfig::NoOp);
}

#[test]
fn the_whole_layout_runs_every_member_on_the_harness_thread_and_pins_nothing_else() {
    let whole = Layout::whole_on(1);
    assert!(whole.whole && whole.invoked && !whole.split && !whole.leader_shared);
    assert_eq!(whole.busy_cores(), vec![Some(1)], "one thread, one core");
    assert_eq!(whole.for_c_probe(), whole, "the leader is invoked whole already");
    assert_eq!(whole.for_c_probe_shared(), whole, "the leader is invoked whole already");
    assert!(!whole.sender_idle(IdleStrategyConfig::NoOp).is_busy(), "nothing spins beside the harness");
    let text = whole.describe(IdleStrategyConfig::NoOp);
    assert!(text.contains("one harness thread: core 1") && text.contains("every member whole"), "{text}");
}

#[test]
fn one_core_never_spins_the_sender() {
    let layout = Layout::for_cores(1);
    assert!(!layout.sender_idle(IdleStrategyConfig::NoOp).is_busy());
    assert!(layout.describe(IdleStrategyConfig::NoOp).contains("gets less than the probe's S"));
}

#[test]
fn four_cores_spread_the_threads() {
    let layout = Layout::for_cores(4);
    assert!(!layout.invoked);
    assert_eq!(
        (layout.harness, layout.sender, layout.consensus, layout.followers),
        (Some(0), Some(1), Some(2), Some(3))
    );
    assert!(layout.describe(IdleStrategyConfig::NoOp).contains("leader consensus thread"));
}

#[test]
fn a_layout_lands_on_the_process_s_own_cores() {
    let layout = Layout::for_cores(2).on_cores(&[2, 3]);
    assert_eq!(
        (layout.harness, layout.sender, layout.consensus, layout.followers),
        (Some(2), Some(3), Some(2), Some(2))
    );
    assert_eq!(layout.probe_cores().sender, Some(3));
    assert_eq!(layout.busy_cores(), [Some(2), Some(3)]);
    assert_eq!(Layout::unpinned().busy_cores(), [None]);
    assert_eq!(Layout::for_cores(2).on_cores(&[0, 1]), Layout::for_cores(2));
    assert_eq!(Layout::for_cores(1).on_cores(&[5]), Layout::for_cores(1), "nothing pinned stays unpinned");
}
