//! Exact-byte tests of every packet kind: round trips, each rejection, the NAK compression.
//! Random inputs live in `tests/wire_fuzz.rs`.

use super::*;

fn seq(v: u32) -> Seq31 {
    Seq31::new(v)
}

fn emit_control(control: &Control<'_>) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let len = control.emit(&mut buf).unwrap();
    assert_eq!(len, control.body_len());
    buf[..len].to_vec()
}

fn nak_bytes(entries: &[u32]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_be_bytes()).collect()
}

fn nak_ranges(body: &[u8]) -> Result<Vec<(u32, u32)>, WireError> {
    match Control::parse(Kind::Nak, body)? {
        Control::Nak(ranges) => Ok(ranges.map(|(lo, hi)| (lo.get(), hi.get())).collect()),
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn header_layout_is_exact() {
    let header = Header {
        kind: Kind::Data,
        flags: flags::PAIR_SECOND | flags::RETRANSMIT,
        pn: 0x0102_0304_0506_0708,
        timestamp_us: 0xA1B2_C3D4,
    };
    let mut buf = [0xEEu8; HEADER_LEN + 1];
    header.emit(&mut buf).unwrap();
    assert_eq!(
        buf,
        [0, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0xA1, 0xB2, 0xC3, 0xD4, 0xEE],
        "emit writes exactly the header bytes"
    );
    assert_eq!(Header::parse(&buf), Ok(header));
    let view = Packet::new_checked(&buf[..]).unwrap();
    assert_eq!((view.kind_raw(), view.flags(), view.reserved()), (0, 6, 0));
    assert_eq!((view.pn(), view.timestamp_us()), (header.pn, header.timestamp_us));
    assert_eq!(view.body(), &[0xEE]);
    assert_eq!(view.header(), Ok(header));
}

#[test]
fn header_round_trips_every_kind() {
    for kind in Kind::ALL {
        let flag_sets: &[u8] = if kind.is_control() { &[0] } else { &[0, 1, 2, 4, 5, 6] };
        for &flags in flag_sets {
            for pn in [0, 1, u64::MAX] {
                let header = Header { kind, flags, pn, timestamp_us: u32::MAX };
                let mut buf = [0u8; HEADER_LEN];
                header.emit(&mut buf).unwrap();
                assert_eq!(buf[0], kind as u8);
                assert_eq!(Header::parse(&buf), Ok(header));
            }
        }
    }
}

#[test]
fn header_kind_and_flag_bytes_exhaustively() {
    for kind_byte in 0..=u8::MAX {
        for flags_byte in 0..=u8::MAX {
            let mut buf = [0u8; HEADER_LEN];
            buf[0] = kind_byte;
            buf[1] = flags_byte;
            let expected = match kind_byte {
                10.. => Err(WireError::UnknownKind(kind_byte)),
                1..=9 if flags_byte != 0 => {
                    Err(WireError::Malformed("flags set on a control packet"))
                }
                0 if flags_byte & !flags::ALL != 0 => {
                    Err(WireError::Malformed("unknown flag bits"))
                }
                _ => Ok(()),
            };
            let parsed = Header::parse(&buf);
            assert_eq!(parsed.map(|_| ()), expected, "kind {kind_byte} flags {flags_byte:#x}");
            if let Ok(header) = parsed {
                let mut again = [0xFFu8; HEADER_LEN];
                header.emit(&mut again).unwrap();
                assert_eq!(again, buf);
            }
        }
    }
}

#[test]
fn header_rejects_short_and_reserved() {
    let mut buf = [0u8; HEADER_LEN];
    for len in 0..HEADER_LEN {
        assert_eq!(Header::parse(&buf[..len]), Err(WireError::Truncated));
    }
    for at in field::RESERVED {
        buf[at] = 0x10;
        assert_eq!(
            Header::parse(&buf),
            Err(WireError::Malformed("reserved header bytes are not zero"))
        );
        buf[at] = 0;
    }
    assert!(Header::parse(&buf).is_ok());
}

#[test]
fn header_emit_refuses_what_parse_rejects() {
    let mut buf = [0u8; HEADER_LEN];
    let bad = [
        Header { kind: Kind::Ack, flags: flags::RETRANSMIT, pn: 0, timestamp_us: 0 },
        Header { kind: Kind::Data, flags: 16, pn: 0, timestamp_us: 0 },
        Header { kind: Kind::Data, flags: 32 | flags::TRAIN, pn: 0, timestamp_us: 0 },
    ];
    for header in bad {
        assert!(matches!(header.emit(&mut buf), Err(WireError::Malformed(_))), "{header:?}");
    }
    let good = Header { kind: Kind::Nak, flags: 0, pn: 9, timestamp_us: 0 };
    assert_eq!(good.emit(&mut buf[..HEADER_LEN - 1]), Err(WireError::BufferTooSmall));
}

#[test]
fn packet_view_setters_write_in_place() {
    let mut buf = [0xFFu8; HEADER_LEN + 3];
    let mut view = Packet::new_checked(&mut buf[..]).unwrap();
    view.set_kind(Kind::Shutdown);
    view.set_flags(0);
    view.clear_reserved();
    view.set_pn(0xDEAD_BEEF_0000_0001);
    view.set_timestamp_us(77);
    view.body_mut().copy_from_slice(&[1, 2, 3]);
    assert_eq!(
        view.header(),
        Ok(Header { kind: Kind::Shutdown, flags: 0, pn: 0xDEAD_BEEF_0000_0001, timestamp_us: 77 })
    );
    assert_eq!(&buf[HEADER_LEN..], &[1, 2, 3]);
    assert_eq!(Packet::new_checked(&buf[..HEADER_LEN - 1]), Err(WireError::Truncated));
}

#[test]
fn kind_bytes() {
    for byte in 0..=u8::MAX {
        match Kind::try_from(byte) {
            Ok(kind) => assert_eq!(u8::from(kind), byte),
            Err(e) => {
                assert!(byte > 6);
                assert_eq!(e, WireError::UnknownKind(byte));
            }
        }
    }
    assert!(!Kind::Data.is_control());
    assert!(Kind::ALL[1..].iter().all(|k| k.is_control()));
}

#[test]
fn data_prefix_round_trip_and_layout() {
    let prefix = DataPrefix { dsn: seq(Seq31::MAX), offset: 0x1122_3344_5566_7788 };
    let mut body = [0u8; DATA_PREFIX_LEN + 3];
    prefix.emit(&mut body).unwrap();
    body[DATA_PREFIX_LEN..].copy_from_slice(b"abc");
    assert_eq!(
        body,
        [0x7F, 0xFF, 0xFF, 0xFF, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, b'a', b'b', b'c']
    );
    assert_eq!(DataPrefix::parse(&body), Ok((prefix, &b"abc"[..])));
    let view = DataBody::new_checked(&body[..]).unwrap();
    assert_eq!(
        (view.dsn_raw(), view.offset(), view.payload()),
        (Seq31::MAX, prefix.offset, &b"abc"[..])
    );
}

#[test]
fn data_prefix_rejections() {
    let mut body = [0u8; DATA_PREFIX_LEN + 1];
    for len in 0..DATA_PREFIX_LEN {
        assert_eq!(DataPrefix::parse(&body[..len]), Err(WireError::Truncated));
    }
    assert_eq!(
        DataPrefix::parse(&body[..DATA_PREFIX_LEN]),
        Err(WireError::Malformed("empty data payload"))
    );
    body[0] = 0x80;
    assert_eq!(
        DataPrefix::parse(&body),
        Err(WireError::Malformed("data sequence number has the top bit set"))
    );
    let prefix = DataPrefix { dsn: seq(1), offset: 2 };
    assert_eq!(prefix.emit(&mut body[..DATA_PREFIX_LEN - 1]), Err(WireError::BufferTooSmall));
    assert!(DataBody::new_checked(&body[..DATA_PREFIX_LEN - 1]).is_err());
}

#[test]
fn data_body_view_setters() {
    let mut body = [0u8; DATA_PREFIX_LEN + 2];
    let mut view = DataBody::new_checked(&mut body[..]).unwrap();
    view.set_dsn(seq(42));
    view.set_offset(1 << 40);
    view.payload_mut().copy_from_slice(&[9, 8]);
    assert_eq!(
        DataPrefix::parse(&body),
        Ok((DataPrefix { dsn: seq(42), offset: 1 << 40 }, &[9u8, 8][..]))
    );
}

#[test]
fn ack_round_trip_and_layout() {
    let ack = Ack {
        ack_no: 1,
        ack_dsn: seq(0x7FFF_FFFE),
        rtt_us: 3,
        rtt_var_us: 4,
        avail_window_pkts: 5,
        recv_rate_pps: 6,
        capacity_pps: u32::MAX,
        queue_delay_us: 7,
        rcv_next_dsn: seq(8),
        missing_pkts: 9,
        delivery_rate_pps: 10,
    };
    let bytes = emit_control(&Control::Ack(ack));
    assert_eq!(bytes, nak_bytes(&[1, 0x7FFF_FFFE, 3, 4, 5, 6, u32::MAX, 7, 8, 9, 10]));
    assert_eq!(bytes.len(), ACK_LEN);
    match Control::parse(Kind::Ack, &bytes).unwrap() {
        Control::Ack(parsed) => assert_eq!(parsed, ack),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fixed_bodies_reject_short_long_and_flagged() {
    let fixed = [
        (Kind::Ack, ACK_LEN),
        (Kind::Ack2, 4),
        (Kind::KeepAlive, 0),
        (Kind::Shutdown, 4),
        (Kind::DropRequest, 8),
    ];
    let zeros = [0u8; ACK_LEN + 1];
    for (kind, len) in fixed {
        assert!(Control::parse(kind, &zeros[..len]).is_ok(), "{kind:?}");
        for short in 0..len {
            assert_eq!(Control::parse(kind, &zeros[..short]).unwrap_err(), WireError::Truncated);
        }
        assert_eq!(
            Control::parse(kind, &zeros[..len + 1]).unwrap_err(),
            WireError::Malformed("trailing bytes after a fixed-size body"),
            "{kind:?}"
        );
    }
    for at in [field::ACK_DSN.start, field::ACK_RCV_NEXT.start] {
        let mut ack = [0u8; ACK_LEN];
        ack[at] = 0x80;
        assert!(matches!(Control::parse(Kind::Ack, &ack), Err(WireError::Malformed(_))));
    }
    for at in [field::DROP_FIRST.start, field::DROP_LAST.start] {
        let mut drop = [0u8; 8];
        drop[at] = 0x80;
        assert!(matches!(Control::parse(Kind::DropRequest, &drop), Err(WireError::Malformed(_))));
    }
    assert_eq!(
        Control::parse(Kind::Data, &zeros).unwrap_err(),
        WireError::Malformed("data is not a control kind")
    );
}

#[test]
fn small_controls_round_trip() {
    let cases = [
        (Control::Ack2 { ack_no: 0xCAFE_F00D }, vec![0xCA, 0xFE, 0xF0, 0x0D]),
        (Control::KeepAlive, vec![]),
        (Control::Shutdown { reason: 7 }, vec![0, 0, 0, 7]),
        (Control::DropRequest { first: seq(5), last: seq(5) }, nak_bytes(&[5, 5])),
        (
            Control::DropRequest { first: seq(0x7FFF_FFFF), last: seq(2) },
            nak_bytes(&[0x7FFF_FFFF, 2]),
        ),
    ];
    for (control, bytes) in cases {
        assert_eq!(emit_control(&control), bytes, "{control:?}");
        let parsed = Control::parse(control.kind(), &bytes).unwrap();
        assert_eq!(parsed.kind(), control.kind());
        assert_eq!(emit_control(&parsed), bytes);
        let mut small = vec![0u8; bytes.len().saturating_sub(1)];
        if !bytes.is_empty() {
            assert_eq!(control.emit(&mut small), Err(WireError::BufferTooSmall));
        }
    }
}

#[test]
fn drop_request_must_run_forward() {
    let ok_longest = nak_bytes(&[10, 10 + (1 << 30) - 1]);
    assert!(Control::parse(Kind::DropRequest, &ok_longest).is_ok());
    for (first, last) in [(10, 9), (10, 10 + (1 << 30)), (0, 0x7FFF_FFFF)] {
        let body = nak_bytes(&[first, last]);
        assert_eq!(
            Control::parse(Kind::DropRequest, &body).unwrap_err(),
            WireError::Malformed("drop-request last is before first"),
            "{first}..={last}"
        );
        let control = Control::DropRequest { first: seq(first), last: seq(last) };
        assert!(matches!(control.emit(&mut [0u8; 8]), Err(WireError::Malformed(_))));
    }
}

#[test]
fn a_probe_is_its_id_and_zero_padding_and_its_answer_the_id() {
    let probe = Control::Probe { id: 0xA1B2_C3D4, padding: 1400 };
    assert_eq!(probe.body_len(), 1404);
    let mut buf = vec![0xFFu8; 1404];
    assert_eq!(probe.emit(&mut buf), Ok(1404));
    assert_eq!(&buf[..4], &[0xA1, 0xB2, 0xC3, 0xD4]);
    assert!(buf[4..].iter().all(|&b| b == 0), "padding is zeros whatever the buffer held");
    let parsed = Control::parse(Kind::Probe, &buf).unwrap();
    assert!(matches!(parsed, Control::Probe { id: 0xA1B2_C3D4, padding: 1400 }), "{parsed:?}");
    assert!(matches!(
        Control::parse(Kind::Probe, &buf[..4]),
        Ok(Control::Probe { padding: 0, .. })
    ));
    assert_eq!(Control::parse(Kind::Probe, &buf[..3]).unwrap_err(), WireError::Truncated);
    buf[700] = 1;
    assert_eq!(
        Control::parse(Kind::Probe, &buf).unwrap_err(),
        WireError::Malformed("probe padding is not zero")
    );
    assert_eq!(probe.emit(&mut [0u8; 1403]), Err(WireError::BufferTooSmall));

    let ack = Control::ProbeAck { id: 7 };
    let mut out = [0u8; 4];
    assert_eq!(ack.emit(&mut out), Ok(4));
    assert!(matches!(Control::parse(Kind::ProbeAck, &out), Ok(Control::ProbeAck { id: 7 })));
    assert_eq!(Control::parse(Kind::ProbeAck, &out[..3]).unwrap_err(), WireError::Truncated);
    assert!(matches!(Control::parse(Kind::ProbeAck, &[0; 5]), Err(WireError::Malformed(_))));
}

#[test]
fn nak_paper_example() {
    // UDT paper, appendix: 3 alone, 6 through 15, 18 alone.
    let body = nak_bytes(&[0x0000_0003, 0x8000_0006, 0x0000_000F, 0x0000_0012]);
    assert_eq!(nak_ranges(&body), Ok(vec![(3, 3), (6, 15), (18, 18)]));
    let ranges = [(seq(3), seq(3)), (seq(6), seq(15)), (seq(18), seq(18))];
    let mut buf = [0u8; 32];
    assert_eq!(emit_nak(ranges.into_iter(), &mut buf), (16, 3));
    assert_eq!(&buf[..16], &body[..]);
}

#[test]
fn nak_range_across_the_wrap() {
    let ranges =
        [(seq(0x7FFF_FFFE), seq(1)), (seq(0x7FFF_FFFF), seq(0x7FFF_FFFF)), (seq(0), seq(0))];
    let mut buf = [0u8; 16];
    assert_eq!(emit_nak(ranges.into_iter(), &mut buf), (16, 3));
    assert_eq!(&buf[..], &nak_bytes(&[0xFFFF_FFFE, 1, 0x7FFF_FFFF, 0])[..]);
    assert_eq!(nak_ranges(&buf), Ok(vec![(0x7FFF_FFFE, 1), (0x7FFF_FFFF, 0x7FFF_FFFF), (0, 0)]));
}

#[test]
fn nak_longest_range() {
    let longest = nak_bytes(&[0x8000_0000 | 0x7FFF_FFF0, 0x7FFF_FFF0 + (1 << 30) - 1 - (1 << 31)]);
    assert_eq!(nak_ranges(&longest), Ok(vec![(0x7FFF_FFF0, 0x3FFF_FFEF)]));
    let mut buf = [0u8; 8];
    assert_eq!(emit_nak([(seq(0x7FFF_FFF0), seq(0x3FFF_FFEF))].into_iter(), &mut buf), (8, 1));
    assert_eq!(&buf[..], &longest[..]);
}

#[test]
fn nak_rejections() {
    let malformed = |entries: &[u32], why: &'static str| {
        assert_eq!(nak_ranges(&nak_bytes(entries)), Err(WireError::Malformed(why)), "{entries:x?}");
    };
    assert_eq!(nak_ranges(&[]), Err(WireError::Truncated));
    assert_eq!(nak_ranges(&[0, 0, 1]), Err(WireError::Truncated));
    assert_eq!(
        nak_ranges(&[0, 0, 0, 1, 0]),
        Err(WireError::Malformed("nak length is not a multiple of 4"))
    );
    malformed(&[0x8000_0001], "nak range start without an end");
    malformed(&[5, 0x8000_0001], "nak range start without an end");
    malformed(&[0x8000_0001, 0x8000_0005, 9], "two nak range starts in a row");
    malformed(&[0x8000_0007, 7], "nak range of one number");
    malformed(&[0x8000_0007, 6], "nak range end is not after its start");
    malformed(&[0x8000_0000, 1 << 30], "nak range end is not after its start");
    malformed(&[0x8000_0000 | 0x7FFF_FFFF, (1 << 30) - 1], "nak range end is not after its start");
    // The longest accepted range, from either side of the wrap.
    assert_eq!(nak_ranges(&nak_bytes(&[0x8000_0000, (1 << 30) - 1])), Ok(vec![(0, (1 << 30) - 1)]));
}

#[test]
fn emit_nak_writes_whole_ranges_only() {
    let ranges = [(seq(1), seq(1)), (seq(5), seq(9)), (seq(12), seq(12)), (seq(20), seq(21))];
    // Bytes each prefix of `ranges` needs: 4, 12, 16, 24.
    for size in 0..=28 {
        let mut buf = vec![0xAAu8; size];
        let (bytes, count) = emit_nak(ranges.into_iter(), &mut buf);
        let expected = match size {
            0..4 => (0, 0),
            4..12 => (4, 1),
            12..16 => (12, 2),
            16..24 => (16, 3),
            _ => (24, 4),
        };
        assert_eq!((bytes, count), expected, "buffer of {size} bytes");
        assert!(buf[bytes..].iter().all(|&b| b == 0xAA), "wrote past the last whole range");
        if count > 0 {
            let parsed: Vec<_> = match Control::parse(Kind::Nak, &buf[..bytes]).unwrap() {
                Control::Nak(r) => r.collect(),
                other => panic!("{other:?}"),
            };
            assert_eq!(parsed, ranges[..count]);
        }
    }
}

#[test]
fn nak_emit_writes_whole_body_after_partial_iteration() {
    let body = nak_bytes(&[3, 0x8000_0006, 15, 18]);
    let Control::Nak(mut ranges) = Control::parse(Kind::Nak, &body).unwrap() else {
        panic!("not a nak");
    };
    assert_eq!(ranges.size_hint(), (2, Some(4)));
    assert_eq!(ranges.next(), Some((seq(3), seq(3))));
    let control = Control::Nak(ranges.clone());
    assert_eq!(emit_control(&control), body);
    assert_eq!(ranges.as_bytes(), &body[..]);
    assert_eq!(ranges.by_ref().count(), 2);
    assert_eq!(ranges.next(), None);
    assert_eq!(ranges.size_hint(), (0, Some(0)));
}

#[test]
fn a_parity_body_round_trips_and_its_bounds_are_checked() {
    use crate::fec::SIDE;
    let prefix = ParityPrefix { from: Seq31::new(0x7FFF_FFFF), count: 3, line: (2, 63), half: 1 };
    let mut body = vec![0u8; field::PARITY_BYTES.start + 5];
    body[field::PARITY_BYTES].copy_from_slice(&[1, 2, 3, 4, 5]);
    prefix.emit(&mut body, 5).unwrap();
    assert_eq!(
        body[..field::PARITY_BYTES.start],
        [0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 3, 0, 64, 2, 1, 0, 63, 0, 0]
    );
    assert_eq!(ParityPrefix::parse(&body), Ok((prefix, &[1u8, 2, 3, 4, 5][..])));
    assert_eq!(
        Control::parse(Kind::Parity, &body).err(),
        Some(WireError::Malformed("parity is not a control kind"))
    );
    for len in 0..field::PARITY_BYTES.start {
        assert_eq!(ParityPrefix::parse(&body[..len]), Err(WireError::Truncated));
    }
    // Each value the format forbids, refused by emit and by parse.
    let bad = |p: ParityPrefix, len: usize| {
        let mut out = vec![0u8; field::PARITY_BYTES.start + len];
        assert!(matches!(p.emit(&mut out, len), Err(WireError::Malformed(_))), "{p:?} {len}");
        let ok = ParityPrefix { count: 1, line: (0, 0), half: 0, ..p };
        ok.emit(&mut out, 1.max(len)).unwrap();
        out[field::PARITY_COUNT].copy_from_slice(&p.count.to_be_bytes());
        out[field::PARITY_FAMILY] = p.line.0;
        out[field::PARITY_INDEX].copy_from_slice(&p.line.1.to_be_bytes());
        out[field::PARITY_HALF] = p.half;
        assert!(matches!(ParityPrefix::parse(&out), Err(WireError::Malformed(_))), "{p:?} {len}");
    };
    bad(ParityPrefix { count: 0, ..prefix }, 5);
    bad(ParityPrefix { count: (SIDE * SIDE) as u32 + 1, ..prefix }, 5);
    bad(ParityPrefix { line: (3, 0), ..prefix }, 5);
    bad(ParityPrefix { line: (0, SIDE as u16), ..prefix }, 5);
    bad(ParityPrefix { half: 2, ..prefix }, 5);
    bad(prefix, 0);
    let mut other = body.clone();
    other[field::PARITY_SIDE].copy_from_slice(&32u16.to_be_bytes());
    assert_eq!(
        ParityPrefix::parse(&other),
        Err(WireError::Malformed("parity block side is not the code's"))
    );
    let mut other = body.clone();
    other[field::PARITY_RESERVED.start] = 1;
    assert!(matches!(ParityPrefix::parse(&other), Err(WireError::Malformed(_))));
    body[0] |= 0x80;
    assert!(matches!(ParityPrefix::parse(&body), Err(WireError::Malformed(_))));
}

#[test]
fn the_coded_flag_is_bit_3_and_bit_4_is_malformed() {
    let mut buf = [0u8; HEADER_LEN];
    let coded = Header { kind: Kind::Data, flags: flags::CODED, pn: 0, timestamp_us: 0 };
    coded.emit(&mut buf).unwrap();
    assert_eq!(buf[1], 8);
    assert_eq!(Header::parse(&buf).map(|h| h.flags), Ok(flags::CODED));
    buf[1] = 16;
    assert_eq!(Header::parse(&buf).map(|_| ()), Err(WireError::Malformed("unknown flag bits")));
}
