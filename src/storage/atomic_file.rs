//! Replacing a small file whole, so that after a crash at any moment it holds the old bytes or the new
//! ones, never a mix: the vote file and the recording index are written so.

use std::io;
use std::path::{Path, PathBuf};

use super::disk::Disk;

/// A step of a replacement that failed: the file it was on, what was being done, and the system's error.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) path: PathBuf,
    pub(crate) action: &'static str,
    pub(crate) source: io::Error,
}

/// Replaces `path` with `bytes` on `disk`: written to `<path>.tmp`, synced (`fdatasync`) when `sync`,
/// renamed over `path`, and the directory synced when `sync`, so the rename is durable too.
pub(crate) fn replace(disk: &dyn Disk, path: &Path, bytes: &[u8], sync: bool) -> Result<(), Failed> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    fn failed(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> Failed {
        let path = path.to_path_buf();
        move |source| Failed { path, action, source }
    }
    let file = disk.create(&tmp).map_err(failed(&tmp, "create its temporary copy"))?;
    file.write_all_at(bytes, 0).map_err(failed(&tmp, "write it"))?;
    if sync {
        file.sync_data().map_err(failed(&tmp, "sync it"))?;
    }
    drop(file);
    disk.rename(&tmp, path).map_err(failed(path, "rename its temporary copy over it"))?;
    if sync {
        let dir = path.parent().unwrap_or(Path::new("."));
        disk.sync_dir(dir).map_err(failed(dir, "sync its directory"))?;
    }
    Ok(())
}
