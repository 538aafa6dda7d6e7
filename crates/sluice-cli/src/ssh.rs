//! `--ssh`: reach a host that runs no Sluice daemon. ssh starts a one-shot `sluice serve --once`
//! there, which answers on stdout with its address, fingerprint and a one-time token; the data
//! then moves over Sluice's own UDP channels, and ssh only carries that one line and keeps the
//! server alive (it stops when the ssh connection closes).
//!
//! The fingerprint arrives over ssh's authenticated channel, so the client pins it for this one
//! connection without asking and without writing it to the known-hosts file.

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::Stdio;
use std::time::Duration;

use clap::Args;
use sluice::session::{ClientConfig, Fingerprint, TrustPolicy};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::exit;

/// The first word of the line a one-shot server (`serve --once`) prints: `sluice-once 1 ADDR
/// FINGERPRINT TOKEN CWD` (the version of this line, the server's address, its fingerprint,
/// the token, and the directory it runs in, to which the client's relative paths refer).
pub(crate) const HANDOFF: &str = "sluice-once";
/// The version of the handoff line.
pub(crate) const HANDOFF_VERSION: &str = "1";

/// How long ssh may take to log in and start the remote server (a person may be typing a
/// password or passphrase).
const START_WAIT: Duration = Duration::from_secs(120);
/// How long the remote server gets to stop after its session, before ssh is killed.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// Flags of a start over ssh.
#[derive(Args, Debug, Clone)]
pub(crate) struct SshArgs {
    /// Start a one-shot server on the remote host over ssh, so it needs no daemon: the host is
    /// `[user@]host` as ssh knows it, and paths are relative to the remote home directory
    /// unless absolute (`~/` works too). Only the start goes through ssh.
    #[arg(long)]
    pub(crate) ssh: bool,
    /// The ssh command, split into words as a shell does (quotes and backslashes, no
    /// expansions), e.g. "ssh -p 2222 -i '~/.ssh/lab key'" [default: ssh].
    #[arg(short = 'e', long, env = "SLUICE_SSH", value_name = "COMMAND", requires = "ssh")]
    pub(crate) ssh_command: Option<String>,
    /// The sluice program on the remote host [default: sluice, found on the remote PATH].
    #[arg(long, env = "SLUICE_REMOTE_SLUICE", value_name = "PATH", requires = "ssh")]
    pub(crate) remote_sluice: Option<String>,
}

/// A one-shot server started over ssh; the ssh process lives as long as this does.
pub(crate) struct SshServer {
    child: Child,
    host: String,
    reported: SocketAddr,
    fingerprint: Fingerprint,
    token: String,
    home: String,
}

impl SshArgs {
    /// Starts the remote server on `host` and reads its handoff line.
    pub(crate) async fn start(&self, host: &str) -> anyhow::Result<SshServer> {
        let words = command_words(self.ssh_command.as_deref().unwrap_or("ssh"))?;
        let (program, options) = words.split_first().expect("command_words returns a word");
        let remote = format!("{} serve --once", shell_quote(self.remote_sluice()));
        let mut child = Command::new(program)
            .args(options)
            // `--` ends ssh's options: a host spelled like an option cannot become one.
            .args(["--", host, &remote])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| exit::usage(format!("cannot run {program}: {e}")))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no pipe from ssh"))?;
        let line = tokio::time::timeout(START_WAIT, handoff_line(stdout)).await;
        match line {
            Ok(Ok(Some(line))) => {
                let (reported, fingerprint, token, home) = parse_handoff(&line)?;
                Ok(SshServer { child, host: host.to_owned(), reported, fingerprint, token, home })
            }
            Ok(Ok(None)) => Err(self.no_server(host, &mut child).await),
            Ok(Err(e)) => Err(exit::network(format!("reading from ssh to {host}: {e}"))),
            Err(_) => Err(exit::network(format!(
                "ssh to {host} started no Sluice server within {} s",
                START_WAIT.as_secs()
            ))),
        }
    }

    fn remote_sluice(&self) -> &str {
        self.remote_sluice.as_deref().unwrap_or("sluice")
    }

    /// Why ssh ended without a handoff line, from its exit status.
    async fn no_server(&self, host: &str, child: &mut Child) -> anyhow::Error {
        let status = tokio::time::timeout(FINISH_WAIT, child.wait()).await;
        match status.ok().and_then(Result::ok).and_then(|s| s.code()) {
            Some(255) => exit::network(format!(
                "ssh could not connect or log in to {host} (its message is above)"
            )),
            Some(127) => anyhow::Error::new(exit::Coded {
                code: exit::OTHER,
                message: format!(
                    "{host} has no `{}` program: install Sluice there, or name it with \
                     --remote-sluice",
                    self.remote_sluice()
                ),
            }),
            Some(code) => anyhow::Error::new(exit::Coded {
                code: exit::OTHER,
                message: format!(
                    "`{} serve --once` on {host} ended with status {code} before it served (its \
                     message is above)",
                    self.remote_sluice()
                ),
            }),
            None => exit::network(format!("ssh to {host} ended before the server started")),
        }
    }
}

/// The first line of the server's stdout that is a handoff line (a login script may print
/// other lines first); `None` at the end of the output.
async fn handoff_line(stdout: tokio::process::ChildStdout) -> std::io::Result<Option<String>> {
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        if line.split(' ').next() == Some(HANDOFF) {
            return Ok(Some(line));
        }
    }
    Ok(None)
}

/// The address, fingerprint, token and working directory in a handoff line.
fn parse_handoff(line: &str) -> anyhow::Result<(SocketAddr, Fingerprint, String, String)> {
    let bad = |what: &str| exit::network(format!("the remote server's handoff line: {what}"));
    let mut words = line.splitn(6, ' ');
    let (_, version) = (words.next(), words.next());
    if version != Some(HANDOFF_VERSION) {
        return Err(bad(&format!(
            "version {} (this client speaks {HANDOFF_VERSION}); install the same Sluice on both \
             hosts",
            version.unwrap_or("none")
        )));
    }
    let addr = words.next().and_then(|a| a.parse().ok()).ok_or_else(|| bad("no address"))?;
    let fingerprint =
        words.next().and_then(|f| f.parse().ok()).ok_or_else(|| bad("no fingerprint"))?;
    let token = words.next().filter(|t| !t.is_empty()).ok_or_else(|| bad("no token"))?;
    let home = words.next().filter(|h| h.starts_with('/')).ok_or_else(|| bad("no directory"))?;
    Ok((addr, fingerprint, token.to_owned(), home.to_owned()))
}

impl SshServer {
    /// Client settings that reach this server: the host's name as this machine resolves it (ssh
    /// reached it that way), else the address the server reported, with the server's port, its
    /// token and its fingerprint pinned.
    pub(crate) fn client_config(
        &self,
        known_hosts: std::path::PathBuf,
    ) -> anyhow::Result<ClientConfig> {
        let name = self.host.rsplit_once('@').map_or(self.host.as_str(), |(_, h)| h);
        let resolved =
            (name, self.reported.port()).to_socket_addrs().ok().and_then(|mut a| a.next());
        let server = match resolved {
            Some(addr) => addr,
            None if !self.reported.ip().is_unspecified() => self.reported,
            None => {
                return Err(exit::network(format!(
                    "cannot resolve {name}, and its server listens on every address: reach it \
                     by an address ssh can use too"
                )));
            }
        };
        Ok(ClientConfig::new(
            server,
            format!("ssh:{}", self.host),
            self.token.clone(),
            known_hosts,
            TrustPolicy::Pinned(self.fingerprint.clone()),
        ))
    }

    /// `path` as this server (rooted at `/`) names it.
    pub(crate) fn remote_path(&self, path: &str) -> String {
        remote_path(&self.home, path)
    }

    /// Closes ssh's stdin (the remote server stops if its session has not ended already) and
    /// waits a moment for ssh to exit; kills it after that.
    pub(crate) async fn finish(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(FINISH_WAIT, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

/// `path` as a server rooted at `/` names it: absolute paths as they are, `~` and relative
/// paths under `home`; `.` and `..` resolved by name (as the remote shell would, but for
/// symbolic links).
fn remote_path(home: &str, path: &str) -> String {
    let under_home = path.strip_prefix('~').filter(|r| r.is_empty() || r.starts_with('/'));
    let full = match under_home {
        Some(rest) => format!("{home}/{rest}"),
        None if path.starts_with('/') => path.to_owned(),
        None => format!("{home}/{path}"),
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    let mut joined = parts.join("/");
    // A trailing slash ("into this directory") survives.
    if path.ends_with('/') && !joined.is_empty() {
        joined.push('/');
    }
    joined
}

/// The words of an `--ssh-command` (`-e`, `SLUICE_SSH`), split as a POSIX shell splits them;
/// at least one.
fn command_words(command: &str) -> anyhow::Result<Vec<String>> {
    let words = shlex::split(command).ok_or_else(|| {
        exit::usage(format!(
            "--ssh-command {command:?} has an unclosed quote or ends in a backslash"
        ))
    })?;
    match words.is_empty() {
        true => Err(exit::usage("--ssh-command is empty")),
        false => Ok(words),
    }
}

/// `word` quoted for a POSIX shell (ssh hands the remote command to the user's shell).
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+=:".contains(&b))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handoff_lines_parse_and_bad_ones_are_named() {
        let fp = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
        let line = format!("sluice-once 1 10.1.2.3:4567 {fp} abc123 /home/a b");
        let (addr, f, token, home) = parse_handoff(&line).unwrap();
        assert_eq!(addr, "10.1.2.3:4567".parse().unwrap());
        assert_eq!(f.as_str(), fp);
        assert_eq!((token.as_str(), home.as_str()), ("abc123", "/home/a b"));
        let err = parse_handoff("sluice-once 2 x").unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
        let err = parse_handoff(&format!("sluice-once 1 10.1.2.3:4567 {fp}")).unwrap_err();
        assert!(err.to_string().contains("no token"), "{err}");
    }

    #[test]
    fn remote_paths_are_rooted_at_the_home_directory_unless_absolute() {
        let path = |p: &str| remote_path("/home/ann", p);
        assert_eq!(path("data/x.bin"), "home/ann/data/x.bin");
        assert_eq!(path(""), "home/ann");
        assert_eq!(path("."), "home/ann");
        assert_eq!(path("~/in/"), "home/ann/in/");
        assert_eq!(path("~"), "home/ann");
        assert_eq!(path("/srv/data/./a"), "srv/data/a");
        assert_eq!(path("../bob/x"), "home/bob/x");
        assert_eq!(path("/"), "");
        assert_eq!(path("~bob/x"), "home/ann/~bob/x");
    }

    #[test]
    fn the_ssh_command_is_split_as_a_shell_splits_it() {
        let words = |c: &str| command_words(c).map_err(|e| e.to_string());
        assert_eq!(words("ssh").unwrap(), ["ssh"]);
        assert_eq!(
            words("  ssh -p 2222  -i '/keys/lab key' -o \"ProxyJump a b\" ").unwrap(),
            ["ssh", "-p", "2222", "-i", "/keys/lab key", "-o", "ProxyJump a b"]
        );
        assert_eq!(words(r"/opt/my\ ssh -v").unwrap(), ["/opt/my ssh", "-v"]);
        // No expansions: what ssh gets is what was written.
        assert_eq!(words("ssh -i ~/.ssh/lab $HOME").unwrap(), ["ssh", "-i", "~/.ssh/lab", "$HOME"]);
        let err = words("ssh -i 'lab key").unwrap_err();
        assert!(err.contains("unclosed quote") && err.contains("lab key"), "{err}");
        assert!(words(r"ssh \").unwrap_err().contains("backslash"));
        assert_eq!(words("  ").unwrap_err(), "--ssh-command is empty");
    }

    #[test]
    fn shell_words_are_quoted() {
        assert_eq!(shell_quote("/usr/local/bin/sluice"), "/usr/local/bin/sluice");
        assert_eq!(shell_quote("my sluice"), "'my sluice'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$(rm -rf x)"), "'$(rm -rf x)'");
        assert_eq!(shell_quote(""), "''");
    }
}
