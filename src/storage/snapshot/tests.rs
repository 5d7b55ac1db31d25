use std::fs;

use proptest::prelude::*;

use super::*;

const IDENTITY: SnapshotIdentity = SnapshotIdentity { membership: 0x0bad_cafe, stream_id: 10 };

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("qc-snapshot-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A state machine that keeps every entry with its position, so a restored one compares whole.
#[derive(Debug, Default, PartialEq, Eq)]
struct Journal {
    entries: Vec<(i64, Vec<u8>)>,
}

impl StateMachine for Journal {
    fn apply(&mut self, position: i64, entry: &[u8]) {
        self.entries.push((position, entry.to_vec()));
    }

    fn take_snapshot(&mut self, writer: &mut dyn Write) -> io::Result<()> {
        writer.write_all(&(self.entries.len() as u64).to_le_bytes())?;
        for (position, entry) in &self.entries {
            writer.write_all(&position.to_le_bytes())?;
            writer.write_all(&(entry.len() as u64).to_le_bytes())?;
            writer.write_all(entry)?;
        }
        Ok(())
    }

    fn load_snapshot(&mut self, reader: &mut dyn Read) -> io::Result<()> {
        let mut word = [0; 8];
        let mut next = |reader: &mut dyn Read| reader.read_exact(&mut word).map(|()| u64::from_le_bytes(word));
        let count = next(reader)?;
        self.entries.clear();
        for _ in 0..count {
            let position = next(reader)? as i64;
            let mut entry = vec![0; next(reader)? as usize];
            reader.read_exact(&mut entry)?;
            self.entries.push((position, entry));
        }
        Ok(())
    }
}

/// A journal of `count` entries of `size` bytes each, ending at position `count * size`.
fn journal(count: usize, size: usize) -> Journal {
    let mut journal = Journal::default();
    for i in 0..count {
        journal.apply(((i + 1) * size) as i64, &vec![i as u8; size]);
    }
    journal
}

/// Writes a snapshot of state `byte` repeated `length` times at `position` (term `position / 100`).
fn write_bytes(store: &SnapshotStore, position: i64, byte: u8, length: usize) -> SnapshotInfo {
    store.write(position, position / 100, |w| w.write_all(&vec![byte; length])).unwrap()
}

/// The state bytes the newest verified snapshot holds, and its restore.
fn restore_bytes(store: &SnapshotStore) -> (Vec<u8>, Restored) {
    let mut state = Vec::new();
    let restored = store.restore(|r| r.read_to_end(&mut state).map(|_| ())).unwrap();
    (state, restored)
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x40;
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_written_state_machine_is_restored_whole() {
    let dir = scratch("round-trip");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    assert!(store.list().unwrap().is_empty());
    let mut empty_restore = Journal::default();
    let restored = store.restore(|r| empty_restore.load_snapshot(r)).unwrap();
    assert!(restored.info.is_none() && restored.skipped.is_empty(), "an empty store restores nothing");

    // Larger than the copy buffer, and not a multiple of it.
    let mut machine = journal(300, 700);
    let position = 300 * 700;
    let info = store.write(position, 4, |w| machine.take_snapshot(w)).unwrap();
    assert_eq!((info.position, info.leadership_term_id), (position, 4));
    assert_eq!(info.path, store.path_of(position));
    assert_eq!(info.path.file_name().unwrap(), "snapshot-00000000000000210000.qcsnap");
    assert_eq!(fs::metadata(&info.path).unwrap().len(), info.file_length());
    assert_eq!(store.list().unwrap(), vec![info.clone()]);
    assert_eq!(entries(&dir), vec!["snapshot-00000000000000210000.qcsnap"], "no temporary file is left");

    let mut restarted = Journal::default();
    let restored = store.restore(|r| restarted.load_snapshot(r)).unwrap();
    assert_eq!(restored.info, Some(info));
    assert!(restored.skipped.is_empty());
    assert_eq!(restarted, machine);

    // An empty state is a snapshot too.
    let info = store.write(position + 1, 5, |_| Ok(())).unwrap();
    assert_eq!(info.length, 0);
    let (state, restored) = restore_bytes(&store);
    assert_eq!((state.len(), restored.info), (0, Some(info)));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_newest_snapshot_wins_and_reopening_finds_them() {
    let dir = scratch("newest");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    // Written out of order: position, not age, decides.
    write_bytes(&store, 2_000, 2, 10);
    write_bytes(&store, 9_000, 9, 10);
    write_bytes(&store, 500, 1, 10);
    drop(store);
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    let positions: Vec<i64> = store.list().unwrap().iter().map(|i| i.position).collect();
    assert_eq!(positions, vec![500, 2_000, 9_000], "oldest first");
    let (state, restored) = restore_bytes(&store);
    assert_eq!(state, vec![9; 10]);
    assert_eq!(restored.info.unwrap().leadership_term_id, 90);
    // Writing at an existing position replaces it.
    write_bytes(&store, 9_000, 7, 3);
    assert_eq!(restore_bytes(&store).0, vec![7; 3]);
    assert_eq!(store.list().unwrap().len(), 3);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_flipped_state_byte_is_skipped_for_the_older_snapshot_with_the_reason() {
    let dir = scratch("flip-state");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    write_bytes(&store, 100, 1, 5_000);
    let bad = write_bytes(&store, 200, 2, 5_000);
    flip_byte(&bad.path, HEADER_LENGTH + 4_321);
    // A reader that only looks (read-only, in a directory it does not change) is told the same.
    fs::write(dir.join("snapshot-00000000000000000300.qcsnap.0.tmp"), b"unfinished").unwrap();
    let before = entries(&dir);
    let looking = SnapshotStore::open_read_only(SharedDisk::os(), &dir, IDENTITY);
    let (newest, skipped) = looking.newest().unwrap();
    assert_eq!((newest.map(|i| i.position), skipped.len()), (Some(100), 1));
    assert_eq!(entries(&dir), before, "nothing created or removed");
    let missing = SnapshotStore::open_read_only(SharedDisk::os(), &dir.join("none"), IDENTITY);
    assert_eq!(missing.newest().unwrap(), (None, vec![]));
    assert!(!dir.join("none").exists());
    let (state, restored) = restore_bytes(&store);
    assert_eq!(state, vec![1; 5_000]);
    assert_eq!(restored.info.unwrap().position, 100);
    assert_eq!(restored.skipped.len(), 1);
    let skip = &restored.skipped[0];
    assert!(skip.contains(&bad.path.display().to_string()), "names the file: {skip}");
    assert!(skip.contains("fails its checksum"), "says why: {skip}");
    assert!(skip.contains("delete it, or restore the data directory from a backup"), "says what to do: {skip}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_header_is_skipped_for_the_older_snapshot() {
    let dir = scratch("flip-header");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    write_bytes(&store, 100, 1, 50);
    let bad = write_bytes(&store, 200, 2, 50);
    flip_byte(&bad.path, 32); // the leadership term
    let (state, restored) = restore_bytes(&store);
    assert_eq!((state, restored.info.unwrap().position), (vec![1; 50], 100));
    assert!(restored.skipped[0].contains("header checksum"), "{:?}", restored.skipped);
    // Listing does not verify: the damaged header's values are not trusted.
    let listed = store.list().unwrap();
    assert_eq!((listed[1].position, listed[1].leadership_term_id, listed[1].length), (200, -1, 50));

    flip_byte(&bad.path, 32);
    flip_byte(&bad.path, 0); // the magic
    assert!(restore_bytes(&store).1.skipped[0].contains("wrong magic"));
    flip_byte(&bad.path, 0);
    // A header sealed properly that contradicts the file's name (a renamed file).
    fs::rename(&bad.path, store.path_of(300)).unwrap();
    let skipped = restore_bytes(&store).1.skipped;
    assert!(skipped[0].contains("named for position 300, its header says 200"), "{skipped:?}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_truncated_or_overlong_snapshot_is_skipped_for_the_older_one() {
    let dir = scratch("truncated");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    write_bytes(&store, 100, 1, 50);
    let bad = write_bytes(&store, 200, 2, 50);
    let bytes = fs::read(&bad.path).unwrap();
    fs::write(&bad.path, &bytes[..bytes.len() - 1]).unwrap();
    let (state, restored) = restore_bytes(&store);
    assert_eq!((state, restored.info.unwrap().position), (vec![1; 50], 100));
    assert!(restored.skipped[0].contains("holds 49 bytes of state, its header says 50 (truncated)"));
    fs::write(&bad.path, &bytes[..20]).unwrap();
    assert!(restore_bytes(&store).1.skipped[0].contains("is 20 bytes, shorter than its 88-byte header"));
    let mut longer = bytes.clone();
    longer.push(0);
    fs::write(&bad.path, longer).unwrap();
    assert!(restore_bytes(&store).1.skipped[0].contains("holds 51 bytes"));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_snapshot_of_another_cluster_or_stream_is_skipped() {
    let dir = scratch("foreign");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    write_bytes(&store, 100, 1, 8);
    let other = SnapshotStore::open(&dir, SnapshotIdentity { membership: 0x0bad_cafe, stream_id: 11 }).unwrap();
    let foreign = write_bytes(&other, 200, 2, 8);
    let (state, restored) = restore_bytes(&store);
    assert_eq!((state, restored.info.unwrap().position), (vec![1; 8], 100));
    let skip = &restored.skipped[0];
    assert!(skip.contains(&foreign.path.display().to_string()), "{skip}");
    assert!(skip.contains("stream 11, this node's is cluster 0x000000000badcafe stream 10"), "{skip}");
    assert!(skip.contains("give this node its own"), "{skip}");
    // The other cluster's store sees its own, and skips this one's.
    assert_eq!(restore_bytes(&other).1.info.unwrap().position, 200);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn when_every_snapshot_fails_none_is_loaded_and_each_is_reported() {
    let dir = scratch("all-bad");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    for position in [100, 200, 300] {
        let info = write_bytes(&store, position, 1, 30);
        flip_byte(&info.path, HEADER_LENGTH + 29);
    }
    let restored = store.restore(|_| panic!("nothing unverified is loaded")).unwrap();
    assert!(restored.info.is_none());
    assert_eq!(restored.skipped.len(), 3);
    for (skip, position) in restored.skipped.iter().zip([300, 200, 100]) {
        assert!(skip.contains(&format!("snapshot-{position:020}.qcsnap fails its checksum")), "{skip}");
    }
    let to_send = store.open_for_send().unwrap();
    assert!(to_send.snapshot.is_none());
    assert_eq!(to_send.skipped, restored.skipped);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_crash_mid_write_leaves_no_snapshot_and_its_temporary_file_is_removed_at_open() {
    let dir = scratch("crash");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    write_bytes(&store, 100, 1, 40);
    // A crash before the rename: half a snapshot in its temporary file.
    let temp = dir.join("snapshot-00000000000000000200.qcsnap.0.tmp");
    fs::write(&temp, [0xAB; 60]).unwrap();
    fs::write(dir.join("notes.txt"), b"not ours").unwrap();
    assert_eq!(store.list().unwrap().len(), 1, "a temporary file is not a snapshot");
    assert_eq!(restore_bytes(&store).0, vec![1; 40]);
    drop(store);
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    assert!(!temp.exists(), "removed at open");
    assert_eq!(entries(&dir), vec!["notes.txt", "snapshot-00000000000000000100.qcsnap"], "others are left alone");
    assert_eq!(restore_bytes(&store).0, vec![1; 40]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_state_machine_that_fails_to_write_stores_nothing_and_one_that_fails_to_load_is_an_error() {
    let dir = scratch("state-fails");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    let e = store
        .write(100, 1, |w| {
            w.write_all(&[5; 100_000])?;
            Err(io::Error::other("disk quota of the application"))
        })
        .unwrap_err();
    assert!(matches!(e, SnapshotError::State { .. }));
    let e = e.to_string();
    assert!(e.contains("snapshot-00000000000000000100.qcsnap") && e.contains("nothing was stored"), "{e}");
    assert!(entries(&dir).is_empty(), "no snapshot and no temporary file");

    write_bytes(&store, 100, 1, 10);
    let e = store.restore(|_| Err(io::Error::other("unknown format"))).unwrap_err().to_string();
    assert!(e.contains("failed to load its state") && e.contains("unknown format"), "{e}");
    let e = store.write(-1, 1, |_| Ok(())).unwrap_err().to_string();
    assert!(e.contains("position is >= 0, not -1"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn retain_keeps_the_newest_and_returns_the_oldest_kept_position() {
    let dir = scratch("retain");
    let store = SnapshotStore::open(&dir, IDENTITY).unwrap();
    assert_eq!(store.retain(2).unwrap(), None, "no snapshot");
    for position in [100, 200, 300, 400, 500] {
        write_bytes(&store, position, 1, 4);
    }
    assert_eq!(store.retain(3).unwrap(), Some(300));
    let positions = || store.list().unwrap().iter().map(|i| i.position).collect::<Vec<_>>();
    assert_eq!(positions(), vec![300, 400, 500]);
    assert_eq!(store.retain(5).unwrap(), Some(300), "keeping more than there are deletes nothing");
    assert_eq!(store.retain(1).unwrap(), Some(500));
    assert_eq!(positions(), vec![500]);
    assert!(store.retain(0).unwrap_err().to_string().contains("at least 1"));
    assert_eq!(positions(), vec![500]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_sent_snapshot_is_installed_whole_by_another_member() {
    let dir = scratch("send");
    let leader = SnapshotStore::open(&dir.join("leader"), IDENTITY).unwrap();
    let follower = SnapshotStore::open(&dir.join("follower"), IDENTITY).unwrap();
    let mut machine = journal(100, 1_500);
    leader.write(150_000, 3, |w| machine.take_snapshot(w)).unwrap();
    let newer = write_bytes(&leader, 160_000, 9, 10);
    flip_byte(&newer.path, HEADER_LENGTH);

    let to_send = leader.open_for_send().unwrap();
    assert_eq!(to_send.skipped.len(), 1, "the damaged newer one is not sent");
    let mut reader = to_send.snapshot.unwrap();
    let sent = reader.info().clone();
    assert_eq!(sent.position, 150_000);
    // What follows a snapshot in a stream is left unread.
    let mut stream = Vec::new();
    reader.read_to_end(&mut stream).unwrap();
    assert_eq!(stream.len() as u64, sent.file_length());
    stream.extend_from_slice(b"next message");
    let mut cursor = io::Cursor::new(stream);
    let installed = follower.install(&mut cursor).unwrap();
    assert_eq!(cursor.position(), sent.file_length());
    assert_eq!((installed.position, installed.leadership_term_id, installed.length), (150_000, 3, sent.length));
    assert_eq!(installed.path, follower.path_of(150_000));

    let mut restarted = Journal::default();
    let restored = follower.restore(|r| restarted.load_snapshot(r)).unwrap();
    assert_eq!(restored.info, Some(installed));
    assert_eq!(restarted, machine);
    assert_eq!(entries(&dir.join("follower")), vec!["snapshot-00000000000000150000.qcsnap"]);
    fs::remove_dir_all(&dir).unwrap();
}

/// The whole file of a snapshot of `length` bytes at position 100, from a store of `identity`.
fn sent_bytes(dir: &Path, identity: SnapshotIdentity, length: usize) -> Vec<u8> {
    let store = SnapshotStore::open(dir, identity).unwrap();
    let info = write_bytes(&store, 100, 3, length);
    fs::read(info.path).unwrap()
}

/// A reader that counts what was read from it.
struct Counting<'a> {
    bytes: &'a [u8],
    read: usize,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (&self.bytes[self.read..]).read(buf)?;
        self.read += n;
        Ok(n)
    }
}

#[test]
fn a_corrupt_truncated_oversized_or_foreign_snapshot_is_refused_leaving_nothing() {
    let dir = scratch("install-refused");
    let good = sent_bytes(&dir.join("sender"), IDENTITY, 100_000);
    let follower_dir = dir.join("follower");
    let follower = SnapshotStore::open(&follower_dir, IDENTITY).unwrap().with_max_install_length(200_000);
    let refused = |bytes: &[u8]| {
        let e = follower.install(bytes).unwrap_err();
        assert!(matches!(e, SnapshotError::Refused { .. }), "{e}");
        assert!(entries(&follower_dir).is_empty(), "nothing left behind after: {e}");
        e.to_string()
    };

    let mut corrupt = good.clone();
    corrupt[HEADER_LENGTH as usize + 70_000] ^= 1;
    assert!(refused(&corrupt).contains("fails its checksum"));
    let mut header = good.clone();
    header[44] ^= 1;
    assert!(refused(&header).contains("header checksum"));
    assert!(refused(&good[..good.len() - 10]).contains("ended after 99990 of its 100000 bytes"));
    assert!(refused(&good[..50]).contains("header could not be read whole"));
    let foreign = sent_bytes(&dir.join("foreign"), SnapshotIdentity { membership: 1, stream_id: 10 }, 10);
    assert!(refused(&foreign).contains("belongs to cluster 0x0000000000000001 stream 10"));

    // Too long: refused from its header alone, before the state is read or anything written.
    let small = SnapshotStore::open(&follower_dir, IDENTITY).unwrap().with_max_install_length(99_999);
    let mut reader = Counting { bytes: &good, read: 0 };
    let e = small.install(&mut reader).unwrap_err().to_string();
    assert!(e.contains("100000 bytes, more than the 99999 this store accepts"), "{e}");
    assert_eq!(reader.read, HEADER_LENGTH as usize);
    assert!(entries(&follower_dir).is_empty());

    follower.install(&good[..]).unwrap();
    assert_eq!(entries(&follower_dir), vec!["snapshot-00000000000000000100.qcsnap"]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_name_the_file_and_what_to_do() {
    let dir = scratch("errors");
    let not_a_dir = dir.join("plain-file");
    fs::write(&not_a_dir, b"x").unwrap();
    let e = SnapshotStore::open(&not_a_dir, IDENTITY).unwrap_err().to_string();
    assert!(e.contains("plain-file") && e.contains("cannot create the directory"), "{e}");
    let e = SnapshotError::Invalid { path: "/x/snapshot-1.qcsnap".into(), reason: "fails its checksum".into() };
    assert_eq!(
        e.to_string(),
        "snapshot /x/snapshot-1.qcsnap fails its checksum: it is not used; delete it, or restore the data \
         directory from a backup"
    );
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn only_exact_snapshot_names_are_snapshots() {
    assert_eq!(parse_name("snapshot-00000000000000000100.qcsnap"), Some(100));
    assert_eq!(parse_name("snapshot-09223372036854775807.qcsnap"), Some(i64::MAX));
    assert_eq!(parse_name("snapshot-09223372036854775808.qcsnap"), None, "past i64");
    assert_eq!(parse_name("snapshot-100.qcsnap"), None);
    assert_eq!(parse_name("snapshot-0000000000000000010a.qcsnap"), None);
    assert_eq!(parse_name("snapshot-+0000000000000000100.qcsnap"), None);
    assert_eq!(parse_name("snapshot-00000000000000000100.qcsnap.0.tmp"), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any state round-trips through write, send and install; any one flipped bit of its file is
    /// caught by restore, by open_for_send and by install alike.
    #[test]
    fn any_state_round_trips_and_any_flipped_bit_is_caught(
        state in proptest::collection::vec(any::<u8>(), 0..2_000),
        position in 0..i64::MAX,
        term in 0..i64::MAX,
        flip in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let dir = scratch("proptest");
        let store = SnapshotStore::open(&dir.join("a"), IDENTITY).unwrap();
        let info = store.write(position, term, |w| w.write_all(&state)).unwrap();
        let (restored, _) = restore_bytes(&store);
        prop_assert_eq!(&restored, &state);
        let mut file = Vec::new();
        store.open_for_send().unwrap().snapshot.unwrap().read_to_end(&mut file).unwrap();
        let other = SnapshotStore::open(&dir.join("b"), IDENTITY).unwrap();
        prop_assert_eq!(other.install(&file[..]).unwrap().position, position);

        let offset = flip.index(file.len());
        file[offset] ^= 1 << bit;
        fs::write(&info.path, &file).unwrap();
        let restored = store.restore(|_| panic!("a damaged snapshot is loaded")).unwrap();
        prop_assert!(restored.info.is_none());
        prop_assert_eq!(restored.skipped.len(), 1);
        prop_assert!(store.open_for_send().unwrap().snapshot.is_none());
        let third = SnapshotStore::open(&dir.join("c"), IDENTITY).unwrap();
        prop_assert!(third.install(&file[..]).is_err());
        prop_assert!(entries(&dir.join("c")).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
