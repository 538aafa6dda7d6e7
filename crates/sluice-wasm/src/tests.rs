//! The module's hashing on the host: the same code the page runs, against `blake3::hash`.

use super::*;

/// A file's bytes fed the way the page feeds them: piece by piece through the one buffer.
fn hash_in_pieces(h: &mut Hashers, data: &[u8], piece: usize) -> [u8; 32] {
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
    let mut h = Hashers::default();
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
    let mut h = Hashers::default();
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
    let mut h = Hashers::default();
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
