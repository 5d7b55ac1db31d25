//! The sweep's arguments (the profile flags, the lists that replace a profile's, `--verbose`, the errors
//! that say what to change) and the prediction's inputs (the C probe's value for an idle strategy, the
//! model's mu and M_pkt).

use super::c_probe::probe_c_for;
use super::config::predict;
use super::profile::ConfigSpec;
use super::*;
use crate::report::{CProbe, C_ALONE, C_SHARED};

fn args(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn no_arguments_run_the_quick_profile() {
    let o = parse_args(&args("--bench"), Path::new("target/sweep")).unwrap();
    assert_eq!(o.profile, Profile::quick());
    assert_eq!(o.out, PathBuf::from("target/sweep"));
}

#[test]
fn lists_replace_the_profiles() {
    let o = parse_args(
        &args("--full --mtu 1408 --idle noop,sleep-ns:1000 --msg 32,128 --send-mode gso --rho 0.5 --out /tmp/x"),
        Path::new("t"),
    )
    .unwrap();
    assert_eq!(o.profile.name, "full-custom");
    assert_eq!(o.profile.mtus, vec![1408]);
    assert_eq!(o.profile.idles.len(), 2);
    assert_eq!(o.profile.msgs, vec![32, 128]);
    assert_eq!(o.profile.send_modes, vec![SendMode::Gso]);
    assert_eq!(o.profile.rhos, vec![0.5]);
    assert_eq!(o.profile.timings, Profile::full().timings);
    assert_eq!(o.out, PathBuf::from("/tmp/x"));
}

#[test]
fn verbose_is_a_switch_that_leaves_the_profile_alone() {
    let o = parse_args(&args("--tiny --verbose"), Path::new("t")).unwrap();
    assert!(o.verbose);
    assert_eq!(o.profile, Profile::tiny(), "not a custom grid");
    assert!(!parse_args(&args("--tiny"), Path::new("t")).unwrap().verbose);
}

#[test]
fn bad_arguments_say_what_to_change() {
    let e = parse_args(&args("--mtu abc"), Path::new("t")).unwrap_err().to_string();
    assert!(e.contains("--mtu \"abc\"") && e.contains("usage"), "{e}");
    assert!(parse_args(&args("--rho"), Path::new("t")).unwrap_err().to_string().contains("needs a value"));
    assert!(parse_args(&args("--wat 1"), Path::new("t")).unwrap_err().to_string().contains("unknown"));
    assert!(parse_args(&args("--msg 4"), Path::new("t")).unwrap_err().to_string().contains("8-byte"));
}

#[test]
fn predictions_take_the_probe_c_for_the_idle_strategy() {
    let c_probe = [
        CProbe { idle: "noop".into(), layout: C_SHARED.into(), c_per_s: 9.0, data_syscalls_per_s: 1.0, loads: vec![] },
        CProbe {
            idle: "noop".into(),
            layout: C_ALONE.into(),
            c_per_s: 40_000.0,
            data_syscalls_per_s: 1.0,
            loads: vec![],
        },
    ];
    let mut config = ConfigSpec {
        mtu: 1408,
        idle: IdleStrategyConfig::NoOp,
        msg: 128,
        send_mode: SendMode::Classic,
        control: Control::Separate,
    };
    assert_eq!(probe_c_for(&config, &c_probe), 40_000.0);
    let (m_pkt, mu, why) = predict(&config, 200_000.0, 40_000.0);
    assert_eq!((m_pkt, why), (8, None));
    assert!((mu - 640_000.0).abs() < 1.0, "{mu}");
    config.idle = IdleStrategyConfig::Yield;
    assert_eq!(probe_c_for(&config, &c_probe), 0.0);
    assert!(predict(&config, 0.0, 0.0).2.is_some(), "no S, no prediction");
}
