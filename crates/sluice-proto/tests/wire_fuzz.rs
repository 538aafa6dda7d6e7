//! Seeded property tests over every decoder: random bytes, random near-valid packets and random
//! mutations of valid (plain and sealed) packets. Nothing may panic, and whatever parses must
//! re-emit to exactly the bytes it came from.
//!
//! Each test prints its seed; `SLUICE_TEST_SEED=<n> cargo test -p sluice-proto --test wire_fuzz`
//! replays another one.

#![allow(clippy::print_stdout, reason = "tests print their seeds and coverage from helpers")]

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use sluice_proto::crypto::{Algorithm, CryptoError, PacketKey};
use sluice_proto::seq::Seq31;
use sluice_proto::wire::{
    Ack, Control, DataBody, DataPrefix, HEADER_LEN, Header, Kind, Packet, TAG_LEN, WireError,
    emit_nak,
};

const DEFAULT_SEED: u64 = 0x5EED_51CE_0000_0001;
const KEY: [u8; 32] = [0x42; 32];
const IV: [u8; 12] = [0x24; 12];
const HALF_CIRCLE: u32 = 1 << 30;

fn runner(test: &str, cases: u32) -> TestRunner {
    let seed = match std::env::var("SLUICE_TEST_SEED") {
        Ok(s) => s.parse().expect("SLUICE_TEST_SEED must be a u64"),
        Err(_) => DEFAULT_SEED,
    };
    println!("{test}: seed {seed} ({cases} cases; SLUICE_TEST_SEED={seed} replays it)");
    let mut chacha_seed = [0u8; 32];
    for (i, chunk) in chacha_seed.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(seed ^ ((i as u64) << 59)).to_le_bytes());
    }
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &chacha_seed))
}

/// Runs `check` on `cases` values of `strategy`, then checks the tally it kept.
fn run<S: Strategy>(
    test: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(&Tally, S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let tally = Tally::default();
    if let Err(e) = runner(test, cases).run(&strategy, |value| check(&tally, value)) {
        panic!("{test}: {e}");
    }
    tally.check(test);
}

/// How often each decoder accepted its input in one test: proof the test is not vacuous.
#[derive(Debug, Default)]
struct Tally {
    /// Accepted bodies per kind, in wire order.
    accepted: [Cell<u32>; 9],
    /// Accepted NAK bodies holding at least one flagged range.
    nak_with_range: Cell<u32>,
}

impl Tally {
    fn hit(&self, kind: Kind) {
        let slot = &self.accepted[usize::from(u8::from(kind))];
        slot.set(slot.get() + 1);
    }

    /// Prints the tally and checks every decoder accepted something.
    fn check(&self, test: &str) {
        let accepted: Vec<u32> = self.accepted.iter().map(Cell::get).collect();
        println!(
            "{test}: accepted per kind {accepted:?}, naks with a range {}",
            self.nak_with_range.get()
        );
        assert!(accepted.iter().all(|&n| n > 0), "{test}: some kind never parsed");
        assert!(self.nak_with_range.get() > 0, "{test}: no nak range ever parsed");
    }
}

fn keys() -> [PacketKey; 2] {
    [
        PacketKey::new(Algorithm::Aes256Gcm, &KEY, IV),
        PacketKey::new(Algorithm::ChaCha20Poly1305, &KEY, IV),
    ]
}

/// A body decoded into owned values, for comparing against what a packet was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decoded {
    Data { dsn: u32, offset: u64, payload: Vec<u8> },
    Ack(Ack),
    Ack2(u32),
    Nak(Vec<(u32, u32)>),
    KeepAlive,
    Shutdown(u32),
    Drop(u32, u32),
    Probe(u32, usize),
    ProbeAck(u32),
}

/// Decodes `body` as `kind` with every decoder that applies, checking on the way that each
/// accepted value re-emits to exactly `body` and that views agree with the structs.
fn decode_body(
    tally: &Tally,
    kind: Kind,
    body: &[u8],
) -> Result<Result<Decoded, WireError>, TestCaseError> {
    if kind == Kind::Data {
        prop_assert!(Control::parse(kind, body).is_err());
        let (prefix, payload) = match DataPrefix::parse(body) {
            Ok(parsed) => parsed,
            Err(e) => return Ok(Err(e)),
        };
        let mut again = vec![0u8; body.len()];
        prefix.emit(&mut again).map_err(|e| TestCaseError::fail(e.to_string()))?;
        again[12..].copy_from_slice(payload);
        prop_assert_eq!(&again[..], body);
        let view = DataBody::new_checked(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(view.dsn_raw(), prefix.dsn.get());
        prop_assert_eq!(view.offset(), prefix.offset);
        prop_assert_eq!(view.payload(), payload);
        tally.hit(kind);
        return Ok(Ok(Decoded::Data {
            dsn: prefix.dsn.get(),
            offset: prefix.offset,
            payload: payload.to_vec(),
        }));
    }
    let control = match Control::parse(kind, body) {
        Ok(control) => control,
        Err(e) => return Ok(Err(e)),
    };
    prop_assert_eq!(control.kind(), kind);
    tally.hit(kind);
    let mut again = vec![0u8; body.len()];
    prop_assert_eq!(control.emit(&mut again), Ok(body.len()));
    prop_assert_eq!(&again[..], body);
    let decoded = match control {
        Control::Ack(ack) => Decoded::Ack(ack),
        Control::Ack2 { ack_no } => Decoded::Ack2(ack_no),
        Control::KeepAlive => Decoded::KeepAlive,
        Control::Shutdown { reason } => Decoded::Shutdown(reason),
        Control::DropRequest { first, last } => {
            prop_assert!(span(first.get(), last.get()) < HALF_CIRCLE);
            Decoded::Drop(first.get(), last.get())
        }
        Control::Probe { id, padding } => Decoded::Probe(id, padding),
        Control::ProbeAck { id } => Decoded::ProbeAck(id),
        Control::Nak(ranges) => {
            // Iteration is bounded by the body; one extra step checks that it has ended.
            let list: Vec<_> = ranges.clone().take(body.len() / 4 + 1).collect();
            prop_assert!(!list.is_empty() && list.len() <= body.len() / 4);
            for &(lo, hi) in &list {
                prop_assert!(lo.get() <= Seq31::MAX && hi.get() <= Seq31::MAX);
                prop_assert!(span(lo.get(), hi.get()) < HALF_CIRCLE, "{:?}", (lo, hi));
            }
            let mut again = vec![0u8; body.len()];
            prop_assert_eq!(emit_nak(list.iter().copied(), &mut again), (body.len(), list.len()));
            prop_assert_eq!(&again[..], body);
            if list.iter().any(|(lo, hi)| lo != hi) {
                tally.nak_with_range.set(tally.nak_with_range.get() + 1);
            }
            Decoded::Nak(list.iter().map(|(lo, hi)| (lo.get(), hi.get())).collect())
        }
    };
    Ok(Ok(decoded))
}

fn span(lo: u32, hi: u32) -> u32 {
    hi.wrapping_sub(lo) & Seq31::MAX
}

/// Every plaintext decoder on arbitrary bytes: as a datagram, as a bare body of every kind.
fn check_decoders(tally: &Tally, bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(view) = Packet::new_checked(bytes) {
        prop_assert_eq!(view.body().len(), bytes.len() - HEADER_LEN);
        let fields = (view.kind_raw(), view.flags(), view.reserved(), view.pn());
        if let Ok(header) = Header::parse(bytes) {
            prop_assert_eq!(fields, (header.kind as u8, header.flags, 0, header.pn));
            prop_assert_eq!(view.timestamp_us(), header.timestamp_us);
            let mut again = [0u8; HEADER_LEN];
            prop_assert_eq!(header.emit(&mut again), Ok(()));
            prop_assert_eq!(&again[..], &bytes[..HEADER_LEN]);
            let _ = decode_body(tally, header.kind, view.body())?;
        }
    } else {
        prop_assert_eq!(Header::parse(bytes), Err(WireError::Truncated));
    }
    for kind in Kind::ALL {
        let _ = decode_body(tally, kind, bytes)?;
    }
    Ok(())
}

/// `open` on bytes that are not a genuine sealed packet must fail, without panicking.
fn check_forged(bytes: &[u8]) -> Result<(), TestCaseError> {
    for key in keys() {
        let mut copy = bytes.to_vec();
        let result = key.open(&mut copy);
        prop_assert!(result.is_err(), "{:?} opened forged bytes", key);
        if bytes.len() < HEADER_LEN + TAG_LEN {
            prop_assert_eq!(result.unwrap_err(), CryptoError::Truncated);
        } else if Header::parse(bytes).is_err() {
            prop_assert_eq!(result.unwrap_err(), CryptoError::Header);
        } else {
            prop_assert_eq!(result.unwrap_err(), CryptoError::Auth);
        }
    }
    Ok(())
}

#[test]
fn random_bytes_never_panic_and_round_trip() {
    let strategy = prop::collection::vec(any::<u8>(), 0..80);
    run("random_bytes", 20_000, strategy, |tally, bytes| {
        check_decoders(tally, &bytes)?;
        check_forged(&bytes)
    });
}

/// A 32-bit word biased towards the values decoders treat specially: small numbers, flagged
/// numbers, numbers near the 31-bit wrap and near half the circle.
fn word() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..16,
        (0u32..16).prop_map(|v| v | 1 << 31),
        (0u32..16).prop_map(|v| Seq31::MAX - v),
        (0u32..16).prop_map(|v| (Seq31::MAX - v) | 1 << 31),
        (0u32..4).prop_map(|v| HALF_CIRCLE - 2 + v),
    ]
}

#[test]
fn near_valid_packets_never_panic_and_round_trip() {
    // A header that usually parses, over a body of biased words and a ragged tail.
    let strategy = (
        0u8..10,
        prop::sample::select(vec![0u8, 1, 2, 3, 4, 5, 6, 8, 0x80]),
        any::<u8>().prop_map(|b| if b < 240 { 0 } else { b }),
        any::<u64>(),
        any::<u32>(),
        prop::collection::vec(word(), 0..10),
        prop::collection::vec(any::<u8>(), 0..4),
    );
    run("near_valid", 20_000, strategy, |tally, (kind, flags, reserved, pn, ts, words, tail)| {
        let mut bytes = vec![kind, flags, reserved, 0];
        bytes.extend_from_slice(&pn.to_be_bytes());
        bytes.extend_from_slice(&ts.to_be_bytes());
        bytes.extend(words.iter().flat_map(|w| w.to_be_bytes()));
        if tail.len() == 3 {
            bytes.extend_from_slice(&tail);
        }
        check_decoders(tally, &bytes)?;
        check_decoders(tally, &bytes[HEADER_LEN..])?;
        check_forged(&bytes)
    });
}

/// What a valid packet is built from.
#[derive(Debug, Clone)]
struct Spec {
    flags: u8,
    pn: u64,
    timestamp_us: u32,
    body: Decoded,
}

fn spec() -> impl Strategy<Value = Spec> {
    let seq = 0..=Seq31::MAX;
    let range_span = prop_oneof![Just(0u32), 1u32..64, HALF_CIRCLE - 4..HALF_CIRCLE];
    let body = prop_oneof![
        (seq.clone(), any::<u64>(), prop::collection::vec(any::<u8>(), 1..48))
            .prop_map(|(dsn, offset, payload)| Decoded::Data { dsn, offset, payload }),
        (any::<[u32; 9]>(), seq.clone(), seq.clone()).prop_map(|(v, ack_dsn, rcv_next)| {
            Decoded::Ack(Ack {
                ack_no: v[0],
                ack_dsn: Seq31::new(ack_dsn),
                rtt_us: v[1],
                rtt_var_us: v[2],
                avail_window_pkts: v[3],
                recv_rate_pps: v[4],
                capacity_pps: v[5],
                queue_delay_us: v[6],
                rcv_next_dsn: Seq31::new(rcv_next),
                missing_pkts: v[7],
                delivery_rate_pps: v[8],
            })
        }),
        any::<u32>().prop_map(Decoded::Ack2),
        prop::collection::vec((seq.clone(), range_span.clone()), 1..8).prop_map(|ranges| {
            Decoded::Nak(
                ranges
                    .into_iter()
                    .map(|(lo, n)| (lo, Seq31::new(lo.wrapping_add(n)).get()))
                    .collect(),
            )
        }),
        Just(Decoded::KeepAlive),
        any::<u32>().prop_map(Decoded::Shutdown),
        (seq, range_span)
            .prop_map(|(first, n)| Decoded::Drop(first, Seq31::new(first.wrapping_add(n)).get())),
        (any::<u32>(), 0usize..64).prop_map(|(id, padding)| Decoded::Probe(id, padding)),
        any::<u32>().prop_map(Decoded::ProbeAck),
    ];
    (prop::sample::select(vec![0u8, 1, 2, 4, 5, 6]), any::<u64>(), any::<u32>(), body)
        .prop_map(|(flags, pn, timestamp_us, body)| Spec { flags, pn, timestamp_us, body })
}

impl Spec {
    fn kind(&self) -> Kind {
        match self.body {
            Decoded::Data { .. } => Kind::Data,
            Decoded::Ack(_) => Kind::Ack,
            Decoded::Ack2(_) => Kind::Ack2,
            Decoded::Nak(_) => Kind::Nak,
            Decoded::KeepAlive => Kind::KeepAlive,
            Decoded::Shutdown(_) => Kind::Shutdown,
            Decoded::Drop(..) => Kind::DropRequest,
            Decoded::Probe(..) => Kind::Probe,
            Decoded::ProbeAck(_) => Kind::ProbeAck,
        }
    }

    fn header(&self) -> Header {
        let flags = if self.kind() == Kind::Data { self.flags } else { 0 };
        Header { kind: self.kind(), flags, pn: self.pn, timestamp_us: self.timestamp_us }
    }

    /// The plaintext datagram (header and body, no tag), built with the crate's emitters.
    fn build(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 256];
        self.header().emit(&mut buf).unwrap();
        let body = &mut buf[HEADER_LEN..];
        let body_len = match &self.body {
            Decoded::Data { dsn, offset, payload } => {
                DataPrefix { dsn: Seq31::new(*dsn), offset: *offset }.emit(body).unwrap();
                body[12..12 + payload.len()].copy_from_slice(payload);
                12 + payload.len()
            }
            Decoded::Nak(ranges) => {
                let seqs = ranges.iter().map(|&(lo, hi)| (Seq31::new(lo), Seq31::new(hi)));
                let (len, count) = emit_nak(seqs, body);
                assert_eq!(count, ranges.len());
                len
            }
            Decoded::Ack(ack) => Control::Ack(*ack).emit(body).unwrap(),
            Decoded::Ack2(ack_no) => Control::Ack2 { ack_no: *ack_no }.emit(body).unwrap(),
            Decoded::KeepAlive => Control::KeepAlive.emit(body).unwrap(),
            Decoded::Shutdown(reason) => Control::Shutdown { reason: *reason }.emit(body).unwrap(),
            Decoded::Drop(first, last) => {
                let (first, last) = (Seq31::new(*first), Seq31::new(*last));
                Control::DropRequest { first, last }.emit(body).unwrap()
            }
            Decoded::Probe(id, padding) => {
                Control::Probe { id: *id, padding: *padding }.emit(body).unwrap()
            }
            Decoded::ProbeAck(id) => Control::ProbeAck { id: *id }.emit(body).unwrap(),
        };
        buf.truncate(HEADER_LEN + body_len);
        buf
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(usize),
    SetByte(usize, u8),
    Truncate(usize),
    Append(u8),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::FlipBit),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::SetByte(at, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<u8>().prop_map(Mutation::Append),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutations: &[Mutation]) {
    for m in mutations {
        let len = bytes.len();
        match *m {
            Mutation::Append(b) => bytes.push(b),
            _ if len == 0 => {}
            Mutation::FlipBit(bit) => bytes[bit / 8 % len] ^= 1 << (bit % 8),
            Mutation::SetByte(at, b) => bytes[at % len] = b,
            Mutation::Truncate(to) => bytes.truncate(to % len),
            Mutation::Remove(at) => {
                bytes.remove(at % len);
            }
        }
    }
}

#[test]
fn valid_packets_round_trip_and_mutations_are_caught() {
    let strategy = (spec(), prop::collection::vec(mutation(), 1..4), any::<bool>());
    run("mutations", 10_000, strategy, |tally, (spec, mutations, chacha)| {
        // The packet as built decodes to exactly its spec.
        let plain = spec.build();
        prop_assert_eq!(Header::parse(&plain), Ok(spec.header()));
        prop_assert_eq!(
            decode_body(tally, spec.kind(), &plain[HEADER_LEN..])?,
            Ok(spec.body.clone())
        );
        check_decoders(tally, &plain)?;

        let mut mutated = plain.clone();
        mutate(&mut mutated, &mutations);
        check_decoders(tally, &mutated)?;
        check_decoders(tally, mutated.get(HEADER_LEN..).unwrap_or_default())?;

        let key = &keys()[usize::from(chacha)];
        let mut sealed = plain.clone();
        sealed.resize(plain.len() + TAG_LEN, 0);
        prop_assert_eq!(key.seal(&mut sealed, plain.len() - HEADER_LEN), Ok(sealed.len()));
        let mut tampered = sealed.clone();
        mutate(&mut tampered, &mutations);
        let mut opened = tampered.clone();
        match key.open(&mut opened) {
            Ok((header, len)) => {
                prop_assert_eq!(&tampered, &sealed, "a changed packet authenticated");
                prop_assert_eq!(header, spec.header());
                prop_assert_eq!(&opened[..HEADER_LEN + len], &plain[..]);
            }
            Err(_) => prop_assert_ne!(&tampered, &sealed, "the genuine packet failed to open"),
        }
        check_decoders(tally, &tampered)
    });
}

#[test]
fn emit_nak_fills_the_buffer_with_a_prefix_of_whole_ranges() {
    let range = (0..=Seq31::MAX, prop_oneof![Just(0u32), 1u32..1000, HALF_CIRCLE - 2..HALF_CIRCLE]);
    let strategy = (prop::collection::vec(range, 0..20), 0usize..100);
    // Only NAKs here, so the every-kind tally of `run` does not apply.
    let result = runner("emit_nak", 5_000).run(&strategy, |(ranges, size)| {
        let ranges: Vec<(Seq31, Seq31)> = ranges
            .into_iter()
            .map(|(lo, n)| (Seq31::new(lo), Seq31::new(lo.wrapping_add(n))))
            .collect();
        let mut buf = vec![0xA5u8; size];
        let (len, count) = emit_nak(ranges.iter().copied(), &mut buf);
        let need = |r: &(Seq31, Seq31)| if r.0 == r.1 { 4 } else { 8 };
        prop_assert_eq!(len, ranges[..count].iter().map(need).sum::<usize>());
        if let Some(next) = ranges.get(count) {
            prop_assert!(len + need(next) > size, "stopped before a range that fits");
        }
        prop_assert!(buf[len..].iter().all(|&b| b == 0xA5));
        if count == 0 {
            prop_assert_eq!(len, 0);
        } else {
            let Ok(Control::Nak(parsed)) = Control::parse(Kind::Nak, &buf[..len]) else {
                return Err(TestCaseError::fail("emitted nak does not parse"));
            };
            prop_assert_eq!(parsed.collect::<Vec<_>>(), &ranges[..count]);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("emit_nak: {e}");
    }
}
