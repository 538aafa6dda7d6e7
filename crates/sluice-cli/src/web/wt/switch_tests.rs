//! An upload that changes its way mid-file, as the page's "auto" transport does: what the
//! server holds of one way's try is where the other way goes on, and only the rest moves. HTTPS
//! through the app's router (`app_tests`' client) on the same server state as the WebTransport
//! side; the page's machines played as in `store_tests.rs`. The bytes that moved are counted at
//! the server: the WebTransport side's received bytes, and each HTTPS request's `received`.

use std::sync::atomic::Ordering;

use serde_json::json;
use sluice_session::layout::BLOCK_BYTES;

use super::super::app_tests::{App, Client, json_of};
use super::store_tests::{Play, store};
use super::tests::{SEED, bytes, serve};

/// The names in `dir`, sorted.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_off_over_https_goes_on_over_webtransport_moving_only_the_rest() {
    let s = serve().await;
    let app = App::of(s.state.clone(), s.root().parent().unwrap());
    let c = Client::new(&app, "all-token").await;
    let data = bytes(SEED ^ 31, 5 * BLOCK_BYTES as usize + 123);
    // The page's time, as the played page's manifest gives it.
    let which = format!("path=pub%2Fx.bin&size={}&mtime=1700000000", data.len());
    // Over HTTPS three blocks and a little more came, then the connection was cut.
    let held = 3 * BLOCK_BYTES as usize + 1000;
    let first = c.put(&format!("/api/upload?{which}&offset=0"), data[..held].to_vec()).await;
    assert_eq!(json_of(first).await["have"], held);
    // Over WebTransport the server offers what the HTTPS try left, the page keeps its whole
    // blocks (each checked by its BLAKE3), and the rest moves.
    let (conn, _) = s.connect("all-token").await;
    let sent = store(&[conn], "pub/x.bin", "refuse", &data, Play::default()).await;
    let done = sent.done.unwrap();
    println!("done: {done}");
    assert!(done["ok"].is_object(), "{done}");
    assert!(std::fs::read(s.root().join("pub/x.bin")).unwrap() == data, "every byte");
    let moved = s.counters.received.load(Ordering::Relaxed);
    assert_eq!(moved, data.len() as u64 - 3 * BLOCK_BYTES, "only what the HTTPS try lacked");
    assert_eq!(done["ok"]["moved"], moved, "the page sent what the server took");
    assert_eq!(done["ok"]["repaired"], 0);
    // Neither way's partial file, nor a record or a lock, is left beside it.
    assert_eq!(names_in(&s.root().join("pub")), ["x.bin"]);
    let status = json_of(c.get(&format!("/api/upload?{which}")).await).await;
    assert_eq!(status["have"], 0, "{status}");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_cut_off_over_webtransport_goes_on_over_https_moving_only_the_rest() {
    let s = serve().await;
    let app = App::of(s.state.clone(), s.root().parent().unwrap());
    let c = Client::new(&app, "all-token").await;
    let data = bytes(SEED ^ 32, 5 * BLOCK_BYTES as usize + 123);
    let hash = blake3::hash(&data).to_hex().to_string();
    let which = format!("path=pub%2Fy.bin&size={}&mtime=1700000000", data.len());
    // Over WebTransport two pieces came, then the tab closed.
    let (conn, _) = s.connect("all-token").await;
    let play = Play { stop_after: Some(2), ..Play::default() };
    let first = store(std::slice::from_ref(&conn), "pub/y.bin", "refuse", &data, play).await;
    assert!(first.done.is_none(), "{:?}", first.done);
    // Once the server's end of that try is over, HTTPS hears what it holds: the two blocks.
    let mut have = json!(0);
    for _ in 0..250 {
        have = json_of(c.get(&format!("/api/upload?{which}")).await).await["have"].clone();
        if have != 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(have, 2 * BLOCK_BYTES, "what the WebTransport try wrote");
    let before = s.counters.received.load(Ordering::Relaxed);
    assert_eq!(before, 2 * BLOCK_BYTES);
    // The rest over HTTPS, with the whole file's BLAKE3: only the rest moves, and what the
    // other way wrote is checked with it.
    let rest = c
        .put_with(
            &format!("/api/upload?{which}&offset={}", 2 * BLOCK_BYTES),
            data[2 * BLOCK_BYTES as usize..].to_vec(),
            &[("x-sluice-blake3", &hash)],
        )
        .await;
    let done = json_of(rest).await;
    println!("done: {done}");
    assert_eq!((done["done"].clone(), done["stored"].clone()), (json!(true), json!(true)));
    assert_eq!(done["received"], data.len() as u64 - 2 * BLOCK_BYTES, "only the rest moved");
    assert_eq!(done["blake3"], hash.as_str());
    assert!(std::fs::read(s.root().join("pub/y.bin")).unwrap() == data, "every byte");
    assert_eq!(s.counters.received.load(Ordering::Relaxed), before, "nothing more came over WT");
    assert_eq!(names_in(&s.root().join("pub")), ["y.bin"]);
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_same_sources_blocks_that_verify_are_taken_from_the_other_way() {
    let s = serve().await;
    let app = App::of(s.state.clone(), s.root().parent().unwrap());
    let c = Client::new(&app, "all-token").await;
    let data = bytes(SEED ^ 33, 4 * BLOCK_BYTES as usize + 77);
    let (conn, _) = s.connect("all-token").await;
    let one = std::slice::from_ref(&conn);
    let held = 3 * BLOCK_BYTES as usize;
    // Another source (another time) left three blocks over HTTPS: not taken, all moves.
    let other = format!("path=pub%2Fo.bin&size={}&mtime=1700000001", data.len());
    c.put(&format!("/api/upload?{other}&offset=0"), data[..held].to_vec()).await;
    let done = store(one, "pub/o.bin", "refuse", &data, Play::default()).await.done.unwrap();
    assert!(done["ok"].is_object(), "{done}");
    assert_eq!(s.counters.received.load(Ordering::Relaxed), data.len() as u64, "all of it");
    assert!(std::fs::read(s.root().join("pub/o.bin")).unwrap() == data);
    // The same source, but the HTTPS try's second block is not this file's: the first block is
    // kept, the rest moves (and the stored file is this one's).
    let same = format!("path=pub%2Fb.bin&size={}&mtime=1700000000", data.len());
    let mut spoiled = data[..held].to_vec();
    spoiled[BLOCK_BYTES as usize + 5] ^= 0x5a;
    c.put(&format!("/api/upload?{same}&offset=0"), spoiled).await;
    let before = s.counters.received.load(Ordering::Relaxed);
    let done = store(one, "pub/b.bin", "refuse", &data, Play::default()).await.done.unwrap();
    println!("done: {done}");
    assert!(done["ok"].is_object(), "{done}");
    let moved = s.counters.received.load(Ordering::Relaxed) - before;
    assert_eq!(moved, data.len() as u64 - BLOCK_BYTES, "the one block that verified was kept");
    assert!(std::fs::read(s.root().join("pub/b.bin")).unwrap() == data, "every byte");
    let _ = s.stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webtransport_upload_still_running_keeps_its_partial_file_from_https() {
    let s = serve().await;
    let app = App::of(s.state.clone(), s.root().parent().unwrap());
    let c = Client::new(&app, "all-token").await;
    let data = bytes(SEED ^ 34, 4 * BLOCK_BYTES as usize);
    let which = format!("path=pub%2Fr.bin&size={}&mtime=1700000000", data.len());
    // The page sent two pieces and stays: the server waits for the rest, its claim held.
    let (conn, _) = s.connect("all-token").await;
    let play = Play { hold_after: Some(2), ..Play::default() };
    let page = data.clone();
    tokio::spawn(async move { store(&[conn], "pub/r.bin", "refuse", &page, play).await });
    let two = || s.counters.received.load(Ordering::Relaxed) == 2 * BLOCK_BYTES;
    assert!(super::tests::eventually(two).await, "the two pieces did not come");
    // Its record is written at most every 500 ms: once it is, HTTPS still takes nothing.
    let recorded = || names_in(&s.root().join("pub")).contains(&".r.bin.sluice-resume".into());
    assert!(super::tests::eventually(recorded).await, "no record: {:?}", names_in(&s.root()));
    let status = json_of(c.get(&format!("/api/upload?{which}")).await).await;
    assert_eq!(status["have"], 0, "{status}");
    let put = c.put(&format!("/api/upload?{which}&offset=0"), data[..1000].to_vec()).await;
    assert_eq!(json_of(put).await["error"], "busy");
    let names = names_in(&s.root().join("pub"));
    println!("{names:?}");
    assert!(names.iter().any(|n| n.starts_with(".r.bin.sluice-part-")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(".sluice-web-")), "{names:?}");
    let _ = s.stop.send(());
}
