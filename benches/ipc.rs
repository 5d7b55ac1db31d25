//! IPC benchmark (being built in issue 2).
fn main() {}
