//! The sender's hash of the bytes it announced.

use std::sync::atomic::AtomicBool;

use sluice::files::hash_prefix;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn hash_prefix_is_plain_blake3_of_the_announced_bytes_and_ignores_the_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(3 << 20 | 12345);
    let path = dir.path().join("f");
    std::fs::write(&path, &data).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    std::io::Read::read_exact(&mut file, &mut [0u8; 100]).unwrap();
    let no = AtomicBool::new(false);
    let len = data.len() as u64;
    assert_eq!(hash_prefix(&file, len, &no).unwrap(), Some(blake3::hash(&data)));
    // A file that grew since its size was announced: only the announced bytes count.
    assert_eq!(hash_prefix(&file, 1000, &no).unwrap(), Some(blake3::hash(&data[..1000])));
    assert_eq!(hash_prefix(&file, 0, &no).unwrap(), Some(blake3::hash(b"")));
    // One that shrank cannot give the announced bytes.
    let err = hash_prefix(&file, len + 1, &no).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(hash_prefix(&file, len, &AtomicBool::new(true)).unwrap(), None);
}
