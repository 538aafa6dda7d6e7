//! A third-party transfer's destination (server B): the jobs it runs for its clients. A job
//! reads from the source (server A) as a client would, with A's grant in place of a token and
//! this server's own certificate as its identity, into this server's root for the client's
//! token. It goes on when its client leaves; it is kept in the state directory until it ends,
//! so a restart resumes it (within the grant's life); a client asking for the same job again
//! follows the running one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_proto::cc::CcKind;
use sluice_proto::config::ChannelConfig;
use tokio::sync::{Semaphore, watch};
use tracing::{info, warn};

use super::identity::{Fingerprint, Identity};
use super::job_log::{CANCELLED, Ended, JobTasks, keep_record, kept_records, unix_now};
use super::messages::{
    ErrorCode, GrantClaim, JobDone, JobInfo, JobKind, JobPhase, JobProgress, PullJob,
};
use super::observe::{CopyObserver, PlannedFile};
use super::{Client, ClientConfig, CopyOptions, SessionError, TrustPolicy};
use crate::datapath::Progress;

/// The directory of the state directory where running jobs are kept.
const JOBS_DIR: &str = "jobs";
/// The file of the state directory where ended jobs are kept (`sluice jobs` lists them).
pub(crate) const ENDED_FILE: &str = "ended-jobs.json";
/// Attempts of a job whose source could not be reached or whose connection failed, each
/// resuming what the one before left (the waits between them, in order).
const RETRY_WAITS: [Duration; 3] =
    [Duration::from_secs(2), Duration::from_secs(5), Duration::from_secs(10)];

/// A job as this server keeps it: whose it is, where it writes, and what it reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    /// The index of the client's token in the token file.
    pub(crate) token: usize,
    /// That token's digest (hex): a restart finds the token by it, wherever its line is now (a
    /// record of an older server lacks it: then the index must still be the token's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token_digest: Option<String>,
    /// That token's root here (canonical).
    pub(crate) root: PathBuf,
    /// The client's request.
    pub(crate) pull: PullJob,
}

/// What a job's followers see.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobState {
    /// How far it has come.
    pub(crate) progress: JobProgress,
    /// Its end, once it ended: the report, or the failure's class and message.
    pub(crate) end: Option<Result<JobDone, (ErrorCode, String)>>,
}

/// Which requests are the same job: one client token, source, paths and destination.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct JobKey {
    token: usize,
    source_fingerprint: String,
    paths: Vec<String>,
    dest: String,
}

impl JobKey {
    fn of(record: &JobRecord) -> JobKey {
        JobKey {
            token: record.token,
            source_fingerprint: record.pull.source_fingerprint.clone(),
            paths: record.pull.paths.clone(),
            dest: record.pull.dest.clone(),
        }
    }
}

/// The jobs of one server.
pub(crate) struct Jobs {
    /// Where running jobs are kept (`None`: a one-shot server, which keeps none).
    dir: Option<PathBuf>,
    /// This server's identity, proved to sources.
    identity: Arc<Identity>,
    /// Local settings of the data channels.
    channel: ChannelConfig,
    /// The server's places for transfers: a job takes one, as a client's transfer does.
    transfers: Arc<Semaphore>,
    running: Mutex<HashMap<JobKey, Live>>,
    /// Those that ended lately (`sluice jobs`).
    ended: Ended,
    /// The running jobs' tasks, ended when the server stops ([`Jobs::stop`]).
    tasks: JobTasks,
}

/// A running job as its followers and the listing see it.
struct Live {
    state: watch::Receiver<JobState>,
    /// When it started (Unix seconds).
    started: u64,
    /// The source's address, as the client gave it.
    source: String,
    /// The job's id.
    job: String,
    /// Set to cancel it (`sluice jobs --cancel`).
    cancel: watch::Sender<bool>,
}

/// A job as `sluice jobs` shows it, from its key and what it has come to.
fn info(key: &JobKey, live: &Live, state: &JobState) -> JobInfo {
    let (phase, ended, error) = match &state.end {
        None => (JobPhase::Running, None, None),
        Some(Ok(_)) => (JobPhase::Done, Some(unix_now()), None),
        Some(Err(_)) if *live.cancel.borrow() => (JobPhase::Cancelled, Some(unix_now()), None),
        Some(Err((_, message))) => (JobPhase::Failed, Some(unix_now()), Some(message.clone())),
    };
    let (bytes, files, total) = match &state.end {
        Some(Ok(done)) => (done.bytes, done.files, done.bytes),
        _ => (state.progress.bytes, state.progress.files, state.progress.total),
    };
    JobInfo {
        kind: JobKind::ThirdParty,
        id: live.job.clone(),
        from: live.source.clone(),
        dest: key.dest.clone(),
        phase,
        bytes,
        total,
        files,
        started: live.started,
        ended,
        missing: Vec::new(),
        missing_bytes: 0,
        error,
    }
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jobs").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Jobs {
    /// The jobs of a server with `state_dir` (running ones are kept there); `ended` lists
    /// those that ended (kept there too: [`ENDED_FILE`]).
    pub(crate) fn new(
        state_dir: Option<&Path>,
        identity: Arc<Identity>,
        channel: ChannelConfig,
        transfers: Arc<Semaphore>,
        ended: Ended,
    ) -> Jobs {
        let dir = state_dir.map(|d| d.join(JOBS_DIR));
        let (running, tasks) = (Mutex::default(), JobTasks::default());
        Jobs { dir, identity, channel, transfers, running, ended, tasks }
    }

    /// `token`'s jobs, running and ended lately.
    pub(crate) fn list(&self, token: usize) -> Vec<JobInfo> {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let mine = running.iter().filter(|(key, _)| key.token == token);
        let mut jobs: Vec<JobInfo> =
            mine.map(|(key, live)| info(key, live, &live.state.borrow())).collect();
        // Read under the running ones' lock: a job that ends moves under it.
        jobs.extend(self.ended.of(token));
        drop(running);
        jobs
    }

    /// Cancels `token`'s running job `id`: whether there was one. Its files stay as an
    /// interrupted download leaves them (resumable by the same copy run again).
    pub(crate) fn cancel(&self, token: usize, id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let found = running.iter().find(|(key, live)| key.token == token && live.job == id);
        found.map(|(_, live)| live.cancel.send_replace(true)).is_some()
    }

    /// This server's identity, which it proves as a client (to sources, and to relays as a
    /// collector).
    pub(crate) fn identity(&self) -> Arc<Identity> {
        self.identity.clone()
    }

    /// Checks a client's job before it starts: a source address, a fingerprint, and options
    /// this server can use.
    pub(crate) fn check(pull: &PullJob) -> Result<(SocketAddr, Fingerprint), SessionError> {
        let source: SocketAddr = pull.source.parse().map_err(|_| {
            SessionError::Config(format!(
                "the source {:?} is not an address (ip:port)",
                pull.source
            ))
        })?;
        let fingerprint: Fingerprint = pull
            .source_fingerprint
            .parse()
            .map_err(|e| SessionError::Config(format!("the source's fingerprint: {e}")))?;
        if CcKind::from_name(&pull.spec.cc).is_none() {
            return Err(SessionError::Config(format!("unknown controller {:?}", pull.spec.cc)));
        }
        if pull.paths.is_empty() {
            return Err(SessionError::Config("a job needs at least one path".into()));
        }
        super::copy::check_level(pull.compress)?;
        Ok((source, fingerprint))
    }

    /// Starts `record`'s job, or follows the same job when it runs already (the flag says
    /// which). `limit` is the client token's places for transfers, when it has a limit.
    pub(crate) fn start_or_attach(
        self: &Arc<Self>,
        record: JobRecord,
        limit: Option<Arc<Semaphore>>,
    ) -> Result<(watch::Receiver<JobState>, bool), SessionError> {
        let key = JobKey::of(&record);
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = running.get(&key) {
            info!(job = %record.pull.job, "a client follows a running job");
            return Ok((live.state.clone(), true));
        }
        self.save(&record)?;
        let (tx, rx) = watch::channel(JobState::default());
        let (cancel, cancelled) = watch::channel(false);
        let live = Live {
            state: rx.clone(),
            started: unix_now(),
            source: record.pull.source.clone(),
            job: record.pull.job.clone(),
            cancel,
        };
        running.insert(key.clone(), live);
        drop(running);
        self.tasks.spawn(run(self.clone(), key, record, tx, limit, cancelled));
        Ok((rx, false))
    }

    /// Ends every running job where it is, as the server's process ending would: their records
    /// stay in the state directory and their files as an interrupted copy leaves them, for the
    /// next run of the server to resume. For a server that stops inside a process that goes on
    /// (tests, the web app's embedded server): before, its jobs ran on after it, and the next
    /// server's resumed job found its own files claimed by them.
    pub(crate) fn stop(&self) {
        self.tasks.abort_all();
        self.running.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Starts the jobs a previous run of the server left unfinished. `token` finds a record's
    /// token, by its digest when the record has one (else by its index), while it still stands
    /// with the write right: its index now, its root and its limit.
    pub(crate) fn resume_saved(
        self: &Arc<Self>,
        token: impl Fn(Option<[u8; 32]>, usize) -> Option<(usize, PathBuf, Option<Arc<Semaphore>>)>,
    ) {
        let Some(dir) = &self.dir else { return };
        for (path, mut record) in kept_records::<JobRecord>(dir, "job") {
            let digest = record.token_digest.as_deref().map(sluice_session::relay::from_hex::<32>);
            let found = match digest {
                // A digest that does not parse names no token.
                Some(None) => None,
                Some(Some(digest)) => token(Some(digest), record.token),
                None => token(None, record.token),
            };
            match found {
                Some((index, root, limit)) if root == record.root => {
                    info!(job = %record.pull.job, "resuming a job after a restart");
                    record.token = index;
                    if let Err(e) = self.start_or_attach(record, limit) {
                        warn!(error = %e, "could not resume a job");
                    }
                }
                _ => {
                    warn!(job = %record.pull.job, "a job's token is gone or changed: dropped");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }

    fn record_path(&self, job: &str) -> Option<PathBuf> {
        // The job id was checked by the source's grant; a record's name is its hash anyway, so
        // no client text becomes a path.
        let name = blake3::hash(job.as_bytes()).to_hex();
        self.dir.as_ref().map(|d| d.join(format!("{}.json", &name[..32])))
    }

    fn save(&self, record: &JobRecord) -> Result<(), SessionError> {
        match self.record_path(&record.pull.job) {
            Some(path) => keep_record(&path, record),
            None => Ok(()),
        }
    }

    /// Takes an ended job off the running ones (into the ended ones, with its end) and its
    /// record out of the state directory.
    fn forget(&self, key: &JobKey, job: &str, end: &JobState) {
        // Off the running ones and into the ended ones in one step, so a listing shows it once.
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = running.remove(key) {
            self.ended.push(key.token, info(key, &live, end));
        }
        drop(running);
        if let Some(path) = self.record_path(job) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Runs a job to its end: attempts, each resuming what the last left, while the source cannot
/// be reached or the connection fails.
async fn run(
    jobs: Arc<Jobs>,
    key: JobKey,
    record: JobRecord,
    state: watch::Sender<JobState>,
    limit: Option<Arc<Semaphore>>,
    mut cancelled: watch::Receiver<bool>,
) {
    let job = record.pull.job.clone();
    info!(%job, source = %record.pull.source, paths = ?record.pull.paths, "job started");
    let mut waits = RETRY_WAITS.iter();
    let attempts = async {
        loop {
            let attempt = async {
                let _token = match &limit {
                    Some(places) => Some(places.clone().acquire_owned().await),
                    None => None,
                };
                let _server = jobs.transfers.clone().acquire_owned().await;
                attempt(&jobs, &record, &state).await
            };
            match attempt.await {
                Err(SessionError::Network(why)) => match waits.next() {
                    Some(wait) => {
                        warn!(%job, why, wait_s = wait.as_secs(), "job attempt failed: trying again");
                        tokio::time::sleep(*wait).await;
                    }
                    None => break Err(SessionError::Network(why)),
                },
                other => break other,
            }
        }
    };
    let outcome = tokio::select! {
        outcome = attempts => outcome,
        _ = cancelled.wait_for(|c| *c) => Err(SessionError::Refused(CANCELLED.into())),
    };
    let end = match outcome {
        Ok(done) => {
            info!(%job, files = done.files, bytes = done.bytes, "job done and verified");
            Ok(done)
        }
        Err(err) => {
            warn!(%job, error = %err, "job failed");
            Err((err.code(), side_of(&err, &record.pull.source)))
        }
    };
    state.send_modify(|s| s.end = Some(end));
    jobs.forget(&key, &job, &state.borrow());
}

/// One attempt: connect to the source (pinning the fingerprint the client gave, proving this
/// server's certificate, presenting the grant) and download into the job's destination.
async fn attempt(
    jobs: &Jobs,
    record: &JobRecord,
    state: &watch::Sender<JobState>,
) -> Result<JobDone, SessionError> {
    let started = Instant::now();
    let pull = &record.pull;
    let (source, fingerprint) = Jobs::check(pull)?;
    // The pin is the client's, never a file's: an empty known-hosts file is read, and
    // nothing is written to it (a pinned host that the file does not know is `Pinned`).
    let mut config =
        ClientConfig::new(source, &pull.source, "", "/dev/null", TrustPolicy::Pinned(fingerprint));
    config.channel = channel_of(&jobs.channel, pull)?;
    config.channels = (pull.spec.max_channels > 0).then_some(pull.spec.max_channels);
    config.identity = Some(jobs.identity.clone());
    config.grant = Some(GrantClaim { grant: pull.grant.clone(), job: pull.job.clone() });
    // The request follows the grant in the same round trip; a refused grant is its error.
    let client = Client::start(config).await.map_err(|e| match e {
        SessionError::Network(m) => {
            SessionError::Network(format!("could not reach the source: {m}"))
        }
        other => other,
    })?;
    let dest =
        super::access::resolve(&record.root, if pull.dest.is_empty() { "." } else { &pull.dest })?;
    let options = CopyOptions {
        recursive: pull.recursive,
        links: pull.links,
        overwrite: pull.overwrite,
        checksum: pull.checksum,
        preserve: pull.preserve,
        dry_run: pull.dry_run,
        compress: pull.compress,
    };
    let observer = Box::new(JobObserver(state.clone()));
    let report = client
        .download_confined(&pull.paths, &dest, &options, Some(record.root.clone()), observer)
        .await;
    client.close().await;
    let report = report?;
    Ok(JobDone {
        job: pull.job.clone(),
        files: report.files,
        bytes: report.bytes,
        resumed: report.resumed,
        replaced: report.replaced,
        kept: report.kept,
        blake3: report.blake3,
        planned: report.planned,
        millis: started.elapsed().as_millis() as u64,
        attached: false,
    })
}

/// The data channels' settings of a job: this server's, with the client's controller, rates
/// and packet size.
fn channel_of(base: &ChannelConfig, pull: &PullJob) -> Result<ChannelConfig, SessionError> {
    let mut channel = base.clone();
    channel.cc = CcKind::from_name(&pull.spec.cc)
        .ok_or_else(|| SessionError::Config(format!("unknown controller {:?}", pull.spec.cc)))?;
    channel.rate_bps = pull.spec.rate_bps;
    channel.min_rate_bps = pull.spec.min_rate_bps;
    if pull.spec.packet_size > 0 {
        channel.packet_size = pull.spec.packet_size as usize;
    }
    channel.validate().map_err(|e| SessionError::Config(e.to_string()))?;
    Ok(channel)
}

/// A job's failure as its client reads it: which side failed when that is known, then why.
fn side_of(err: &SessionError, source: &str) -> String {
    match err {
        SessionError::Io { .. } => format!("writing here failed: {err}"),
        SessionError::HostKey(_) => {
            format!("the source {source} did not prove the fingerprint the client pinned: {err}")
        }
        SessionError::PeerIo { message, .. } => format!("the source {source} failed: {message}"),
        other => format!("the job reading from {source}: {}", other.detail()),
    }
}

/// Publishes a job's progress to its followers.
struct JobObserver(watch::Sender<JobState>);

impl CopyObserver for JobObserver {
    fn planned(&mut self, files: &[PlannedFile]) {
        let total = files.iter().map(|f| f.size).sum();
        self.0.send_modify(|s| {
            s.progress.files = files.len() as u64;
            s.progress.total = total;
        });
    }

    fn progress(&mut self, progress: Progress) {
        self.0.send_modify(|s| {
            s.progress.bytes = progress.bytes;
            s.progress.total = s.progress.total.max(progress.total);
        });
    }
}
