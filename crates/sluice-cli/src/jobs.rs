//! `sluice jobs`: what a server does for this token without a client (third-party copies it
//! pulls, relayed uploads it collects), and what such jobs came to lately.

use clap::Args;
use indicatif::BinaryBytes;
use serde_json::json;
use sluice::session::{JobInfo, JobKind, JobPhase};

use crate::browse::{reach_host, utc, write_out};
use crate::connect::ConnectArgs;
use crate::exit;
use crate::remote::{Location, parse_location};
use crate::ssh::SshArgs;

/// Arguments of `sluice jobs`.
#[derive(Args, Debug)]
pub(crate) struct JobsArgs {
    /// The server (`host` or `host:`).
    #[arg(value_name = "HOST")]
    server: String,
    /// Print one JSON document: {"jobs": [{kind, id, from, dest, phase, bytes, total, files,
    /// started, ended, missing, missing_bytes, error}]} (times in Unix seconds, the server's
    /// clock).
    #[arg(long)]
    json: bool,
    /// Cancel this job (its id as listed, running or stalled) and show it once it ended. A
    /// third-party copy's files stay as an interrupted download leaves them (the same copy
    /// run again resumes them); a relayed upload's collected blocks are deleted.
    #[arg(long, value_name = "ID")]
    cancel: Option<String>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    ssh: SshArgs,
}

/// The host of `host` or `host:`; a path after it is a usage error.
fn host_of(server: &str) -> anyhow::Result<String> {
    let spec = match server {
        s if s.starts_with('[') && s.ends_with(']') => format!("{s}:"),
        // A bare IPv6 address: no path can follow it.
        s if !s.starts_with('[') && s.matches(':').count() > 1 => format!("[{s}]:"),
        s if !s.contains(':') => format!("{s}:"),
        s => s.to_owned(),
    };
    match parse_location(&spec).map_err(exit::usage)? {
        Location::Remote { host, path } if path.is_empty() => Ok(host),
        Location::Remote { host, path } => Err(exit::usage(format!(
            "{server}: give the server alone ({host}:), not a path ({path})"
        ))),
        Location::Local(_) => Err(exit::usage(format!("{server}: give a server (host or host:)"))),
    }
}

/// Runs `sluice jobs`.
pub(crate) async fn run(args: JobsArgs) -> anyhow::Result<()> {
    let host = host_of(&args.server)?;
    let reached = reach_host(&args.connect, &args.ssh, &host).await?;
    let jobs = async {
        let listed = reached.client.jobs().await?;
        match &args.cancel {
            Some(prefix) => {
                let id = unique(&listed, prefix)?;
                Ok(reached.client.cancel_job(&id).await?)
            }
            None => anyhow::Ok(listed),
        }
    }
    .await;
    reached.close().await;
    let jobs: Vec<JobInfo> = jobs?;
    if args.json {
        return write_out(&format!("{}\n", json!({ "jobs": jobs })));
    }
    if args.cancel.is_some() && jobs.iter().any(|j| j.phase == JobPhase::Running) {
        crate::show::say("sluice: the job was asked to cancel and has not ended yet");
    }
    write_out(&table(&host, &jobs))
}

/// The id of the one job that `prefix` begins (at least 4 characters; the table shows 16).
fn unique(jobs: &[JobInfo], prefix: &str) -> anyhow::Result<String> {
    if prefix.chars().count() < 4 {
        return Err(exit::usage(format!(
            "--cancel {prefix}: give at least 4 characters of the id"
        )));
    }
    let live = |j: &&JobInfo| matches!(j.phase, JobPhase::Running | JobPhase::Stalled);
    let matching: Vec<&JobInfo> =
        jobs.iter().filter(live).filter(|j| j.id.starts_with(prefix)).collect();
    match matching.as_slice() {
        [one] => Ok(one.id.clone()),
        [] => Err(anyhow::Error::new(sluice::session::SessionError::NotFound(format!(
            "no running or stalled job {prefix} of this token (sluice jobs lists them)"
        )))),
        _ => Err(exit::usage(format!(
            "--cancel {prefix}: {} jobs begin so; give more of the id",
            matching.len()
        ))),
    }
}

/// The listing for a person: a line per job, and beneath a stalled or failed one why, and
/// what to do.
fn table(host: &str, jobs: &[JobInfo]) -> String {
    if jobs.is_empty() {
        return format!("no jobs of this token on {}\n", host.escape_debug());
    }
    let mut out = format!(
        "{:<16} {:<11} {:<9} {:>32}  {:<19}  DEST <- FROM\n",
        "ID", "KIND", "PHASE", "PROGRESS", "STARTED (UTC)"
    );
    for job in jobs {
        let id: String = job.id.chars().take(16).collect();
        let kind = match job.kind {
            JobKind::ThirdParty => "third-party",
            JobKind::Relayed => "relayed",
        };
        let phase = match job.phase {
            JobPhase::Running => "running",
            JobPhase::Stalled => "stalled",
            JobPhase::Done => "done",
            JobPhase::Failed => "failed",
            JobPhase::Cancelled => "cancelled",
        };
        out.push_str(&format!(
            "{:<16} {kind:<11} {phase:<9} {:>32}  {:<19}  {} <- {}\n",
            id.escape_debug(),
            progress(job),
            utc(job.started as i64),
            if job.dest.is_empty() { "." } else { &job.dest }.escape_debug(),
            job.from.escape_debug(),
        ));
        if job.phase == JobPhase::Stalled {
            let ranges: Vec<String> =
                job.missing.iter().map(|[a, b]| format!("{a}..{b}")).collect();
            out.push_str(&format!(
                "    missing {} (bytes {}{}): run the same copy again at the sender; it moves \
                 only these\n",
                BinaryBytes(job.missing_bytes),
                ranges.join(", "),
                if ranges.len() < job.missing.len() || job.missing_bytes > covered(job) {
                    " and more"
                } else {
                    ""
                },
            ));
        }
        if let Some(error) = &job.error {
            out.push_str(&format!("    {}\n", error.escape_debug()));
        }
    }
    out
}

/// Bytes the listed missing ranges cover.
fn covered(job: &JobInfo) -> u64 {
    job.missing.iter().map(|[a, b]| b - a).sum()
}

/// `1.50 GiB / 4.00 GiB (37 %)`, or the bytes alone while the total is not known.
fn progress(job: &JobInfo) -> String {
    if job.total == 0 {
        return format!("{}", BinaryBytes(job.bytes));
    }
    let percent = job.bytes as f64 * 100.0 / job.total as f64;
    format!("{} / {} ({percent:.0} %)", BinaryBytes(job.bytes), BinaryBytes(job.total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(phase: JobPhase) -> JobInfo {
        JobInfo {
            kind: JobKind::Relayed,
            id: "0123456789abcdef0123456789abcdef".into(),
            from: "198.18.0.2:7000, 198.18.0.3:7000".into(),
            dest: "in/<b>\nx".into(),
            phase,
            bytes: 3 << 30,
            total: 4 << 30,
            files: 1,
            started: 1_795_305_600,
            ended: Some(1_795_305_700),
            missing: vec![[0, 4 << 20], [8 << 20, 12 << 20]],
            missing_bytes: 1 << 30,
            error: Some("the sender left and 256 blocks are nowhere to collect".into()),
        }
    }

    #[test]
    fn servers_are_named_alone() {
        assert_eq!(host_of("dtn").unwrap(), "dtn");
        assert_eq!(host_of("dtn:").unwrap(), "dtn");
        assert_eq!(host_of("198.18.0.1").unwrap(), "198.18.0.1");
        assert_eq!(host_of("[::1]:").unwrap(), "::1");
        assert_eq!(host_of("::1").unwrap(), "::1");
        assert_eq!(host_of("[::1]").unwrap(), "::1");
        let err = host_of("dtn:data/x").unwrap_err().to_string();
        assert!(err.contains("not a path"), "{err}");
        assert!(host_of("./dtn").is_err());
    }

    #[test]
    fn a_stalled_job_says_what_is_missing_and_what_to_do() {
        let text = table("dtn", &[job(JobPhase::Stalled)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[1].starts_with("0123456789abcdef relayed     stalled  "), "{text}");
        assert!(lines[1].contains("3.00 GiB / 4.00 GiB (75 %)"), "{text}");
        assert!(lines[1].contains("2026-11-22 00:00:00"), "{text}");
        // A name is shown as text: its newline escaped, never a second line.
        assert!(lines[1].contains("in/<b>\\nx <- 198.18.0.2:7000, 198.18.0.3:7000"), "{text}");
        assert!(
            lines[2].contains("missing 1.00 GiB (bytes 0..4194304, 8388608..12582912 and more)")
        );
        assert!(lines[2].contains("run the same copy again"), "{text}");
        assert!(lines[3].contains("nowhere to collect"), "{text}");
    }

    #[test]
    fn a_cancel_names_one_live_job_by_a_prefix_of_its_id() {
        let mut other = job(JobPhase::Running);
        other.id = "0123456789abcdefffff".into();
        let mut ended = job(JobPhase::Done);
        ended.id = "99990000".into();
        let jobs = [job(JobPhase::Stalled), other, ended];
        assert_eq!(unique(&jobs, "0123456789abcdef0").unwrap(), jobs[0].id);
        assert_eq!(unique(&jobs, "0123456789abcdeff").unwrap(), "0123456789abcdefffff");
        let err = unique(&jobs, "0123").unwrap_err().to_string();
        assert!(err.contains("2 jobs begin so"), "{err}");
        let err = unique(&jobs, "9999").unwrap_err().to_string();
        assert!(err.contains("no running or stalled job 9999"), "{err}");
        assert!(unique(&jobs, "012").unwrap_err().to_string().contains("at least 4"));
    }

    #[test]
    fn running_and_empty_listings() {
        let mut running = job(JobPhase::Running);
        (running.error, running.missing, running.total) = (None, Vec::new(), 0);
        let text = table("dtn", &[running]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("running"), "{text}");
        assert!(text.contains("3.00 GiB "), "{text}");
        assert_eq!(table("dtn", &[]), "no jobs of this token on dtn\n");
    }
}
