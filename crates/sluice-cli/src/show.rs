//! What `sluice cp` shows while it works and when it ends: a progress display on a terminal,
//! a stream of JSON lines with `--json` (schema: `docs/json-events.md`), or nothing.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};
use sluice::datapath::Progress;
use sluice::session::{CopyObserver, PlannedFile, TransferReport, Transport};

/// The version of the JSON lines' schema (`docs/json-events.md`); it changes when a field
/// changes meaning or goes away, not when one is added.
pub(crate) const JSON_SCHEMA: u32 = 1;
/// JSON progress lines come at most this often.
const JSON_PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The rate (and so the ETA) is measured over this much recent time.
const RATE_WINDOW: Duration = Duration::from_secs(3);

/// How the copy is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A progress display on stderr, a summary at the end.
    Terminal,
    /// JSON lines on stdout.
    Json,
    /// A summary at the end on stderr, no progress (stderr is not a terminal).
    Plain,
    /// Nothing but errors.
    Quiet,
}

impl Mode {
    /// The mode for these flags and this stderr.
    pub(crate) fn choose(json: bool, quiet: bool) -> Mode {
        match (json, quiet) {
            (true, _) => Mode::Json,
            (false, true) => Mode::Quiet,
            _ if std::io::IsTerminal::is_terminal(&std::io::stderr()) => Mode::Terminal,
            _ => Mode::Plain,
        }
    }
}

/// What the observer learned, shared with the end of the copy.
#[derive(Debug, Default)]
struct Seen {
    files: Vec<PlannedFile>,
    /// Where each file ends, counting the planned files' bytes end to end.
    ends: Vec<u64>,
    /// Recent (time, bytes) samples, for the rate.
    samples: Vec<(Instant, u64)>,
    last_json: Option<Instant>,
    /// Data channels per transfer, once the server said.
    channels: u32,
}

/// Shows one copy.
#[derive(Clone)]
pub(crate) struct Show {
    mode: Mode,
    direction: &'static str,
    bar: Option<ProgressBar>,
    seen: Arc<Mutex<Seen>>,
}

impl Show {
    pub(crate) fn new(mode: Mode, direction: &'static str) -> Show {
        let bar = (mode == Mode::Terminal).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{msg}\n{bar:32.cyan/blue} {decimal_bytes:>9}/{decimal_total_bytes:9} \
                 {decimal_bytes_per_sec:>11} ETA {eta:>4}  {prefix}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
            bar.set_style(style);
            bar
        });
        Show { mode, direction, bar, seen: Arc::default() }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The copy's start, once its files are known: `files` files of `bytes` in all.
    pub(crate) fn started(&self, files: u64, bytes: u64) {
        let channels = self.seen().channels;
        if let Some(bar) = &self.bar {
            bar.set_length(bytes);
        }
        if self.mode == Mode::Json {
            emit(&json!({
                "event": "start",
                "schema": JSON_SCHEMA,
                "direction": self.direction,
                "files": files,
                "bytes": bytes,
                "channels": channels,
            }));
        }
    }

    /// A warning (a file the sender left out, ...).
    pub(crate) fn warning(&self, message: &str) {
        match self.mode {
            Mode::Json => emit(&json!({"event": "warning", "message": message})),
            Mode::Quiet => {}
            Mode::Terminal | Mode::Plain => say(&format!("sluice: {message}")),
        }
    }

    /// The end of a copy that succeeded: file events and the summary.
    pub(crate) fn finished(&self, report: &TransferReport, dry_run: bool, secs: f64) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        for skipped in &report.skipped {
            self.warning(&format!("skipped {}", skipped.escape_debug()));
        }
        let moved = report.bytes.saturating_sub(report.resumed);
        let goodput_bps = moved as f64 * 8.0 / secs.max(1e-9);
        let retransmitted = report.channel.as_ref().map(|c| {
            c.retransmitted_pkts as f64 / (c.data_pkts + c.retransmitted_pkts).max(1) as f64
        });
        let wire_share = report
            .channel
            .as_ref()
            .filter(|c| c.bytes > 0 && c.payload_bytes != c.bytes)
            .map(|c| c.payload_bytes as f64 / c.bytes as f64);
        // A copy whose sender started from what the path delivered last time.
        let memory = report.path_memory;
        // Over TCP, the streams that carried data (the sender grows them while they help).
        let streams = (report.transport == Transport::Tcp)
            .then(|| report.channel.as_ref().map_or(0, |c| c.carrying));
        match self.mode {
            Mode::Json => {
                if !dry_run {
                    for file in &self.seen().files {
                        emit(&json!({"event": "file_done", "path": file.path, "bytes": file.size}));
                    }
                }
                emit(&json!({
                    "event": "summary",
                    "dry_run": dry_run,
                    "files": report.files,
                    "bytes": report.bytes,
                    "seconds": round3(secs),
                    "goodput_bps": goodput_bps.round(),
                    "retransmitted_share": retransmitted.map(round4),
                    "wire_share": wire_share.map(round4),
                    "blocks_repaired": report.repaired,
                    "resumed_bytes": report.resumed,
                    "replaced": report.replaced,
                    "kept": report.kept,
                    "blake3": report.blake3,
                    "transport": report.transport.name(),
                    "streams": streams,
                    "path_memory": memory.map(|m| json!({
                        "rate_bps": m.rate_bps,
                        "age_s": m.age.as_secs(),
                    })),
                    "would_copy": if dry_run { json!(report.planned) } else { Value::Null },
                }));
            }
            Mode::Quiet => {}
            Mode::Terminal | Mode::Plain => {
                let mut extra = String::new();
                if report.replaced > 0 {
                    extra.push_str(&format!(", {} replaced", report.replaced));
                }
                if report.kept > 0 {
                    extra.push_str(&format!(", {} kept", report.kept));
                }
                if report.resumed > 0 {
                    extra.push_str(&format!(
                        ", resumed: {moved} bytes moved, {} kept",
                        report.resumed
                    ));
                }
                let files =
                    format!("{} file{}", report.files, if report.files == 1 { "" } else { "s" });
                if dry_run {
                    say(&format!(
                        "sluice: dry run: would copy {files}, {} bytes{extra}",
                        report.bytes
                    ));
                    return;
                }
                if let Some(share) = retransmitted.filter(|&s| s > 0.0) {
                    extra.push_str(&format!(", {:.2} % retransmitted", share * 100.0));
                }
                if let Some(share) = wire_share {
                    extra.push_str(&format!(", compressed to {:.1} % on the wire", share * 100.0));
                }
                if report.repaired > 0 {
                    let blocks = if report.repaired == 1 { "block" } else { "blocks" };
                    extra.push_str(&format!(", {} {blocks} repaired", report.repaired));
                }
                if let Some(m) = memory {
                    extra.push_str(&format!(
                        ", started from path memory ({:.0} Mbit/s, {} old)",
                        m.rate_bps as f64 / 1e6,
                        age_words(m.age)
                    ));
                }
                match streams {
                    Some(n) if n > 0 => extra.push_str(&format!(
                        ", over TCP ({n} stream{} carried data)",
                        if n == 1 { "" } else { "s" }
                    )),
                    Some(_) => extra.push_str(", over TCP"),
                    None => {}
                }
                say(&format!(
                    "sluice: {files}, {} bytes in {secs:.2} s, {:.1} Mbit/s{extra}, BLAKE3 verified",
                    report.bytes,
                    goodput_bps / 1e6,
                ));
            }
        }
    }
}

/// An age as a person says it: seconds, minutes or hours.
fn age_words(age: std::time::Duration) -> String {
    match age.as_secs() {
        s if s < 120 => format!("{s} s"),
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s => format!("{} h", s / 3600),
    }
}

impl CopyObserver for Show {
    fn channels(&mut self, channels: u32) {
        self.seen().channels = channels;
        if let Some(bar) = &self.bar {
            bar.set_prefix(format!("{channels} channel{}", if channels == 1 { "" } else { "s" }));
        }
    }

    fn planned(&mut self, files: &[PlannedFile]) {
        let mut seen = self.seen();
        let mut at = 0;
        seen.ends = files
            .iter()
            .map(|f| {
                at += f.size;
                at
            })
            .collect();
        seen.files = files.to_vec();
        // A transfer taken up again counts its progress anew.
        seen.samples.clear();
        drop(seen);
        self.started(files.len() as u64, at);
    }

    fn progress(&mut self, p: Progress) {
        let now = Instant::now();
        let mut seen = self.seen();
        seen.samples.retain(|&(t, _)| now.duration_since(t) <= RATE_WINDOW);
        seen.samples.push((now, p.bytes));
        let rate_bps = match (seen.samples.first(), seen.samples.last()) {
            (Some(&(t0, b0)), Some(&(t1, b1))) if t1 > t0 => {
                Some(b1.saturating_sub(b0) as f64 * 8.0 / t1.duration_since(t0).as_secs_f64())
            }
            _ => None,
        };
        // The file the bytes have reached, as if they moved in order (nearly so: chunks go
        // out in order, first come first served).
        let k = seen.ends.partition_point(|&end| end <= p.bytes);
        let n = seen.files.len();
        let k = k.min(n.saturating_sub(1));
        let file = seen.files.get(k).map(|f| f.path.clone());
        let json_due = seen.last_json.is_none_or(|t| now.duration_since(t) >= JSON_PROGRESS_EVERY)
            || p.bytes == p.total;
        if self.mode == Mode::Json && json_due {
            seen.last_json = Some(now);
        }
        drop(seen);
        match self.mode {
            Mode::Terminal => {
                if let Some(bar) = &self.bar {
                    bar.set_length(p.total);
                    bar.set_position(p.bytes);
                    if let Some(file) = &file {
                        bar.set_message(format!("[{}/{n}] {file}", k + 1));
                    }
                }
            }
            Mode::Json if json_due => {
                let eta_s = rate_bps
                    .filter(|&r| r > 0.0)
                    .map(|r| round3((p.total - p.bytes.min(p.total)) as f64 * 8.0 / r));
                emit(&json!({
                    "event": "progress",
                    "bytes": p.bytes,
                    "total": p.total,
                    "rate_bps": rate_bps.map(f64::round),
                    "eta_s": eta_s,
                    "file": file,
                }));
            }
            _ => {}
        }
    }
}

/// The `error` line of a copy that failed (the message goes to stderr as well, from `main`).
pub(crate) fn json_error(exit_code: u8, kind: &str, message: &str) {
    emit(&json!({"event": "error", "exit_code": exit_code, "kind": kind, "message": message}));
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// One JSON line on stdout, flushed (a reader follows the stream as it comes).
#[allow(clippy::print_stdout)]
fn emit(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

#[allow(clippy::print_stderr)]
pub(crate) fn say(line: &str) {
    eprintln!("{line}");
}

impl Show {
    /// The end of a relayed upload: the sender's part (every block safe) and, when it waited,
    /// the receiver's (the verified file in place).
    pub(crate) fn relayed(&self, report: &sluice::session::RelayedReport, host: &str) {
        match self.mode {
            Mode::Json => emit(&relayed_json(report, self.direction)),
            Mode::Quiet => {}
            Mode::Terminal | Mode::Plain if report.files == 0 && report.kept_files > 0 => {
                let (files, was) = files_kept(report.kept_files);
                say(&format!(
                    "sluice: nothing to send: {files} at the server kept as {was} (--overwrite)"
                ));
            }
            Mode::Terminal | Mode::Plain => {
                let after = match report.total_seconds {
                    Some(total) if report.files == 1 => {
                        format!("the server has the verified file after {total:.1} s")
                    }
                    Some(total) => format!(
                        "the server has the {} verified files after {total:.1} s",
                        report.files
                    ),
                    None => format!(
                        "collection goes on at the server (job {}: sluice jobs {} follows it)",
                        report.job,
                        host.escape_debug()
                    ),
                };
                let resumed = already_there(report, "at the server");
                say(&format!(
                    "sluice: sent {} bytes in {:.1} s ({} blocks: {}{resumed}); {after}",
                    report.bytes,
                    report.send_seconds,
                    report.blocks,
                    shares(report)
                ));
            }
        }
    }

    /// A relayed download's summary: what came through which of the server's relays, when
    /// the server's part was done, and when the verified file (or tree) was here.
    pub(crate) fn relayed_download(&self, report: &sluice::session::RelayedReport) {
        match self.mode {
            Mode::Json => emit(&relayed_json(report, self.direction)),
            Mode::Quiet => {}
            Mode::Terminal | Mode::Plain if report.files == 0 && report.kept_files > 0 => {
                let (files, was) = files_kept(report.kept_files);
                say(&format!("sluice: nothing to fetch: {files} here kept as {was} (--overwrite)"));
            }
            Mode::Terminal | Mode::Plain => {
                let files = match report.files {
                    1 => "the verified file".to_owned(),
                    n => format!("the {n} verified files"),
                };
                let kept = already_there(report, "here");
                let blocks = match report.blocks {
                    1 => "1 block".to_owned(),
                    n => format!("{n} blocks"),
                };
                say(&format!(
                    "sluice: received {} bytes through the server's relays ({blocks}: {}{kept}); \
                     the server's part was done after {:.1} s, {files} here after {:.1} s",
                    report.bytes,
                    shares(report),
                    report.send_seconds,
                    report.total_seconds.unwrap_or(report.send_seconds),
                ));
            }
        }
    }
}

/// A relayed transfer's destinations that took blocks, with how many: `r1 61, r2 64`.
fn shares(report: &sluice::session::RelayedReport) -> String {
    let took = report.placed.iter().filter(|p| p.blocks > 0);
    took.map(|p| format!("{} {}", p.name, p.blocks)).collect::<Vec<_>>().join(", ")
}

/// What a relayed transfer did not move because the receiver (`at`: where it is) had it:
/// blocks from an earlier run, files its overwrite policy kept; each after `; `.
fn already_there(report: &sluice::session::RelayedReport, at: &str) -> String {
    let mut said = String::new();
    if report.resumed_blocks > 0 {
        said.push_str(&format!("; {} were {at} from an earlier run", report.resumed_blocks));
    }
    if report.kept_files > 0 {
        let (files, _) = files_kept(report.kept_files);
        said.push_str(&format!("; {files} {at} kept as they were"));
    }
    said
}

/// `n` files kept by the overwrite policy: `1 file`, `it was`; `3 files`, `they were`.
fn files_kept(n: u64) -> (String, &'static str) {
    if n == 1 { ("1 file".into(), "it was") } else { (format!("{n} files"), "they were") }
}

/// A relayed transfer's `--json` summary (`direction`: `upload` or `download`).
fn relayed_json(report: &sluice::session::RelayedReport, direction: &str) -> Value {
    let placed: Vec<Value> = report
        .placed
        .iter()
        .map(|p| json!({"name": p.name, "blocks": p.blocks, "bytes": p.bytes}))
        .collect();
    json!({
        "event": "summary",
        "relayed": true,
        "direction": direction,
        "files": report.files,
        "bytes": report.bytes,
        "blocks": report.blocks,
        "send_seconds": round3(report.send_seconds),
        "total_seconds": report.total_seconds.map(round3),
        "job": report.job,
        "resumed_blocks": report.resumed_blocks,
        "kept_files": report.kept_files,
        "placed": placed,
    })
}

/// A dry run's files that would move, one per line on stdout (names escaped).
#[allow(clippy::print_stdout)]
pub(crate) fn print_planned(report: &TransferReport) {
    for path in &report.planned {
        println!("{}", path.escape_debug());
    }
}
