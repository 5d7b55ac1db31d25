//! The node directory: one directory per running node, holding its shared-memory files.
//!
//! A node keeps its counters file (and later its logs) in `/dev/shm/quorumcast/<name>`
//! ([`NodeDirectory::default_path`]); on hosts without `/dev/shm` the root is
//! `std::env::temp_dir()/quorumcast` instead, which works the same but may be backed by a disk.
//!
//! Liveness is an advisory `flock(LOCK_EX)` on `<dir>/node.lock`, held for as long as the node's
//! [`NodeDirectory`] lives. The kernel drops the lock when the process dies, however it dies, so:
//!
//! - lock held by someone else: a node is running there, [`DirectoryError::AlreadyRunning`];
//! - lock file present but nobody holds it: a crashed run left the directory behind,
//!   [`DirectoryError::Stale`], unless [`StalePolicy::Clean`] was asked for;
//! - the lock file holds the text `<pid> <start time in ms since the Unix epoch>` of its owner, for
//!   messages and for `qc-stat`.
//!
//! `flock` locks belong to an open file description, so a second [`NodeDirectory::create`] in the same
//! process (which opens the file again) is refused like one from another process.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Name of the lock file inside a node directory.
pub const LOCK_FILE_NAME: &str = "node.lock";

/// Root of node directories on hosts with a `/dev/shm` (memory-backed tmpfs).
pub const SHM_ROOT: &str = "/dev/shm/quorumcast";

/// How many times `create` tries to take a lock it finds held before it reports the node as running.
///
/// A reader probing liveness ([`NodeDirectory::status`]) holds the lock for a few microseconds; the
/// retries keep such a probe from making a starting node think another one runs.
const LOCK_ATTEMPTS: u32 = 5;

/// Pause between two lock attempts.
const LOCK_RETRY_PAUSE: Duration = Duration::from_millis(2);

/// What [`NodeDirectory::create`] does with a directory left behind by a run that no longer holds its lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StalePolicy {
    /// Refuse with [`DirectoryError::Stale`], leaving the files for inspection (the default).
    #[default]
    Refuse,
    /// Remove everything in the directory and start fresh; [`NodeDirectory::cleaned`] reports the run removed.
    Clean,
}

/// Who owned a node directory, as written in its lock file (either part may be unreadable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOwner {
    /// Process id of the owner.
    pub pid: Option<u32>,
    /// When the owner created the directory.
    pub started_at: Option<SystemTime>,
}

impl fmt::Display for LockOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid}")?,
            None => write!(f, "unknown pid")?,
        }
        if let Some(age) = self.started_at.and_then(|t| SystemTime::now().duration_since(t).ok()) {
            write!(f, ", started {:.1} s ago", age.as_secs_f64())?;
        }
        Ok(())
    }
}

/// The state of a node directory as seen from outside (by `qc-stat`), see [`NodeDirectory::status`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryStatus {
    /// No directory at the path.
    Missing,
    /// The directory exists but has no lock file: not a node directory, or a node in its first microseconds.
    NoLockFile,
    /// A live process holds the lock.
    Running(LockOwner),
    /// Nobody holds the lock: the owner has died without removing the directory.
    Stale(LockOwner),
}

/// Why a node directory could not be created or attached to.
#[derive(Debug)]
pub enum DirectoryError {
    /// A live process holds the directory's lock.
    AlreadyRunning {
        /// The node directory.
        path: PathBuf,
        /// The owner's pid as written in the lock file (None when unreadable).
        pid: Option<u32>,
    },
    /// The directory was left by a run that died; nobody holds its lock.
    Stale {
        /// The node directory.
        path: PathBuf,
        /// Pid of the dead run.
        pid: Option<u32>,
        /// When the dead run started.
        started_at: Option<SystemTime>,
    },
    /// [`NodeDirectory::attach`] found no directory at the path.
    Missing {
        /// The path looked at.
        path: PathBuf,
    },
    /// A file-system operation failed.
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyRunning { path, pid } => {
                let owner = LockOwner { pid: *pid, started_at: None };
                write!(
                    f,
                    "a node is already running in {} ({owner}): stop it or choose another node name",
                    path.display()
                )
            }
            Self::Stale { path, pid, started_at } => {
                let owner = LockOwner { pid: *pid, started_at: *started_at };
                write!(
                    f,
                    "{} was left by a node that is no longer running ({owner}): start with \
                     StalePolicy::Clean to remove it, or remove the directory yourself",
                    path.display()
                )
            }
            Self::Missing { path } => {
                write!(f, "no node directory at {}: is the node started, and under this name?", path.display())
            }
            Self::Io { action, path, source } => write!(f, "cannot {action} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for DirectoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> DirectoryError + 'a {
    move |source| DirectoryError::Io { action, path: path.to_path_buf(), source }
}

/// A node's directory of shared-memory files.
///
/// Invariants: a directory made by [`NodeDirectory::create`] holds the exclusive `flock` of its lock file
/// for its whole life (the open file is kept in `lock`), and removes the directory when dropped or
/// closed; one made by [`NodeDirectory::attach`] holds no lock and never removes anything.
#[derive(Debug)]
pub struct NodeDirectory {
    path: PathBuf,
    lock: Option<File>,
    cleaned: Option<LockOwner>,
}

impl NodeDirectory {
    /// The root holding node directories: `/dev/shm/quorumcast`, or `std::env::temp_dir()/quorumcast`
    /// when the host has no `/dev/shm`.
    pub fn default_root() -> PathBuf {
        let shm = Path::new(SHM_ROOT);
        match shm.parent() {
            Some(dev_shm) if dev_shm.is_dir() => shm.to_path_buf(),
            _ => std::env::temp_dir().join("quorumcast"),
        }
    }

    /// The default directory of the node called `name`: [`NodeDirectory::default_root`]`/<name>`.
    pub fn default_path(name: &str) -> PathBuf {
        Self::default_root().join(name)
    }

    /// Creates the node directory at `path` (and its parents), taking its lock.
    ///
    /// Refuses with [`DirectoryError::AlreadyRunning`] when a live process (this one included) holds
    /// the lock. A directory whose lock nobody holds and which holds anything besides an empty lock file
    /// is stale: refused with [`DirectoryError::Stale`], or emptied under the lock with
    /// [`StalePolicy::Clean`] (see [`NodeDirectory::cleaned`]). The lock file then receives this
    /// process's pid and start time.
    pub fn create(path: impl AsRef<Path>, policy: StalePolicy) -> Result<Self, DirectoryError> {
        let path = path.as_ref().to_path_buf();
        fs::create_dir_all(&path).map_err(io_error("create the node directory", &path))?;
        let lock_path = path.join(LOCK_FILE_NAME);
        let mut lock = lock_exclusively(&path, &lock_path)?;
        let previous = read_owner(&mut lock);
        let mut cleaned = None;
        if is_stale(&path, &lock, previous)? {
            match policy {
                StalePolicy::Refuse => {
                    return Err(DirectoryError::Stale { path, pid: previous.pid, started_at: previous.started_at })
                }
                StalePolicy::Clean => {
                    remove_entries_except_lock(&path)?;
                    cleaned = Some(previous);
                }
            }
        }
        write_owner(&mut lock).map_err(io_error("write the lock file", &lock_path))?;
        Ok(Self { path, lock: Some(lock), cleaned })
    }

    /// Attaches to an existing node directory without taking its lock, for readers such as `qc-stat`;
    /// dropping the result removes nothing.
    pub fn attach(path: impl AsRef<Path>) -> Result<Self, DirectoryError> {
        let path = path.as_ref().to_path_buf();
        if !path.is_dir() {
            return Err(DirectoryError::Missing { path });
        }
        Ok(Self { path, lock: None, cleaned: None })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of the file `name` in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether this handle owns the directory (holds its lock and removes it on drop).
    pub fn is_owner(&self) -> bool {
        self.lock.is_some()
    }

    /// The dead run whose files [`StalePolicy::Clean`] removed when this directory was created, if any.
    pub fn cleaned(&self) -> Option<LockOwner> {
        self.cleaned
    }

    /// The directory's state as seen from outside; see [`NodeDirectory::status`].
    pub fn current_status(&self) -> DirectoryStatus {
        Self::status(&self.path)
    }

    /// Whether a node runs in the directory at `path`, by probing its lock.
    ///
    /// The probe takes a shared lock for a few microseconds when nobody holds the exclusive one; a node
    /// starting in that instant retries (`create` tries several times before it reports a running node).
    pub fn status(path: impl AsRef<Path>) -> DirectoryStatus {
        DirectoryLock::status(path.as_ref(), LOCK_FILE_NAME)
    }

    /// Removes the directory now and releases the lock, reporting a failure to remove it.
    ///
    /// Does nothing for an attached directory.
    pub fn close(mut self) -> Result<(), DirectoryError> {
        self.remove()
    }

    /// Releases the lock and leaves the directory and its files in place, exactly as a crash would,
    /// for inspection after a run (the next `create` there reports it stale) and for tests.
    pub fn leak(mut self) -> PathBuf {
        self.lock = None;
        std::mem::take(&mut self.path)
    }

    /// Removes every entry, then the lock file, then the (then empty) directory, holding the lock until
    /// the end. A directory that is not empty at the last step (a new node got in) is left alone.
    fn remove(&mut self) -> Result<(), DirectoryError> {
        let Some(lock) = self.lock.take() else {
            return Ok(());
        };
        remove_entries_except_lock(&self.path)?;
        let lock_path = self.path.join(LOCK_FILE_NAME);
        fs::remove_file(&lock_path).map_err(io_error("remove the lock file", &lock_path))?;
        let removed = fs::remove_dir(&self.path);
        drop(lock);
        removed.map_err(io_error("remove the node directory", &self.path))
    }
}

/// An exclusive `flock` on the lock file `name` in a directory other than a node directory (a member's
/// data directory), held for as long as this value lives, so that a second process (or a second holder in
/// this one) is refused and a reader can tell whether the directory is in use ([`DirectoryLock::status`]).
///
/// Invariants: the file holds `<pid> <start ms>` of the holder, as a node directory's lock file does; it
/// is never removed (the next holder takes the lock on it again), and dropping the value releases the lock.
#[derive(Debug)]
pub struct DirectoryLock {
    path: PathBuf,
    _file: File,
}

impl DirectoryLock {
    /// Takes the lock of `dir/name` (creating the file; `dir` must exist), or refuses with
    /// [`DirectoryError::AlreadyRunning`] naming `dir` and the holder's pid while another holds it.
    pub fn acquire(dir: &Path, name: &str) -> Result<Self, DirectoryError> {
        let path = dir.join(name);
        let mut file = lock_exclusively(dir, &path)?;
        write_owner(&mut file).map_err(io_error("write the lock file", &path))?;
        Ok(Self { path, _file: file })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a process holds the lock of `dir/name`, by probing it (a shared lock for a few
    /// microseconds when nobody holds the exclusive one); writes nothing. [`DirectoryStatus::Stale`]: the
    /// file is there and nobody holds it.
    pub fn status(dir: &Path, name: &str) -> DirectoryStatus {
        if !dir.is_dir() {
            return DirectoryStatus::Missing;
        }
        let Ok(mut file) = File::open(dir.join(name)) else {
            return DirectoryStatus::NoLockFile;
        };
        let owner = read_owner(&mut file);
        match try_flock(&file, libc::LOCK_SH) {
            Ok(true) => DirectoryStatus::Stale(owner),
            // A lock we cannot probe (an odd file system) is reported as held: the safer guess.
            Ok(false) | Err(_) => DirectoryStatus::Running(owner),
        }
    }
}

impl Drop for NodeDirectory {
    fn drop(&mut self) {
        // A failure here leaves a stale directory, which the next start reports with its remedy.
        let _ = self.remove();
    }
}

/// Opens (creating) the lock file and takes its exclusive lock, retrying briefly when it is held.
///
/// After locking, checks that the locked file is still the one at `lock_path` (a node shutting down
/// unlinks it while holding the lock); if not, starts over on the new file.
fn lock_exclusively(dir: &Path, lock_path: &Path) -> Result<File, DirectoryError> {
    let mut attempts = 0;
    loop {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_path)
            .map_err(io_error("open the lock file", lock_path))?;
        if try_flock(&file, libc::LOCK_EX).map_err(io_error("lock", lock_path))? {
            if same_file(&file, lock_path) {
                return Ok(file);
            }
        } else {
            attempts += 1;
            if attempts >= LOCK_ATTEMPTS {
                let owner = read_owner(&mut file);
                return Err(DirectoryError::AlreadyRunning { path: dir.to_path_buf(), pid: owner.pid });
            }
            thread::sleep(LOCK_RETRY_PAUSE);
        }
    }
}

/// Tries `flock(mode | LOCK_NB)`: Ok(true) when taken, Ok(false) when someone else holds a conflicting lock.
fn try_flock(file: &File, mode: libc::c_int) -> io::Result<bool> {
    // SAFETY: `flock` only reads the descriptor number, which stays open for the whole call because
    // `file` is borrowed; it touches no memory of ours.
    let rc = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(error),
    }
}

/// Whether the open `file` is (still) the file at `path`.
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
        _ => false,
    }
}

/// A directory whose lock we now hold is stale when a previous owner wrote the lock file or left files.
fn is_stale(dir: &Path, lock: &File, previous: LockOwner) -> Result<bool, DirectoryError> {
    let written = lock.metadata().map_err(io_error("inspect the lock file", dir))?.len() > 0;
    if written || previous.pid.is_some() {
        return Ok(true);
    }
    let mut entries = fs::read_dir(dir).map_err(io_error("list the node directory", dir))?;
    Ok(entries.any(|entry| entry.map_or(true, |e| e.file_name() != LOCK_FILE_NAME)))
}

/// Removes every file and subdirectory of `dir` except the lock file.
fn remove_entries_except_lock(dir: &Path) -> Result<(), DirectoryError> {
    for entry in fs::read_dir(dir).map_err(io_error("list the node directory", dir))? {
        let entry = entry.map_err(io_error("list the node directory", dir))?;
        if entry.file_name() == LOCK_FILE_NAME {
            continue;
        }
        let path = entry.path();
        let is_dir = entry.file_type().map_err(io_error("inspect", &path))?.is_dir();
        let removed = if is_dir { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        removed.map_err(io_error("remove", &path))?;
    }
    Ok(())
}

/// Reads `<pid> <start ms>` from the start of the lock file; unreadable parts are None.
fn read_owner(file: &mut File) -> LockOwner {
    let mut text = String::new();
    if file.seek(SeekFrom::Start(0)).is_err() || file.take(64).read_to_string(&mut text).is_err() {
        return LockOwner::default();
    }
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|w| w.parse().ok());
    let started_at = words.next().and_then(|w| w.parse().ok()).map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    LockOwner { pid, started_at }
}

/// Replaces the lock file's contents by this process's pid and the current time.
fn write_owner(file: &mut File) -> io::Result<()> {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{} {now_ms}", std::process::id())?;
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_dir(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("qc-test-{}-dir-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn default_path_is_under_dev_shm_when_present() {
        let path = NodeDirectory::default_path("node-a");
        assert!(path.ends_with("quorumcast/node-a"));
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(path, Path::new("/dev/shm/quorumcast/node-a"));
        }
    }

    #[test]
    fn lock_file_holds_pid_and_start_time() {
        let root = test_dir("owner");
        let dir = NodeDirectory::create(root.join("n"), StalePolicy::Refuse).unwrap();
        let text = fs::read_to_string(dir.file(LOCK_FILE_NAME)).unwrap();
        let owner = read_owner(&mut File::open(dir.file(LOCK_FILE_NAME)).unwrap());
        assert_eq!(owner.pid, Some(std::process::id()), "lock file text {text:?}");
        let age = SystemTime::now().duration_since(owner.started_at.unwrap()).unwrap();
        assert!(age < Duration::from_secs(3600));
        assert_eq!(dir.current_status(), DirectoryStatus::Running(owner));
        drop(dir);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unreadable_lock_file_gives_unknown_owner() {
        let root = test_dir("garbage");
        fs::create_dir_all(&root).unwrap();
        let path = root.join(LOCK_FILE_NAME);
        fs::write(&path, "not a pid\n").unwrap();
        assert_eq!(read_owner(&mut File::open(&path).unwrap()), LockOwner::default());
        let error = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap_err();
        assert!(matches!(error, DirectoryError::Stale { pid: None, started_at: None, .. }), "{error}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn empty_leftover_directory_is_not_stale() {
        let root = test_dir("empty");
        fs::create_dir_all(&root).unwrap();
        let dir = NodeDirectory::create(&root, StalePolicy::Refuse).unwrap();
        assert_eq!(dir.cleaned(), None);
        dir.close().unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn a_directory_lock_refuses_a_second_holder_and_tells_a_reader_whether_it_is_held() {
        let root = test_dir("data-lock");
        fs::create_dir_all(&root).unwrap();
        assert_eq!(DirectoryLock::status(&root, "data.lock"), DirectoryStatus::NoLockFile);
        let lock = DirectoryLock::acquire(&root, "data.lock").unwrap();
        let error = DirectoryLock::acquire(&root, "data.lock").unwrap_err();
        assert!(matches!(error, DirectoryError::AlreadyRunning { pid: Some(pid), .. } if pid == std::process::id()));
        assert!(matches!(DirectoryLock::status(&root, "data.lock"), DirectoryStatus::Running(_)));
        drop(lock);
        assert!(matches!(DirectoryLock::status(&root, "data.lock"), DirectoryStatus::Stale(_)), "released, file kept");
        drop(DirectoryLock::acquire(&root, "data.lock").unwrap());
        assert_eq!(DirectoryLock::status(&root.join("none"), "data.lock"), DirectoryStatus::Missing);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn errors_say_what_to_do() {
        let stale = DirectoryError::Stale { path: "/x".into(), pid: Some(7), started_at: None }.to_string();
        assert!(stale.contains("pid 7") && stale.contains("StalePolicy::Clean") && stale.contains("remove"));
        let running = DirectoryError::AlreadyRunning { path: "/x".into(), pid: Some(9) }.to_string();
        assert!(running.contains("already running") && running.contains("pid 9"), "{running}");
    }
}
