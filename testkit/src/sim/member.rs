//! Each member's node as the simulator starts it: its host address, its environment (simulated clock,
//! network and disk), the members its node file names, and its builder.

use super::*;

/// Member `id`'s environment: its simulated clock, the network, its disk, a seed, the planted bugs, and (with a log
/// cost) a charge for every log file its consensus thread makes itself.
pub(super) fn environment(
    config: &SimConfig,
    network: &SimNetwork,
    id: i32,
    time: &Arc<SimulatedTime>,
    busy_ns: &Arc<std::sync::atomic::AtomicU64>,
    disk: &SimDisk,
    seed: u64,
) -> Environment {
    let mut env =
        Environment::deterministic(NanoClock::simulated(Arc::clone(time)), SharedNetwork::new(network.clone()), seed);
    env.disk = disk.process();
    env.bugs = config.bugs;
    env.shuffle_agents = config.shuffle_agents;
    if config.log_cost_ns_per_kib > 0 {
        let (network, host, busy, per_kib) =
            (network.clone(), address(id, 0).ip(), Arc::clone(busy_ns), config.log_cost_ns_per_kib);
        env.inline_log_cost = Some(InlineLogCost::new(move |bytes| {
            let cost = bytes as u64 / 1024 * per_kib;
            // What it sends from now on leaves when the file is made; it runs nothing else meanwhile.
            network.hold_host(host, cost);
            busy.fetch_add(cost, std::sync::atomic::Ordering::Relaxed);
        }));
    }
    env
}

/// Member `id`'s host: `10.77.0.<id + 1>`, with `port`.
pub(super) fn address(id: i32, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, id as u8 + 1)), port)
}

/// Member `id`'s node: invoker mode, the default timers, a small-term channel, the storage of `config`.
/// The members node `id`'s node file names (see [`SimConfig::narrow_node_files`]).
pub(super) fn node_file<'a>(members: &'a [Member], id: i32, config: &SimConfig) -> &'a [Member] {
    if config.membership && config.narrow_node_files && (id as usize) < config.members {
        &members[..config.members]
    } else {
        members
    }
}

pub(super) fn node_builder(scratch: &ScratchDir, id: i32, members: &[Member], config: &SimConfig) -> NodeBuilder {
    let term_length = config.term_length;
    let auth = config.auth.then(|| AuthKey::derive("node simulator", &config.seed.to_le_bytes()));
    let channel =
        ChannelConfig { mtu: 1408, term_length, receiver_window: term_length / 2, auth, ..ChannelConfig::default() };
    let mut builder = NodeBuilder::new(id, members.to_vec());
    if config.membership {
        builder = builder.initial_members((0..config.members as i32).collect());
    }
    let builder = builder
        .leader(0)
        .timers(Timers::default())
        .data_dir(scratch.join(format!("data-{id}")))
        .directory(scratch.join(format!("node-{id}")))
        .clean_stale(true)
        .channel(channel)
        .threading(ThreadingMode::Invoker)
        .idle_all("backoff");
    let builder = match config.clients {
        0 => builder,
        _ => builder.clients(ClientEndpointConfig::enabled(AuthKey::derive("node simulator sessions", &[]))),
    };
    match config.storage {
        Some(sync) if config.snapshots => builder.storage(StorageConfig {
            sync,
            segment_length: 64 << 10,
            snapshot_interval: Some(SNAPSHOT_INTERVAL),
            snapshots_kept: 2,
            ..StorageConfig::default()
        }),
        Some(sync) => builder.sync(sync),
        None => builder.memory_log(),
    }
}
