//! Reading a recording back from any position it holds: each block verified before a byte of it is
//! handed out, across segments, up to a limit the writer has published.

use std::path::PathBuf;

use super::segment::{self, BlockReader};
use super::{list_segments, RecordingError, RecordingIdentity};
use crate::storage::disk::{DiskFile, SharedDisk};

/// A block's bytes as a reader hands them out: where they start, the bytes, and where the log goes on.
pub type Block<'a> = (i64, &'a [u8], i64);

/// A segment being read.
#[derive(Debug)]
struct Open {
    path: PathBuf,
    file: std::sync::Arc<dyn DiskFile>,
    blocks: BlockReader,
}

/// Reads a recording's log bytes from a position, one block at a time.
///
/// The reader never reads at or past the `limit` it is given: the writer publishes its end only after a
/// block is whole in the file, so every block below it verifies unless the file was damaged, which is an
/// error naming the segment, never bytes handed out.
#[derive(Debug)]
pub struct RecordingReader {
    disk: SharedDisk,
    dir: PathBuf,
    identity: RecordingIdentity,
    position: i64,
    open: Option<Open>,
    payload: Vec<u8>,
    /// Start at the first byte of the block that holds the position, not at the position.
    from_block_start: bool,
}

impl RecordingReader {
    /// A reader of the recording in `dir` from `position`.
    pub fn new(dir: PathBuf, identity: RecordingIdentity, position: i64) -> Self {
        Self::on(SharedDisk::os(), dir, identity, position)
    }

    /// A reader of the recording in `dir` on `disk` from `position`.
    pub fn on(disk: SharedDisk, dir: PathBuf, identity: RecordingIdentity, position: i64) -> Self {
        Self { disk, dir, identity, position, open: None, payload: Vec::new(), from_block_start: false }
    }

    /// A new reader of the same recording from `position` (nothing of this one's state kept).
    pub fn reopen(&self, position: i64) -> Self {
        Self::on(self.disk.clone(), self.dir.clone(), self.identity, position)
    }

    /// A new reader of the same recording from the start of the block that holds `near` (a frame boundary
    /// at or below it, for a reader that needs whole frames from about there).
    pub fn reopen_from_block_with(&self, near: i64) -> Self {
        Self { from_block_start: true, ..self.reopen(near) }
    }

    /// The position of the next byte it hands out.
    pub fn position(&self) -> i64 {
        self.position
    }

    /// The bytes of the log from [`position`](Self::position) (or from the start of its block, for a reader
    /// made with `from_block_with`) to the end of the block that holds it (whole
    /// frames, a final PAD frame as its header alone): their position, the bytes, and the position after
    /// them; `Ok(None)` when the position is at or past `limit`.
    pub fn next_block(&mut self, limit: i64) -> Result<Option<Block<'_>>, RecordingError> {
        if self.position >= limit {
            return Ok(None);
        }
        loop {
            if self.open.is_none() {
                self.open = Some(self.open_segment()?);
            }
            let open = self.open.as_mut().expect("opened");
            let length = open.file.len().map_err(|e| RecordingError::io(&open.path, "read", e))?;
            match open.blocks.next(&*open.file, length, &mut self.payload) {
                Ok(Some(header)) if header.end() <= self.position => continue,
                Ok(Some(header)) => {
                    if std::mem::take(&mut self.from_block_start) {
                        self.position = header.position;
                    }
                    let (at, skip) = (self.position, (self.position - header.position) as usize);
                    self.position = header.end();
                    let bytes = self.payload.get(skip..).unwrap_or_default();
                    return Ok(Some((at, bytes, header.end())));
                }
                Ok(None) => {
                    // The segment ends below the limit: the next one starts where it ends.
                    let (at, path) = (open.blocks.position, open.path.clone());
                    if self.next_base()? != Some(at) {
                        return Err(RecordingError::new(
                            &path,
                            format!("ends at {at}, and no segment starts there: a segment is missing"),
                        ));
                    }
                    self.open = None;
                }
                Err(why) => {
                    return Err(RecordingError::new(
                        &open.path,
                        format!("{why}: the segment is damaged; replace it from another member's recording, or move the recording directory away and restart this member to catch up"),
                    ))
                }
            }
        }
    }

    /// The base of the segment after the one open, if there is one.
    fn next_base(&self) -> Result<Option<i64>, RecordingError> {
        Ok(list_segments(&*self.disk, &self.dir)?.into_iter().find(|&base| base >= self.position))
    }

    /// Opens the segment that holds the position.
    fn open_segment(&self) -> Result<Open, RecordingError> {
        let bases = list_segments(&*self.disk, &self.dir)?;
        let Some(&base) = bases.iter().rev().find(|&&base| base <= self.position) else {
            return Err(RecordingError::new(
                &self.dir,
                format!(
                    "holds no segment with position {} (the recording starts at {}): it was compacted below it",
                    self.position,
                    bases.first().copied().unwrap_or(-1)
                ),
            ));
        };
        let path = self.dir.join(segment::file_name(base));
        let opened = segment::Segment::open(&*self.disk, &path, &self.identity)
            .map_err(|why| RecordingError::new(&path, why))?;
        Ok(Open { path, file: opened.file, blocks: BlockReader::new(base, opened.data_start) })
    }
}
