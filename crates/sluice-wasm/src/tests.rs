//! The module's hashing on the host: the same code the page runs, against `blake3::hash`.

use super::*;

/// A file's bytes fed the way the page feeds them: piece by piece through the one buffer.
fn hash_in_pieces(h: &mut Module, data: &[u8], piece: usize) -> [u8; 32] {
    let id = h.start();
    assert_ne!(id, 0);
    for chunk in data.chunks(piece) {
        h.buffer(chunk.len()).unwrap()[..chunk.len()].copy_from_slice(chunk);
        assert!(h.update(id, chunk.len()));
    }
    assert!(h.finish(id));
    h.output(32).try_into().unwrap()
}

#[test]
fn pieces_hash_as_blake3_hashes_the_whole() {
    let data: Vec<u8> = (0..3_000_017u32).map(|i| (i * 31 + i / 7) as u8).collect();
    let mut h = Module::default();
    // Byte by byte over a part (a million calls would be slow), then larger pieces over all.
    for (piece, len) in
        [(1, 100_003), (1000, data.len()), (65_536, data.len()), (1 << 20, data.len())]
    {
        let got = hash_in_pieces(&mut h, &data[..len], piece);
        assert_eq!(&got, blake3::hash(&data[..len]).as_bytes(), "pieces of {piece}");
    }
    assert_eq!(&hash_in_pieces(&mut h, b"", 10), blake3::hash(b"").as_bytes());
}

#[test]
fn two_files_at_once_do_not_mix() {
    let (a, b) = (vec![1u8; 100_000], vec![2u8; 70_000]);
    let mut h = Module::default();
    let (ia, ib) = (h.start(), h.start());
    assert_ne!(ia, ib);
    // Pieces of the two, taken in turn through the one buffer, until both are in.
    let (mut pa, mut pb) = (a.chunks(10_000), b.chunks(10_000));
    loop {
        let (ca, cb) = (pa.next(), pb.next());
        if ca.is_none() && cb.is_none() {
            break;
        }
        for (id, piece) in [(ia, ca), (ib, cb)] {
            if let Some(piece) = piece {
                h.buffer(piece.len()).unwrap()[..piece.len()].copy_from_slice(piece);
                assert!(h.update(id, piece.len()));
            }
        }
    }
    assert!(h.finish(ib));
    assert_eq!(h.output(32), blake3::hash(&b).as_bytes());
    assert!(h.finish(ia));
    assert_eq!(h.output(32), blake3::hash(&a).as_bytes());
}

#[test]
fn bad_ids_and_lengths_are_refused_not_a_crash() {
    let mut h = Module::default();
    assert!(!h.update(0, 0));
    assert!(!h.update(7, 0));
    assert!(!h.finish(7));
    h.end(0);
    h.end(u32::MAX);
    let id = h.start();
    h.buffer(10).unwrap();
    assert!(!h.update(id, 1 << 30), "beyond the buffer");
    assert!(h.buffer(BUFFER_MAX + 1).is_none());
    assert!(h.finish(id));
    assert!(!h.finish(id), "ended");
    // Ids are reused once ended, and no more than HASHERS_MAX are open.
    let ids: Vec<u32> = (0..HASHERS_MAX).map(|_| h.start()).collect();
    assert!(ids.iter().all(|&i| i != 0));
    assert_eq!(h.start(), 0);
    h.end(ids[5]);
    assert_eq!(h.start(), ids[5]);
}

/// Bytes that differ at every position (a block moved or swapped would hash differently).
fn bytes(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

/// The subtrees of BLAKE3's tree over `size` bytes, the whole included, as (offset, len):
/// the left subtree is the largest power of two number of chunks below the whole.
fn nodes(offset: u64, len: u64, out: &mut Vec<(u64, u64)>) {
    out.push((offset, len));
    if len > blake3::CHUNK_LEN as u64 {
        let left = blake3::hazmat::left_subtree_len(len);
        nodes(offset, left, out);
        nodes(offset + left, len - left, out);
    }
}

#[test]
fn a_range_is_a_subtree_exactly_when_the_tree_has_it() {
    let chunk = blake3::CHUNK_LEN as u64;
    // Every chunk-granular range of files of up to 40 chunks, whole or with a short last chunk.
    for chunks in 1..=40u64 {
        for size in [chunks * chunk, chunks * chunk - 517] {
            let mut want = Vec::new();
            nodes(0, size, &mut want);
            for offset in (0..size).step_by(chunk as usize) {
                for end in (offset + 1..=size).filter(|e| e % chunk == 0 || *e == size) {
                    let got = tree::is_subtree(offset, end - offset, size);
                    assert_eq!(
                        got,
                        want.contains(&(offset, end - offset)),
                        "{offset}..{end} of {size}"
                    );
                }
            }
        }
    }
    // Not at a chunk's start, empty, past the end.
    assert!(!tree::is_subtree(10, 1024, 4096));
    assert!(!tree::is_subtree(1024, 0, 4096));
    assert!(!tree::is_subtree(3072, 2048, 4096));
    assert!(!tree::is_subtree(u64::MAX - 10, 1024, u64::MAX));
}

#[test]
fn block_hashes_merge_into_the_files_blake3() {
    let chunk = blake3::CHUNK_LEN;
    let block = 4 * chunk;
    // One block, a block and a byte, powers of two of blocks and around them, a short last chunk.
    for size in [
        0,
        1,
        100,
        block - 1,
        block,
        block + 1,
        2 * block,
        3 * block - 5,
        4 * block,
        5 * block + 7,
        8 * block,
        13 * block + chunk,
        16 * block + 1,
    ] {
        let data = bytes(size);
        let mut tree = tree::Tree::new(size as u64, block as u64).unwrap();
        // In any order: the last block first, then the others from the end.
        let offsets: Vec<usize> = (0..size).step_by(block).rev().collect();
        for (n, &offset) in offsets.iter().enumerate() {
            assert!(tree.file_hash().is_none(), "a hash before every block is in ({n} in)");
            let piece = &data[offset..(offset + block).min(size)];
            let got = tree.add(offset as u64, piece).unwrap();
            assert_eq!(Some(got), tree::block_hash(piece, offset as u64, size as u64));
        }
        assert_eq!(&tree.file_hash().unwrap(), blake3::hash(&data).as_bytes(), "size {size}");
        if size > block {
            // A changed byte in any block changes the file's hash.
            let mut bad = tree::Tree::new(size as u64, block as u64).unwrap();
            for offset in (0..size).step_by(block) {
                let mut piece = data[offset..(offset + block).min(size)].to_vec();
                if offset == block {
                    piece[0] ^= 1;
                }
                bad.add(offset as u64, &piece).unwrap();
            }
            assert_ne!(&bad.file_hash().unwrap(), blake3::hash(&data).as_bytes());
        }
    }
}

#[test]
fn a_tree_refuses_blocks_out_of_place_and_lengths_off_the_tree() {
    let block = 4096u64;
    assert!(tree::Tree::new(10_000, 3000).is_none(), "not a power of two of chunks");
    assert!(tree::Tree::new(10_000, 0).is_none());
    let mut tree = tree::Tree::new(10_000, block).unwrap();
    let data = bytes(10_000);
    assert!(tree.add(1024, &data[1024..5120]).is_none(), "not at a block's start");
    assert!(tree.add(0, &data[..4000]).is_none(), "short of the block");
    assert!(tree.add(8192, &data[8192..9000]).is_none(), "short of the last block");
    assert!(tree.add(12_288, &data[..100]).is_none(), "past the end");
    // The same through the module's buffer, and its ids.
    let mut h = Module::default();
    assert_eq!(h.tree_start(10_000, 3000), 0);
    let id = h.tree_start(10_000, block);
    for offset in [0usize, 4096, 8192] {
        let piece = &data[offset..(offset + 4096).min(10_000)];
        h.buffer(piece.len()).unwrap()[..piece.len()].copy_from_slice(piece);
        assert!(!h.tree_hash(id), "a file hash before its block at {offset}");
        assert!(h.tree_add(id, offset as u64, piece.len()));
        let want = tree::block_hash(piece, offset as u64, 10_000).unwrap();
        assert_eq!(h.output(32), want.as_slice());
    }
    assert!(h.tree_hash(id));
    assert_eq!(h.output(32), blake3::hash(&data).as_bytes());
    h.tree_end(id);
    assert!(!h.tree_hash(id), "ended");
    assert!(!h.tree_add(id, 0, 4096));
}

#[test]
fn whole_numbers_from_javascript() {
    assert_eq!(whole(0.0), Some(0));
    assert_eq!(whole(4_194_304.0), Some(4_194_304));
    for bad in [-1.0, 0.5, f64::NAN, f64::INFINITY, 9_007_199_254_740_992.0] {
        assert_eq!(whole(bad), None, "{bad}");
    }
}
