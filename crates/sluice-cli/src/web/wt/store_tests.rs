//! An upload run by the transfer machines (`store`): the test plays the page with the page's
//! own module (`sluice-wasm`'s machines, through its bytes and JSON, as the page's script
//! does): its `Sending` gets the manifest of the page's file, the server's frames go in, its
//! effects are done (the resume check against the server's offers, the binding with no ports,
//! the data pushed as pieces on the page's streams, the whole file's hash, a repair's block
//! hashes), and what it says goes to the server. The stored file is compared byte for byte;
//! the server's count says what moved. Bytes from the seeded generator of `tests.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Value, json};
use sluice_session::layout::BLOCK_BYTES;
use sluice_wasm::Module;
use tokio::task::JoinSet;
use wtransport::Connection;

use super::Counters;
use super::fetch_tests::frames;
use super::push::pieces;
use super::tests::{
    SEED, bytes, eventually, panics_as_the_server_goes, request, serve, write_head,
};

/// The page's next tag: each upload has its own, as on the page.
static TAGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0x51);

/// How a test's page behaves.
#[derive(Default)]
pub(super) struct Play {
    /// Another page's session, which sends a piece of the same tag once the first phase
    /// started: it must be refused unread.
    pub(super) intruder: Option<Connection>,
    /// A byte of the first piece of the first phase goes out changed (a fault the digests
    /// must catch).
    pub(super) spoil: bool,
    /// The page goes once this many pieces of the first phase landed, and sends no others (the
    /// tab closed).
    pub(super) stop_after: Option<usize>,
    /// The page sends this many pieces of the first phase and no more, and stays: the server
    /// waits for the rest.
    pub(super) hold_after: Option<usize>,
    /// The page sends half of the first phase's first piece (counted by these counters) and
    /// goes (the tab closed); once the server has ended the upload, the rest of that piece
    /// follows. Its answer is [`Sent::torn`].
    pub(super) torn: Option<Arc<Counters>>,
}

/// What a page's upload ended with: the machine's `done` (`{ok: ...}` or `{error: ...}`; none
/// when the page went first), the server's last head after an `ok` (`{stored, name}`), and the
/// pieces each lane carried.
pub(super) struct Sent {
    pub(super) done: Option<Value>,
    pub(super) last: Option<Value>,
    lanes: Vec<usize>,
    /// With [`Play::torn`]: the server's answer to the torn piece, and the bytes it counted
    /// received once the upload had ended.
    torn: Option<(Value, u64)>,
}

/// A piece's request head.
fn piece_head(tag: u64, phase: u32, offset: u64, len: usize) -> Value {
    json!({ "op": "piece", "tag": tag, "phase": phase, "offset": offset, "len": len })
}

fn hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Uploads `data` as `path` by `policy` from a page whose sessions are `lanes`.
pub(super) async fn store(
    lanes: &[Connection],
    path: &str,
    policy: &str,
    data: &[u8],
    play: Play,
) -> Sent {
    let name = path.rsplit('/').next().unwrap();
    let head = json!({ "op": "store", "path": path, "policy": policy });
    store_files(lanes, head, &[(name, data)], play).await
}

/// Uploads `files` (manifest paths and bytes; their folders are listed before them, as the
/// page lists them) with the request `head` (a `store`'s, less its tag) from a page whose
/// sessions are `lanes`.
pub(super) async fn store_files(
    lanes: &[Connection],
    mut head: Value,
    files: &[(&str, &[u8])],
    mut play: Play,
) -> Sent {
    let tag = TAGS.fetch_add(1, Ordering::Relaxed);
    let mut by_lane = vec![0; lanes.len()];
    let (mut send, recv) = lanes[0].open_bi().await.unwrap().await.unwrap();
    head["tag"] = json!(tag);
    write_head(&mut send, &head).await;
    let mut m = Module::default();
    let started = Instant::now();
    let now = || started.elapsed().as_secs_f64() * 1e3;
    let mut folders: Vec<&str> = files
        .iter()
        .flat_map(|(path, _)| path.match_indices('/').map(|(at, _)| &path[..at]))
        .collect();
    folders.sort_unstable();
    folders.dedup();
    let dirs = folders.iter().map(|path| {
        json!({ "path": path, "kind": "dir", "size": 0, "mtime": 1_700_000_000, "mode": 0o755 })
    });
    let manifest: Vec<Value> = dirs
        .chain(files.iter().map(|(path, data)| {
            json!({ "path": path, "kind": "file", "size": data.len(), "mtime": 1_700_000_000, "mode": 0o644 })
        }))
        .collect();
    let id = m.machines.send(now(), json!(manifest).to_string().as_bytes());
    assert_ne!(id, 0, "{}", m.machines.error());
    let input = |m: &mut Module, bytes: &[u8], event: bool| {
        m.buffer(bytes.len()).unwrap()[..bytes.len()].copy_from_slice(bytes);
        assert!(m.machine_input(id, now(), bytes.len(), event), "refused: {}", m.machines.error());
    };
    // The wanted files (all until the server's plan says), laid end to end as the data is.
    let mut wanted: Vec<&[u8]> = files.iter().map(|(_, data)| *data).collect();
    let mut data: Vec<u8> = wanted.concat();
    let mut ends: Vec<u64> = Vec::new();
    let mut frames = frames(recv);
    // The running phase's pushes: each ends when its stream is finished.
    let mut pushing: JoinSet<()> = JoinSet::new();
    let mut phase: Option<u32> = None;
    let mut pushed = 0usize;
    let mut peer_open = true;
    let blocks = |d: &[u8]| -> Vec<String> { d.chunks(BLOCK_BYTES as usize).map(hex).collect() };
    loop {
        loop {
            let len = m.machine_effect(id).expect("an effect within the buffer");
            let out = m.output(len).to_vec();
            let Some((&kind, out)) = out.split_first() else { break };
            if kind == 1 {
                send.write_all(out).await.unwrap();
                continue;
            }
            let e: Value = serde_json::from_slice(out).unwrap();
            let event = if let Some(w) = e.get("wanted") {
                let numbers = w["files"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap());
                wanted = numbers.map(|n| files[n as usize].1).collect();
                data = wanted.concat();
                let mut end = 0;
                ends = wanted
                    .iter()
                    .map(|d| {
                        end += d.len() as u64;
                        end
                    })
                    .collect();
                None
            } else if let Some(offers) = e.get("check_resume") {
                // The leading blocks the server holds that match each offered file's.
                let kept: Vec<u64> = offers
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| {
                        let file = wanted[o[0].as_u64().unwrap() as usize];
                        let theirs = o[1].as_array().unwrap();
                        let mine = blocks(file);
                        let same = theirs.iter().zip(&mine).take_while(|(a, b)| a == b).count();
                        (same as u64 * BLOCK_BYTES).min(file.len() as u64)
                    })
                    .collect();
                Some(json!({ "resume_checked": { "kept": kept } }))
            } else if let Some(bind) = e.get("bind") {
                Some(json!({ "bound": { "phase": bind["phase"] } }))
            } else if e == json!("hash_files") {
                let hashes: Vec<String> = wanted.iter().map(|d| hex(d)).collect();
                Some(json!({ "hashed": { "hashes": hashes } }))
            } else if let Some(which) = e.get("hash_blocks") {
                let which = which.as_array().unwrap().iter().map(|k| k.as_u64().unwrap() as usize);
                let hashed: Vec<Vec<String>> = which.map(|k| blocks(wanted[k])).collect();
                Some(json!({ "blocks_hashed": { "hashed": hashed } }))
            } else if let Some(start) = e.get("start_data") {
                let n = start["phase"].as_u64().unwrap() as u32;
                if let Some(tab) = play.intruder.take() {
                    // (No body: the answer comes before it would be read.)
                    let head = piece_head(tag, n, 0, BLOCK_BYTES as usize);
                    let (answer, _) = request(&tab, head, &[]).await;
                    assert_eq!(answer["error"], "not-found", "another page's piece: {answer}");
                }
                let ranges: Vec<std::ops::Range<u64>> = start["ranges"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r[0].as_u64().unwrap()..r[1].as_u64().unwrap())
                    .collect();
                let all = pieces(&ranges, &ends);
                if let Some(counters) = play.torn.take() {
                    let torn = tear(
                        &lanes[0],
                        &mut send,
                        &mut frames,
                        tag,
                        n,
                        &data,
                        all[0].clone(),
                        &counters,
                    );
                    let torn = Some(torn.await);
                    return Sent { done: None, last: None, lanes: by_lane, torn };
                }
                // A page that goes after some pieces sends no more than those.
                let count =
                    play.stop_after.or(play.hold_after).map_or(all.len(), |n| n.min(all.len()));
                for (k, piece) in all.into_iter().take(count).enumerate() {
                    let lane = k % lanes.len();
                    by_lane[lane] += 1;
                    let mut bytes = data[piece.start as usize..piece.end as usize].to_vec();
                    if play.spoil && n == 0 && k == 0 {
                        bytes[0] ^= 0x5a;
                    }
                    let conn = lanes[lane].clone();
                    let head = piece_head(tag, n, piece.start, bytes.len());
                    pushing.spawn(async move {
                        let (answer, _) = request(&conn, head, &bytes).await;
                        assert_eq!(answer, json!({}), "a piece refused");
                    });
                }
                phase = Some(n);
                None
            } else if let Some(done) = e.get("done") {
                // Once the machines ended well, the server's last head follows.
                let mut last = None;
                if done.get("ok").is_some() {
                    let wait = std::time::Duration::from_secs(10);
                    let frame = tokio::time::timeout(wait, frames.recv()).await;
                    let frame = frame.expect("the last head within 10 s").flatten();
                    let frame = frame.expect("a last head before the stream's end");
                    last = Some(serde_json::from_slice(&frame[4..]).unwrap());
                }
                return Sent { done: Some(done.clone()), last, lanes: by_lane, torn: None };
            } else {
                // `stop_data`: the server has every byte while the pushes end; they end anyway.
                let quiet = [json!("stop_hashing"), json!("stop_data")];
                assert!(quiet.contains(&e), "asked for {e}");
                None
            };
            if let Some(event) = event {
                input(&mut m, event.to_string().as_bytes(), true);
            }
        }
        if let Some(n) = phase
            && pushing.is_empty()
            && play.hold_after.is_none()
        {
            input(&mut m, json!({ "data_ended": { "phase": n } }).to_string().as_bytes(), true);
            phase = None;
            continue;
        }
        let deadline = m.machines.deadline_ms(id);
        let wait = deadline.map_or(60_000.0, |d| (d - now()).max(0.0));
        tokio::select! {
            frame = frames.recv(), if peer_open => match frame.flatten() {
                Some(frame) => input(&mut m, &frame, false),
                None => {
                    peer_open = false;
                    input(&mut m, json!("peer_finished").to_string().as_bytes(), true);
                }
            },
            Some(done) = pushing.join_next(), if !pushing.is_empty() => {
                done.unwrap();
                pushed += 1;
                if play.stop_after.is_some_and(|n| pushed >= n) {
                    // The tab closes: the control stream goes, and the pushes with it.
                    pushing.shutdown().await;
                    let _ = send.reset(wtransport::VarInt::from_u32(0));
                    return Sent { done: None, last: None, lanes: by_lane, torn: None };
                }
            }
            () = tokio::time::sleep(std::time::Duration::from_secs_f64(wait / 1e3)) => {
                assert!(deadline.is_some(), "stuck: nothing came for a minute");
                input(&mut m, json!("timeout").to_string().as_bytes(), true);
            }
        }
    }
}

/// [`Play::torn`]'s page: half of the piece `range` of phase `n` on its own stream of `conn`,
/// counted at the server; then the control stream (`send`, its frames `frames`) goes, and once
/// the server has ended it, the rest of the piece. The server's answer to the piece, and the
/// bytes counted received then.
#[allow(clippy::too_many_arguments)]
async fn tear(
    conn: &Connection,
    send: &mut wtransport::SendStream,
    frames: &mut tokio::sync::mpsc::UnboundedReceiver<Option<Vec<u8>>>,
    tag: u64,
    n: u32,
    data: &[u8],
    range: std::ops::Range<u64>,
    counters: &Counters,
) -> (Value, u64) {
    let bytes = &data[range.start as usize..range.end as usize];
    let half = bytes.len() / 2;
    let (mut piece, mut answer) = conn.open_bi().await.unwrap().await.unwrap();
    write_head(&mut piece, &piece_head(tag, n, range.start, bytes.len())).await;
    piece.write_all(&bytes[..half]).await.unwrap();
    let received = || counters.received.load(Ordering::Relaxed);
    assert!(eventually(|| received() == half as u64).await, "half a piece counted: {}", received());
    let _ = send.reset(wtransport::VarInt::from_u32(0));
    // The server's end of the control stream ends after the upload (and its route) has gone.
    while let Some(Some(_)) = frames.recv().await {}
    // The server may stop the stream (STOP_SENDING) as soon as the rest begins: not an error.
    if piece.write_all(&bytes[half..]).await.is_ok() {
        let _ = piece.finish().await;
    }
    let answer = super::tests::read_head(&mut answer).await;
    // Whatever the server read of the rest, it counted by now: the answer came after.
    (answer, received())
}

/// [`store`] again while the server still ends an earlier try of the same file (`busy`).
pub(super) async fn store_when_free(conn: &Connection, path: &str, data: &[u8]) -> Sent {
    for _ in 0..100 {
        let sent = store(std::slice::from_ref(conn), path, "refuse", data, Play::default()).await;
        let busy = sent.done.as_ref().is_some_and(|d| d["error"]["peer"]["code"] == "busy");
        if !busy {
            return sent;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{path} stayed busy for 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_through_the_machines_is_stored_every_byte_verified() {
    let s = serve().await;
    let data = bytes(SEED ^ 21, 2 * BLOCK_BYTES as usize + 5_000);
    let (conn, _) = s.connect("all-token").await;
    let sent = store(&[conn], "pub/up <b>.bin", "refuse", &data, Play::default()).await;
    let done = sent.done.unwrap();
    println!("done: {done}");
    assert!(done["ok"].is_object(), "{done}");
    assert_eq!(done["ok"]["repaired"], 0);
    let stored = std::fs::read(s.root().join("pub/up <b>.bin")).unwrap();
    assert!(stored == data, "every byte");
    let mtime = std::fs::metadata(s.root().join("pub/up <b>.bin")).unwrap().modified().unwrap();
    assert_eq!(mtime.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs(), 1_700_000_000);
    assert_eq!(s.counters.received.load(Ordering::Relaxed), data.len() as u64, "each byte once");
    // Nothing is left beside it.
    let names: Vec<String> = std::fs::read_dir(s.root().join("pub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["up <b>.bin"]);
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_upload_resumes_moving_only_what_the_server_lacks() {
    let s = serve().await;
    let data = bytes(SEED ^ 22, 5 * BLOCK_BYTES as usize + 123);
    let (conn, _) = s.connect("all-token").await;
    let play = Play { stop_after: Some(2), ..Play::default() };
    let first = store(std::slice::from_ref(&conn), "pub/r.bin", "refuse", &data, play).await;
    assert!(first.done.is_none(), "{:?}", first.done);
    assert!(!s.root().join("pub/r.bin").exists(), "nothing stored from a cut-off upload");
    // What the first try's streams brought, counted once they all ended.
    let mut before = 0;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = s.counters.received.load(Ordering::Relaxed);
        if now == before {
            break;
        }
        before = now;
    }
    let sent = store_when_free(&conn, "pub/r.bin", &data).await;
    let done = sent.done.unwrap();
    println!("done: {done}; {before} bytes before the cut");
    assert!(done["ok"].is_object(), "{done}");
    assert!(std::fs::read(s.root().join("pub/r.bin")).unwrap() == data, "every byte");
    let after = s.counters.received.load(Ordering::Relaxed) - before;
    assert_eq!(done["ok"]["moved"], after, "the server took what the page sent, once");
    // The server kept whole blocks from the start of what it wrote, and offered them.
    let kept = data.len() as u64 - after;
    assert_eq!(before, 2 * BLOCK_BYTES, "the first try's two pieces came");
    assert_eq!(kept, 2 * BLOCK_BYTES, "the two blocks the first try wrote were kept");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_spoiled_on_the_way_up_is_found_and_its_block_sent_again() {
    let s = serve().await;
    let data = bytes(SEED ^ 23, 3 * BLOCK_BYTES as usize + 999);
    let (conn, _) = s.connect("all-token").await;
    let play = Play { spoil: true, ..Play::default() };
    let done = store(&[conn], "pub/s.bin", "refuse", &data, play).await.done.unwrap();
    println!("done: {done}");
    assert_eq!(done["ok"]["repaired"], 1, "{done}");
    assert!(std::fs::read(s.root().join("pub/s.bin")).unwrap() == data, "every byte, repaired");
    let received = s.counters.received.load(Ordering::Relaxed);
    assert_eq!(
        received,
        data.len() as u64 + BLOCK_BYTES,
        "the file once and its first block again"
    );
    // Counted once the server's end is done, which may be just after the page's.
    let repaired = || s.state.gate.metrics().render().contains("sluice_blocks_repaired_total 1\n");
    assert!(super::tests::eventually(repaired).await, "the repair is not in /metrics");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overwrite_policies_hold_and_keep_both_takes_a_free_name() {
    let s = serve().await;
    let old = b"the old bytes".to_vec();
    let new = bytes(SEED ^ 24, 70_000);
    std::fs::write(s.root().join("pub/p.txt"), &old).unwrap();
    let (conn, _) = s.connect("all-token").await;
    let one = std::slice::from_ref(&conn);
    let refused = store(one, "pub/p.txt", "refuse", &new, Play::default()).await;
    let (refused, last) = (refused.done.unwrap(), refused.last);
    println!("refuse: {refused}");
    assert_eq!(refused["error"]["peer"]["code"], "refused", "{refused}");
    assert_eq!(last, None, "no last head after a refusal");
    let never = store(one, "pub/p.txt", "never", &new, Play::default()).await;
    assert!(never.done.as_ref().unwrap()["ok"].is_object(), "{:?}", never.done);
    assert_eq!(std::fs::read(s.root().join("pub/p.txt")).unwrap(), old, "never: kept");
    assert_eq!(never.last, Some(json!({ "stored": false })), "never: the page hears it kept");
    // The page hears the name the file was stored under, as over HTTPS.
    let both = store(one, "pub/p.txt", "keep-both", &new, Play::default()).await;
    assert!(both.done.as_ref().unwrap()["ok"].is_object(), "{:?}", both.done);
    assert_eq!(std::fs::read(s.root().join("pub/p.txt")).unwrap(), old, "keep-both: kept");
    assert!(std::fs::read(s.root().join("pub/p (1).txt")).unwrap() == new, "beside it");
    assert_eq!(both.last, Some(json!({ "stored": true, "name": "p (1).txt" })), "keep-both");
    let again = store(one, "pub/p.txt", "keep-both", &new, Play::default()).await;
    assert_eq!(again.last, Some(json!({ "stored": true, "name": "p (2).txt" })), "the next free");
    let always = store(one, "pub/p.txt", "always", &new, Play::default()).await;
    assert!(always.done.as_ref().unwrap()["ok"].is_object(), "{:?}", always.done);
    assert!(std::fs::read(s.root().join("pub/p.txt")).unwrap() == new, "always: replaced");
    assert_eq!(always.last, Some(json!({ "stored": true, "name": "p.txt" })), "always");
    let bad = store(one, "pub/p.txt", "sometimes", &new, Play::default()).await.done.unwrap();
    assert!(bad["error"]["peer"]["message"].as_str().unwrap().contains("sometimes"), "{bad}");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_without_the_right_or_outside_the_root_is_refused_in_the_machines_words() {
    let s = serve().await;
    let data = bytes(SEED ^ 25, 1000);
    std::fs::create_dir_all(s.root().join("pub/dir")).unwrap();
    let (all, _) = s.connect("all-token").await;
    let (read, _) = s.connect("read-token").await;
    let root = s.root().to_string_lossy().into_owned();
    for (conn, path, code) in [
        (&read, "x.bin", "refused"),
        (&all, "../x.bin", "refused"),
        (&all, "pub/dir", "refused"),
        (&all, "pub/no/such/x.bin", "not-found"),
    ] {
        let sent = store(std::slice::from_ref(conn), path, "always", &data, Play::default()).await;
        let done = sent.done.unwrap();
        println!("{path}: {done}");
        let peer = &done["error"]["peer"];
        assert_eq!(peer["code"], code, "{path}: {done}");
        let words = peer["message"].as_str().unwrap();
        assert!(!words.contains(&root), "{path}: the server's own path shows: {words}");
    }
    assert!(!s.root().join("x.bin").exists() && !s.root().parent().unwrap().join("x.bin").exists());
    assert_eq!(s.counters.received.load(Ordering::Relaxed), 0);
    let _ = s.stop.send(());
}

/// A piece still on its way when its upload ends (the page cancelled, or went) is not read
/// on: its rest is neither counted nor paced, and the piece is answered `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_still_coming_when_its_upload_ends_is_not_read_on() {
    let s = serve().await;
    let data = bytes(SEED ^ 31, 3 * BLOCK_BYTES as usize);
    let (conn, _) = s.connect("all-token").await;
    let play = Play { torn: Some(s.counters.clone()), ..Play::default() };
    let sent = store(std::slice::from_ref(&conn), "pub/t.bin", "refuse", &data, play).await;
    let (answer, received) = sent.torn.unwrap();
    println!("the torn piece: {answer}; {received} bytes counted");
    assert_eq!(answer["error"], "cancelled", "{answer}");
    assert_eq!(received, BLOCK_BYTES / 2, "only the half sent while the upload ran");
    assert!(!s.root().join("pub/t.bin").exists(), "nothing stored");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pieces_come_over_every_session_of_the_page_and_another_pages_are_refused() {
    let s = serve().await;
    let data = bytes(SEED ^ 26, 4 * BLOCK_BYTES as usize + 1);
    let (_, id) = s.ticket("all-token");
    let first = s.connect_page(&s.ticket_of(&id).0, "page-1").await.unwrap();
    let second = s.connect_page(&s.ticket_of(&id).0, "page-1").await.unwrap();
    let tab = s.connect_page(&s.ticket_of(&id).0, "page-2").await.unwrap();
    for session in [&first, &second, &tab] {
        let none = json!({ "op": "nothing" });
        assert_eq!(request(session, none, &[]).await.0["error"], "bad-request");
    }
    // The same login's other tab sends a piece of the same tag while the upload runs: it is
    // refused unread, and nothing of it is counted or stored.
    let play = Play { intruder: Some(tab), ..Play::default() };
    let sent = store(&[first, second], "pub/l.bin", "refuse", &data, play).await;
    let done = sent.done.unwrap();
    println!("done: {done}; pieces by lane {:?}", sent.lanes);
    assert!(done["ok"].is_object(), "{done}");
    assert!(std::fs::read(s.root().join("pub/l.bin")).unwrap() == data, "every byte");
    assert_eq!(sent.lanes, [3, 2], "the five pieces in turn over the page's two sessions");
    assert_eq!(s.counters.received.load(Ordering::Relaxed), data.len() as u64, "no other bytes");
    let _ = s.stop.send(());
}

#[test]
fn an_upload_waiting_for_its_pieces_ends_without_a_panic_when_the_server_goes() {
    let data = bytes(SEED ^ 27, 3 * BLOCK_BYTES as usize);
    let panics = panics_as_the_server_goes(async |s| {
        let (conn, _) = s.connect("all-token").await;
        let play = Play { hold_after: Some(1), ..Play::default() };
        // (The page's task stays on its runtime until the server has gone.)
        tokio::spawn(async move { store(&[conn], "pub/g.bin", "refuse", &data, play).await });
        // The server took the one piece and waits for the others.
        let one = || s.counters.received.load(Ordering::Relaxed) == BLOCK_BYTES;
        assert!(eventually(one).await, "the first piece did not come");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!s.root().join("pub/g.bin").exists());
    });
    assert!(panics.is_empty(), "the server's threads panicked as it went: {panics:#?}");
}

/// How many uploads the server started (its `/metrics`).
fn puts(s: &super::tests::Served) -> u64 {
    let text = s.state.gate.metrics().render();
    let line = text.lines().find(|l| l.starts_with("sluice_transfers_total{direction=\"put\"}"));
    line.and_then(|l| l.rsplit(' ').next()).map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folders_files_go_in_one_run_each_by_the_policy() {
    let s = serve().await;
    let dir = s.root().join("pub/tree");
    std::fs::create_dir_all(&dir).unwrap();
    let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    // The page's files are of 1_700_000_000: older.bin's copy on the server is older (replaced
    // under if-newer), newer.bin's newer (kept).
    for (name, secs) in [("older.bin", 1_600_000_000), ("newer.bin", 1_800_000_000)] {
        let file = std::fs::File::create(dir.join(name)).unwrap();
        std::io::Write::write_all(&mut &file, b"the server's").unwrap();
        file.set_modified(at(secs)).unwrap();
    }
    let (a, b, c) = (bytes(SEED ^ 31, 70_000), bytes(SEED ^ 32, 5), bytes(SEED ^ 33, 200_000));
    let (older, newer) = (bytes(SEED ^ 34, 1_000), bytes(SEED ^ 35, 2_000));
    let files: [(&str, &[u8]); 6] = [
        ("a <i>.bin", &a),
        ("older.bin", &older),
        ("b.bin", &b),
        ("newer.bin", &newer),
        ("empty.bin", &[]),
        ("sub/c.bin", &c),
    ];
    let (conn, _) = s.connect("all-token").await;
    let one = std::slice::from_ref(&conn);
    let head = json!({ "op": "store", "dir": "pub/tree", "policy": "if-newer" });
    let sent = store_files(one, head, &files, Play::default()).await;
    let done = sent.done.unwrap();
    println!("done: {done}; last {:?}", sent.last);
    assert!(done["ok"].is_object(), "{done}");
    assert_eq!(sent.last, Some(json!({ "stored": true, "files": 5 })), "five of six stored");
    for (name, data) in files {
        let kept = name == "newer.bin";
        let on_disk = std::fs::read(dir.join(name)).unwrap();
        assert!(kept || on_disk == data, "{name}: every byte");
        assert!(!kept || on_disk == b"the server's", "{name}: kept by the policy");
    }
    let moved = a.len() + older.len() + b.len() + c.len();
    assert_eq!(s.counters.received.load(Ordering::Relaxed), moved as u64, "each byte once");
    assert_eq!(puts(&s), 1, "one run for the six files");
    // Nothing is left beside them.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a <i>.bin", "b.bin", "empty.bin", "newer.bin", "older.bin", "sub"]);
    assert_eq!(std::fs::read_dir(dir.join("sub")).unwrap().count(), 1, "sub/c.bin alone");
    // A folder's files are not kept both (each would need its own free name), nor sent into
    // what is not a folder, nor outside the root.
    let root = s.root().to_string_lossy().into_owned();
    let refused = [("pub/tree", "keep-both"), ("pub/tree/b.bin", "always"), ("..", "always")];
    for (dir, policy) in refused {
        let head = json!({ "op": "store", "dir": dir, "policy": policy });
        let done = store_files(one, head, &files[..1], Play::default()).await.done.unwrap();
        println!("{dir} {policy}: {done}");
        assert_eq!(done["error"]["peer"]["code"], "refused", "{dir} {policy}: {done}");
        assert!(!done.to_string().contains(&root), "the server's own path shows: {done}");
    }
    assert_eq!(s.counters.received.load(Ordering::Relaxed), moved as u64, "nothing more");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_folder_run_resumes_its_large_file_and_sends_the_small_ones_again() {
    let s = serve().await;
    std::fs::create_dir_all(s.root().join("pub/r")).unwrap();
    let small = bytes(SEED ^ 36, 10_000);
    let big = bytes(SEED ^ 37, 3 * BLOCK_BYTES as usize + 7);
    let files: [(&str, &[u8]); 2] = [("small.bin", &small), ("big.bin", &big)];
    let (conn, _) = s.connect("all-token").await;
    let one = std::slice::from_ref(&conn);
    let head = json!({ "op": "store", "dir": "pub/r", "policy": "refuse" });
    // The pieces: the small file, then the big one's blocks; the tab closes after three.
    let play = Play { stop_after: Some(3), ..Play::default() };
    let first = store_files(one, head.clone(), &files, play).await;
    assert!(first.done.is_none(), "{:?}", first.done);
    assert!(!s.root().join("pub/r/small.bin").exists(), "nothing stored from a cut-off run");
    let mut before = 0;
    for _ in 0..200 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let now = s.counters.received.load(Ordering::Relaxed);
        if now == before {
            break;
        }
        before = now;
    }
    assert_eq!(before, small.len() as u64 + 2 * BLOCK_BYTES, "the first try's three pieces came");
    let mut done = None;
    for _ in 0..100 {
        let sent = store_files(one, head.clone(), &files, Play::default()).await;
        let d = sent.done.unwrap();
        if d["error"]["peer"]["code"] != "busy" {
            done = Some(d);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let done = done.expect("the folder stayed busy for 5 s");
    println!("done: {done}; {before} bytes before the cut");
    assert!(done["ok"].is_object(), "{done}");
    for (name, data) in files {
        assert!(std::fs::read(s.root().join("pub/r").join(name)).unwrap() == data, "{name}");
    }
    let after = s.counters.received.load(Ordering::Relaxed) - before;
    assert_eq!(done["ok"]["moved"], after, "the server took what the page sent, once");
    // The big file's two blocks were kept; the small one (too small to keep) came again.
    assert_eq!(after, small.len() as u64 + big.len() as u64 - 2 * BLOCK_BYTES);
    let _ = s.stop.send(());
}
