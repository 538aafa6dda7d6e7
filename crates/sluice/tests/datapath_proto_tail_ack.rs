//! Regression tests for a `sluice-proto` bug the data path ran into on lossy paths: when an ACK
//! was lost at a moment the receiver had everything that was sent (the final ACK of a transfer,
//! or any ACK while the sender waits on its window), nothing made the receiver send another, and
//! the sender waited for its idle timeout. The sender's EXP probe arrives as a duplicate; the
//! receiver now answers a duplicate with an ACK.

#![allow(clippy::print_stdout)] // tests print their seeds and results

use std::collections::BTreeMap;

use sluice_proto::cc::CcKind;
use sluice_proto::config::ChannelConfig;
use sluice_proto::crypto::{Algorithm, PacketKey};
use sluice_proto::receiver::{Receiver, State};
use sluice_proto::sender::{REASON_DONE, Sender};
use sluice_proto::wire::{Header, Kind};

fn key(b: u8) -> PacketKey {
    PacketKey::new(Algorithm::Aes256Gcm, &[b; 32], [b; 12])
}

/// Which ACK the link loses.
#[derive(Clone, Copy, PartialEq)]
enum Lose {
    /// The first ACK sent once every byte has arrived.
    Final,
    /// The first ACK sent while no data is on the way and bytes are still due (a sender
    /// blocked by a small receive window).
    WhileBlocked,
}

/// Moves `total` bytes over a lossless 5 ms link except for one lost ACK. Returns the sender's
/// final state and the time it ended.
fn transfer_losing_one_ack(total: u64, lose: Lose) -> (State, u64) {
    let blocked = lose == Lose::WhileBlocked;
    let config = ChannelConfig {
        idle_timeout_us: 10_000_000,
        recv_window_pkts: if blocked { 32 } else { 1 << 18 },
        // A sender blocked on the receive window: one that sends far faster than 32 packets a
        // round trip from the start (the default controller's startup may not get there).
        cc: if blocked { CcKind::Fixed } else { CcKind::Adaptive },
        rate_bps: if blocked { 1_000_000_000 } else { 0 },
        ..ChannelConfig::default()
    };
    let mut sender = Sender::new(config.clone(), key(1), key(2), 0).unwrap();
    let mut receiver = Receiver::new(config, key(2), key(1), 0).unwrap();
    sender.push(0, total);
    sender.finish();
    let delay_us = 5_000;
    let mut received = 0u64;
    let mut ack_dropped = false;
    let mut wire: BTreeMap<(u64, u64), (bool, Vec<u8>)> = BTreeMap::new();
    let mut buf = vec![0u8; 2048];
    let (mut now, mut n) = (0u64, 0u64);
    let mut fill = |_: u64, dst: &mut [u8]| dst.fill(7);
    while sender.state() == State::Open {
        sender.handle_timeout(now);
        receiver.handle_timeout(now);
        while let Some(len) = sender.poll_transmit(now, &mut buf, &mut fill) {
            n += 1;
            wire.insert((now + delay_us, n), (true, buf[..len].to_vec()));
        }
        while let Some(len) = receiver.poll_transmit(now, &mut buf) {
            n += 1;
            let is_ack = Header::parse(&buf[..len]).unwrap().kind == Kind::Ack;
            let data_on_the_way = wire.values().any(|(to_receiver, _)| *to_receiver);
            let moment = match lose {
                Lose::Final => received == total,
                Lose::WhileBlocked => received > 0 && received < total && !data_on_the_way,
            };
            if is_ack && moment && !ack_dropped {
                ack_dropped = true;
                println!("dropping an ACK at {now} us, {received} of {total} bytes received");
                continue;
            }
            wire.insert((now + delay_us, n), (false, buf[..len].to_vec()));
        }
        if sender.state() != State::Open {
            break;
        }
        let next =
            [wire.keys().next().map(|k| k.0), sender.poll_timeout(), receiver.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
        now = next.max(now);
        while let Some(entry) = wire.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (to_receiver, mut bytes) = entry.remove();
            if to_receiver {
                if let Ok(Some(d)) = receiver.handle_datagram(now, &mut bytes) {
                    received += d.range.len() as u64;
                }
                while let Some(rebuilt) = receiver.poll_recovered() {
                    received += rebuilt.payload.len() as u64;
                }
            } else {
                sender.handle_datagram(now, &mut bytes);
            }
        }
    }
    assert!(ack_dropped);
    (sender.state(), now)
}

#[test]
fn a_lost_final_ack_is_repaired() {
    let (state, end_us) = transfer_losing_one_ack(100_000, Lose::Final);
    println!("sender ended in {state:?} at {end_us} us");
    assert_eq!(state, State::Closed(REASON_DONE), "the sender never learned that all arrived");
}

#[test]
fn a_lost_ack_while_the_sender_is_blocked_is_repaired() {
    let (state, end_us) = transfer_losing_one_ack(1_000_000, Lose::WhileBlocked);
    println!("sender ended in {state:?} at {end_us} us");
    assert_eq!(state, State::Closed(REASON_DONE), "the transfer stalled");
}
