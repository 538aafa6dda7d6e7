//! `sluice ls` and `sluice stat`: the server's view of a path within its root.

use clap::Args;
use serde_json::json;
use sluice::session::{FileKind, StatInfo};
use sluice::tree::EntryKind;

use crate::connect::{ConnectArgs, Reached, reach};
use crate::exit;
use crate::remote::{Location, parse_location};
use crate::ssh::SshArgs;

/// Arguments of `sluice ls`.
#[derive(Args, Debug)]
pub(crate) struct LsArgs {
    /// `host:path` (`host:` is the served directory itself).
    #[arg(value_name = "HOST:PATH")]
    location: String,
    /// Long format: kind and permissions, size, modification time (UTC), name.
    #[arg(short = 'l')]
    long: bool,
    /// Print one JSON document: {"path", "entries": [{name, kind, size, mtime, mode, target}]}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    ssh: SshArgs,
}

/// Arguments of `sluice stat`.
#[derive(Args, Debug)]
pub(crate) struct StatArgs {
    /// `host:path`.
    #[arg(value_name = "HOST:PATH")]
    location: String,
    /// Print one JSON object: {"path", "kind", "size", "mtime"}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    ssh: SshArgs,
}

/// The host and path of a `host:path` argument; a local path is a usage error.
fn remote(location: &str) -> anyhow::Result<(String, String)> {
    match parse_location(location).map_err(exit::usage)? {
        Location::Remote { host, path } => Ok((host, path)),
        Location::Local(path) => {
            Err(exit::usage(format!("{path}: give a remote path, host:path (host: for the root)")))
        }
    }
}

pub(crate) async fn reach_host(
    connect: &ConnectArgs,
    ssh: &SshArgs,
    host: &str,
) -> anyhow::Result<Reached> {
    let channel = sluice::session::default_channel_config();
    let prefs = crate::config::load()?.prefs(host);
    reach(connect, ssh, host, &prefs, channel, None).await
}

/// Runs `sluice ls`.
#[allow(clippy::print_stdout)]
pub(crate) async fn ls(args: LsArgs) -> anyhow::Result<()> {
    let (host, path) = remote(&args.location)?;
    let reached = reach_host(&args.connect, &args.ssh, &host).await?;
    let entries = reached.client.list(&reached.remote_path(&path)).await;
    reached.close().await;
    let entries = entries?;
    if args.json {
        let entries: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({"name": e.path, "kind": kind_name(e.kind), "size": e.size,
                       "mtime": e.mtime, "mode": e.mode, "target": e.target})
            })
            .collect();
        return write_out(&format!("{}\n", json!({"path": path, "entries": entries})));
    }
    let mut out = String::new();
    for entry in &entries {
        let name = entry.path.escape_debug().to_string();
        let shown = match entry.kind {
            EntryKind::Dir => format!("{name}/"),
            _ => name,
        };
        if !args.long {
            out.push_str(&shown);
            out.push('\n');
            continue;
        }
        let target = entry.target.as_deref().map(|t| format!(" -> {}", t.escape_debug()));
        out.push_str(&format!(
            "{}{} {:>14} {} {shown}{}\n",
            kind_char(entry.kind),
            mode_string(entry.mode),
            entry.size,
            utc(entry.mtime),
            target.unwrap_or_default()
        ));
    }
    write_out(&out)?;
    Ok(())
}

/// Runs `sluice stat`.
#[allow(clippy::print_stdout)]
pub(crate) async fn stat(args: StatArgs) -> anyhow::Result<()> {
    let (host, path) = remote(&args.location)?;
    let reached = reach_host(&args.connect, &args.ssh, &host).await?;
    let asked = reached.remote_path(if path.is_empty() { "." } else { &path });
    let info = reached.client.stat(if asked.is_empty() { "." } else { &asked }).await;
    reached.close().await;
    let StatInfo { size, mtime, kind } = info?;
    let kind = match kind {
        FileKind::File => "file",
        FileKind::Directory => "directory",
        FileKind::Other => "other",
    };
    if args.json {
        println!("{}", json!({"path": path, "kind": kind, "size": size, "mtime": mtime}));
    } else {
        println!("{}: {kind}, {size} bytes, modified {}", path.escape_debug(), utc(mtime));
    }
    Ok(())
}

fn kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::File => "file",
        EntryKind::Dir => "directory",
        EntryKind::Symlink => "link",
    }
}

fn kind_char(kind: EntryKind) -> char {
    match kind {
        EntryKind::File => '-',
        EntryKind::Dir => 'd',
        EntryKind::Symlink => 'l',
    }
}

/// `rwxr-xr-x` of the permission bits.
fn mode_string(mode: u32) -> String {
    (0..9)
        .map(|i| {
            let bit = 1 << (8 - i);
            match (mode & bit != 0, i % 3) {
                (false, _) => '-',
                (true, 0) => 'r',
                (true, 1) => 'w',
                (true, _) => 'x',
            }
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` UTC of seconds since the Unix epoch (the civil calendar from a day
/// count, after Howard Hinnant's `civil_from_days`).
pub(crate) fn utc(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Writes `text` to stdout; a reader that stopped reading (`sluice ls | head`) is no error.
pub(crate) fn write_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(crate::exit::local_io(format!("writing to stdout: {e}")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_the_calendars() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_795_305_600 + 3_723), "2026-11-22 01:02:03");
        assert_eq!(utc(-1), "1969-12-31 23:59:59");
    }

    #[test]
    fn modes_read_like_ls() {
        assert_eq!(mode_string(0o755), "rwxr-xr-x");
        assert_eq!(mode_string(0o640), "rw-r-----");
        assert_eq!(mode_string(0), "---------");
    }
}
