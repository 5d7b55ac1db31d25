//! `qc-stat`: prints the counters of a running node (being built in issue 2).
fn main() {
    eprintln!("qc-stat: not built yet");
    std::process::exit(2);
}
