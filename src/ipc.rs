//! Being built in issue 2.
