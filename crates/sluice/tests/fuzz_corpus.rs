//! Replays the fuzz corpora kept in `fuzz/corpus/` through the invariant checks the fuzz targets
//! run (`sluice::fuzzing`), so every input the fuzzer ever kept stays checked on stable Rust in
//! every test run. `write_seed_corpora` (ignored; run it with `--ignored`) writes the hand-made
//! seeds the corpora started from, from the real encoders.

#![allow(clippy::print_stdout)]

use std::fs;
use std::path::{Path, PathBuf};

use sluice::fuzzing;

mod common;

/// An invariant check of `sluice::fuzzing`.
type Check = fn(&[u8]);

/// The targets and their checks, as `fuzz/Cargo.toml` names them.
const TARGETS: [(&str, Check); 5] = [
    ("datagram", fuzzing::datagram),
    ("message", fuzzing::message),
    ("manifest", fuzzing::manifest),
    ("resume_record", fuzzing::resume_record),
    ("config_text", fuzzing::config_text),
];

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

#[test]
fn every_kept_fuzz_input_still_keeps_its_invariants() {
    for (target, check) in TARGETS {
        let dir = corpus(target);
        let mut inputs = 0;
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&bytes));
            assert!(outcome.is_ok(), "{target}: {} breaks an invariant", path.display());
            inputs += 1;
        }
        println!("{target}: {inputs} inputs");
        assert!(inputs >= 3, "{target}: the corpus has only {inputs} inputs");
    }
}

fn frame<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    sluice::session::messages::encode(msg).unwrap()
}

#[test]
#[ignore = "writes the seed corpora into fuzz/corpus; run by hand"]
fn write_seed_corpora() {
    use sluice::session::messages::{
        Answer, ErrorCode, ManifestPart, Offer, ReceiverMsg, Request, SenderMsg, Want,
    };
    use sluice::tree::{Entry, EntryKind};

    let write = |target: &str, name: &str, bytes: &[u8]| {
        fs::create_dir_all(corpus(target)).unwrap();
        fs::write(corpus(target).join(format!("seed-{name}")), bytes).unwrap();
    };
    // Datagrams: a 16-byte header (kind, flags, reserved, packet number, timestamp), then
    // a plaintext body of each kind.
    let header = |kind: u8, flags: u8| {
        let mut h = vec![kind, flags, 0, 0];
        h.extend_from_slice(&7u64.to_be_bytes());
        h.extend_from_slice(&1234u32.to_be_bytes());
        h
    };
    let mut data = header(0, 4);
    data.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0x10, 0]);
    data.extend_from_slice(b"payload bytes");
    write("datagram", "data", &data);
    let mut ack = header(1, 0);
    for word in [3u32, 100, 20_000, 5_000, 8192, 70_000, 80_000, 300, 120, 2, 69_000] {
        ack.extend_from_slice(&word.to_be_bytes());
    }
    write("datagram", "ack", &ack);
    write("datagram", "ack2", &[header(2, 0), 3u32.to_be_bytes().to_vec()].concat());
    let nak = [header(3, 0), vec![0, 0, 0, 5, 0x80, 0, 0, 7, 0, 0, 0, 10]].concat();
    write("datagram", "nak", &nak);
    write("datagram", "keepalive", &header(4, 0));
    write("datagram", "shutdown", &[header(5, 0), 1u32.to_be_bytes().to_vec()].concat());
    write("datagram", "drop", &[header(6, 0), vec![0, 0, 0, 4, 0, 0, 0, 8]].concat());

    let hello = common::hello("t0ken");
    let Request::Hello { spec, .. } = hello.clone() else { unreachable!() };
    write("message", "hello", &frame(&hello));
    let get = r#"{"type":"get","paths":["a/b.bin","c"],"recursive":true,"links":"copy","checksum":false,"compress":3}"#;
    write("message", "get", &[(get.len() as u32).to_be_bytes().to_vec(), get.into()].concat());
    let want = Want {
        files: vec![[0, 3], [5, 6]],
        replaced: 1,
        kept: 2,
        resume: Vec::new(),
        dry_run: false,
        early: true,
    };
    write("message", "want", &frame(&ReceiverMsg::Want(want)));
    let offer = Offer {
        session_id: "00112233445566778899aabbccddeeff".into(),
        max_channels: 4,
        udp_ports: vec![40000, 40001],
    };
    write("message", "offer", &frame(&offer));
    write("message", "stat", &frame(&Request::Stat { path: "x/y".into() }));
    let welcome = Answer::Welcome { session_id: "00112233445566778899aabbccddeeff".into(), spec };
    write("message", "welcome", &frame(&welcome));
    let refused = Answer::Refused { code: ErrorCode::Auth, message: "no".into() };
    write("message", "refused", &frame(&refused));
    write(
        "message",
        "ready",
        &frame(&SenderMsg::Ready { udp_ports: vec![40000, 40001], path_memory: None }),
    );

    let entry = |path: &str, kind, size| Entry {
        path: path.into(),
        kind,
        size,
        mtime: 1_700_000_000,
        mode: 0o644,
        target: (kind == EntryKind::Symlink).then(|| "../x".into()),
        blake3: None,
    };
    let part = ManifestPart {
        entries: vec![
            entry("t", EntryKind::Dir, 0),
            entry("t/a.bin", EntryKind::File, 1 << 20),
            entry("t/l", EntryKind::Symlink, 0),
        ],
        last: true,
    };
    write("manifest", "tree", &serde_json::to_vec(&part).unwrap());
    let escape = ManifestPart { entries: vec![entry("../x", EntryKind::File, 1)], last: false };
    write("manifest", "escape", &serde_json::to_vec(&escape).unwrap());
    write("manifest", "ranges", &[1, 0, 2, 0, 3, 0, 9, 0, 10, 0, 200, 1]);

    let record = |temp: &str, prefix: u64| {
        format!(
            r#"{{"version":1,"temp":"{temp}","path":"t/a.bin","size":20971520,"mtime":1700000000,"prefix":{prefix}}}"#
        )
    };
    write(
        "resume_record",
        "ok",
        record(".a.bin.sluice-part-0123456789abcdef", 8_388_608).as_bytes(),
    );
    write("resume_record", "climb", record("../.a.sluice-part-x", 5).as_bytes());
    write(
        "resume_record",
        "whole",
        record(".a.bin.sluice-part-0000000000000000", 1 << 40).as_bytes(),
    );

    let tokens = "# tokens\n\nalpha\nbeta rights=read,list root=projects/run7 transfers=2 \
                  rate=200Mbit\ngamma rights=write root=incoming\n";
    write("config_text", "tokens", tokens.as_bytes());
    write("config_text", "bad-tokens", b"a root=../up\nb rights=all\n");
    let known = "# known hosts\nlab SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU\n\
                 [::1]:7733 SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nmalformed\n";
    write("config_text", "known-hosts", known.as_bytes());
    write("config_text", "fingerprint", b"SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU");
    let client = "[defaults]\nchannels = 4\ncompress = 1\nlimit_rate = \"800Mbit\"\n\n[hosts.lab]\n\
                  address = \"198.18.0.2\"\nport = 7733\ntoken_file = \"/k/lab.token\"\ncompress = 3\n";
    write("config_text", "client-config", client.as_bytes());
    write("config_text", "client-token", b"[hosts.a]\ntoken = \"secret\"\n");
    let server = "root = \"/data\"\nlisten = \"0.0.0.0:7733\"\ntokens = \"/etc/sluice/tokens\"\n\
                  max_channels = 8\n";
    write("config_text", "server-config", server.as_bytes());
}
