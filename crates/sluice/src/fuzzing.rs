//! What every decoder of bytes from a peer or from disk must keep, checked on arbitrary input:
//! the fuzz targets in `fuzz/` call these on what libFuzzer makes, and `tests/fuzz_corpus.rs`
//! replays the corpora kept in the repository on every test run. Each function panics when an
//! invariant breaks (a panic is what the fuzzer reports); none returns anything.
//!
//! Not an API: it is public only so that the fuzz crate can reach it.

use std::path::{Component, Path};

use sluice_proto::crypto::{Algorithm, PacketKey};
use sluice_proto::wire::{Control, DataPrefix, HEADER_LEN, Header, Kind, Packet, emit_nak};

use crate::session::identity::Fingerprint;
use crate::session::known_hosts::KnownHosts;
use crate::session::messages::{
    Answer, ManifestPart, Offer, ReceiverMsg, Request, SenderMsg, decode, encode,
};
use crate::session::tokens::TokenSet;
use crate::settings::{ClientFile, ServerFile};
use crate::tree::manifest::{self, Entry, from_ranges, to_ranges};

/// A datagram from the network: the header and every body decoder re-emit exactly the bytes
/// they accepted, and no key opens bytes that were not sealed with it.
pub fn datagram(bytes: &[u8]) {
    if let Ok(header) = Header::parse(bytes) {
        let mut again = [0u8; HEADER_LEN];
        header.emit(&mut again).expect("a parsed header emits");
        assert_eq!(&again[..], &bytes[..HEADER_LEN], "header round trip");
        let view = Packet::new_checked(bytes).expect("a parsed header is a packet");
        assert_eq!(view.pn(), header.pn);
        body(header.kind, view.body());
    }
    for kind in Kind::ALL {
        body(kind, bytes);
    }
    for alg in [Algorithm::Aes256Gcm, Algorithm::ChaCha20Poly1305] {
        let key = PacketKey::new(alg, &[0x42; 32], [0x24; 12]);
        assert!(key.open(&mut bytes.to_vec()).is_err(), "{alg:?} opened unsealed bytes");
    }
}

fn body(kind: Kind, body: &[u8]) {
    if kind == Kind::Data {
        if let Ok((prefix, payload)) = DataPrefix::parse(body) {
            let mut again = vec![0u8; body.len()];
            prefix.emit(&mut again).expect("a parsed prefix emits");
            let at = body.len() - payload.len();
            again[at..].copy_from_slice(payload);
            assert_eq!(again, body, "data prefix round trip");
        }
        return;
    }
    let Ok(control) = Control::parse(kind, body) else { return };
    assert_eq!(control.kind(), kind);
    let mut again = vec![0u8; body.len()];
    assert_eq!(control.emit(&mut again), Ok(body.len()), "{kind:?} emits its length");
    assert_eq!(again, body, "{kind:?} round trip");
    if let Control::Nak(ranges) = control {
        let list: Vec<_> = ranges.take(body.len() / 4 + 1).collect();
        assert!(!list.is_empty() && list.len() <= body.len() / 4, "NAK range count");
        let mut again = vec![0u8; body.len()];
        assert_eq!(emit_nak(list.iter().copied(), &mut again), (body.len(), list.len()));
        assert_eq!(again, body, "NAK ranges round trip");
    }
}

/// A control-stream frame: a message that decodes encodes to a frame that decodes to the same
/// message, and a client's proposal is either refused or yields settings within bounds.
pub fn message(frame: &[u8]) {
    if let Ok(msg) = decode::<Request>(frame) {
        assert_eq!(decode::<Request>(&encode(&msg).expect("encodes")).expect("re-decodes"), msg);
        if let Request::Hello { spec, .. } = &msg {
            crate::session::check_spec(spec);
        }
    }
    if let Ok(msg) = decode::<Answer>(frame) {
        assert_eq!(decode::<Answer>(&encode(&msg).expect("encodes")).expect("re-decodes"), msg);
    }
    if let Ok(msg) = decode::<SenderMsg>(frame) {
        assert_eq!(decode::<SenderMsg>(&encode(&msg).expect("encodes")).expect("re-decodes"), msg);
    }
    if let Ok(msg) = decode::<ReceiverMsg>(frame) {
        let again = encode(&msg).expect("encodes");
        assert_eq!(decode::<ReceiverMsg>(&again).expect("re-decodes"), msg);
    }
    if let Ok(msg) = decode::<Offer>(frame) {
        assert_eq!(decode::<Offer>(&encode(&msg).expect("encodes")).expect("re-decodes"), msg);
    }
}

/// A manifest part from a peer: what [`manifest::check`] accepts names only places under the
/// destination, and the range coding of file indices round-trips.
pub fn manifest(body: &[u8]) {
    if let Ok(part) = serde_json::from_slice::<ManifestPart>(body) {
        if manifest::check(&part.entries).is_ok() {
            accepted_paths_stay_inside(&part.entries);
        }
        let again = serde_json::to_vec(&part).expect("a part encodes");
        let back: ManifestPart = serde_json::from_slice(&again).expect("re-decodes");
        assert_eq!(back, part);
    }
    let mut indices: Vec<u32> =
        body.chunks_exact(2).map(|c| u32::from(u16::from_le_bytes([c[0], c[1]]))).collect();
    indices.sort_unstable();
    indices.dedup();
    let count = indices.last().map_or(0, |&last| last as usize + 1);
    let ranges = to_ranges(indices.iter().copied());
    assert_eq!(from_ranges(&ranges, count).expect("own ranges decode"), indices);
    // Ranges from a peer: whatever decodes is sorted, unique and below the count.
    let raw: Vec<[u32; 2]> = body
        .chunks_exact(8)
        .map(|c| {
            let w = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]) % 4096;
            [w(0), w(4)]
        })
        .collect();
    if let Ok(decoded) = from_ranges(&raw, 2048) {
        assert!(decoded.windows(2).all(|w| w[0] < w[1]), "decoded indices are sorted, unique");
        assert!(decoded.iter().all(|&i| i < 2048), "decoded indices are below the count");
    }
}

fn accepted_paths_stay_inside(entries: &[Entry]) {
    let dest = Path::new("/dest");
    for entry in entries {
        let joined = dest.join(&entry.path);
        assert!(joined.starts_with(dest), "{:?} leaves the destination", entry.path);
        assert!(
            joined.components().skip(2).all(|c| matches!(c, Component::Normal(_))),
            "{:?} has a component that is not a name",
            entry.path
        );
    }
}

/// A resume record read from disk: it round-trips, the temporary file it may name is a plain
/// name in the target's directory, and the prefix it lets a resume keep is within the file.
pub fn resume_record(bytes: &[u8]) {
    let Some(record) = crate::tree::resume::decode_record(bytes) else { return };
    let again = serde_json::to_vec(&record).expect("a record encodes");
    assert_eq!(crate::tree::resume::decode_record(&again), Some(record.clone()));
    if record.temp_is_ours() {
        let temp = Path::new(&record.temp);
        assert_eq!(temp.components().count(), 1, "{:?} is not a plain name", record.temp);
        assert!(matches!(temp.components().next(), Some(Component::Normal(_))));
    }
    for size in [0, 1, record.size, record.prefix, record.prefix.saturating_add(1), u64::MAX] {
        let kept = record.usable_prefix(size);
        assert!(kept <= size, "keeps {kept} of {size}");
        assert!(kept == size || kept % crate::tree::resume::RESUME_BLOCK_BYTES == 0);
    }
}

/// The text files an operator or user writes: the token file, the known-hosts file, the
/// client's and the server's config files, and a fingerprint. Every token a token file accepts
/// verifies as its own line and no other; no grant's root is absolute or climbs; every
/// well-formed known-hosts line is read; a client config never has a default address, and a
/// host's settings are its section's over the defaults; a fingerprint that parses prints as it
/// was written.
pub fn config_text(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(file) = ClientFile::parse(&text) {
        assert_eq!(file.defaults.address, None, "a default address was accepted");
        let stranger = "\0not a host";
        if !file.hosts.contains_key(stranger) {
            assert_eq!(file.prefs(stranger), file.defaults);
        }
        let d = &file.defaults;
        for (host, s) in &file.hosts {
            let p = file.prefs(host);
            // Each setting is the section's, else the default's (an address only the section's).
            assert_eq!(p.address, s.address, "{host}");
            assert_eq!(p.port, s.port.or(d.port), "{host}");
            assert_eq!(p.token_file, s.token_file.clone().or(d.token_file.clone()), "{host}");
            assert_eq!(p.known_hosts, s.known_hosts.clone().or(d.known_hosts.clone()), "{host}");
            assert_eq!(p.fingerprint, s.fingerprint.clone().or(d.fingerprint.clone()), "{host}");
            assert_eq!(p.channels, s.channels.or(d.channels), "{host}");
            assert_eq!(p.limit_rate, s.limit_rate.clone().or(d.limit_rate.clone()), "{host}");
            assert_eq!(p.compress, s.compress.or(d.compress), "{host}");
            assert_eq!(p.policy, s.policy.clone().or(d.policy.clone()), "{host}");
            assert_eq!(p.packet_size, s.packet_size.or(d.packet_size), "{host}");
        }
    }
    let _ = ServerFile::parse(&text);
    if let Ok(set) = TokenSet::parse(&text) {
        let tokens: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.split_whitespace().next().unwrap_or_default())
            .collect();
        assert_eq!(tokens.len(), set.len());
        for (index, token) in tokens.iter().enumerate() {
            assert_eq!(set.verify(token), Some(index), "token {index}");
            let longer = format!("{token}x");
            if let Some(other) = set.verify(&longer) {
                assert_eq!(tokens[other], longer, "{longer:?} verified as another token");
            }
        }
        for grant in set.grants() {
            if let Some(root) = &grant.root {
                assert!(manifest::components(root).is_ok(), "root {root:?} escapes");
            }
        }
    }
    let known = KnownHosts::parse(Path::new("known_hosts"), &text);
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let (Some(host), Some(_), None, false) =
            (words.next(), words.next(), words.next(), line.trim().starts_with('#'))
        {
            assert!(known.get(host).is_some(), "{host:?} was not read");
        }
    }
    let first = text.lines().next().unwrap_or_default();
    if let Ok(fingerprint) = first.parse::<Fingerprint>() {
        assert_eq!(fingerprint.as_str(), first);
    }
}
