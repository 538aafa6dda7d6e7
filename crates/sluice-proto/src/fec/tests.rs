use super::*;
use crate::rng::Rng;

const PAYLOAD: usize = 1416;

/// A channel whose packets carry `PAYLOAD` bytes, with the default 32 MiB kept for the code.
fn config() -> ChannelConfig {
    ChannelConfig { packet_size: PAYLOAD + crate::wire::DATA_OVERHEAD, ..ChannelConfig::default() }
}

/// `count` packets from sequence number `first`: a chunk's offsets that jump once, full
/// payloads but the last of each chunk, bytes from the seed.
fn packets(first: u64, count: u64, seed: u64) -> Vec<(u64, u64, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let mut offset = 1 << 30;
    (0..count)
        .map(|i| {
            let short = i == count / 2 || i == count - 1;
            let len = if short { 1 + rng.below(PAYLOAD as u64) } else { PAYLOAD as u64 };
            let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let packet = (first + i, offset, payload);
            offset = if i == count / 2 { 7 << 20 } else { offset + len };
            packet
        })
        .collect()
}

fn coder_of(sent: &[(u64, u64, Vec<u8>)]) -> Coder {
    let mut coder = Coder::new(&config()).unwrap();
    for (dsn, offset, payload) in sent {
        coder.add(*dsn, *offset, payload);
    }
    coder
}

/// A receiver's side that got every packet of `sent` but those in `lost`, and its loss list.
fn received(sent: &[(u64, u64, Vec<u8>)], lost: &[u64]) -> (Tail, IntervalSet) {
    let mut tail = Tail::new(&config()).unwrap();
    let mut missing = IntervalSet::new();
    for (dsn, offset, payload) in sent {
        if lost.contains(dsn) {
            missing.insert(*dsn, *dsn);
        } else {
            tail.keep(*dsn, *offset, payload);
        }
    }
    (tail, missing)
}

/// Hands `halves` to the receiver's side as its driver does (peeling from each parity made
/// whole), taking what is rebuilt off the loss list; returns what was rebuilt.
fn deliver(tail: &mut Tail, missing: &mut IntervalSet, halves: &[Half]) -> Vec<Recovered> {
    let mut all = Vec::new();
    for half in halves {
        if tail.take_half(half.clone()).unwrap() {
            let rebuilt = tail.peel(vec![(block_of(half.from), half.line)], missing);
            for r in &rebuilt {
                assert!(missing.remove(r.dsn), "{} rebuilt twice", r.dsn);
            }
            all.extend(rebuilt);
        }
    }
    all
}

fn expected(sent: &[(u64, u64, Vec<u8>)], dsns: &[u64]) -> Vec<Recovered> {
    sent.iter()
        .filter(|p| dsns.contains(&p.0))
        .map(|(dsn, offset, payload)| Recovered {
            dsn: *dsn,
            offset: *offset,
            payload: payload.clone(),
        })
        .collect()
}

#[test]
fn one_percent_lost_of_a_round_trip_and_of_its_parities_is_rebuilt_whole() {
    for seed in 1..=5u64 {
        println!("seed {seed}");
        // 13,000 packets from a place within a block: four blocks, the first and last in part.
        let first = 5_000 + seed * 977;
        let sent = packets(first, 13_000, seed);
        let coder = coder_of(&sent);
        let halves = coder.halves(first, first + 13_000);
        let mut rng = Rng::new(seed);
        let lost: Vec<u64> = sent.iter().map(|p| p.0).filter(|_| rng.chance(0.01)).collect();
        let arrived: Vec<Half> = halves.into_iter().filter(|_| !rng.chance(0.01)).collect();
        let (mut tail, mut missing) = received(&sent, &lost);
        let mut rebuilt = deliver(&mut tail, &mut missing, &arrived);
        rebuilt.sort_by_key(|r| r.dsn);
        assert_eq!(rebuilt, expected(&sent, &lost), "{} lost", lost.len());
        assert!(missing.is_empty());
    }
}

#[test]
fn the_parities_of_the_blocks_reaching_back_to_since_go_newest_block_first() {
    let first = 3 * BLOCK_PKTS + 100;
    let sent = packets(first, 2 * BLOCK_PKTS, 4);
    let coder = coder_of(&sent);
    let next = first + 2 * BLOCK_PKTS;
    // The newest block holds 100 packets, row 0 and part of row 1: 2 rows, 64 columns and 64
    // diagonals have packets of it, two halves each.
    let halves = coder.halves(next - 10, next);
    let blocks: Vec<u64> = halves.iter().map(|h| h.from).collect();
    assert!(blocks.iter().all(|&f| f == 5 * BLOCK_PKTS), "only the newest block: {blocks:?}");
    assert_eq!(halves.len(), 2 * (2 + 64 + 64));
    assert!(halves.iter().all(|h| h.count == 100 && h.bytes.len() == half_bytes(PAYLOAD)));
    let all = coder.halves(first, next);
    let order: Vec<u64> = all.iter().map(|h| h.from).collect();
    assert_eq!(order.first(), Some(&(5 * BLOCK_PKTS)));
    assert_eq!(order.last(), Some(&first));
    // The first block from row 1, column 36 on: every line but row 0 has packets of it.
    assert_eq!(all.len(), 2 * (191 + 3 * 64 + 130));
}

#[test]
fn losses_no_parity_can_take_alone_are_rebuilt_once_a_repair_frees_one() {
    // Rows 0 and 32, columns 0 and 32 of one block: each row, column and diagonal through
    // them misses two packets.
    let sent = packets(0, BLOCK_PKTS, 9);
    let halves = coder_of(&sent).halves(0, BLOCK_PKTS);
    let lost = [0, 32, 32 * SIDE, 32 * SIDE + 32];
    let (mut tail, mut missing) = received(&sent, &lost);
    assert!(deliver(&mut tail, &mut missing, &halves).is_empty());
    // The repair of packet 0 arrives: row 0 now misses one, and so on.
    missing.remove(0);
    tail.keep(0, sent[0].1, &sent[0].2);
    let mut rebuilt = tail.peel(tail.lines_after(0), &missing);
    rebuilt.sort_by_key(|r| r.dsn);
    assert_eq!(rebuilt, expected(&sent, &lost[1..]));
}

#[test]
fn a_parity_over_a_packet_no_longer_kept_rebuilds_nothing() {
    let sent = packets(0, 200, 3);
    let halves = coder_of(&sent).halves(0, 200);
    let keep = retained_pkts(&config());
    // Packet 70 is row 1, column 6, diagonal 7; 64 (row 1), 6 (column 6) and 7 (diagonal 7)
    // have newer packets in their slots.
    let (mut tail, mut missing) = received(&sent, &[70]);
    for dsn in [64, 6, 7] {
        tail.keep(keep + dsn, 0, &[1, 2, 3]);
        // An old packet's late repair does not displace the newer one.
        tail.keep(dsn, 0, &[9]);
        assert_eq!(tail.retained.get(dsn), None);
    }
    assert!(deliver(&mut tail, &mut missing, &halves).is_empty());
    assert!(missing.contains(70));
    // With one of them kept, 70 comes back.
    let (mut tail, mut missing) = received(&sent, &[70]);
    for dsn in [64, 6] {
        tail.keep(keep + dsn, 0, &[1, 2, 3]);
    }
    assert_eq!(deliver(&mut tail, &mut missing, &halves), expected(&sent, &[70]));
}

#[test]
fn halves_of_the_wrong_size_or_out_of_a_block_are_refused() {
    let mut tail = Tail::new(&config()).unwrap();
    let good =
        Half { from: 10, count: 5, line: (2, 63), half: 1, bytes: vec![0; half_bytes(PAYLOAD)] };
    assert_eq!(tail.take_half(good.clone()), Ok(false));
    let bad = |h: Half| {
        assert_eq!(
            Tail::new(&config()).unwrap().take_half(h.clone()),
            Err(Refused::Malformed),
            "{h:?}"
        )
    };
    bad(Half { bytes: vec![0; 3], ..good.clone() });
    bad(Half { count: 0, ..good.clone() });
    bad(Half { from: BLOCK_PKTS - 2, count: 3, ..good.clone() });
    bad(Half { line: (3, 0), ..good.clone() });
    bad(Half { line: (0, 64), ..good.clone() });
    bad(Half { half: 2, ..good.clone() });
    // A half for other packets of the block replaces what was collected.
    assert_eq!(tail.take_half(Half { half: 0, count: 6, ..good.clone() }), Ok(false));
    assert_eq!(tail.take_half(Half { half: 1, count: 6, ..good }), Ok(true));
    // The block now codes 10..=15.
    assert_eq!(tail.lines_after(15).len(), 3);
    assert!(tail.lines_after(16).is_empty());
}

#[test]
fn the_coder_keeps_no_block_the_receiver_could_not_rebuild_from() {
    let mut coder = Coder::new(&config()).unwrap();
    let keep = retained_pkts(&config());
    assert_eq!(keep, (32 << 20) / PAYLOAD as u64);
    let big = ChannelConfig { tail_code_bytes: 1 << 40, ..config() };
    assert_eq!(retained_pkts(&big), MAX_RETAINED_PKTS);
    let none = ChannelConfig { tail_code_bytes: 0, ..config() };
    assert!(Coder::new(&none).is_none() && Tail::new(&none).is_none(), "no code without room");
    for dsn in 0..keep + 2 * BLOCK_PKTS {
        coder.add(dsn, dsn * 10, &[dsn as u8; 10]);
    }
    let next = keep + 2 * BLOCK_PKTS;
    let oldest = coder.halves(0, next).last().map(|h| h.from);
    // The receiver keeps the {keep} packets before the next: the block beginning there is the
    // oldest coded, those before it are gone.
    assert_eq!(oldest, Some(next - keep));
    assert!(coder.blocks.len() as u64 <= keep / BLOCK_PKTS + 1);
}

#[test]
fn what_coding_and_keeping_cost_per_gib() {
    // Not asserted (no test asserts a wall-clock time): printed, for the module docs. The
    // sender's three XORs and the receiver's copy, per GiB of full packets.
    let sent = packets(0, 50_000, 12);
    let mut coder = Coder::new(&config()).unwrap();
    let mut tail = Tail::new(&config()).unwrap();
    let started = std::time::Instant::now();
    for (dsn, offset, payload) in &sent {
        coder.add(*dsn, *offset, payload);
    }
    let coded = started.elapsed();
    // Once round the ring first: its pages are then mapped, as through most of a transfer.
    for (dsn, offset, payload) in &sent {
        tail.keep(*dsn, *offset, payload);
    }
    let started = std::time::Instant::now();
    for (dsn, offset, payload) in &sent {
        tail.keep(*dsn + 50_000, *offset, payload);
    }
    let kept = started.elapsed();
    let gib = sent.iter().map(|p| p.2.len()).sum::<usize>() as f64 / f64::from(1 << 30);
    println!(
        "per GiB: coding {:.0} ms, keeping {:.0} ms",
        coded.as_secs_f64() * 1e3 / gib,
        kept.as_secs_f64() * 1e3 / gib
    );
    assert_eq!(tail.retained.get(99_999).map(|(offset, _)| offset), Some(sent[49_999].1));
}

#[test]
fn a_packet_too_long_to_code_restarts_its_blocks_parities() {
    let mut coder = Coder::new(&config()).unwrap();
    for dsn in 0..10 {
        coder.add(dsn, dsn * 10, &[1; 10]);
    }
    coder.add(10, 100, &[2; PAYLOAD + 1]);
    for dsn in 11..20 {
        coder.add(dsn, dsn * 10, &[1; 10]);
    }
    // The block's parities restart after the packet: they name 11..20 only.
    let halves = coder.halves(0, 20);
    assert!(!halves.is_empty());
    assert!(halves.iter().all(|h| h.from == 11 && h.count == 9), "{:?}", halves[0]);
}
