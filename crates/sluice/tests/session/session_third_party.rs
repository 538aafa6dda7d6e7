//! Third-party copies on loopback (issue 27, `docs/third-party.md`): a client with a session to
//! server A and one to server B has B read from A with A's grant. The file and tree arrive
//! intact; every misuse the issue lists is refused, each by the check meant for it; the job
//! goes on when its client goes away, and the same request follows it.

#![allow(clippy::print_stdout)] // tests print their seeds

use crate::common;

use std::time::Duration;

use common::{TOKEN, TestServer, pattern, write_private};
use sluice::session::between::{DataSettings, Side, copy_between};
use sluice::session::messages::{JobDone, JobKind, JobPhase, PullJob};
use sluice::session::{
    Client, CopyOptions, SessionError, ThirdParty, ThirdPartyConfig, default_channel_config,
};

/// A second token, of the same rights.
const OTHER: &str = "other-token-9876543210";

/// What these tests copy with: the defaults (a refused overwrite).
fn options() -> CopyOptions {
    CopyOptions::default()
}

async fn copy(
    a: &Client,
    b: &Client,
    sources: &[&str],
    dest: &str,
    options: &CopyOptions,
) -> Result<JobDone, (Side, SessionError)> {
    let sources: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    let channel = default_channel_config();
    let data = DataSettings { channel: &channel, channels: Some(2) };
    copy_between(a, b, &sources, dest, options, data, |_| {}).await
}

/// A pull of `paths` from A into `dest` with `grant` for `job`, as a client would ask B.
fn pull(a: &TestServer, grant: &str, job: &str, paths: &[&str], dest: &str) -> PullJob {
    // What a client proposes for two channels with the default settings.
    let spec = sluice_session::negotiate::Negotiated::proposal(&default_channel_config(), 2);
    PullJob {
        source: a.addr.to_string(),
        source_fingerprint: a.fingerprint.to_string(),
        grant: grant.to_owned(),
        job: job.to_owned(),
        paths: paths.iter().map(|p| p.to_string()).collect(),
        dest: dest.to_owned(),
        recursive: true,
        links: Default::default(),
        overwrite: Default::default(),
        checksum: false,
        preserve: false,
        compress: None,
        dry_run: false,
        spec,
    }
}

fn refused_with<T: std::fmt::Debug>(result: Result<T, SessionError>, words: &str) -> String {
    let err = result.expect_err("the misuse was refused");
    let text = err.to_string();
    assert!(text.contains(words), "expected {words:?} in: {text}");
    text
}

#[tokio::test]
async fn a_file_and_a_tree_go_from_a_to_b_and_the_grant_ends_with_its_job() {
    let seed = 27u8;
    println!("seed {seed}");
    let a = TestServer::start().await;
    let b = TestServer::start().await;
    let data = pattern(3 << 20, seed);
    std::fs::write(a.root().join("big.bin"), &data).unwrap();
    std::fs::create_dir_all(a.root().join("tree/sub")).unwrap();
    for i in 0..20u8 {
        std::fs::write(a.root().join(format!("tree/sub/f{i}")), pattern(1000 + i as usize, i))
            .unwrap();
    }
    let (ca, cb) = (a.client().await, b.client().await);
    let done = copy(&ca, &cb, &["big.bin"], "copy.bin", &options()).await.unwrap();
    assert_eq!((done.files, done.bytes, done.attached), (1, data.len() as u64, false));
    assert_eq!(std::fs::read(b.root().join("copy.bin")).unwrap(), data);
    assert_eq!(done.blake3.as_deref(), Some(blake3::hash(&data).to_hex().as_str()));

    let tree = CopyOptions { recursive: true, ..options() };
    let done = copy(&ca, &cb, &["tree"], ".", &tree).await.unwrap();
    assert_eq!(done.files, 20);
    for i in 0..20u8 {
        let got = std::fs::read(b.root().join(format!("tree/sub/f{i}"))).unwrap();
        assert_eq!(got, pattern(1000 + i as usize, i));
    }
    // The data went from A to B: A sent it and B's client (this end) received nothing.
    assert!(
        a.metrics.render().contains("sluice_transfers_total{direction=\"get\"} 2"),
        "{}",
        a.metrics.render()
    );

    // The grant of a job that ended reads nothing more (a second job with it is refused).
    let granted = ca.grant(&b.fingerprint, &["big.bin".to_owned()]).await.unwrap();
    let first = cb.pull(pull(&a, &granted.grant, &granted.job, &["big.bin"], "again.bin"), |_| {});
    first.await.unwrap();
    let again = cb.pull(pull(&a, &granted.grant, &granted.job, &["big.bin"], "third.bin"), |_| {});
    refused_with(again.await, "has ended");
    assert!(!b.root().join("third.bin").exists());
    for s in [a, b] {
        s.stop().await;
    }
}

#[tokio::test]
async fn each_misuse_of_a_grant_is_refused_by_its_own_check() {
    let a = TestServer::start().await;
    let b = TestServer::start().await;
    std::fs::create_dir_all(a.root().join("data/run7")).unwrap();
    std::fs::write(a.root().join("data/run7/x"), b"seven").unwrap();
    std::fs::write(a.root().join("secret"), b"not granted").unwrap();
    let (ca, cb) = (a.client().await, b.client().await);
    let granted = ca.grant(&b.fingerprint, &["data/run7".to_owned()]).await.unwrap();

    // Another job with the grant.
    let other_job = pull(&a, &granted.grant, "another-job", &["data/run7"], "o1");
    refused_with(cb.pull(other_job, |_| {}).await, "job");
    // Another path than the grant names.
    let other_path = pull(&a, &granted.grant, &granted.job, &["secret"], "o2");
    refused_with(cb.pull(other_path, |_| {}).await, "secret");
    // An altered grant.
    let mut altered = granted.grant.clone();
    altered.pop();
    altered.push(if granted.grant.ends_with('A') { 'B' } else { 'A' });
    refused_with(
        cb.pull(pull(&a, &altered, &granted.job, &["data/run7"], "o3"), |_| {}).await,
        "grant",
    );
    // Beyond the token's root, and a path that climbs.
    for (bad, why) in [("../etc", "'..'"), ("/etc", "/etc")] {
        let err = ca.grant(&b.fingerprint, &[bad.to_owned()]).await.unwrap_err();
        assert!(err.to_string().contains(why), "grant of {bad:?}: {err}");
    }
    // A server with another fingerprint presents it: a third server C, to which the client
    // hands the grant made for B.
    let c = TestServer::start().await;
    let cc = c.client().await;
    let stolen = pull(&a, &granted.grant, &granted.job, &["data/run7"], "o4");
    let text = refused_with(cc.pull(stolen, |_| {}).await, "only that server");
    assert!(text.contains(b.fingerprint.as_str()), "{text}");
    assert!(!c.root().join("o4").exists());
    for name in ["o1", "o2", "o3"] {
        assert!(!b.root().join(name).exists(), "{name} was written");
    }
    // The grant itself still works for its job and path.
    let good = pull(&a, &granted.grant, &granted.job, &["data/run7"], "good");
    cb.pull(good, |_| {}).await.unwrap();
    assert_eq!(std::fs::read(b.root().join("good/x")).unwrap(), b"seven");
    for s in [a, b, c] {
        s.stop().await;
    }
}

#[tokio::test]
async fn b_dials_only_a_source_that_proves_the_pinned_fingerprint_and_sends_it_nothing_else() {
    let a = TestServer::start().await;
    let b = TestServer::start().await;
    let decoy = TestServer::start().await;
    std::fs::write(a.root().join("f"), b"data").unwrap();
    let (ca, cb) = (a.client().await, b.client().await);
    let granted = ca.grant(&b.fingerprint, &["f".to_owned()]).await.unwrap();
    // The client names the decoy's address with A's fingerprint.
    let mut job = pull(&a, &granted.grant, &granted.job, &["f"], "f");
    job.source = decoy.addr.to_string();
    let text = refused_with(cb.pull(job, |_| {}).await, "did not prove the fingerprint");
    println!("{text}");
    // The decoy saw a handshake and nothing else: no Hello (no session, no refusal).
    let seen = decoy.metrics.render();
    assert!(seen.contains("sluice_sessions_total 0"), "{seen}");
    assert!(seen.contains("sluice_sessions_refused_total 0"), "{seen}");
    assert!(!b.root().join("f").exists());
    for s in [a, b, decoy] {
        s.stop().await;
    }
}

#[tokio::test]
async fn a_server_with_third_party_off_neither_grants_nor_takes_jobs_and_a_dial_list_holds() {
    let off = |c: &mut sluice::session::ServerConfig| {
        c.third_party = ThirdPartyConfig { mode: ThirdParty::Off, dial: Vec::new() };
    };
    let a = TestServer::start_with(off).await;
    let b = TestServer::start_with(off).await;
    std::fs::write(a.root().join("f"), b"data").unwrap();
    let (ca, cb) = (a.client().await, b.client().await);
    let err = ca.grant(&b.fingerprint, &["f".to_owned()]).await.unwrap_err();
    assert!(err.to_string().contains("--third-party"), "{err}");
    let job = pull(&a, "sluice-grant-v1.x.y", "j", &["f"], "f");
    refused_with(cb.pull(job, |_| {}).await, "--third-party");

    // A source that does not issue: B's presentation of an earlier grant is refused too (pull
    // only on A: it takes jobs, grants nothing).
    let pull_only = |c: &mut sluice::session::ServerConfig| {
        c.third_party = ThirdPartyConfig { mode: ThirdParty::Pull, dial: Vec::new() };
    };
    let a2 = TestServer::start_with(pull_only).await;
    let err = a2.client().await.grant(&b.fingerprint, &["f".to_owned()]).await.unwrap_err();
    assert!(err.to_string().contains("--third-party"), "{err}");

    // A destination whose dial list does not name the source.
    let fenced = |c: &mut sluice::session::ServerConfig| {
        c.third_party = ThirdPartyConfig {
            mode: ThirdParty::Both,
            dial: vec!["198.18.0.0/15".parse().unwrap()],
        };
    };
    let a3 = TestServer::start().await;
    let b3 = TestServer::start_with(fenced).await;
    std::fs::write(a3.root().join("f"), b"data").unwrap();
    let granted = a3.client().await.grant(&b3.fingerprint, &["f".to_owned()]).await.unwrap();
    let job = pull(&a3, &granted.grant, &granted.job, &["f"], "f");
    refused_with(b3.client().await.pull(job, |_| {}).await, "not on its list");
    for s in [a, b, a2, a3, b3] {
        s.stop().await;
    }
}

#[tokio::test]
async fn a_token_without_the_rights_cannot_grant_or_pull() {
    let read_only = |c: &mut sluice::session::ServerConfig| {
        let dir = c.root.parent().unwrap().to_owned();
        write_private(&common::tokens_file(&dir), &format!("{TOKEN} rights=read,list\n"));
    };
    let write_only = |c: &mut sluice::session::ServerConfig| {
        let dir = c.root.parent().unwrap().to_owned();
        write_private(&common::tokens_file(&dir), &format!("{TOKEN} rights=write\n"));
    };
    let a = TestServer::start_with(write_only).await;
    let b = TestServer::start_with(read_only).await;
    std::fs::write(a.root().join("f"), b"data").unwrap();
    let err = a.client().await.grant(&b.fingerprint, &["f".to_owned()]).await.unwrap_err();
    assert!(err.to_string().contains("may not read"), "{err}");
    let job = pull(&a, "sluice-grant-v1.x.y", "j", &["f"], "f");
    refused_with(b.client().await.pull(job, |_| {}).await, "may not write");
    refused_with(b.client().await.jobs().await, "may not list jobs");
    for s in [a, b] {
        s.stop().await;
    }
}

/// A job of 64 MiB from A into B's big.bin capped at `rate_bps` (B knows a second token,
/// [`OTHER`]), followed by a client of B until some bytes moved.
struct Following {
    a: TestServer,
    b: TestServer,
    data: Vec<u8>,
    granted: sluice::session::Granted,
    job: PullJob,
    following: tokio::task::JoinHandle<Result<JobDone, SessionError>>,
}

impl Following {
    async fn start(seed: u8, rate_bps: u64) -> Following {
        println!("seed {seed}");
        let a = TestServer::start().await;
        let b = TestServer::start_with(|c| {
            let dir = c.root.parent().unwrap().to_owned();
            write_private(&common::tokens_file(&dir), &format!("{TOKEN}\n{OTHER}\n"));
        })
        .await;
        let data = pattern(64 << 20, seed);
        std::fs::write(a.root().join("big.bin"), &data).unwrap();
        let ca = a.client().await;
        let granted = ca.grant(&b.fingerprint, &["big.bin".to_owned()]).await.unwrap();
        let mut job = pull(&a, &granted.grant, &granted.job, &["big.bin"], "big.bin");
        job.spec.rate_bps = rate_bps;
        let cb = b.client().await;
        let (moved_tx, mut moved) = tokio::sync::watch::channel(0u64);
        let following = tokio::spawn({
            let job = job.clone();
            async move {
                cb.pull(job, move |p| {
                    let _ = moved_tx.send(p.bytes);
                })
                .await
            }
        });
        tokio::time::timeout(Duration::from_secs(60), moved.wait_for(|b| *b > 0))
            .await
            .unwrap()
            .unwrap();
        Following { a, b, data, granted, job, following }
    }

    /// A session with B under the other token.
    async fn other(&self) -> Client {
        let mut config = self.b.client_config();
        config.token = OTHER.to_owned();
        Client::connect(config).await.unwrap()
    }

    async fn stop(self) {
        for s in [self.a, self.b] {
            s.stop().await;
        }
    }
}

#[tokio::test]
async fn a_cancelled_job_ends_for_its_followers_and_is_not_resumed() {
    // Capped at 50 Mbit/s: it runs for about ten seconds.
    let mut world = Following::start(6, 50_000_000).await;
    let (b, granted) = (&world.b, &world.granted);
    let records = b.root().parent().unwrap().join("state").join("jobs");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 1, "the running job is kept");
    // Another token cannot cancel it, nor can anyone cancel a job that is not there.
    let other = world.other().await;
    refused_with(other.cancel_job(&granted.job).await, "no running or stalled job");
    let mine = b.client().await;
    refused_with(mine.cancel_job("no-such-job").await, "no running or stalled job no-such-job");
    let ended = mine.cancel_job(&granted.job).await.unwrap();
    println!("cancelled: {ended:?}");
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((ended[0].phase, ended[0].id.as_str()), (JobPhase::Cancelled, granted.job.as_str()));
    assert!(ended[0].bytes < 64 << 20, "{ended:?}");
    // Its follower hears the end; its record is gone, so a restart would not resume it.
    let following = tokio::time::timeout(Duration::from_secs(10), &mut world.following);
    let followed = following.await.unwrap().unwrap();
    refused_with(followed, "cancelled");
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0, "the record is removed");
    assert_eq!(mine.jobs().await.unwrap(), ended);
    assert!(!b.root().join("big.bin").exists(), "nothing unverified in place");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_goes_on_after_its_server_restarts_for_its_token_wherever_that_token_s_line_is() {
    // 64 MiB capped at 100 Mbit/s: seconds. B restarts mid-way with its token file reordered
    // (the other token first): the job resumes for the token that started it, found by its
    // digest, not for whichever token now has its old line.
    let world = Following::start(6, 100_000_000).await;
    world.following.abort();
    let Following { a, b, data, granted, .. } = world;
    // Still running when B stops (which ends it where it is): a Done after the restart is
    // the resumed job's, not one that finished before.
    let before = b.client().await.jobs().await.unwrap();
    assert_eq!(before.iter().map(|j| j.phase).collect::<Vec<_>>(), [JobPhase::Running]);
    write_private(&common::tokens_file(b.dir.path()), &format!("{OTHER}\n{TOKEN}\n"));
    let b = b.restart_in_place().await;
    let client = b.client().await;
    let mut listed = Vec::new();
    for _ in 0..600 {
        listed = client.jobs().await.unwrap();
        if listed.iter().any(|j| j.phase != JobPhase::Running) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("after the restart: {listed:?}");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].phase, listed[0].id.as_str()), (JobPhase::Done, granted.job.as_str()));
    assert_eq!(&std::fs::read(b.root().join("big.bin")).unwrap(), &data);
    let mut config = b.client_config();
    config.token = OTHER.to_owned();
    let other = Client::connect(config).await.unwrap();
    assert_eq!(other.jobs().await.unwrap(), Vec::new(), "not the other token's");
    for s in [a, b] {
        s.stop().await;
    }
}

#[tokio::test]
async fn the_job_goes_on_when_its_client_leaves_and_the_same_request_follows_it() {
    // Capped at 100 Mbit/s: the job runs for seconds, long after its first client left. The
    // client follows it until some bytes moved, then goes away.
    let world = Following::start(5, 100_000_000).await;
    let (a, b, data, granted, job) =
        (&world.a, &world.b, &world.data, &world.granted, world.job.clone());
    world.following.abort();
    // `sluice jobs` at B shows it running, from A into big.bin.
    let again = b.client().await;
    let listed = again.jobs().await.unwrap();
    println!("running: {listed:?}");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let running = &listed[0];
    assert_eq!((running.kind, running.phase), (JobKind::ThirdParty, JobPhase::Running));
    assert_eq!((running.id.as_str(), running.dest.as_str()), (granted.job.as_str(), "big.bin"));
    assert_eq!(running.from, a.addr.to_string());
    assert!(running.bytes > 0 && running.bytes < data.len() as u64, "{running:?}");
    // Another session asks for the same job: it follows the running one to its end.
    let done = again.pull(job, |_| {}).await.unwrap();
    assert!(done.attached, "{done:?}");
    assert_eq!(&std::fs::read(b.root().join("big.bin")).unwrap(), data);
    // Then it is listed as done, with every byte, and no longer as running.
    let listed = again.jobs().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].phase, JobPhase::Done, "{listed:?}");
    assert_eq!((listed[0].bytes, listed[0].files), (data.len() as u64, 1), "{listed:?}");
    assert!(listed[0].ended.is_some_and(|e| e >= listed[0].started), "{listed:?}");
    // Another token's listing at B does not show it.
    assert_eq!(world.other().await.jobs().await.unwrap(), Vec::new());
    world.stop().await;
}
