//! Packet protection: round trips, tamper detection, key and nonce separation, and known answers
//! that pin the nonce layout (IV XOR (4 zero bytes ‖ packet number big-endian)).

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use sluice_proto::crypto::{Algorithm, CryptoError, PacketKey};
use sluice_proto::seq::Seq31;
use sluice_proto::wire::{DataPrefix, HEADER_LEN, Header, Kind, TAG_LEN, flags};

const ALGORITHMS: [Algorithm; 2] = [Algorithm::Aes256Gcm, Algorithm::ChaCha20Poly1305];
const KEY: [u8; 32] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
];
const IV: [u8; 12] = [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab];
const KAT_PN: u64 = 0x0102_0304_0506_0708;
const KAT_PAYLOAD: &[u8] = b"sluice known answer";

/// Writes a data packet (header and plaintext body) into `buf`; returns the body length.
fn write_data_packet(buf: &mut [u8], pn: u64, payload: &[u8]) -> usize {
    let header =
        Header { kind: Kind::Data, flags: flags::RETRANSMIT, pn, timestamp_us: 0x1122_3344 };
    header.emit(buf).unwrap();
    let body = &mut buf[HEADER_LEN..];
    DataPrefix { dsn: Seq31::new(7), offset: 4096 }.emit(body).unwrap();
    body[12..12 + payload.len()].copy_from_slice(payload);
    12 + payload.len()
}

/// A sealed data packet and its plaintext form.
fn sealed(key: &PacketKey, pn: u64, payload: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut buf = vec![0u8; 1500];
    let body_len = write_data_packet(&mut buf, pn, payload);
    let plain = buf[..HEADER_LEN + body_len].to_vec();
    let len = key.seal(&mut buf, body_len).unwrap();
    assert_eq!(len, HEADER_LEN + body_len + TAG_LEN);
    buf.truncate(len);
    (buf, plain)
}

#[test]
fn seal_open_round_trip_both_algorithms() {
    for alg in ALGORITHMS {
        let key = PacketKey::new(alg, &KEY, IV);
        assert_eq!(key.algorithm(), alg);
        for payload_len in [1, 2, 15, 16, 17, 1000, 1400] {
            let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7) as u8).collect();
            let (mut packet, plain) = sealed(&key, payload_len as u64, &payload);
            assert_eq!(packet[..HEADER_LEN], plain[..HEADER_LEN], "{alg:?}: header stays clear");
            assert_ne!(
                packet[HEADER_LEN..plain.len()],
                plain[HEADER_LEN..],
                "{alg:?}: body hidden"
            );
            let (header, len) = key.open(&mut packet).unwrap();
            assert_eq!(header, Header::parse(&plain).unwrap());
            assert_eq!(&packet[..HEADER_LEN + len], &plain[..], "{alg:?} len {payload_len}");
        }
        // Control packets with an empty body (keep-alive) seal to a bare header and tag.
        let mut buf = [0u8; HEADER_LEN + TAG_LEN];
        Header { kind: Kind::KeepAlive, flags: 0, pn: 9, timestamp_us: 1 }.emit(&mut buf).unwrap();
        assert_eq!(key.seal(&mut buf, 0), Ok(HEADER_LEN + TAG_LEN));
        assert_eq!(key.open(&mut buf).map(|(h, len)| (h.kind, len)), Ok((Kind::KeepAlive, 0)));
    }
}

#[test]
fn flipping_any_bit_fails_open() {
    for alg in ALGORITHMS {
        let key = PacketKey::new(alg, &KEY, IV);
        let (packet, _) = sealed(&key, 77, b"every bit of header, body and tag counts");
        for bit in 0..packet.len() * 8 {
            let mut tampered = packet.clone();
            tampered[bit / 8] ^= 1 << (bit % 8);
            let err = key.open(&mut tampered).unwrap_err();
            // A flip in the kind, flags or reserved bytes may break the header first.
            if bit >= 4 * 8 {
                assert_eq!(err, CryptoError::Auth, "{alg:?}: bit {bit}");
            }
        }
        let mut intact = packet.clone();
        assert!(key.open(&mut intact).is_ok());
    }
}

#[test]
fn other_key_or_iv_or_algorithm_fails_open() {
    let mut other_key = KEY;
    other_key[31] ^= 1;
    let mut other_iv = IV;
    other_iv[0] ^= 1;
    for alg in ALGORITHMS {
        let key = PacketKey::new(alg, &KEY, IV);
        let (packet, _) = sealed(&key, 5, b"for one key only");
        let other_alg = if alg == Algorithm::Aes256Gcm {
            Algorithm::ChaCha20Poly1305
        } else {
            Algorithm::Aes256Gcm
        };
        let wrong = [
            PacketKey::new(alg, &other_key, IV),
            PacketKey::new(alg, &KEY, other_iv),
            PacketKey::new(other_alg, &KEY, IV),
        ];
        for wrong_key in &wrong {
            assert_eq!(
                wrong_key.open(&mut packet.clone()).unwrap_err(),
                CryptoError::Auth,
                "{wrong_key:?}"
            );
        }
    }
}

#[test]
fn changing_the_packet_number_fails_open() {
    for alg in ALGORITHMS {
        let key = PacketKey::new(alg, &KEY, IV);
        let (packet, _) = sealed(&key, 1000, b"bound to its packet number");
        for pn in [999, 1001, 1000 ^ (1 << 63), 0] {
            let mut moved = packet.clone();
            let mut header = Header::parse(&moved).unwrap();
            header.pn = pn;
            header.emit(&mut moved).unwrap();
            assert_eq!(key.open(&mut moved).unwrap_err(), CryptoError::Auth, "{alg:?} pn {pn}");
        }
    }
}

#[test]
fn same_plaintext_under_two_packet_numbers_differs() {
    for alg in ALGORITHMS {
        let key = PacketKey::new(alg, &KEY, IV);
        let (first, _) = sealed(&key, 1, b"the same retransmitted payload");
        let (second, _) = sealed(&key, 2, b"the same retransmitted payload");
        let body = HEADER_LEN..first.len() - TAG_LEN;
        let tag = first.len() - TAG_LEN..;
        assert_ne!(first[body.clone()], second[body], "{alg:?}: ciphertext");
        assert_ne!(first[tag.clone()], second[tag], "{alg:?}: tag");
    }
}

#[test]
fn short_buffers_and_bad_headers_are_refused() {
    let key = PacketKey::new(Algorithm::Aes256Gcm, &KEY, IV);
    for len in 0..HEADER_LEN + TAG_LEN {
        assert_eq!(key.open(&mut vec![0u8; len]).unwrap_err(), CryptoError::Truncated);
    }
    let mut buf = [0u8; 64];
    let body_len = write_data_packet(&mut buf, 3, b"x");
    let needed = HEADER_LEN + body_len + TAG_LEN;
    assert_eq!(key.seal(&mut buf[..needed - 1], body_len), Err(CryptoError::Truncated));
    assert_eq!(key.seal(&mut buf, usize::MAX), Err(CryptoError::Truncated));
    assert_eq!(key.seal(&mut buf, usize::MAX - HEADER_LEN), Err(CryptoError::Truncated));
    let mut bad = buf;
    bad[0] = 0xFF;
    assert_eq!(key.seal(&mut bad, body_len), Err(CryptoError::Header));
    assert_eq!(key.seal(&mut buf, body_len), Ok(needed));
    let mut packet = buf[..needed].to_vec();
    packet[2] = 1;
    assert_eq!(key.open(&mut packet).unwrap_err(), CryptoError::Header);
}

#[test]
fn debug_never_shows_key_material() {
    let key = PacketKey::new(Algorithm::ChaCha20Poly1305, &[0x5A; 32], [0x3C; 12]);
    let shown = format!("{key:?} {key:#?}");
    assert!(shown.contains("ChaCha20Poly1305"), "{shown}");
    for secret in ["90", "5a", "5A", "60", "3c", "3C"] {
        assert!(!shown.contains(secret), "{shown} contains {secret}");
    }
}

/// Seals the known-answer packet with `PacketKey`; returns the whole datagram.
fn kat_packet(alg: Algorithm) -> Vec<u8> {
    let key = PacketKey::new(alg, &KEY, IV);
    let mut buf = vec![0u8; 128];
    let body_len = write_data_packet(&mut buf, KAT_PN, KAT_PAYLOAD);
    let len = key.seal(&mut buf, body_len).unwrap();
    buf.truncate(len);
    buf
}

#[test]
fn aes_256_gcm_known_answer() {
    let packet = kat_packet(Algorithm::Aes256Gcm);
    // The nonce written out by hand: IV XOR (0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8).
    let nonce = [0xa0, 0xa1, 0xa2, 0xa3, 0xa5, 0xa7, 0xa5, 0xa3, 0xad, 0xaf, 0xad, 0xa3];
    let header = &packet[..HEADER_LEN];
    assert_eq!(header, [0, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44]);

    // Path 1: aws-lc-rs's plain AEAD, given that nonce and the header as associated data.
    let plain_key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &KEY).unwrap());
    let mut expected = Vec::new();
    expected.extend_from_slice(&7u32.to_be_bytes());
    expected.extend_from_slice(&4096u64.to_be_bytes());
    expected.extend_from_slice(KAT_PAYLOAD);
    plain_key
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(header),
            &mut expected,
        )
        .unwrap();
    assert_eq!(&packet[HEADER_LEN..], &expected[..]);

    // Path 2: bytes computed once by another implementation (Python `cryptography`, AESGCM).
    assert_eq!(
        hex(&packet[HEADER_LEN..]),
        "f1d6a940792d0d7e211429f9523027e3375d537e8146825ceaf6e52970c62cdc\
         b4138f730ea69652ea0bb5c1aabc2b"
    );
}

#[test]
fn chacha20_poly1305_known_answer() {
    // Same key, IV, packet number and packet as the AES test; bytes from Python `cryptography`.
    let packet = kat_packet(Algorithm::ChaCha20Poly1305);
    assert_eq!(
        hex(&packet[HEADER_LEN..]),
        "a6ff4451d38b3e96b5fcfc5a208b310f1675ab32071f00e8354cb431927c2f59\
         7a2f65eeb3200e18fc0da70924e6de"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
