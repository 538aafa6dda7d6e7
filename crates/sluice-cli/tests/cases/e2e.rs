// The end-to-end cases, compiled once per transport: `tests/e2e.rs` (the default, auto) and
// `tests/e2e_tcp.rs` (`--transport tcp`) include this file after defining `TRANSPORT`, the
// transport every client command of the cases uses (through `isolate`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, code, random_file, same_file, stderr};

/// Keeps a client command from this machine's configuration (`common::isolate`), on the
/// cases' transport.
fn isolate(c: &mut Command, dir: &Path) {
    common::isolate(c, dir);
    c.env("SLUICE_TRANSPORT", TRANSPORT);
}

const TOKEN: &str = "e2e-test-token-7f3a";

/// Writes the test's token file (owner-only, as a server requires).
fn write_tokens(path: &Path) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    writeln!(f, "# test tokens\n\n{TOKEN}").unwrap();
}

/// A server process with its own root, state and tokens; killed on drop.
struct ServerProc {
    child: Child,
    port: u16,
    fingerprint: String,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl ServerProc {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, None)
    }

    /// Starts a server; `port` reuses a port (for a restart with another identity).
    fn start_in(dir: tempfile::TempDir, port: Option<u16>) -> Self {
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let tokens = dir.path().join("tokens");
        if !tokens.exists() {
            write_tokens(&tokens);
        }
        let state = dir.path().join(format!("state-{}", port.unwrap_or(0)));
        let mut child = Command::new(BIN)
            .args(["serve", "--root"])
            .arg(&root)
            .args(["--listen", &format!("127.0.0.1:{}", port.unwrap_or(0))])
            .arg("--state-dir")
            .arg(&state)
            .arg("--tokens")
            .arg(&tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        // "sluice: serving on 127.0.0.1:PORT with fingerprint SHA256:..."
        let addr = line.split_whitespace().nth(3).unwrap_or_else(|| panic!("server said {line:?}"));
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        let fingerprint = line.split_whitespace().last().unwrap().to_string();
        assert!(fingerprint.starts_with("SHA256:"), "{line}");
        ServerProc { child, port, fingerprint, root, _dir: dir }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct ClientEnv {
    dir: tempfile::TempDir,
}

impl ClientEnv {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }
    fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }
    fn cmd(&self, server: &ServerProc, token: Option<&str>) -> Command {
        let mut c = Command::new(BIN);
        c.arg("cp")
            .args(["-P", &server.port.to_string()])
            .arg("--known-hosts")
            .arg(self.known_hosts());
        isolate(&mut c, self.dir.path());
        if let Some(t) = token {
            c.env("SLUICE_TOKEN", t);
        }
        c
    }
    fn cp(
        &self,
        server: &ServerProc,
        token: Option<&str>,
        extra: &[&str],
        src: &str,
        dst: &str,
    ) -> Output {
        self.cmd(server, token).args(extra).args([src, dst]).output().unwrap()
    }
}

fn no_partial_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .all(|e| !e.unwrap().file_name().to_string_lossy().contains("sluice-part"))
}

#[test]
fn files_of_every_size_arrive_byte_exact_both_ways() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    for (i, size) in [0u64, 1, (1 << 20) + 1].into_iter().enumerate() {
        println!("e2e sizes: seed={i} size={size}");
        let name = format!("f{size}.bin");
        random_file(&server.root.join(&name), size, i as u64);
        let local = client.dir.path().join(&name);
        let o = client.cp(
            &server,
            Some(TOKEN),
            &["--accept-new-host", "-q"],
            &format!("127.0.0.1:{name}"),
            local.to_str().unwrap(),
        );
        assert_eq!(code(&o), 0, "download {size}: {}", stderr(&o));
        assert!(same_file(&server.root.join(&name), &local));

        let up = format!("up{size}.bin");
        let o = client.cp(
            &server,
            Some(TOKEN),
            &["-q"],
            local.to_str().unwrap(),
            &format!("127.0.0.1:{up}"),
        );
        assert_eq!(code(&o), 0, "upload {size}: {}", stderr(&o));
        assert!(same_file(&local, &server.root.join(&up)));
    }
    assert!(no_partial_files(&server.root) && no_partial_files(client.dir.path()));
}

#[test]
fn compress_shrinks_text_on_the_wire_and_a_bad_level_is_a_usage_error() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    // Text that compresses: numbered lines.
    let text: String =
        (0..400_000).map(|i| format!("line {i} of a log that compresses\n")).collect();
    std::fs::write(server.root.join("log.txt"), &text).unwrap();
    let local = client.dir.path().join("log.txt");
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "--compress"],
        "127.0.0.1:log.txt",
        local.to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("log.txt"), &local));
    let summary = stderr(&o);
    let share: f64 = summary
        .split("compressed to ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no compression share in {summary:?}"));
    assert!(share < 50.0, "{summary}");
    for bad in ["--compress=0", "--compress=20", "--compress=fast"] {
        let o = client.cp(&server, Some(TOKEN), &[bad], "127.0.0.1:log.txt", "/nonexistent/x");
        assert_eq!(code(&o), 2, "{bad}: {}", stderr(&o));
    }
}

/// The JSON lines of `--json`, read strictly: an unknown or missing field fails the test
/// (docs/json-events.md is the schema they check).
mod events {
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[serde(tag = "event", rename_all = "snake_case")]
    pub(crate) enum Event {
        Start(Start),
        Progress(Progress),
        FileDone(FileDone),
        Warning(Warning),
        Summary(Summary),
        Error(Error),
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Start {
        pub schema: u32,
        pub direction: String,
        pub files: u64,
        pub bytes: u64,
        pub channels: u32,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Progress {
        pub bytes: u64,
        pub total: u64,
        pub rate_bps: Option<f64>,
        pub eta_s: Option<f64>,
        pub file: Option<String>,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct FileDone {
        pub path: String,
        pub bytes: u64,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Warning {
        pub message: String,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Summary {
        pub dry_run: bool,
        pub files: u64,
        pub bytes: u64,
        pub seconds: f64,
        pub goodput_bps: f64,
        pub retransmitted_share: Option<f64>,
        pub wire_share: Option<f64>,
        pub blocks_repaired: u64,
        pub resumed_bytes: u64,
        pub replaced: u64,
        pub kept: u64,
        pub blake3: Option<String>,
        pub transport: String,
        pub streams: Option<u32>,
        pub path_memory: Option<PathMemory>,
        pub would_copy: Option<Vec<String>>,
    }

    #[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct PathMemory {
        pub rate_bps: u64,
        pub age_s: u64,
    }

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct Error {
        pub exit_code: u8,
        pub kind: String,
        pub message: String,
    }

    /// Every line of `stdout`, each one event.
    pub(crate) fn parse(stdout: &[u8]) -> Vec<Event> {
        let text = String::from_utf8(stdout.to_vec()).expect("UTF-8 JSON lines");
        text.lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not an event: {line}"))
            })
            .collect()
    }
}

#[test]
fn an_upload_starts_from_what_the_path_delivered_last_time_unless_told_not_to() {
    use events::Event;
    let server = ServerProc::start();
    let client = ClientEnv::new();
    let src = client.dir.path().join("m.bin");
    println!("e2e path memory: seed=91");
    random_file(&src, 64 << 20, 91);
    let memory = client.dir.path().join(".cache/sluice/paths.json");
    let upload = |extra: &[&str]| {
        let mut flags = vec!["--accept-new-host", "--json", "--overwrite", "always"];
        flags.extend_from_slice(extra);
        let o = client.cp(&server, Some(TOKEN), &flags, src.to_str().unwrap(), "127.0.0.1:m.bin");
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let events = events::parse(&o.stdout);
        let Some(Event::Summary(summary)) = events.last() else { panic!("{events:?}") };
        summary.path_memory
    };
    // First contact: nothing to start from; what the path delivered is kept.
    assert_eq!(upload(&[]), None);
    if TRANSPORT == "tcp" {
        // TCP streams run the kernel's congestion control: nothing to keep or start from.
        assert_eq!(upload(&[]), None);
        assert!(!memory.exists());
        let o = client.cp(&server, Some(TOKEN), &["--accept-new-host", "--json"], "127.0.0.1:m.bin",
                          client.dir.path().join("d.bin").to_str().unwrap());
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let Some(Event::Summary(summary)) = events::parse(&o.stdout).pop() else { panic!() };
        assert_eq!(summary.path_memory, None);
        return;
    }
    let kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&memory).expect("the cache file")).unwrap();
    let records = kept.as_object().unwrap();
    assert_eq!(records.len(), 1, "{kept}");
    let (key, record) = records.iter().next().unwrap();
    assert!(key.starts_with("SHA256:") && key.ends_with("from 127.0.0.1"), "{key}");
    let rate_bps = record["rate_bps"].as_u64().unwrap();
    assert!(rate_bps > 0 && record["min_rtt_us"].as_u64().unwrap() > 0, "{record}");
    // The next upload starts from it, and says so.
    let used = upload(&[]).expect("the second upload started from path memory");
    assert_eq!(used.rate_bps, rate_bps);
    assert!(used.age_s < 600, "{used:?}");
    // The flag, and the config file's key, turn it off.
    assert_eq!(upload(&["--no-path-memory"]), None);
    let config = client.dir.path().join("sluice.toml");
    std::fs::write(&config, "[defaults]\npath_memory = false\n").unwrap();
    let o = client
        .cmd(&server, Some(TOKEN))
        .env("SLUICE_CONFIG", &config)
        .args(["--accept-new-host", "--json", "--overwrite", "always"])
        .args([src.to_str().unwrap(), "127.0.0.1:m.bin"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let Some(Event::Summary(summary)) = events::parse(&o.stdout).pop() else { panic!() };
    assert_eq!(summary.path_memory, None);
    assert_eq!(std::fs::read(server.root.join("m.bin")).unwrap(), std::fs::read(&src).unwrap());
    // Downloads: the server keeps what its sending got through, and its `Ready` tells the
    // client when it started from that.
    let download = |to: &str| {
        let to = client.dir.path().join(to);
        let flags = ["--accept-new-host", "--json"];
        let o = client.cp(&server, Some(TOKEN), &flags, "127.0.0.1:m.bin", to.to_str().unwrap());
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&src).unwrap());
        let Some(Event::Summary(summary)) = events::parse(&o.stdout).pop() else { panic!() };
        summary.path_memory
    };
    assert_eq!(download("d1.bin"), None);
    let used = download("d2.bin").expect("the second download started from path memory");
    assert!(used.rate_bps > 0 && used.age_s < 600, "{used:?}");
}

#[test]
fn json_lines_follow_their_schema() {
    use events::Event;
    let server = ServerProc::start();
    let client = ClientEnv::new();
    let tree = server.root.join("t");
    std::fs::create_dir(&tree).unwrap();
    let sizes = [(3 << 20) + 5, 0, 70_000];
    for (i, size) in sizes.iter().enumerate() {
        println!("e2e json: seed={i} size={size}");
        random_file(&tree.join(format!("f{i}")), *size, 40 + i as u64);
    }
    // The reading is strict: an extra field or a missing one is refused.
    assert!(serde_json::from_str::<Event>(r#"{"event":"warning","message":"m","x":1}"#).is_err());
    assert!(serde_json::from_str::<Event>(r#"{"event":"file_done","path":"p"}"#).is_err());
    let total: u64 = sizes.iter().sum();
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "--json", "-r"],
        "127.0.0.1:t",
        client.dir.path().to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let events = events::parse(&o.stdout);
    let Some(Event::Start(start)) = events.first() else { panic!("{events:?}") };
    assert_eq!(
        (start.schema, start.direction.as_str(), start.files, start.bytes),
        (1, "download", 3, total)
    );
    assert!(start.channels >= 1);
    let Some(Event::Summary(summary)) = events.last() else { panic!("{events:?}") };
    assert!(!summary.dry_run && summary.files == 3 && summary.bytes == total, "{summary:?}");
    assert!(summary.seconds > 0.0 && summary.goodput_bps > 0.0 && summary.would_copy.is_none());
    assert_eq!((summary.blocks_repaired, summary.resumed_bytes), (0, 0));
    assert_eq!((summary.replaced, summary.kept, summary.wire_share), (0, 0, None));
    assert!(summary.retransmitted_share.is_some_and(|r| (0.0..1.0).contains(&r)), "{summary:?}");
    assert_eq!(summary.blake3, None, "three files: no single BLAKE3");
    // auto takes UDP on loopback.
    let transport = if TRANSPORT == "tcp" { "tcp" } else { "udp" };
    assert_eq!(summary.transport, transport, "{summary:?}");
    // Over TCP, the streams that carried data: at least one, at most the ceiling.
    match TRANSPORT {
        "tcp" => assert!(summary.streams.is_some_and(|n| (1..=16).contains(&n)), "{summary:?}"),
        _ => assert_eq!(summary.streams, None, "{summary:?}"),
    }
    // The server's first download to this client: nothing to start from.
    assert_eq!(summary.path_memory, None, "{summary:?}");
    let progress: Vec<_> = events
        .iter()
        .filter_map(|e| if let Event::Progress(p) = e { Some(p) } else { None })
        .collect();
    assert!(!progress.is_empty());
    assert!(progress.windows(2).all(|w| w[0].bytes <= w[1].bytes), "progress went back");
    for p in &progress {
        assert!(p.rate_bps.is_none_or(|r| r >= 0.0) && p.eta_s.is_none_or(|e| e >= 0.0), "{p:?}");
        let file = p.file.as_deref().unwrap_or("");
        assert!(["t/f0", "t/f1", "t/f2"].contains(&file), "{p:?}");
    }
    let last = progress.last().unwrap();
    assert_eq!((last.bytes, last.total), (total, total));
    let mut done: Vec<(String, u64)> = events
        .iter()
        .filter_map(
            |e| if let Event::FileDone(f) = e { Some((f.path.clone(), f.bytes)) } else { None },
        )
        .collect();
    done.sort();
    let want: Vec<(String, u64)> =
        sizes.iter().enumerate().map(|(i, s)| (format!("t/f{i}"), *s)).collect();
    assert_eq!(done, want);
    assert!(events.iter().all(|e| !matches!(e, Event::Error(_))));

    // A dry run: the summary alone, with the files it would copy.
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--json", "-r", "-n", "--overwrite", "always"],
        "127.0.0.1:t",
        client.dir.path().to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let events = events::parse(&o.stdout);
    let [Event::Summary(summary)] = events.as_slice() else { panic!("{events:?}") };
    assert!(summary.dry_run);
    assert_eq!(summary.would_copy.as_ref().map(Vec::len), Some(3));

    // An upload of a directory holding a FIFO: the FIFO is skipped, with a warning line.
    let up = client.dir.path().join("up");
    std::fs::create_dir(&up).unwrap();
    std::fs::write(up.join("x.txt"), b"x").unwrap();
    let made = Command::new("mkfifo").arg(up.join("pipe")).status().unwrap();
    assert!(made.success());
    let o = client.cp(&server, Some(TOKEN), &["--json", "-r"], up.to_str().unwrap(), "127.0.0.1:");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let events = events::parse(&o.stdout);
    let warned =
        events.iter().any(|e| matches!(e, Event::Warning(w) if w.message.contains("pipe")));
    assert!(warned, "{events:?}");

    // A failure: one error line with the exit code the process has.
    let o = client.cp(&server, Some("wrong-token"), &["--json"], "127.0.0.1:t/f0", "/tmp/never");
    assert_eq!(code(&o), 3);
    let events = events::parse(&o.stdout);
    let [Event::Error(err)] = events.as_slice() else { panic!("{events:?}") };
    assert_eq!((err.exit_code, err.kind.as_str()), (3, "auth"));
    assert!(err.message.contains("token"), "{}", err.message);
}

#[test]
fn cp_r_moves_trees_and_files_together_and_a_dry_run_only_lists() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    let src = client.dir.path().join("proj");
    std::fs::create_dir_all(src.join("data/deep")).unwrap();
    std::fs::create_dir_all(src.join("empty")).unwrap();
    for i in 0..50u64 {
        random_file(&src.join(format!("data/f{i:02} with space")), 3000 + i, i);
    }
    random_file(&src.join("data/deep/-big"), 3 << 20, 99);
    let single = client.dir.path().join("note.txt");
    std::fs::write(&single, b"hello\n").unwrap();
    let accept = ["-q", "--accept-new-host", "-r"];
    let (s, f) = (src.to_str().unwrap(), single.to_str().unwrap());

    // A dry run lists the files on stdout and creates nothing.
    let o = client
        .cmd(&server, Some(TOKEN))
        .args(accept)
        .arg("-n")
        .args([s, f, "127.0.0.1:"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let listed = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(listed, 52, "{}", String::from_utf8_lossy(&o.stdout));
    assert!(std::fs::read_dir(&server.root).unwrap().next().is_none());

    // Without -r a directory is a usage-level refusal naming -r.
    let o = client.cp(&server, Some(TOKEN), &["-q"], s, "127.0.0.1:");
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("-r"), "{}", stderr(&o));

    let o = client.cmd(&server, Some(TOKEN)).args(accept).args([s, f, "127.0.0.1:"]).output();
    let o = o.unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&single, &server.root.join("note.txt")));
    assert!(same_file(&src.join("data/deep/-big"), &server.root.join("proj/data/deep/-big")));
    assert!(server.root.join("proj/empty").is_dir());

    let back = client.dir.path().join("back");
    std::fs::create_dir(&back).unwrap();
    let o =
        client.cp(&server, Some(TOKEN), &["-q", "-r"], "127.0.0.1:proj", back.to_str().unwrap());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for i in 0..50u64 {
        let name = format!("data/f{i:02} with space");
        assert!(same_file(&src.join(&name), &back.join("proj").join(&name)), "{name}");
    }
    assert!(same_file(&src.join("data/deep/-big"), &back.join("proj/data/deep/-big")));
    assert!(no_partial_files(&back.join("proj/data")));
}

/// The prefix a resume record claims (0 while there is none).
fn recorded_prefix(record: &Path) -> u64 {
    let Ok(text) = std::fs::read_to_string(record) else { return 0 };
    let at = text.find("\"prefix\":").map(|i| i + 9);
    at.and_then(|i| text[i..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(0)
}

/// "N bytes moved" from a summary (all of the file when nothing was resumed).
fn moved_bytes(summary: &str, size: u64) -> u64 {
    match summary.find("resumed: ") {
        Some(i) => summary[i + 9..].split(' ').next().unwrap().parse().unwrap(),
        None => size,
    }
}

#[test]
fn a_killed_download_resumes_and_moves_only_what_is_missing() {
    let server = ServerProc::start();
    let size: u64 = 96 << 20;
    random_file(&server.root.join("big.bin"), size, 21);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("big.bin");
    let record = client.dir.path().join(".big.bin.sluice-resume");
    let run = |extra: &[&str]| {
        let mut c = client.cmd(&server, Some(TOKEN));
        // Slow enough to be interrupted at a chosen point: the record is saved every 0.5 s,
        // and over 4 TCP streams the prefix grows in steps of up to 16 MiB (at 250 Mbit/s a
        // loaded machine once saw it jump from below two thirds to the end between records).
        c.args(["--accept-new-host", "--rate-mbit", "120"]).args(extra);
        c.args(["127.0.0.1:big.bin", dst.to_str().unwrap()]);
        c
    };
    // Killed (SIGKILL: no chance to clean up) at about a third, then at about two thirds.
    let mut moved = Vec::new();
    for stop_at in [size / 3, 2 * size / 3] {
        let mut child = run(&[]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while recorded_prefix(&record) < stop_at && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let prefix = recorded_prefix(&record);
        println!("killed with {prefix} of {size} bytes recorded: {}", stderr_text(&out.stderr));
        assert!(prefix >= stop_at && prefix < size, "record says {prefix}");
        assert!(!dst.exists(), "nothing under the final name before verification");
        moved.push(prefix);
    }
    let o = run(&[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("big.bin"), &dst));
    let last = moved_bytes(&stderr(&o), size);
    println!("the last run moved {last} of {size} bytes: {}", stderr(&o));
    // What was recorded stays (whole 4 MiB blocks): the last run moves the rest and little more.
    assert!(last <= size - moved[1] + (4 << 20), "moved {last}");
    assert!(!record.exists());
    assert!(no_partial_files(client.dir.path()));

    // A corrupted block on disk and a garbage record are not trusted.
    let interrupt_at_half = || {
        std::fs::remove_file(&dst).unwrap();
        let mut child = run(&[]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        while recorded_prefix(&record) < size / 2 {
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::read_dir(client.dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("sluice-part"))
            .expect("the partial file is kept")
    };
    let temp = interrupt_at_half();
    // Flip one byte in the second block: that block and everything after it move again.
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&temp).unwrap();
    let mut byte = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut byte, (4 << 20) + 10).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[byte[0] ^ 0xff], (4 << 20) + 10).unwrap();
    let o = run(&[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("big.bin"), &dst));
    assert_eq!(moved_bytes(&stderr(&o), size), size - (4 << 20), "{}", stderr(&o));

    interrupt_at_half();
    std::fs::write(&record, b"{not a record").unwrap();
    let o = run(&[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("big.bin"), &dst));
    assert_eq!(moved_bytes(&stderr(&o), size), size, "{}", stderr(&o));
    assert!(no_partial_files(client.dir.path()));

    // A partial file that holds every byte (as when the client died between the last byte and
    // the rename): the client's data ports go with Want, the server keeps everything and sends
    // no Ready of its own, and not a byte moves again.
    let temp = interrupt_at_half();
    std::fs::copy(server.root.join("big.bin"), &temp).unwrap();
    let claimed = recorded_prefix(&record);
    let text = std::fs::read_to_string(&record).unwrap();
    let all = text.replace(&format!("\"prefix\":{claimed}"), &format!("\"prefix\":{size}"));
    std::fs::write(&record, all).unwrap();
    assert_eq!(recorded_prefix(&record), size);
    let o = run(&[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("big.bin"), &dst));
    assert_eq!(moved_bytes(&stderr(&o), size), 0, "{}", stderr(&o));
    assert!(no_partial_files(client.dir.path()));
}

fn stderr_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn one_gib_both_ways() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    println!("e2e 1GiB: seed=42");
    random_file(&server.root.join("big.bin"), 1 << 30, 42);
    let local = client.dir.path().join("big.bin");
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "-q"],
        "127.0.0.1:big.bin",
        local.to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("big.bin"), &local));
    let o =
        client.cp(&server, Some(TOKEN), &["-q"], local.to_str().unwrap(), "127.0.0.1:big-up.bin");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&local, &server.root.join("big-up.bin")));
}

#[test]
fn two_clients_at_once() {
    let server = ServerProc::start();
    random_file(&server.root.join("a.bin"), 32 << 20, 1);
    random_file(&server.root.join("b.bin"), 32 << 20, 2);
    let (c1, c2) = (ClientEnv::new(), ClientEnv::new());
    let spawn = |c: &ClientEnv, name: &str| {
        c.cmd(&server, Some(TOKEN))
            .args(["--accept-new-host", "-q", &format!("127.0.0.1:{name}")])
            .arg(c.dir.path().join(name))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (p1, p2) = (spawn(&c1, "a.bin"), spawn(&c2, "b.bin"));
    let (o1, o2) = (p1.wait_with_output().unwrap(), p2.wait_with_output().unwrap());
    assert_eq!(code(&o1), 0, "{}", stderr(&o1));
    assert_eq!(code(&o2), 0, "{}", stderr(&o2));
    assert!(same_file(&server.root.join("a.bin"), &c1.dir.path().join("a.bin")));
    assert!(same_file(&server.root.join("b.bin"), &c2.dir.path().join("b.bin")));
}

#[test]
fn wrong_or_missing_token_is_refused() {
    let server = ServerProc::start();
    random_file(&server.root.join("secret.bin"), 1000, 3);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("secret.bin");
    let o = client.cp(
        &server,
        Some("not-the-token"),
        &["--accept-new-host"],
        "127.0.0.1:secret.bin",
        dst.to_str().unwrap(),
    );
    assert_eq!(code(&o), 3, "wrong token: {}", stderr(&o));
    assert!(
        stderr(&o).to_lowercase().contains("token") || stderr(&o).to_lowercase().contains("auth"),
        "{}",
        stderr(&o)
    );
    let o = client.cp(
        &server,
        None,
        &["--accept-new-host"],
        "127.0.0.1:secret.bin",
        dst.to_str().unwrap(),
    );
    assert_eq!(code(&o), 3, "missing token: {}", stderr(&o));
    assert!(!dst.exists());
}

#[test]
fn changed_server_fingerprint_is_refused() {
    let mut first = ServerProc::start();
    random_file(&first.root.join("x.bin"), 100, 4);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("x.bin");
    let o = client.cp(
        &first,
        Some(TOKEN),
        &["--accept-new-host", "-q"],
        "127.0.0.1:x.bin",
        dst.to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Same address, new identity (a fresh state directory).
    let port = first.port;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let second = ServerProc::start_in(tempfile::tempdir().unwrap(), Some(port));
    assert_ne!(second.fingerprint, first.fingerprint);
    let o = client.cp(
        &second,
        Some(TOKEN),
        &["--accept-new-host"],
        "127.0.0.1:x.bin",
        dst.to_str().unwrap(),
    );
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    let msg = stderr(&o);
    assert!(
        msg.contains(client.known_hosts().to_str().unwrap()),
        "message must name the known-hosts file: {msg}"
    );
}

#[test]
fn paths_outside_the_root_are_refused() {
    let server = ServerProc::start();
    let outside = server.root.parent().unwrap().join("outside.txt");
    std::fs::write(&outside, b"secret").unwrap();
    symlink(&outside, server.root.join("link-out")).unwrap();
    let client = ClientEnv::new();
    let dst = client.dir.path().join("got");
    for path in ["../outside.txt", "/etc/passwd", "link-out", "sub/../../outside.txt"] {
        let o = client.cp(
            &server,
            Some(TOKEN),
            &["--accept-new-host"],
            &format!("127.0.0.1:{path}"),
            dst.to_str().unwrap(),
        );
        assert_eq!(code(&o), 4, "{path}: {}", stderr(&o));
        assert!(!dst.exists(), "{path}");
        let served = server.root.to_str().unwrap();
        assert!(!stderr(&o).contains(served), "the server's layout shows: {}", stderr(&o));
    }
    let src = client.dir.path().join("up.txt");
    std::fs::write(&src, b"x").unwrap();
    for path in ["../evil.txt", "/tmp/evil.txt", "link-out"] {
        let o = client.cp(
            &server,
            Some(TOKEN),
            &["--accept-new-host"],
            src.to_str().unwrap(),
            &format!("127.0.0.1:{path}"),
        );
        assert_eq!(code(&o), 4, "upload {path}: {}", stderr(&o));
        let served = server.root.to_str().unwrap();
        assert!(!stderr(&o).contains(served), "the server's layout shows: {}", stderr(&o));
    }
    assert_eq!(std::fs::read(&outside).unwrap(), b"secret");
}

#[test]
fn killing_the_server_mid_transfer_fails_cleanly_within_ten_seconds() {
    let mut server = ServerProc::start();
    println!("e2e kill: seed=9");
    random_file(&server.root.join("big.bin"), 1 << 30, 9);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("big.bin");
    let child = client
        .cmd(&server, Some(TOKEN))
        .args(["--accept-new-host", "-q", "127.0.0.1:big.bin"])
        .arg(&dst)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until data is flowing (a partial file exists), then kill the server.
    let deadline = Instant::now() + Duration::from_secs(30);
    while no_partial_files(client.dir.path()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!no_partial_files(client.dir.path()), "the transfer never started");
    server.child.kill().unwrap();
    let killed = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    println!("the client gave up {took:?} after the kill: {}", stderr(&out).trim());
    assert!(took < Duration::from_secs(10), "client took {took:?} to notice");
    assert_ne!(code(&out), 0);
    assert!(!stderr(&out).trim().is_empty(), "no message");
    assert!(!dst.exists(), "nothing may stand under the final name");
    // The partial file stays, with its resume record, for the same command to continue.
    let left: Vec<String> = std::fs::read_dir(client.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        left.iter().all(|n| n.contains(".sluice-part-") || n.ends_with(".sluice-resume")),
        "{left:?}"
    );
}

/// Runs `sluice cp` on a pseudo-terminal (through `script`) and answers its host-key question.
fn cp_on_a_terminal(
    client: &ClientEnv,
    server: &ServerProc,
    answer: &str,
    remote: &str,
    dst: &Path,
) -> (i32, String) {
    let cmd = format!(
        "{BIN} cp -P {} --known-hosts {} {remote} {}; echo EXIT=$?",
        server.port,
        client.known_hosts().display(),
        dst.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("SLUICE_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("util-linux `script` is needed for the terminal test");
    child.stdin.take().unwrap().write_all(format!("{answer}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let code = text.rsplit("EXIT=").next().and_then(|c| c.trim().parse().ok()).unwrap_or(-1);
    (code, text)
}

#[test]
fn first_contact_asks_on_a_terminal_and_pins_only_on_yes() {
    let server = ServerProc::start();
    random_file(&server.root.join("t.bin"), 1000, 5);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("t.bin");
    let (exit, text) = cp_on_a_terminal(&client, &server, "no", "127.0.0.1:t.bin", &dst);
    assert_eq!(exit, 3, "{text}");
    assert!(text.contains(&server.fingerprint), "the question shows the fingerprint: {text}");
    assert!(!dst.exists() && !client.known_hosts().exists());

    let (exit, text) = cp_on_a_terminal(&client, &server, "yes", "127.0.0.1:t.bin", &dst);
    assert_eq!(exit, 0, "{text}");
    assert!(same_file(&server.root.join("t.bin"), &dst));
    let pinned = std::fs::read_to_string(client.known_hosts()).unwrap();
    assert!(
        pinned.contains(&format!("127.0.0.1:{} {}", server.port, server.fingerprint)),
        "{pinned}"
    );

    // Known now: no question, even without a terminal. The file is there already: refused
    // (exit 4) with a clear message, unless --overwrite says what to do.
    let o = client.cp(&server, Some(TOKEN), &["-q"], "127.0.0.1:t.bin", dst.to_str().unwrap());
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("already exists at the destination (t.bin)"), "{}", stderr(&o));
    let always = ["-q", "--overwrite", "always"];
    let o = client.cp(&server, Some(TOKEN), &always, "127.0.0.1:t.bin", dst.to_str().unwrap());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// Uploads `src` (with `extra` flags) at 20 Mbit/s with `--json`, and once the progress lines
/// say a quarter has moved, overwrites the last MiB of `victim`; returns the exit code and the
/// events. The sender hashes the file as the data starts; the rate leaves the test about 3 s
/// after the quarter to write before the sender reads that MiB. At 40 Mbit/s (about 1.7 s), once
/// in a run of the suite under two busy loops on 2 cores, the upload succeeded: the write came
/// after the sender had read the whole file.
fn upload_changing(
    server: &ServerProc,
    client: &ClientEnv,
    extra: &[&str],
    src: &Path,
    victim: &Path,
) -> (i32, Vec<events::Event>) {
    let mut child = client
        .cmd(server, Some(TOKEN))
        .args(["--accept-new-host", "--json", "--limit-rate", "20Mbit"])
        .args(extra)
        .arg(src)
        .arg("127.0.0.1:")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut changed = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let (bytes, total) = (value["bytes"].as_u64(), value["total"].as_u64());
        let event = value["event"].as_str().unwrap_or("");
        // At the first progress: the last MiB is read at the end, and under load a progress
        // has gone from a fifth of the file to its end in one step (the change never came).
        if let (false, "progress", Some(b), Some(t)) = (changed, event, bytes, total)
            && b > 0
            && b < t
        {
            let len = std::fs::metadata(victim).unwrap().len();
            let f = std::fs::OpenOptions::new().write(true).open(victim).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &vec![0xA5; 1 << 20], len - (1 << 20))
                .unwrap();
            changed = true;
        }
        lines.push(line);
    }
    let status = child.wait().unwrap();
    assert!(changed, "the file was never changed in flight: {lines:?}");
    let events = events::parse(lines.join("\n").as_bytes());
    (status.code().unwrap_or(-1), events)
}

#[test]
fn exit_codes_6_7_and_8_come_from_their_causes() {
    use events::Event;
    let server = ServerProc::start();
    let client = ClientEnv::new();
    // 7: a local source that does not exist.
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host"],
        "/nonexistent/src.bin",
        "127.0.0.1:x",
    );
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/src.bin"), "{}", stderr(&o));

    // 6: one file whose last MiB changes while it moves: it verifies against neither.
    let one = client.dir.path().join("one.bin");
    println!("e2e exit codes: seed=61 size=12 MiB");
    random_file(&one, 12 << 20, 61);
    let (code6, events) = upload_changing(&server, &client, &[], &one, &one);
    assert_eq!(code6, 6, "{events:?}");
    assert!(
        matches!(events.last(), Some(Event::Error(e)) if e.kind == "integrity" && e.message.contains("one.bin"))
    );
    assert!(!server.root.join("one.bin").exists());

    // 8: a tree in which one file changes while it moves: the other is stored.
    let tree = client.dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    println!("e2e exit codes: seeds 62, 63");
    random_file(&tree.join("a.bin"), 100_000, 62);
    random_file(&tree.join("b.bin"), 12 << 20, 63);
    let (code8, events) = upload_changing(&server, &client, &["-r"], &tree, &tree.join("b.bin"));
    assert_eq!(code8, 8, "{events:?}");
    assert!(
        matches!(events.last(), Some(Event::Error(e)) if e.kind == "partial" && e.message.contains("b.bin"))
    );
    assert!(same_file(&tree.join("a.bin"), &server.root.join("tree/a.bin")));
    assert!(!server.root.join("tree/b.bin").exists());
}

#[test]
fn a_second_upload_to_a_path_being_written_is_busy_with_exit_4() {
    use events::Event;
    let server = ServerProc::start();
    let client = ClientEnv::new();
    println!("e2e busy: seeds 81 (first) and 82 (second), size=16 MiB");
    let [first_src, second_src] = ["a", "b"].map(|sub| client.dir.path().join(sub).join("x.bin"));
    for (src, seed) in [(&first_src, 81), (&second_src, 82)] {
        std::fs::create_dir_all(src.parent().unwrap()).unwrap();
        random_file(src, 16 << 20, seed);
    }
    // The first at 32 Mbit/s takes 4 s; the second starts once 4 MiB of it have moved.
    let mut first = client
        .cmd(&server, Some(TOKEN))
        .args(["--accept-new-host", "--json", "--limit-rate", "32Mbit"])
        .arg(&first_src)
        .arg("127.0.0.1:x.bin")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines().map_while(Result::ok);
    let under_way = lines.by_ref().any(|line| {
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let (bytes, total) = (value["bytes"].as_u64(), value["total"].as_u64());
        matches!((value["event"].as_str(), bytes, total),
            (Some("progress"), Some(b), Some(t)) if b >= 4 << 20 && b < t)
    });
    assert!(under_way, "the first upload never showed progress");

    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "--json"],
        second_src.to_str().unwrap(),
        "127.0.0.1:x.bin",
    );
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let events = events::parse(&o.stdout);
    let said = "busy: x.bin: another transfer is writing it; try again when that one ends";
    assert!(
        matches!(events.last(), Some(Event::Error(e)) if e.kind == "busy" && e.message == said),
        "{events:?}"
    );

    lines.for_each(drop);
    assert!(first.wait().unwrap().success());
    assert!(same_file(&first_src, &server.root.join("x.bin")));
}

/// Runs `sluice <command> <args...>` against `server` with the test's token and known hosts.
fn browse(server: &ServerProc, client: &ClientEnv, command: &str, args: &[&str]) -> Output {
    let mut c = Command::new(BIN);
    isolate(&mut c, client.dir.path());
    c.arg(command)
        .args(["-P", &server.port.to_string(), "--accept-new-host"])
        .arg("--known-hosts")
        .arg(client.known_hosts())
        .env("SLUICE_TOKEN", TOKEN)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ls_and_stat_show_the_servers_view_within_its_root() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    let dir = server.root.join("d");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("b.txt"), b"12345").unwrap();
    std::fs::write(dir.join("a name\nwith newline"), b"").unwrap();
    symlink("b.txt", dir.join("link")).unwrap();
    std::fs::set_permissions(
        dir.join("b.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o640),
    )
    .unwrap();
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let o = browse(&server, &client, "ls", &["127.0.0.1:d"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(text(&o), "a name\\nwith newline\nb.txt\nlink\nsub/\n");

    let o = browse(&server, &client, "ls", &["-l", "127.0.0.1:d"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let long = text(&o);
    let b_line = long.lines().find(|l| l.ends_with(" b.txt")).unwrap_or_else(|| panic!("{long}"));
    assert!(b_line.starts_with("-rw-r----- ") && b_line.contains(" 5 "), "{b_line}");
    assert!(long.lines().any(|l| l.starts_with('l') && l.ends_with("link -> b.txt")), "{long}");
    assert!(long.lines().any(|l| l.starts_with('d') && l.ends_with(" sub/")), "{long}");

    let o = browse(&server, &client, "ls", &["--json", "127.0.0.1:d"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let entries = doc["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 4);
    let b = entries.iter().find(|e| e["name"] == "b.txt").unwrap();
    assert_eq!(
        (b["kind"].as_str(), b["size"].as_u64(), b["mode"].as_u64()),
        (Some("file"), Some(5), Some(0o640))
    );

    // The root itself, and a file on its own.
    let o = browse(&server, &client, "ls", &["127.0.0.1:"]);
    assert_eq!(text(&o), "d/\n", "{}", stderr(&o));
    let o = browse(&server, &client, "ls", &["127.0.0.1:d/b.txt"]);
    assert_eq!(text(&o), "b.txt\n");

    let o = browse(&server, &client, "stat", &["127.0.0.1:d/b.txt"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(text(&o).starts_with("d/b.txt: file, 5 bytes, modified 20"), "{}", text(&o));
    let o = browse(&server, &client, "stat", &["--json", "127.0.0.1:d"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "directory");

    // Outside the root, missing, and a local path.
    let o = browse(&server, &client, "ls", &["127.0.0.1:../"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let o = browse(&server, &client, "ls", &["127.0.0.1:nope"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not found: nope") && !stderr(&o).contains("root"),
        "{}",
        stderr(&o)
    );
    let o = browse(&server, &client, "stat", &["./local"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn completions_and_manual_pages_come_from_the_command_line_definition() {
    let run = |args: &[&str]| Command::new(BIN).args(args).output().unwrap();
    let o = run(&["completions", "bash"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bash = String::from_utf8_lossy(&o.stdout);
    assert!(bash.contains("_sluice()") && bash.contains("--compress") && bash.contains("ls"));
    let o = run(&["completions", "zsh"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("#compdef sluice"));
    let o = run(&["completions", "tcsh"]);
    assert_eq!(code(&o), 2, "an unknown shell is a usage error");

    let o = run(&["man"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(page.contains(".TH sluice 1") && page.contains("sluice\\-cp"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for page in ["sluice.1", "sluice-cp.1", "sluice-serve.1", "sluice-ls.1", "sluice-stat.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}");
    }
    let cp = std::fs::read_to_string(dir.path().join("sluice-cp.1")).unwrap();
    assert!(cp.contains("overwrite") && cp.contains("Exit codes"), "{cp}");
}

#[test]
fn sigterm_stops_the_server_cleanly_and_the_upload_resumes() {
    use events::Event;
    let mut server = ServerProc::start();
    let client = ClientEnv::new();
    let src = client.dir.path().join("big.bin");
    println!("e2e sigterm: seed=71 size=64 MiB");
    random_file(&src, 64 << 20, 71);
    let mut child = client
        .cmd(&server, Some(TOKEN))
        .args(["--accept-new-host", "--json", "--limit-rate", "100Mbit"])
        .arg(&src)
        .arg("127.0.0.1:")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A quarter in, once the server's resume record keeps a whole resume block (4 MiB; the
    // sender's count is of every byte confirmed, and the streams' chunks land out of order, so
    // a quarter sent has been less than a block in order at the server: it resumed 0 bytes),
    // SIGTERM to the server (its process id: the one this test started).
    let mut signalled = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        let (bytes, total) = (value["bytes"].as_u64(), value["total"].as_u64());
        if let (None, Some("progress"), Some(b), Some(t)) =
            (signalled, value["event"].as_str(), bytes, total)
            && b * 4 >= t
            && let kept = recorded_prefix(&server.root.join(".big.bin.sluice-resume"))
            && kept >= 4 << 20
        {
            let pid = server.child.id().to_string();
            assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
            println!("e2e sigterm: SIGTERM at {b} bytes sent, {kept} recorded by the server");
            signalled = Some(kept);
        }
    }
    let Some(kept) = signalled else { panic!("the upload ended before it could be interrupted") };
    assert_eq!(code(&child.wait_with_output().unwrap()), 5, "a network failure: retry");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not stop within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the server's exit after SIGTERM: {status:?}");
    // What stays is the partial file and its resume record, nothing under the final name.
    let listing: Vec<String> = std::fs::read_dir(&server.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(listing.iter().any(|n| n.ends_with(".sluice-resume")), "{listing:?}");
    assert!(listing.iter().any(|n| n.contains(".sluice-part-")), "{listing:?}");
    assert!(
        listing.iter().all(|n| n.contains(".sluice-part-") || n.ends_with(".sluice-resume")),
        "{listing:?}"
    );

    // The same server again (same directory, same identity, a new port): the same command
    // moves only what is missing.
    let dir = std::mem::replace(&mut server._dir, tempfile::tempdir().unwrap());
    drop(server);
    let server = ServerProc::start_in(dir, None);
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "--json"],
        src.to_str().unwrap(),
        "127.0.0.1:",
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let events = events::parse(&o.stdout);
    let Some(Event::Summary(summary)) = events.last() else { panic!("{events:?}") };
    println!("e2e sigterm: resumed {} of {} bytes", summary.resumed_bytes, summary.bytes);
    // At least the whole blocks the record kept when the signal went (it may keep more: the
    // bytes in flight land before the server stops).
    let blocks = kept / (4 << 20) * (4 << 20);
    assert!(
        summary.resumed_bytes >= blocks && summary.resumed_bytes < summary.bytes,
        "{summary:?}"
    );
    assert!(same_file(&src, &server.root.join("big.bin")));
    let left: Vec<String> = std::fs::read_dir(&server.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["big.bin"], "only the file is left");
}

#[test]
fn the_config_file_and_the_environment_fill_in_what_flags_leave_open_in_that_order() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    random_file(&server.root.join("f.bin"), 300_000, 81);
    let token_file = client.dir.path().join("lab.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mode = |bits| std::os::unix::fs::PermissionsExt::from_mode(bits);
    std::fs::set_permissions(&token_file, mode(0o600)).unwrap();
    let config = client.dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\npolicy = \"from-the-file\"\n\n[hosts.lab]\naddress = \"127.0.0.1\"\n\
             port = {}\ntoken_file = \"{}\"\n",
            server.port,
            token_file.display()
        ),
    )
    .unwrap();
    let dst = client.dir.path().join("got.bin");
    let run = |env: &[(&str, &str)], flags: &[&str]| {
        let mut c = Command::new(BIN);
        isolate(&mut c, client.dir.path());
        c.env("SLUICE_CONFIG", &config).args(["cp", "--accept-new-host", "--known-hosts"]);
        c.arg(client.known_hosts()).envs(env.iter().copied()).args(flags);
        c.args(["lab:f.bin", dst.to_str().unwrap()]).output().unwrap()
    };
    // The file's default applies (and is checked) when neither a flag nor the environment
    // says otherwise.
    let o = run(&[], &[]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--policy from-the-file"), "{}", stderr(&o));
    // The environment wins over the file: the alias gives address, port and token.
    let o = run(&[("SLUICE_POLICY", "fair")], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(same_file(&server.root.join("f.bin"), &dst));
    // A token file others could read is refused before anything is sent (exit 3).
    std::fs::set_permissions(&token_file, mode(0o644)).unwrap();
    let o = run(&[("SLUICE_POLICY", "fair")], &[]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("chmod 600"), "{}", stderr(&o));
    std::fs::set_permissions(&token_file, mode(0o600)).unwrap();
    // A flag wins over the environment.
    let o = run(&[("SLUICE_POLICY", "fair")], &["--policy", "from-the-flag"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--policy from-the-flag"), "{}", stderr(&o));
    // ls through the alias too.
    let mut c = Command::new(BIN);
    isolate(&mut c, client.dir.path());
    let o = c
        .env("SLUICE_CONFIG", &config)
        .args(["ls", "--known-hosts"])
        .arg(client.known_hosts())
        .arg("lab:")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "f.bin\n", "{}", stderr(&o));

    // A secret in the file, an unknown key, and a named file that is missing: usage errors.
    std::fs::write(&config, "[hosts.lab]\ntoken = \"x\"\n").unwrap();
    let o = run(&[], &[]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("token_file") && stderr(&o).contains("sluice.toml"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&config, "[defaults]\nchanels = 2\n").unwrap();
    let o = run(&[], &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("chanels"), "{}", stderr(&o));
    std::fs::remove_file(&config).unwrap();
    let o = run(&[], &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("sluice.toml"), "{}", stderr(&o));
}

#[test]
fn the_server_reads_its_config_file_under_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let tokens = dir.path().join("tokens");
    write_tokens(&tokens);
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "root = \"{}\"\ntokens = \"{}\"\nstate_dir = \"{}\"\nlisten = \"127.0.0.2:0\"\n",
            root.display(),
            tokens.display(),
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    // Starts `sluice serve --config FILE EXTRA...`; returns the line it announced itself with.
    let serve = |extra: &[&str]| {
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .args(extra)
            .env_remove("SLUICE_ROOT")
            .env_remove("SLUICE_LISTEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        line
    };
    assert!(serve(&[]).starts_with("sluice: serving on 127.0.0.2:"), "the file's listen");
    let line = serve(&["--listen", "127.0.0.1:0"]);
    assert!(line.starts_with("sluice: serving on 127.0.0.1:"), "the flag wins: {line}");

    std::fs::write(&config, "root = \"/nonexistent\"\nport = 1\n").unwrap();
    let o = Command::new(BIN).args(["serve", "--config"]).arg(&config).output().unwrap();
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("port") && stderr(&o).contains("server.toml"), "{}", stderr(&o));
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\n").unwrap();
    let o = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("SLUICE_ROOT")
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("no directory to serve"), "{}", stderr(&o));
}

/// `GET path` over HTTP from `addr`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (head.lines().next().unwrap_or("").to_owned(), body.to_owned())
}

/// Starts `sluice serve --metrics 127.0.0.1:0` on `dir`'s `root` (made if missing) with
/// `extra` arguments; returns the server and the metrics address (`127.0.0.1:PORT`).
fn start_with_metrics(dir: tempfile::TempDir, extra: &[&std::ffi::OsStr]) -> (ServerProc, String) {
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let tokens = dir.path().join("tokens");
    write_tokens(&tokens);
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--root"])
        .arg(&root)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--tokens")
        .arg(&tokens)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (mut first, mut second) = (String::new(), String::new());
    out.read_line(&mut first).unwrap();
    out.read_line(&mut second).unwrap();
    let port: u16 =
        first.split_whitespace().nth(3).unwrap().rsplit(':').next().unwrap().parse().unwrap();
    let metrics = second
        .trim()
        .strip_prefix("sluice: metrics on http://")
        .unwrap()
        .strip_suffix("/metrics")
        .unwrap()
        .to_owned();
    let fingerprint = first.split_whitespace().last().unwrap().to_owned();
    (ServerProc { child, port, fingerprint, root, _dir: dir }, metrics)
}

#[test]
fn the_metrics_endpoint_counts_and_the_event_log_records_each_channel() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    random_file(&root.join("m.bin"), 1_000_003, 91);
    let event_log = dir.path().join("events.jsonl");
    let (server, metrics) = start_with_metrics(dir, &["--event-log".as_ref(), event_log.as_ref()]);
    let client = ClientEnv::new();
    let dst = client.dir.path().join("m.bin");
    let o = client.cp(
        &server,
        Some(TOKEN),
        &["--accept-new-host", "-q"],
        "127.0.0.1:m.bin",
        dst.to_str().unwrap(),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = client.cp(&server, Some(TOKEN), &["-q"], "127.0.0.1:missing.bin", "/tmp/never.bin");
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let said = stderr(&o);
    assert!(
        said.contains("not found: missing.bin") && !said.contains(root.to_str().unwrap()),
        "{said}"
    );
    let o = client.cp(&server, Some("not-the-token"), &["-q"], "127.0.0.1:m.bin", "/tmp/never.bin");
    assert_eq!(code(&o), 3, "{}", stderr(&o));

    // A download ends at the client's verdict, which the server reads a little later: scrape
    // until the server has ended the sessions (and their requests).
    let (mut status, mut body) = http_get(&metrics, "/metrics");
    for _ in 0..100 {
        if body.lines().any(|l| l == "sluice_sessions_active 0") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        (status, body) = http_get(&metrics, "/metrics");
    }
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    for line in [
        "sluice_sessions_total 2",
        "sluice_sessions_refused_total 1",
        "sluice_transfers_total{direction=\"get\"} 1",
        "sluice_file_bytes_total{direction=\"sent\"} 1000003",
        "sluice_request_errors_total{class=\"not_found\"} 1",
        "sluice_transfers_active 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
    }
    let (status, _) = http_get(&metrics, "/elsewhere");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    // The event log: each sending channel's counters, as JSON lines naming the request.
    let log = std::fs::read_to_string(&event_log).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    if TRANSPORT == "tcp" {
        // Each sending TCP stream logs its counters (at least once: at its end).
        let streams: Vec<&serde_json::Value> =
            lines.iter().filter(|v| v["target"] == "sluice::datapath::tcp::send").collect();
        let sending: Vec<_> =
            streams.iter().filter(|v| v["fields"]["message"] == "sending").collect();
        assert!(!sending.is_empty(), "{log}");
        for v in sending {
            let f = &v["fields"];
            assert!(f["stream"].is_u64() && f["rate_mbit"].is_u64(), "{v}");
            assert!(f["retransmitted"].is_u64() && f["acked_mib"].is_u64(), "{v}");
            let spans = v["spans"].as_array().unwrap();
            assert!(spans.iter().any(|s| s["name"] == "request"), "{v}");
        }
        return;
    }
    // A sending channel logs its counters, and once the outcome of its path MTU probe, which
    // on loopback is always answered; nothing else.
    const PROBED: &str = "the path carries full-size packets";
    let events: Vec<&serde_json::Value> =
        lines.iter().filter(|v| v["target"] == "sluice::datapath::send").collect();
    let (probed, channels): (Vec<_>, Vec<_>) =
        events.into_iter().partition(|v| v["fields"]["message"] == PROBED);
    assert!(!channels.is_empty(), "{log}");
    assert!(!probed.is_empty(), "{log}");
    assert!(probed.iter().all(|v| v["fields"]["packet_bytes"].is_u64()), "{log}");
    for v in &channels {
        let f = &v["fields"];
        assert_eq!(f["message"], "sending");
        assert!(f["channel"].is_u64() && f["rate_mbit"].is_u64() && f["sent"].is_u64(), "{v}");
        let spans = v["spans"].as_array().unwrap();
        assert!(spans.iter().any(|s| s["name"] == "request"), "{v}");
    }
}

/// Sends `request` as it is on a new connection and returns all the reply, head and body.
fn http_raw(addr: &str, request: &[u8]) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    String::from_utf8(reply).unwrap()
}

#[test]
fn the_metrics_endpoint_is_http_with_every_series_counted_and_survives_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    random_file(&root.join("down.bin"), 300_007, 5);
    let (server, metrics) = start_with_metrics(dir, &[]);
    let client = ClientEnv::new();
    let (down, up) = (client.dir.path().join("down.bin"), client.dir.path().join("up.bin"));
    random_file(&up, 200_003, 6);
    let cp = |token, extra: &[&str], src: &str, dst: &str| {
        let o = client.cp(&server, Some(token), extra, src, dst);
        code(&o)
    };
    assert_eq!(
        cp(TOKEN, &["--accept-new-host", "-q"], "127.0.0.1:down.bin", down.to_str().unwrap()),
        0
    );
    assert_eq!(cp(TOKEN, &["-q"], up.to_str().unwrap(), "127.0.0.1:up.bin"), 0);
    assert_eq!(cp(TOKEN, &["-q"], "127.0.0.1:missing.bin", "/tmp/never.bin"), 4);
    assert_eq!(cp("not-the-token", &["-q"], "127.0.0.1:down.bin", "/tmp/never.bin"), 3);

    // Garbage, a request cut short and a head too large first: the endpoint answers after them.
    let bad = http_raw(&metrics, b"NONSENSE\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    assert_eq!(http_raw(&metrics, b"GET /metr"), "");
    let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
    let big = http_raw(&metrics, big.as_bytes());
    assert!(big.starts_with("HTTP/1.1 431 "), "{big}");

    // A session counts as open until the server has seen its client go: scrape until it has.
    let scrape =
        || http_raw(&metrics, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut reply = scrape();
    for _ in 0..100 {
        if reply.contains("\nsluice_sessions_active 0\n") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        reply = scrape();
    }
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.lines()
            .any(|l| l
                .eq_ignore_ascii_case("content-type: text/plain; version=0.0.4; charset=utf-8")),
        "{head}"
    );
    let value = |series: &str| -> u64 {
        let line = body.lines().find(|l| l.rsplit_once(' ').is_some_and(|(s, _)| s == series));
        let line = line.unwrap_or_else(|| panic!("no {series} in\n{body}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    for (series, expected) in [
        ("sluice_sessions_total", 3),
        ("sluice_sessions_active", 0),
        ("sluice_sessions_refused_total", 1),
        ("sluice_transfers_total{direction=\"get\"}", 1),
        ("sluice_transfers_total{direction=\"put\"}", 1),
        ("sluice_transfers_active", 0),
        ("sluice_file_bytes_total{direction=\"sent\"}", 300_007),
        ("sluice_file_bytes_total{direction=\"received\"}", 200_003),
        ("sluice_blocks_repaired_total", 0),
        ("sluice_request_errors_total{class=\"not_found\"}", 1),
        ("sluice_request_errors_total{class=\"auth\"}", 0),
        ("sluice_request_errors_total{class=\"busy\"}", 0),
    ] {
        assert_eq!(value(series), expected, "{series} in\n{body}");
    }
    assert!(value("sluice_data_packets_total") > 0, "{body}");
    // Loss on loopback is rare but not impossible: present, whatever its value.
    let _ = value("sluice_retransmitted_packets_total");
    // Ten families, each with its HELP and TYPE lines.
    assert_eq!(body.lines().filter(|l| l.starts_with("# TYPE sluice_")).count(), 10, "{body}");
    assert_eq!(body.lines().filter(|l| l.starts_with("# HELP sluice_")).count(), 10, "{body}");

    for path in ["/", "/elsewhere"] {
        let reply = http_raw(
            &metrics,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert!(reply.starts_with("HTTP/1.1 404 Not Found\r\n"), "{path}: {reply}");
    }
}

#[test]
fn sweep_measures_each_setting_and_saves_the_best_to_the_config_file() {
    let server = ServerProc::start();
    let client = ClientEnv::new();
    let config = client.dir.path().join("sweep.toml");
    std::fs::write(&config, "[defaults]\ncompress = 1\n").unwrap();
    let sweep = || {
        let mut c = Command::new(BIN);
        isolate(&mut c, client.dir.path());
        c.env("SLUICE_CONFIG", &config).env("SLUICE_TOKEN", TOKEN);
        c.args(["sweep", "--accept-new-host", "--size", "2MiB", "--packet-sizes", "1200,1452"]);
        c.args(["--channels", "1,2", "--save", "-P", &server.port.to_string(), "--known-hosts"]);
        c.arg(client.known_hosts()).arg("127.0.0.1").output().unwrap()
    };
    let o = sweep();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 5 && ["udp", "tcp"].contains(&w[0]))
        .collect();
    // Over UDP each packet size with each channel count; over TCP each stream count. auto
    // sweeps both transports, tcp only its own.
    let (udp, tcp) = (rows.iter().filter(|r| r[0] == "udp").count(), rows.len());
    let expected = if TRANSPORT == "tcp" { (0, 2) } else { (4, 6) };
    assert_eq!((udp, tcp), expected, "{out}");
    for row in &rows {
        let mbit: f64 = row[3].parse().unwrap_or_else(|_| panic!("{out}"));
        assert!(mbit > 0.0, "{out}");
        assert_eq!(row[1] == "-", row[0] == "tcp", "a packet size over UDP only: {out}");
    }
    assert!(out.contains("best: --packet-size ") || out.contains("best: --transport tcp"), "{out}");
    // The best settings went into the config file, which still reads (cp uses it).
    let saved = std::fs::read_to_string(&config).unwrap();
    assert!(
        saved.starts_with("[defaults]\ncompress = 1\n") && saved.contains("[hosts.\"127.0.0.1\"]"),
        "{saved}"
    );
    assert!(server.root.join(".sluice-sweep.bin").exists());
    let mut c = Command::new(BIN);
    isolate(&mut c, client.dir.path());
    let o = c
        .env("SLUICE_CONFIG", &config)
        .env("SLUICE_TOKEN", TOKEN)
        .args(["ls", "-P", &server.port.to_string(), "--known-hosts"])
        .arg(client.known_hosts())
        .arg("127.0.0.1:")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A second --save does not overwrite the section.
    let o = sweep();
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("already"), "{}", stderr(&o));
}
