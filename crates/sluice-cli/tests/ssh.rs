//! `sluice cp --ssh` against a real OpenSSH server: sshd runs in a network namespace of this
//! test's own (loopback only, removed afterwards), with its own host key, one authorized client
//! key and no other configuration; the client runs in the same namespace. No daemon is started:
//! ssh starts `sluice serve --once` for each copy, and the data moves over Sluice's channels.
//! Needs root and openssh-server; without them the tests skip, except in CI, where they fail.

#![allow(clippy::print_stdout)] // tests print their seeds

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Netns, code, isolate, random_file, same_file, skip_or_fail, stderr};

const SSHD: &str = "/usr/sbin/sshd";
const SSH_PORT: u16 = 2222;

/// An sshd of the test's own inside `ns`; killed on drop.
struct Sshd {
    child: Child,
    dir: PathBuf,
}

impl Sshd {
    /// Makes the keys and configuration in `dir` and starts sshd in `ns`, ready for logins.
    fn start(ns: &Netns, dir: &Path) -> Sshd {
        for key in ["host_key", "user_key", "stranger_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key))
                .status()
                .expect("ssh-keygen (openssh-client) is needed");
            assert!(made.success(), "ssh-keygen failed");
        }
        std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
        let config = format!(
            "ListenAddress 127.0.0.1:{SSH_PORT}\nHostKey {dir}/host_key\n\
             AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nPidFile none\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        // sshd's privilege separation needs this directory to exist.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let child = ns
            .cmd(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stderr(log)
            .spawn()
            .unwrap();
        let sshd = Sshd { child, dir: dir.to_owned() };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut probe = ns.cmd("ssh");
            probe.args(sshd.ssh_args("user_key")).args(["--", "root@127.0.0.1", "true"]);
            if probe.stderr(Stdio::null()).status().unwrap().success() {
                return sshd;
            }
            assert!(Instant::now() < deadline, "sshd did not come up: {}", sshd.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// ssh's options for logging in with `key`, ignoring this machine's ssh configuration.
    fn ssh_args(&self, key: &str) -> Vec<String> {
        let known = self.dir.join("known_hosts");
        vec![
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            self.dir.join(key).display().to_string(),
            "-p".into(),
            SSH_PORT.to_string(),
            "-o".into(),
            "StrictHostKeyChecking=no".into(),
            "-o".into(),
            format!("UserKnownHostsFile={}", known.display()),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
        ]
    }

    /// The `--ssh-command` that logs in with `key`.
    fn ssh_command(&self, key: &str) -> String {
        format!("ssh {}", self.ssh_args(key).join(" "))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sluice COMMAND --ssh` in `ns` with `args`, the remote sluice being `remote_sluice`.
fn run_ssh(ns: &Netns, home: &Path, command: &str, ssh: (&str, &str), args: &[&str]) -> Output {
    ssh_cmd(ns, home, command, ssh, args).output().unwrap()
}

/// The command line of `run_ssh`, not yet run.
fn ssh_cmd(
    ns: &Netns,
    home: &Path,
    command: &str,
    (ssh_command, remote_sluice): (&str, &str),
    args: &[&str],
) -> Command {
    let mut c = ns.cmd(BIN);
    isolate(&mut c, home);
    c.args([command, "--ssh", "--ssh-command", ssh_command, "--remote-sluice", remote_sluice])
        .args(args);
    c
}

/// `sluice cp -q --ssh` in `ns`.
fn cp_ssh(ns: &Netns, home: &Path, ssh: &str, remote_sluice: &str, args: &[&str]) -> Output {
    let args: Vec<&str> = ["-q"].iter().chain(args).copied().collect();
    run_ssh(ns, home, "cp", (ssh, remote_sluice), &args)
}

/// Processes running this build's binary as a one-shot server (the ones ssh started).
fn one_shot_servers() -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if words.first() == Some(&BIN.as_bytes()) && words.contains(&b"--once".as_slice()) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `limit` for the one-shot servers to be gone; returns those left.
fn servers_left_after(limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = one_shot_servers();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A network namespace for a test that runs sshd, where one can: it needs OpenSSH's server,
/// root and iproute2. Elsewhere `None`, after [`skip_or_fail`] says why.
#[track_caller]
fn namespace_for_sshd(tag: &str) -> Option<Netns> {
    if !Path::new(SSHD).exists() {
        skip_or_fail(&format!("needs {SSHD} (openssh-server, which .ci/run installs)"));
        return None;
    }
    let ns = Netns::with_loopback_mtu(tag, 65536);
    if ns.is_none() {
        skip_or_fail("needs root and iproute2 to make a network namespace");
    }
    ns
}

#[test]
fn cp_over_ssh_starts_a_one_shot_server_and_moves_files_both_ways() {
    let Some(ns) = namespace_for_sshd("ssh") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(&ns, dir.path());
    let ssh = sshd.ssh_command("user_key");
    let seed = 0x55_5348;
    println!("seed {seed:#x}");

    // Download: the remote path is absolute; the destination a local file.
    let remote = dir.path().join("remote");
    std::fs::create_dir_all(remote.join("tree/sub")).unwrap();
    random_file(&remote.join("big.bin"), 24 << 20, seed);
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let src = format!("root@127.0.0.1:{}", remote.join("big.bin").display());
    let dst = local.join("big.bin");
    // Paced so that the one-shot server is seen while it serves: the check for leftover
    // servers below would otherwise pass without being able to see one.
    let args = ["-q", "--limit-rate", "64Mbit", &src, dst.to_str().unwrap()];
    let mut c = ssh_cmd(&ns, dir.path(), "cp", (&ssh, BIN), &args);
    let running = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while one_shot_servers().is_empty() {
        assert!(Instant::now() < deadline, "the one-shot server was never seen running");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = running.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}\nsshd: {}", stderr(&o), sshd.log());
    assert!(same_file(&remote.join("big.bin"), &dst));
    assert_eq!(servers_left_after(Duration::from_secs(10)), Vec::<u32>::new(), "servers left");

    // Upload a tree into an existing remote directory ("into it": trailing slash).
    random_file(&local.join("a.bin"), 3 << 20, seed + 1);
    std::fs::create_dir_all(local.join("t/sub")).unwrap();
    random_file(&local.join("t/sub/c.bin"), 1 << 20, seed + 2);
    random_file(&local.join("t/d.bin"), 0, seed + 3);
    let into = format!("root@127.0.0.1:{}/", remote.join("tree").display());
    let (a, t) = (local.join("a.bin"), local.join("t"));
    let args = ["-r", a.to_str().unwrap(), t.to_str().unwrap(), &into];
    let o = cp_ssh(&ns, dir.path(), &ssh, BIN, &args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for name in ["a.bin", "t/sub/c.bin", "t/d.bin"] {
        let (sent, got) = (local.join(name), remote.join("tree").join(name));
        assert!(same_file(&sent, &got), "{name} differs");
    }
    assert_eq!(servers_left_after(Duration::from_secs(10)), Vec::<u32>::new(), "servers left");

    // ls and stat go the same way.
    let tree = format!("root@127.0.0.1:{}", remote.join("tree").display());
    let o = run_ssh(&ns, dir.path(), "ls", (&ssh, BIN), &[&tree]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "a.bin\nsub/\nt/\n");
    let file = format!("root@127.0.0.1:{}", remote.join("tree/a.bin").display());
    let o = run_ssh(&ns, dir.path(), "stat", (&ssh, BIN), &[&file]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("file, 3145728 bytes"), "{said}");

    // sweep goes the same way, one one-shot server per run; the ssh command is split as a
    // shell splits it (the key's path has a space in it).
    std::fs::copy(dir.path().join("user_key"), dir.path().join("lab key")).unwrap();
    let quoted = ssh.replace(
        &dir.path().join("user_key").display().to_string(),
        &format!("'{}'", dir.path().join("lab key").display()),
    );
    assert_ne!(quoted, ssh);
    std::fs::create_dir_all(dir.path().join("sw")).unwrap();
    let into = format!("root@127.0.0.1:{}", dir.path().join("sw").display());
    let args = ["--size", "1MiB", "--packet-sizes", "1452", "--channels", "1,2", &into];
    let o = run_ssh(&ns, dir.path(), "sweep", (&quoted, BIN), &args);
    assert_eq!(code(&o), 0, "{}\nsshd: {}", stderr(&o), sshd.log());
    let out = String::from_utf8_lossy(&o.stdout);
    // Both transports through the one-shot servers: UDP per packet size and channel count,
    // TCP per stream count.
    let rows = |first: &str, second: &str| {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|w| w.len() >= 5 && w[0] == first && w[1] == second)
            .count()
    };
    assert_eq!((rows("udp", "1452"), rows("tcp", "-")), (2, 2), "{out}");
    assert_eq!(std::fs::metadata(dir.path().join("sw/.sluice-sweep.bin")).unwrap().len(), 1 << 20);
    assert_eq!(servers_left_after(Duration::from_secs(10)), Vec::<u32>::new(), "servers left");

    // A missing remote file is "not found" (exit 4), named as the user wrote it.
    let missing = format!("root@127.0.0.1:{}", remote.join("nope.bin").display());
    let o = cp_ssh(&ns, dir.path(), &ssh, BIN, &[&missing, dst.to_str().unwrap()]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(stderr(&o).contains("nope.bin"), "{}", stderr(&o));
    assert_eq!(servers_left_after(Duration::from_secs(10)), Vec::<u32>::new(), "servers left");
}

#[test]
fn cp_over_ssh_names_what_failed_when_no_server_starts() {
    let Some(ns) = namespace_for_sshd("ssh-fail") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(&ns, dir.path());
    let dst = dir.path().join("never.bin");
    let src = format!("root@127.0.0.1:{}", dir.path().join("sshd_config").display());

    // No sluice on the remote host: the message says so and how to fix it.
    let ssh = sshd.ssh_command("user_key");
    let o = cp_ssh(&ns, dir.path(), &ssh, "/nonexistent/sluice", &[&src, dst.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("--remote-sluice"), "{}", stderr(&o));

    // A key the server does not accept: ssh cannot log in (exit 5, ssh's own message above).
    let stranger = sshd.ssh_command("stranger_key");
    let o = cp_ssh(&ns, dir.path(), &stranger, BIN, &[&src, dst.to_str().unwrap()]);
    assert_eq!(code(&o), 5, "{}", stderr(&o));
    assert!(stderr(&o).contains("could not connect or log in"), "{}", stderr(&o));

    // An ssh command that does not exist is a usage error naming it.
    let o = cp_ssh(&ns, dir.path(), "no-such-ssh -p 1", BIN, &[&src, dst.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-ssh"), "{}", stderr(&o));
    assert!(!dst.exists());
}
