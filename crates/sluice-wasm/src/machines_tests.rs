//! A download and an upload between two of the module's machines, driven only through the
//! module's bytes (frames, JSON events, JSON effects), as the page's driver will: the files are
//! byte vectors and the data moves by copying. Deterministic; no seed.

use serde_json::{Value, json};
use sluice_session::layout::BLOCK_BYTES;
use sluice_session::manifest::{Entry, EntryKind};

use crate::Module;

/// The page's time: a millisecond per step.
struct Clock(f64);

impl Clock {
    fn tick(&mut self) -> f64 {
        self.0 += 1.0;
        self.0
    }
}

fn put(m: &mut Module, bytes: &[u8]) -> usize {
    m.buffer(bytes.len()).unwrap()[..bytes.len()].copy_from_slice(bytes);
    bytes.len()
}

fn event(m: &mut Module, id: u32, now: f64, e: &Value) -> bool {
    let len = put(m, e.to_string().as_bytes());
    m.machine_input(id, now, len, true)
}

fn message(m: &mut Module, id: u32, now: f64, frame: &[u8]) -> bool {
    let len = put(m, frame);
    m.machine_input(id, now, len, false)
}

enum Out {
    Frame(Vec<u8>),
    Json(Value),
}

fn effect(m: &mut Module, id: u32) -> Option<Out> {
    let len = m.machine_effect(id).expect("an effect within the buffer");
    let out = m.output(len);
    match out.first()? {
        1 => Some(Out::Frame(out[1..].to_vec())),
        2 => Some(Out::Json(serde_json::from_slice(&out[1..]).unwrap())),
        kind => panic!("an effect of kind {kind}"),
    }
}

fn hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

fn blocks(data: &[u8]) -> Vec<String> {
    data.chunks(BLOCK_BYTES as usize).map(hex).collect()
}

fn manifest(sizes: &[usize]) -> Vec<u8> {
    let dir = Entry {
        path: "t".into(),
        kind: EntryKind::Dir,
        size: 0,
        mtime: 0,
        mode: 0o755,
        target: None,
        blake3: None,
    };
    let files = sizes.iter().enumerate().map(|(k, &size)| Entry {
        path: format!("t/{k}"),
        kind: EntryKind::File,
        size: size as u64,
        mode: 0o644,
        ..dir.clone()
    });
    serde_json::to_vec(&std::iter::once(dir.clone()).chain(files).collect::<Vec<_>>()).unwrap()
}

fn data(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt)).collect()
}

fn span(v: &Value) -> (usize, usize) {
    (v[0].as_u64().unwrap() as usize, v[1].as_u64().unwrap() as usize)
}

/// One transfer of `src` between a sending and a receiving machine of one module, the
/// receiver holding `kept` leading bytes of its first file from before; what each end said at
/// its end, the receiver's files, and the bytes that moved.
struct Outcome {
    sent: Value,
    received: Value,
    dst: Vec<Vec<u8>>,
    moved: usize,
}

fn transfer(src: &[Vec<u8>], kept: usize) -> Outcome {
    let mut m = Module::default();
    let mut clock = Clock(0.0);
    let sizes: Vec<usize> = src.iter().map(Vec::len).collect();
    let len = put(&mut m, &manifest(&sizes));
    let sender = m.machine_send(clock.tick(), len);
    assert_ne!(sender, 0, "{}", m.machines.error());
    let receiver = m.machines.receive(clock.tick(), false);
    let mut dst: Vec<Vec<u8>> = Vec::new();
    let mut wanted: Vec<usize> = Vec::new();
    let (mut to_send, mut to_receive): (Option<Vec<(usize, usize)>>, Option<Value>) = (None, None);
    let (mut sent, mut received) = (None, None);
    let mut moved = 0;
    for _ in 0..10_000 {
        let mut quiet = true;
        while let Some(out) = effect(&mut m, sender) {
            quiet = false;
            let now = clock.tick();
            match out {
                Out::Frame(frame) => assert!(message(&mut m, receiver, now, &frame)),
                Out::Json(e) if e.get("wanted").is_some() => {
                    wanted = e["wanted"]["files"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| n.as_u64().unwrap() as usize)
                        .collect();
                }
                Out::Json(e) if e.get("check_resume").is_some() => {
                    let kept: Vec<u64> = e["check_resume"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|offer| {
                            let file = &src[wanted[offer[0].as_u64().unwrap() as usize]];
                            let same = blocks(file)
                                .iter()
                                .zip(offer[1].as_array().unwrap())
                                .take_while(|(mine, theirs)| theirs.as_str() == Some(mine))
                                .count();
                            (same * BLOCK_BYTES as usize).min(file.len()) as u64
                        })
                        .collect();
                    assert!(event(
                        &mut m,
                        sender,
                        now,
                        &json!({ "resume_checked": { "kept": kept } })
                    ));
                }
                Out::Json(e) if e.get("bind").is_some() => {
                    let bound = json!({ "bound": { "phase": e["bind"]["phase"] } });
                    assert!(event(&mut m, sender, now, &bound), "{}", m.machines.error());
                }
                Out::Json(e) if e.get("start_data").is_some() => {
                    let ranges = e["start_data"]["ranges"].as_array().unwrap();
                    to_send = Some(ranges.iter().map(span).collect());
                }
                Out::Json(e) if e == json!("hash_files") => {
                    let hashes: Vec<String> = wanted.iter().map(|&n| hex(&src[n])).collect();
                    assert!(event(&mut m, sender, now, &json!({ "hashed": { "hashes": hashes } })));
                }
                Out::Json(e) if e.get("done").is_some() => sent = Some(e["done"].clone()),
                Out::Json(e) => panic!("the sender asked for {e}"),
            }
        }
        while let Some(out) = effect(&mut m, receiver) {
            quiet = false;
            let now = clock.tick();
            match out {
                Out::Frame(frame) => assert!(message(&mut m, sender, now, &frame)),
                Out::Json(e) if e.get("plan").is_some() => {
                    let entries: Vec<Entry> = serde_json::from_value(e["plan"].clone()).unwrap();
                    let count = entries.iter().filter(|e| e.kind == EntryKind::File).count();
                    dst = sizes.iter().map(|&n| vec![0; n]).collect();
                    let mut offers = Vec::new();
                    if kept > 0 {
                        dst[0][..kept].copy_from_slice(&src[0][..kept]);
                        let whole = kept / BLOCK_BYTES as usize * BLOCK_BYTES as usize;
                        offers.push(json!([0, blocks(&dst[0][..whole])]));
                    }
                    let files: Vec<u32> = (0..count as u32).collect();
                    let planned = json!({ "planned": { "files": files, "offers": offers } });
                    assert!(event(&mut m, receiver, now, &planned), "{}", m.machines.error());
                }
                Out::Json(e) if e.get("bind").is_some() => {
                    let bound = json!({ "bound": { "phase": e["bind"]["phase"] } });
                    assert!(event(&mut m, receiver, now, &bound));
                }
                Out::Json(e) if e.get("start_data").is_some() => to_receive = Some(e),
                Out::Json(e) if e.get("commit").is_some() => {
                    let same = e["commit"]["expected"] == e["commit"]["actual"];
                    let committed = match same {
                        true => json!({ "committed": {} }),
                        false => json!({ "committed": { "code": "integrity", "message": "no" } }),
                    };
                    assert!(event(&mut m, receiver, now, &committed));
                }
                Out::Json(e) if e.get("done").is_some() => received = Some(e["done"].clone()),
                Out::Json(e) => panic!("the receiver asked for {e}"),
            }
        }
        // Both ends of a phase are open: the bytes move, each end hears the phase ended.
        if let (Some(ranges), Some(start)) = (&to_send, &to_receive) {
            let phase = start["start_data"]["phase"].clone();
            let mut space: Vec<u8> = dst.concat();
            let source: Vec<u8> = wanted.iter().flat_map(|&n| src[n].clone()).collect();
            for &(a, b) in ranges {
                space[a..b].copy_from_slice(&source[a..b]);
                moved += b - a;
            }
            let mut at = 0;
            for file in &mut dst {
                let n = file.len();
                file.copy_from_slice(&space[at..at + n]);
                at += n;
            }
            let (mut from, mut hashes) = (span(&start["start_data"]["span"]).0, Vec::new());
            for end in start["start_data"]["ends"].as_array().unwrap() {
                let end = end.as_u64().unwrap() as usize;
                hashes.push(hex(&space[from..end]));
                from = end;
            }
            let now = clock.tick();
            let received = json!({ "received": { "phase": phase, "hashes": hashes } });
            assert!(event(&mut m, receiver, now, &received));
            assert!(event(&mut m, receiver, now, &json!({ "data_ended": { "phase": phase } })));
            assert!(event(&mut m, sender, now, &json!({ "data_ended": { "phase": phase } })));
            (to_send, to_receive) = (None, None);
            quiet = false;
        }
        if let (Some(sent), Some(received)) = (&sent, &received) {
            return Outcome { sent: sent.clone(), received: received.clone(), dst, moved };
        }
        if quiet {
            let deadline = [sender, receiver]
                .map(|id| m.machines.deadline_ms(id).unwrap_or(f64::INFINITY))
                .into_iter()
                .fold(f64::INFINITY, f64::min);
            panic!(
                "stuck: nothing to do until {deadline} ms; sent {sent:?}, received {received:?}"
            );
        }
    }
    panic!("no end after 10,000 rounds");
}

#[test]
fn a_transfer_runs_through_the_modules_bytes_with_no_ports() {
    let src = vec![data(BLOCK_BYTES as usize + 5_000, 1), data(1_000, 2)];
    let o = transfer(&src, 0);
    println!("sent {}\nreceived {}", o.sent, o.received);
    assert_eq!(o.dst, src, "every byte in place");
    assert_eq!(o.moved, src.iter().map(Vec::len).sum::<usize>());
    let digests: Vec<String> = src.iter().map(|f| hex(f)).collect();
    assert_eq!(o.sent["ok"]["digests"], json!(digests));
    assert_eq!(o.received["ok"]["digests"], json!(digests));
    assert_eq!(o.received["ok"]["resumed"], json!(0));
}

#[test]
fn a_kept_partial_file_moves_only_its_rest() {
    let src = vec![data(2 * BLOCK_BYTES as usize + 7, 3)];
    // One whole block and a little more: the block is offered, checked and kept.
    let o = transfer(&src, BLOCK_BYTES as usize + 100);
    assert_eq!(o.dst, src);
    assert_eq!(o.moved, src[0].len() - BLOCK_BYTES as usize);
    assert_eq!(o.received["ok"]["resumed"], json!(BLOCK_BYTES));
}

#[test]
fn what_a_machine_cannot_take_is_refused_or_ends_it() {
    let mut m = Module::default();
    let receiver = m.machines.receive(0.0, false);
    // Not an event, an event of the other role, an unknown machine: refused, and said why.
    assert!(!event(&mut m, receiver, 1.0, &json!({ "hashed": {} })));
    assert!(m.machines.error().starts_with("not an event"), "{}", m.machines.error());
    assert!(!event(&mut m, receiver, 1.0, &json!({ "resume_checked": { "kept": [] } })));
    assert!(m.machines.error().contains("receiving end has no use"), "{}", m.machines.error());
    assert!(!event(&mut m, 99, 1.0, &json!("timeout")));
    assert!(!message(&mut m, 99, 1.0, b"\0\0\0\x02{}"));
    // A manifest that names a path outside its transfer is refused before any machine starts.
    let bad = br#"[{"path":"../x","kind":"file","size":1,"mtime":0,"mode":420}]"#;
    let len = put(&mut m, bad);
    assert_eq!(m.machine_send(0.0, len), 0);
    assert!(m.machines.error().contains("'..'"), "{}", m.machines.error());
    // A frame that is no message of the peer's: the machine says so to the peer, and ends (as
    // the quinn driver's machines do: a failure of this end, of class `protocol`).
    assert!(message(&mut m, receiver, 2.0, b"\0\0\0\x05hello"));
    let Some(Out::Frame(frame)) = effect(&mut m, receiver) else { panic!("no Failed frame") };
    let failed: Value = serde_json::from_slice(&frame[4..]).unwrap();
    assert_eq!(failed["code"], json!("protocol"), "{failed}");
    let Some(Out::Json(done)) = effect(&mut m, receiver) else { panic!("no end") };
    assert_eq!(done["done"]["error"]["local"]["code"], json!("protocol"), "{done}");
    m.machines.end(receiver);
    assert!(effect(&mut m, receiver).is_none());
}
