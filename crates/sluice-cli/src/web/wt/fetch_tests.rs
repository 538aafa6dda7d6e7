//! A download run by the transfer machines (`fetch`): the test plays the page with the page's
//! own module (`sluice-wasm`'s machines, through its bytes and JSON, as the page's script
//! will): the server's frames go into its `Receiving`, its effects are done (the plan, the
//! binding with no ports, the data written at its offsets from the server's streams, the
//! commit), and what it says goes back. Every byte is compared; the server's count says what
//! moved. The files' bytes come from the seeded generator of `tests.rs` (seed printed).

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Value, json};
use sluice::tree::{Entry, EntryKind};
use sluice_session::layout::BLOCK_BYTES;
use sluice_wasm::Module;
use tokio::sync::mpsc;
use wtransport::Connection;
use wtransport::error::StreamReadExactError;

use super::push::HEAD_BYTES;
use super::tests::{
    SEED, bytes, eventually, panics_as_the_server_goes, request, serve, serve_lanes, write_head,
};

/// A piece from one of the server's streams: (tag, phase, offset, bytes, the lane it came on).
type Piece = (u64, u32, u64, Vec<u8>, usize);

/// The running data phase: its number, where it starts, its files' ends, the bytes to come.
struct Phase {
    n: u32,
    from: usize,
    ends: Vec<usize>,
    left: usize,
}

/// What a page's download ended with.
struct Fetched {
    /// The machine's `done` (`{ok: ...}` or `{error: ...}`).
    done: Value,
    /// The manifest's files and what the page holds of each.
    files: Vec<(String, Vec<u8>)>,
    /// Where a byte was spoiled (in the files laid end to end).
    spoiled: Option<usize>,
    /// Pieces that came on each lane.
    lanes: Vec<usize>,
}

/// The page's module and its one machine.
struct Page {
    m: Module,
    id: u32,
    started: Instant,
}

impl Page {
    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    fn input(&mut self, bytes: &[u8], event: bool) {
        self.m.buffer(bytes.len()).unwrap()[..bytes.len()].copy_from_slice(bytes);
        let now = self.now();
        assert!(
            self.m.machine_input(self.id, now, bytes.len(), event),
            "refused: {}",
            self.m.machines.error()
        );
    }

    fn event(&mut self, e: &Value) {
        self.input(e.to_string().as_bytes(), true);
    }

    /// The next effect: (1, a frame) or (2, JSON).
    fn effect(&mut self) -> Option<(u8, Vec<u8>)> {
        let len = self.m.machine_effect(self.id).expect("an effect within the buffer");
        let out = self.m.output(len);
        Some((*out.first()?, out[1..].to_vec()))
    }
}

fn hex(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

fn span(v: &Value) -> (usize, usize) {
    (v[0].as_u64().unwrap() as usize, v[1].as_u64().unwrap() as usize)
}

/// Every piece on the sessions' streams, checked against its head's length.
fn pieces(lanes: &[Connection]) -> mpsc::UnboundedReceiver<Result<Piece, String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    for (lane, conn) in lanes.iter().cloned().enumerate() {
        accept(conn, lane, tx.clone());
    }
    rx
}

/// Takes the pieces on `conn` (lane number `lane`) to `tx`, and what is wrong with a stream.
fn accept(conn: Connection, lane: usize, tx: mpsc::UnboundedSender<Result<Piece, String>>) {
    tokio::spawn(async move {
        while let Ok(mut stream) = conn.accept_uni().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = [0u8; HEAD_BYTES];
                stream.read_exact(&mut head).await.unwrap();
                let word = |a: usize, b: usize| -> u64 {
                    head[a..b].iter().fold(0, |n, &x| n << 8 | u64::from(x))
                };
                let (tag, phase, offset, len) =
                    (word(0, 8), word(8, 12), word(12, 20), word(20, 24));
                let mut piece = vec![0u8; len as usize];
                match stream.read_exact(&mut piece).await {
                    Ok(()) => {}
                    // An end short of the piece would look like one to a careless reader.
                    Err(StreamReadExactError::FinishedEarly(n)) => {
                        let why = format!("a piece's stream finished after {n} of {len} bytes");
                        let _ = tx.send(Err(format!("{why}, not reset")));
                        return;
                    }
                    // Reset (its phase was cancelled): no piece, as the page takes it.
                    Err(_) => return,
                }
                let mut more = [0u8; 1];
                assert_eq!(stream.read(&mut more).await.unwrap(), None, "no byte past the piece");
                let _ = tx.send(Ok((tag, phase as u32, offset, piece, lane)));
            });
        }
    });
}

/// The control stream's frames (4 bytes of length, then the message), whole; `None` at its end.
pub(super) fn frames(mut recv: wtransport::RecvStream) -> mpsc::UnboundedReceiver<Option<Vec<u8>>> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let mut len = [0u8; 4];
            if recv.read_exact(&mut len).await.is_err() {
                let _ = tx.send(None);
                return;
            }
            let mut frame = len.to_vec();
            frame.resize(4 + u32::from_be_bytes(len) as usize, 0);
            recv.read_exact(&mut frame[4..]).await.unwrap();
            let _ = tx.send(Some(frame));
        }
    });
    rx
}

/// A page's download of `paths`, holding `kept` (the leading bytes of the first file, from an
/// earlier try) and offering its whole blocks for a resume; with `spoil`, the first piece of
/// the first phase has a byte changed as it arrives (a fault the digests must catch).
async fn fetch(lanes: &[Connection], paths: &[&str], kept: &[u8], spoil: bool) -> Fetched {
    // As the page: nothing kept, the data starts right behind the manifest.
    fetch_as(lanes, paths, kept, spoil, kept.is_empty()).await
}

/// [`fetch`], asking for an early start or not whatever is kept.
async fn fetch_as(
    lanes: &[Connection],
    paths: &[&str],
    kept: &[u8],
    spoil: bool,
    early: bool,
) -> Fetched {
    const TAG: u64 = 0x7a6;
    let mut pieces = pieces(lanes);
    let mut by_lane = vec![0; lanes.len()];
    let (mut send, recv) = lanes[0].open_bi().await.unwrap().await.unwrap();
    let head = json!({ "op": "fetch", "paths": paths, "tag": TAG, "early": early });
    write_head(&mut send, &head).await;
    let mut frames = frames(recv);
    let mut page = Page { m: Module::default(), id: 0, started: Instant::now() };
    page.id = page.m.machines.receive(page.now(), early);
    let mut names: Vec<String> = Vec::new();
    let mut space: Vec<u8> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    // Where each file starts.
    let mut starts: Vec<usize> = Vec::new();
    let mut phase: Option<Phase> = None;
    let mut peer_open = true;
    let mut spoiled = None;
    // Pieces not yet written, and the phases before `ended`, all in.
    let mut held: Vec<Piece> = Vec::new();
    let mut ended = 0;
    loop {
        while let Some((kind, out)) = page.effect() {
            if kind == 1 {
                send.write_all(&out).await.unwrap();
                continue;
            }
            let e: Value = serde_json::from_slice(&out).unwrap();
            if let Some(plan) = e.get("plan") {
                let entries: Vec<Entry> = serde_json::from_value(plan.clone()).unwrap();
                let files: Vec<&Entry> =
                    entries.iter().filter(|e| e.kind == EntryKind::File).collect();
                names = files.iter().map(|f| f.path.clone()).collect();
                sizes = files.iter().map(|f| f.size as usize).collect();
                space = vec![0; sizes.iter().sum()];
                starts =
                    sizes.iter().scan(0, |at, n| Some(std::mem::replace(at, *at + n))).collect();
                space[..kept.len()].copy_from_slice(kept);
                let whole = kept.len() / BLOCK_BYTES as usize * BLOCK_BYTES as usize;
                let blocks: Vec<String> =
                    kept[..whole].chunks(BLOCK_BYTES as usize).map(hex).collect();
                let offers = if blocks.is_empty() { json!([]) } else { json!([[0, blocks]]) };
                let wanted: Vec<u32> = (0..names.len() as u32).collect();
                page.event(&json!({ "planned": { "files": wanted, "offers": offers } }));
            } else if let Some(bind) = e.get("bind") {
                page.event(&json!({ "bound": { "phase": bind["phase"] } }));
            } else if let Some(start) = e.get("start_data") {
                let (a, b) = span(&start["span"]);
                let present: usize = start["present"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| span(r).1 - span(r).0)
                    .sum();
                let ends = start["ends"].as_array().unwrap();
                let ends = ends.iter().map(|n| n.as_u64().unwrap() as usize).collect();
                let n = start["phase"].as_u64().unwrap() as u32;
                phase = Some(Phase { n, from: a, ends, left: b - a - present });
            } else if let Some(which) = e.get("hash_blocks") {
                // Each named file's blocks as the page holds them.
                let hashed: Vec<Vec<String>> = which
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| {
                        let k = k.as_u64().unwrap() as usize;
                        let file = &space[starts[k]..starts[k] + sizes[k]];
                        file.chunks(BLOCK_BYTES as usize).map(hex).collect()
                    })
                    .collect();
                page.event(&json!({ "blocks_hashed": { "hashed": hashed } }));
            } else if let Some(commit) = e.get("commit") {
                assert_eq!(commit["expected"], commit["actual"], "the digests agree");
                page.event(&json!({ "committed": {} }));
            } else if let Some(done) = e.get("done") {
                let mut files = Vec::new();
                let mut at = 0;
                for (name, size) in names.iter().zip(&sizes) {
                    files.push((name.clone(), space[at..at + size].to_vec()));
                    at += size;
                }
                return Fetched { done: done.clone(), files, spoiled, lanes: by_lane };
            } else {
                assert!(e == json!("stop_data") || e == json!("drop_early"), "asked for {e}");
            }
        }
        // A piece may come before the machine starts its phase (its streams race the control
        // stream): it waits for it, as a socket's buffer holds a channel's early packets.
        if let Some(Phase { n: running, left, .. }) = &mut phase {
            for (_, _, offset, bytes, lane) in held.extract_if(.., |p| p.1 == *running) {
                by_lane[lane] += 1;
                let at = offset as usize;
                // Within one file and one of its blocks.
                let file = starts.partition_point(|&s| s <= at) - 1;
                let within = at - starts[file];
                assert!(within + bytes.len() <= sizes[file], "a piece past its file's end");
                let block = within / BLOCK_BYTES as usize;
                let last = (within + bytes.len() - 1) / BLOCK_BYTES as usize;
                assert_eq!(block, last, "a piece over two blocks of its file");
                space[at..at + bytes.len()].copy_from_slice(&bytes);
                if spoil && spoiled.is_none() {
                    let byte = at + bytes.len() / 2;
                    space[byte] ^= 0x5a;
                    spoiled = Some(byte);
                }
                *left -= bytes.len();
            }
        }
        assert!(held.iter().all(|p| p.1 >= ended), "a piece of a phase that ended");
        if let Some(Phase { n, from, ends, left: 0 }) = &phase {
            // Every byte of the phase is in: the hashes of the files that end in it.
            let (mut from, mut hashes) = (*from, Vec::new());
            for &end in ends {
                hashes.push(hex(&space[from..end]));
                from = end;
            }
            page.event(&json!({ "received": { "phase": n, "hashes": hashes } }));
            page.event(&json!({ "data_ended": { "phase": n } }));
            ended = n + 1;
            phase = None;
            continue;
        }
        let deadline = page.m.machines.deadline_ms(page.id);
        let wait = deadline.map_or(60_000.0, |d| (d - page.now()).max(0.0));
        tokio::select! {
            frame = frames.recv(), if peer_open => match frame.flatten() {
                Some(frame) => page.input(&frame, false),
                None => {
                    peer_open = false;
                    page.event(&json!("peer_finished"));
                }
            },
            Some(piece) = pieces.recv() => {
                let piece = piece.unwrap_or_else(|why| panic!("{why}"));
                assert_eq!(piece.0, TAG);
                held.push(piece);
            }
            () = tokio::time::sleep(std::time::Duration::from_secs_f64(wait / 1e3)) => {
                assert!(deadline.is_some(), "stuck: nothing came for a minute");
                page.event(&json!("timeout"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_downloads_through_the_machines_every_byte_verified() {
    let s = serve().await;
    let dir = s.root().join("pub/set");
    std::fs::create_dir_all(dir.join("inner")).unwrap();
    let big = bytes(SEED ^ 7, 2 * BLOCK_BYTES as usize + 5_000);
    let small = bytes(SEED ^ 8, 1_000);
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    std::fs::write(dir.join("inner/small <b>.txt"), &small).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    let (conn, _) = s.connect("all-token").await;
    let got = fetch(&[conn], &["pub/set"], &[], false).await;
    println!("done: {}", got.done);
    let ok = &got.done["ok"];
    assert!(ok.is_object(), "{}", got.done);
    let mut files = got.files.clone();
    files.sort();
    let want = vec![
        ("set/big.bin".to_owned(), big.clone()),
        ("set/empty".to_owned(), Vec::new()),
        ("set/inner/small <b>.txt".to_owned(), small.clone()),
    ];
    assert_eq!(files.len(), want.len());
    for ((name, held), (want_name, want_bytes)) in files.iter().zip(&want) {
        assert_eq!(name, want_name);
        assert!(held == want_bytes, "{name}: every byte");
    }
    let total = (big.len() + small.len()) as u64;
    assert_eq!(ok["resumed"], 0);
    assert_eq!(ok["repaired"], 0);
    assert_eq!(s.counters.sent.load(Ordering::Relaxed), total, "each byte sent once");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_partial_download_moves_only_the_rest() {
    let s = serve().await;
    let data = bytes(SEED ^ 9, 3 * BLOCK_BYTES as usize + 77);
    std::fs::write(s.root().join("pub/f.bin"), &data).unwrap();
    let (conn, _) = s.connect("all-token").await;
    // An earlier try left two blocks and a little more; the two are offered and kept.
    let kept = &data[..2 * BLOCK_BYTES as usize + 100];
    let got = fetch(&[conn], &["pub/f.bin"], kept, false).await;
    println!("done: {}", got.done);
    assert!(got.files == vec![("f.bin".to_owned(), data.clone())], "every byte");
    let rest = data.len() as u64 - 2 * BLOCK_BYTES;
    assert_eq!(got.done["ok"]["resumed"], 2 * BLOCK_BYTES);
    assert_eq!(s.counters.sent.load(Ordering::Relaxed), rest, "only the rest moved");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_start_declined_for_a_resume_moves_only_the_rest() {
    let s = serve().await;
    let data = bytes(SEED ^ 12, 2 * BLOCK_BYTES as usize + 5);
    std::fs::write(s.root().join("pub/e.bin"), &data).unwrap();
    let (conn, _) = s.connect("all-token").await;
    // The page asks for an early start, then finds a block it kept: it declines, offers the
    // block, and the transfer starts over on the restart phase with only the rest.
    let kept = &data[..BLOCK_BYTES as usize];
    let got = fetch_as(&[conn], &["pub/e.bin"], kept, false, true).await;
    println!("done: {}", got.done);
    assert!(got.files == vec![("e.bin".to_owned(), data.clone())], "every byte");
    assert_eq!(got.done["ok"]["resumed"], BLOCK_BYTES);
    // What the early phase sent before the decline stopped it, and the rest once.
    let sent = s.counters.sent.load(Ordering::Relaxed);
    let rest = data.len() as u64 - BLOCK_BYTES;
    assert!(sent >= rest && sent <= rest + data.len() as u64, "sent {sent}, the rest {rest}");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_spoiled_on_the_way_is_found_and_sent_again_in_a_repair_round() {
    let s = serve().await;
    let data = bytes(SEED ^ 10, 3 * BLOCK_BYTES as usize + 4_321);
    std::fs::write(s.root().join("pub/r.bin"), &data).unwrap();
    let (conn, _) = s.connect("all-token").await;
    let got = fetch(&[conn], &["pub/r.bin"], &[], true).await;
    println!("done: {}", got.done);
    assert!(got.files == vec![("r.bin".to_owned(), data.clone())], "every byte, repaired");
    assert_eq!(got.done["ok"]["repaired"], 1, "the one spoiled block");
    // The pieces arrive in any order: the spoiled one may be the short last block.
    let block = got.spoiled.unwrap() as u64 / BLOCK_BYTES * BLOCK_BYTES;
    let again = BLOCK_BYTES.min(data.len() as u64 - block);
    let sent = s.counters.sent.load(Ordering::Relaxed);
    assert_eq!(sent, data.len() as u64 + again, "the file once and the block again");
    // Counted once the server's end is done, which may be just after the page's.
    let repaired = || s.state.gate.metrics().render().contains("sluice_blocks_repaired_total 1\n");
    assert!(super::tests::eventually(repaired).await, "the repair is not in /metrics");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_outside_the_root_or_of_nothing_is_refused_in_the_machines_words() {
    let s = serve().await;
    std::fs::write(s.root().join("top.bin"), b"secret").unwrap();
    // The read token's root is `pub`: the served directory's files are outside it.
    let (conn, _) = s.connect("read-token").await;
    for (path, code) in [("../top.bin", "refused"), ("missing.bin", "not-found")] {
        let got = fetch(std::slice::from_ref(&conn), &[path], &[], false).await;
        println!("{path}: {}", got.done);
        let peer = &got.done["error"]["peer"];
        assert_eq!(peer["code"], code, "{path}: {}", got.done);
        let words = peer["message"].as_str().unwrap();
        let root = s.root().to_string_lossy().into_owned();
        assert!(!words.contains(&root), "{path}: the server's own path shows: {words}");
        assert!(got.files.is_empty());
    }
    assert_eq!(s.counters.sent.load(Ordering::Relaxed), 0);
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pieces_go_over_every_session_of_the_page_and_no_other() {
    let s = serve().await;
    let data = bytes(SEED ^ 11, 6 * BLOCK_BYTES as usize + 1);
    std::fs::write(s.root().join("pub/l.bin"), &data).unwrap();
    let (_, id) = s.ticket("all-token");
    let first = s.connect_page(&s.ticket_of(&id).0, "page-1").await.unwrap();
    let second = s.connect_page(&s.ticket_of(&id).0, "page-1").await.unwrap();
    // Watched: the same login's other page (another tab), and another login's session.
    let tab = s.connect_page(&s.ticket_of(&id).0, "page-2").await.unwrap();
    let (stranger, _) = s.connect("all-token").await;
    // A request answered on each proves the server counts it among its page's sessions.
    for session in [&first, &second, &tab] {
        let none = json!({ "op": "nothing" });
        assert_eq!(request(session, none, &[]).await.0["error"], "bad-request");
    }
    let (tx, mut elsewhere) = mpsc::unbounded_channel();
    accept(tab.clone(), 8, tx.clone());
    accept(stranger.clone(), 9, tx);
    let got = fetch(&[first, second], &["pub/l.bin"], &[], false).await;
    println!("done: {}; pieces by lane {:?}", got.done, got.lanes);
    assert!(got.files == vec![("l.bin".to_owned(), data.clone())], "every byte");
    let mut lanes = got.lanes.clone();
    lanes.sort_unstable();
    assert_eq!(lanes, [3, 4], "the seven pieces in turn over the page's two sessions");
    assert!(elsewhere.try_recv().is_err(), "a piece on another page's session");
    drop((tab, stranger));
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_with_more_sessions_than_its_lanes_gets_no_more_in_flight() {
    // Pages open one lane here; this one opens two: its pieces keep to one session.
    let s = serve_lanes(1).await;
    let data = bytes(SEED ^ 13, 2 * BLOCK_BYTES as usize + 3);
    std::fs::write(s.root().join("pub/m.bin"), &data).unwrap();
    let (_, id) = s.ticket("all-token");
    let first = s.connect_page(&s.ticket_of(&id).0, "page-m").await.unwrap();
    let second = s.connect_page(&s.ticket_of(&id).0, "page-m").await.unwrap();
    for session in [&first, &second] {
        let none = json!({ "op": "nothing" });
        assert_eq!(request(session, none, &[]).await.0["error"], "bad-request");
    }
    let got = fetch(&[first, second], &["pub/m.bin"], &[], false).await;
    println!("done: {}; pieces by lane {:?}", got.done, got.lanes);
    assert!(got.files == vec![("m.bin".to_owned(), data.clone())], "every byte");
    let mut lanes = got.lanes.clone();
    lanes.sort_unstable();
    assert_eq!(lanes, [0, 3], "the three pieces on one session");
    let _ = s.stop.send(());
}

#[test]
fn a_download_waiting_for_its_pieces_to_land_ends_without_a_panic_when_the_server_goes() {
    let data = bytes(SEED ^ 14, 3 * BLOCK_BYTES as usize);
    let panics = panics_as_the_server_goes(async |s| {
        std::fs::write(s.root().join("pub/w.bin"), &data).unwrap();
        let (conn, _) = s.connect("all-token").await;
        // The page asks for the file and reads nothing: the pieces' streams fill their windows,
        // and the server waits for them to land.
        let (mut send, recv) = conn.open_bi().await.unwrap().await.unwrap();
        let head = json!({ "op": "fetch", "paths": ["pub/w.bin"], "tag": 1, "early": true });
        write_head(&mut send, &head).await;
        let going = || s.counters.sent.load(Ordering::Relaxed) > 0;
        assert!(eventually(going).await, "no piece went");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let sent = s.counters.sent.load(Ordering::Relaxed);
        assert!(sent < data.len() as u64, "the pieces did not wait for the page: {sent} sent");
        (conn, send, recv)
    });
    assert!(panics.is_empty(), "the server's threads panicked as it went: {panics:#?}");
}
