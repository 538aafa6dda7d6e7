//! What `sluice jobs` shows: the jobs a server runs (third-party pulls, relayed uploads'
//! collections) and those that ended lately, for one token. Each kind of job lists its own
//! running ones; this module keeps the ended ones (in the state directory too, so a restart
//! still lists them) and puts a listing together. It also holds what both kinds share to
//! outlive a server: their records in the state directory ([`keep_record`], [`kept_records`])
//! and their tasks, which a stopping server ends ([`JobTasks`]).

use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::task::AbortHandle;
use tracing::warn;

use super::SessionError;
use super::identity::write_private;

use sluice_session::messages::{Answer, JobInfo, JobPhase, MAX_JOBS_LISTED, MAX_MESSAGE_BYTES};
use sluice_session::relay::to_hex;

/// How many ended jobs a server keeps for its listing, over all tokens.
const KEEP_ENDED: usize = 256;
/// How long an ended job stays listed.
const KEEP_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// Writes a running job's `record` as JSON to `path` (in a directory of such records, made if
/// need be), owner-only: what the next run of the server goes on from. Does file I/O.
pub(crate) fn keep_record<T: Serialize>(path: &Path, record: &T) -> Result<(), SessionError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| SessionError::io(format!("creating {}", dir.display()), e))?;
    }
    let json = serde_json::to_vec(record).map_err(|e| SessionError::Protocol(e.to_string()))?;
    write_private(path, &json)
}

/// The records ([`keep_record`]) in `dir`, each with its path; one that cannot be read is said
/// (as a `what` record) and removed. Does file I/O.
pub(crate) fn kept_records<T: DeserializeOwned>(dir: &Path, what: &str) -> Vec<(PathBuf, T)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        match std::fs::read(&path).map(|b| serde_json::from_slice::<T>(&b)) {
            Ok(Ok(record)) => out.push((path, record)),
            _ => {
                warn!(file = %path.display(), "an unreadable {what} record: removed");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    out
}

/// The tasks of a server's running jobs of one kind, ended together when the server stops.
#[derive(Debug, Default)]
pub(crate) struct JobTasks(Mutex<Vec<AbortHandle>>);

impl JobTasks {
    /// Runs `job` as a task of its own (those that ended are forgotten).
    pub(crate) fn spawn(&self, job: impl Future<Output = ()> + Send + 'static) {
        let task = tokio::spawn(job);
        let mut tasks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task.abort_handle());
    }

    /// Ends every task where it is, as the server's process ending would.
    pub(crate) fn abort_all(&self) {
        for task in self.0.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            task.abort();
        }
    }
}

/// A cancelled job's error, as its followers read it.
pub(crate) const CANCELLED: &str = "the job was cancelled (sluice jobs --cancel)";

/// Seconds since the Unix epoch, by this machine's clock.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The jobs that ended lately (the newest last), each with its token's index.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    list: Mutex<VecDeque<(usize, JobInfo)>>,
    /// Where they are kept across restarts (`None`: in memory only).
    file: Option<PathBuf>,
    /// The tokens' digests (hex), by index: the file names a job's token by its digest, so a
    /// token file reordered or cut between two starts does not show a job to another token.
    digests: Vec<String>,
}

/// One ended job as its file keeps it: its token's digest (hex) and the job.
#[derive(Serialize, Deserialize)]
struct Kept {
    token: String,
    job: JobInfo,
}

impl Ended {
    /// The ended jobs kept in `file` (JSON, owner-only), which every later end rewrites: those
    /// of the last [`KEEP_FOR`] that it holds now, of the tokens whose `digests` (by index, as
    /// the token file has them now) it names. A file that cannot be read is said and left to be
    /// replaced: the listing starts empty.
    pub(crate) fn kept_in(file: PathBuf, digests: &[[u8; 32]]) -> Ended {
        let digests: Vec<String> = digests.iter().map(|d| to_hex(d)).collect();
        let index = |token: &str| digests.iter().position(|d| d == token);
        let since = unix_now().saturating_sub(KEEP_FOR.as_secs());
        let mut list = VecDeque::new();
        match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<Vec<Kept>>(&bytes) {
                Ok(kept) => list.extend(
                    kept.into_iter()
                        .filter(|k| k.job.ended.unwrap_or(0) >= since)
                        .filter_map(|k| Some((index(&k.token)?, k.job))),
                ),
                Err(e) => {
                    warn!(file = %file.display(), "the ended jobs' file is not readable: {e}")
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(file = %file.display(), "cannot read the ended jobs' file: {e}"),
        }
        while list.len() > KEEP_ENDED {
            list.pop_front();
        }
        Ended { list: Mutex::new(list), file: Some(file), digests }
    }

    /// Keeps `info` (which has ended) for `token`'s listings; the oldest go past
    /// [`KEEP_ENDED`]. With a file, it is rewritten (a failure is said; the listing in memory
    /// goes on).
    pub(crate) fn push(&self, token: usize, info: JobInfo) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() == KEEP_ENDED {
            list.pop_front();
        }
        list.push_back((token, info));
        let Some(file) = &self.file else { return };
        let kept: Vec<Kept> = list
            .iter()
            .filter_map(|(token, job)| {
                Some(Kept { token: self.digests.get(*token)?.clone(), job: job.clone() })
            })
            .collect();
        let written = serde_json::to_vec(&kept).map_err(|e| e.to_string()).and_then(|bytes| {
            super::identity::write_private(file, &bytes).map_err(|e| e.to_string())
        });
        if let Err(e) = written {
            warn!(file = %file.display(), "the ended jobs could not be kept: {e}");
        }
    }

    /// `token`'s ended jobs of the last [`KEEP_FOR`], the newest first.
    pub(crate) fn of(&self, token: usize) -> Vec<JobInfo> {
        let since = unix_now().saturating_sub(KEEP_FOR.as_secs());
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let recent =
            list.iter().rev().filter(|(t, i)| *t == token && i.ended.unwrap_or(0) >= since);
        recent.map(|(_, info)| info.clone()).collect()
    }
}

/// The `Jobs` answer of `jobs`: the running and stalled ones first, then the ended ones, each
/// group newest first; at most [`MAX_JOBS_LISTED`], and the oldest ended ones left off until
/// the answer fits in one frame.
pub(crate) fn answer(mut jobs: Vec<JobInfo>) -> Answer {
    let rank = |info: &JobInfo| match info.phase {
        JobPhase::Running | JobPhase::Stalled => 0,
        JobPhase::Done | JobPhase::Failed | JobPhase::Cancelled => 1,
    };
    jobs.sort_by(|a, b| {
        let newest = |i: &JobInfo| std::cmp::Reverse(i.ended.unwrap_or(i.started).max(i.started));
        rank(a).cmp(&rank(b)).then_with(|| newest(a).cmp(&newest(b)))
    });
    jobs.truncate(MAX_JOBS_LISTED);
    let mut answer = Answer::Jobs { jobs };
    while serde_json::to_vec(&answer).is_ok_and(|b| b.len() > MAX_MESSAGE_BYTES) {
        let Answer::Jobs { jobs } = &mut answer else { break };
        if jobs.is_empty() {
            break;
        }
        jobs.truncate(jobs.len() * 3 / 4);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_session::messages::JobKind;

    fn job(id: &str, phase: JobPhase, started: u64, ended: Option<u64>) -> JobInfo {
        JobInfo {
            kind: JobKind::ThirdParty,
            id: id.into(),
            from: "198.18.0.1:7000".into(),
            dest: "in".into(),
            phase,
            bytes: 0,
            total: 0,
            files: 0,
            started,
            ended,
            missing: Vec::new(),
            missing_bytes: 0,
            error: None,
        }
    }

    fn ids(answer: Answer) -> Vec<String> {
        match answer {
            Answer::Jobs { jobs } => jobs.into_iter().map(|j| j.id).collect(),
            other => panic!("not a listing: {other:?}"),
        }
    }

    #[test]
    fn a_listing_puts_live_jobs_first_and_the_newest_first_in_each_group() {
        let now = unix_now();
        let jobs = vec![
            job("done-old", JobPhase::Done, now - 100, Some(now - 90)),
            job("run-old", JobPhase::Running, now - 50, None),
            job("failed-new", JobPhase::Failed, now - 20, Some(now - 5)),
            job("stalled", JobPhase::Stalled, now - 40, Some(now - 1)),
            job("run-new", JobPhase::Running, now - 10, None),
        ];
        assert_eq!(ids(answer(jobs)), ["stalled", "run-new", "run-old", "failed-new", "done-old"]);
    }

    #[test]
    fn a_listing_too_large_for_a_frame_leaves_off_the_oldest() {
        let now = unix_now();
        let mut jobs: Vec<JobInfo> = (0..MAX_JOBS_LISTED as u64 + 50)
            .map(|n| {
                let mut j =
                    job(&format!("{n}"), JobPhase::Done, now - 1000 + n, Some(now - 1000 + n));
                j.dest = "d".repeat(8000);
                j
            })
            .collect();
        jobs.push(job("live", JobPhase::Running, now - 2000, None));
        let answer = answer(jobs);
        let frame = serde_json::to_vec(&answer).unwrap().len();
        assert!(frame <= MAX_MESSAGE_BYTES, "{frame} bytes");
        let listed = ids(answer);
        assert!(listed.len() < MAX_JOBS_LISTED, "{} listed", listed.len());
        assert_eq!(listed[0], "live");
        // The newest ended one is kept; the oldest went.
        assert_eq!(listed[1], format!("{}", MAX_JOBS_LISTED as u64 + 49));
        assert!(!listed.contains(&"0".to_string()));
    }

    #[test]
    fn ended_jobs_kept_in_a_file_are_listed_again_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ended-jobs");
        let now = unix_now();
        let (t0, t1) = ([7u8; 32], [9u8; 32]);
        let ended = Ended::kept_in(file.clone(), &[t0, t1]);
        ended.push(0, job("a", JobPhase::Done, now - 20, Some(now - 10)));
        ended.push(1, job("b", JobPhase::Failed, now - 20, Some(now - 5)));
        ended.push(0, job("stale", JobPhase::Done, 0, Some(now - KEEP_FOR.as_secs() - 10)));
        ended.push(0, job("c", JobPhase::Cancelled, now - 3, Some(now - 1)));
        drop(ended);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "owner-only");
        // A restart: the same jobs for the same tokens, the stale one gone.
        let again = Ended::kept_in(file.clone(), &[t0, t1]);
        let ids = |ended: &Ended, t| ended.of(t).into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(ids(&again, 0), ["c", "a"]);
        assert_eq!(ids(&again, 1), ["b"]);
        assert_eq!(again.of(1)[0], job("b", JobPhase::Failed, now - 20, Some(now - 5)));
        // The token file reordered, and a token gone, between two starts: each job stays with
        // its own token, and a gone token's jobs are shown to no one.
        let reordered = Ended::kept_in(file.clone(), &[t1, [1u8; 32]]);
        assert_eq!(ids(&reordered, 0), ["b"]);
        assert!(reordered.of(1).is_empty());
        // A file that is not ours to read: said, and the listing starts empty.
        std::fs::write(&file, b"not json").unwrap();
        let broken = Ended::kept_in(file.clone(), &[t0]);
        assert!(broken.of(0).is_empty());
        broken.push(0, job("d", JobPhase::Done, now, Some(now)));
        assert_eq!(
            Ended::kept_in(file, &[t0]).of(0).len(),
            1,
            "and it is replaced at the next end"
        );
    }

    #[test]
    fn ended_jobs_are_kept_per_token_and_the_oldest_go() {
        let ended = Ended::default();
        let now = unix_now();
        for n in 0..KEEP_ENDED as u64 + 3 {
            ended.push((n % 2) as usize, job(&format!("{n}"), JobPhase::Done, now, Some(now)));
        }
        ended.push(0, job("stale", JobPhase::Done, 0, Some(now - KEEP_FOR.as_secs() - 10)));
        let zero = ended.of(0);
        assert!(zero.iter().all(|j| j.id.parse::<u64>().is_ok_and(|n| n % 2 == 0)));
        assert_eq!(zero[0].id, format!("{}", KEEP_ENDED as u64 + 2));
        assert_eq!(zero.len() + ended.of(1).len(), KEEP_ENDED - 1, "one slot holds the stale job");
        assert!(!ended.of(0).iter().any(|j| j.id == "stale"));
        assert!(!ended.of(0).iter().any(|j| j.id == "2"), "the oldest were pushed out");
        assert!(!ended.of(1).iter().any(|j| j.id == "3"), "the oldest were pushed out");
    }
}
