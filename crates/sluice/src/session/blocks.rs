//! A transfer's files as its data channels and its repair rounds see them: the store the
//! channels read and write (with a test fault when one is configured), and the BLAKE3 of each
//! block of a file that a repair round compares (the rounds themselves are
//! `sluice_session`'s: [`sluice_session::receiving`]).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sluice_session::layout::BLOCK_BYTES;

use crate::datapath::{Fault, Faulty, Store};
use crate::files::hash_extents;
use crate::tree::FileSet;

/// What the data channels read and write: a transfer's files.
pub(crate) type DataStore = Arc<dyn Store + Send + Sync>;

/// The files as pass `pass` (0 the first) of the data channels sees them: with the configured
/// test fault, if any and not spent, on the reads of a sending end (`sending`) or the writes of
/// a receiving one.
pub(crate) fn data_store(
    files: &Arc<FileSet>,
    fault: Option<Fault>,
    sending: bool,
    pass: u32,
) -> DataStore {
    match (fault.and_then(|f| f.in_pass(pass)), sending) {
        (Some(offset), true) => Arc::new(Faulty::reading(files.clone(), offset)),
        (Some(offset), false) => Arc::new(Faulty::writing(files.clone(), offset)),
        (None, _) => files.clone(),
    }
}

/// BLAKE3 of each [`BLOCK_BYTES`] block of file `k` of `files`.
pub(crate) fn file_blocks(files: &FileSet, k: usize) -> std::io::Result<Vec<blake3::Hash>> {
    let (_, size, base) = files.file_at(k).ok_or(std::io::ErrorKind::NotFound)?;
    let ends =
        (1..=size.div_ceil(BLOCK_BYTES)).map(|b| base + (b * BLOCK_BYTES).min(size)).collect();
    let never = AtomicBool::new(false);
    Ok(hash_extents(files, base, ends, &never)?.unwrap_or_default())
}
