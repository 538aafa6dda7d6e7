//! A file's BLAKE3 put together from its blocks, so that a download is hashed once: each block
//! as it arrives, checked against the server's hash of the same block, and the file's hash from
//! those at the end, without reading the file again.
//!
//! BLAKE3 is a tree over 1 KiB chunks. A block that starts at a multiple of its own length (a
//! power of two number of chunks) is one subtree of it, or the last block of the file is; its
//! chaining value (`blake3::hazmat`) commits to its bytes and its place, as a hash does. The
//! server answers each block with this value ([`block_hash`]; `web/wt/conn.rs`), the page
//! computes the same for what it received and, once every block is in, merges them into the
//! file's BLAKE3 ([`file_hash`]), which it compares with the server's hash of the file.

use blake3::CHUNK_LEN;
use blake3::hazmat::{
    ChainingValue, HasherExt, Mode, left_subtree_len, max_subtree_len, merge_subtrees_non_root,
    merge_subtrees_root,
};

/// Whether bytes `offset..offset + len` of a file of `size` bytes are one subtree of the file's
/// BLAKE3 tree (the whole file included): they start at a chunk's start, and either span a power
/// of two number of chunks that fits below `offset`'s alignment, or are the file's last bytes.
pub fn is_subtree(offset: u64, len: u64, size: u64) -> bool {
    let chunk = CHUNK_LEN as u64;
    let Some(end) = offset.checked_add(len) else {
        return false;
    };
    if len == 0 || end > size || !offset.is_multiple_of(chunk) {
        return false;
    }
    let complete = len.is_multiple_of(chunk) && (len / chunk).is_power_of_two();
    let fits = max_subtree_len(offset).is_none_or(|max| len <= max);
    (offset == 0 && end == size) || (fits && (complete || end == size))
}

/// The hash of `block`, the bytes at `offset` of a file of `size` bytes, in the file's BLAKE3
/// tree: its chaining value, or the file's BLAKE3 when the block is the whole file. `None` when
/// the block is not one subtree ([`is_subtree`]).
pub fn block_hash(block: &[u8], offset: u64, size: u64) -> Option<[u8; 32]> {
    let len = block.len() as u64;
    if !is_subtree(offset, len, size) {
        return None;
    }
    if offset == 0 && len == size {
        return Some(*blake3::hash(block).as_bytes());
    }
    let mut hasher = blake3::Hasher::new();
    Some(hasher.set_input_offset(offset).update(block).finalize_non_root())
}

/// Whether `block` bytes make blocks that are subtrees wherever they start at a multiple of
/// `block`: a power of two number of chunks.
pub fn is_block_len(block: u64) -> bool {
    block.is_multiple_of(CHUNK_LEN as u64) && (block / CHUNK_LEN as u64).is_power_of_two()
}

/// The BLAKE3 of a file of `size` bytes from the [`block_hash`]es of its blocks of `block` bytes
/// (the last one shorter), in order. `None` for a `block` that is not [`is_block_len`] or a
/// count of hashes that is not the file's count of blocks.
pub fn file_hash(hashes: &[[u8; 32]], block: u64, size: u64) -> Option<[u8; 32]> {
    if !is_block_len(block) || hashes.len() as u64 != size.div_ceil(block) {
        return None;
    }
    match hashes {
        [] => Some(*blake3::hash(b"").as_bytes()),
        // The one block is the whole file: its hash is the file's.
        [only] => Some(*only),
        _ => {
            let (left, right) = halves(hashes, block, size);
            Some(*merge_subtrees_root(&left, &right, Mode::Hash).as_bytes())
        }
    }
}

/// The chaining values of the left and right subtrees of `len` bytes made of `cvs` (two or
/// more blocks): BLAKE3's left subtree is the largest power of two number of chunks below the
/// whole, which is a whole number of blocks.
fn halves(cvs: &[ChainingValue], block: u64, len: u64) -> (ChainingValue, ChainingValue) {
    let left = left_subtree_len(len);
    let split = (left / block) as usize;
    (subtree(&cvs[..split], block, left), subtree(&cvs[split..], block, len - left))
}

fn subtree(cvs: &[ChainingValue], block: u64, len: u64) -> ChainingValue {
    match cvs {
        [only] => *only,
        _ => {
            let (left, right) = halves(cvs, block, len);
            merge_subtrees_non_root(&left, &right, Mode::Hash)
        }
    }
}

/// One file's block hashes as they come, in any order, until the file's hash is asked.
#[derive(Debug)]
pub struct Tree {
    size: u64,
    block: u64,
    hashes: Vec<Option<[u8; 32]>>,
}

impl Tree {
    /// A file of `size` bytes in blocks of `block` bytes; `None` for a `block` that is not
    /// [`is_block_len`], or a file of more blocks than a page could hold the hashes of.
    pub fn new(size: u64, block: u64) -> Option<Tree> {
        let count = usize::try_from(size.div_ceil(block.max(1))).ok()?;
        if !is_block_len(block) || count > TREE_BLOCKS_MAX {
            return None;
        }
        Some(Tree { size, block, hashes: vec![None; count] })
    }

    /// Hashes `bytes` as the block at `offset` and keeps its hash (replacing one kept before);
    /// `None` unless `offset` is a block's start and `bytes` the whole block.
    pub fn add(&mut self, offset: u64, bytes: &[u8]) -> Option<[u8; 32]> {
        let index = usize::try_from(offset / self.block).ok()?;
        let whole = self.block.min(self.size.checked_sub(offset)?);
        if !offset.is_multiple_of(self.block)
            || bytes.len() as u64 != whole
            || index >= self.hashes.len()
        {
            return None;
        }
        let hash = block_hash(bytes, offset, self.size)?;
        self.hashes[index] = Some(hash);
        Some(hash)
    }

    /// The file's BLAKE3, once every block's hash is in.
    pub fn file_hash(&self) -> Option<[u8; 32]> {
        let hashes: Option<Vec<[u8; 32]>> = self.hashes.iter().copied().collect();
        file_hash(&hashes?, self.block, self.size)
    }
}

/// The most blocks one tree keeps (32 bytes each): 16 TiB in blocks of 4 MiB.
pub const TREE_BLOCKS_MAX: usize = 1 << 22;
