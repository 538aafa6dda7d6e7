//! Third-party transfers on a server (`docs/third-party.md`): what a server agrees to, the
//! grant key and the ended jobs of a source (server A), and the checks of a grant its reader
//! (server B) presents. The destination's jobs are in [`super::jobs`].

use std::collections::HashMap;
use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_session::grant::{self, Grant, GrantError, GrantRequest};
use sluice_session::messages::GrantClaim;

use super::SessionError;
use super::identity::{Fingerprint, check_private, write_private};
use super::tokens::TokenSet;

/// File name of the grant key in the state directory.
pub const GRANT_KEY_FILE: &str = "grant-key";
/// File name of the jobs that ended under this server's grants (one `job expires_at` a line).
const ENDED_FILE: &str = "ended-grants";
/// How long a grant lives: long enough for a large job and its resumes after a restart of
/// either server, within the grant's maximum.
pub const GRANT_LIFETIME_SECS: u64 = 12 * 60 * 60;

/// Which ends of third-party transfers a server takes (`serve --third-party`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThirdParty {
    /// Neither: no grants issued or honoured, no jobs taken.
    Off,
    /// Only the destination's end: it takes jobs and reads from other servers.
    Pull,
    /// Only the source's end: it issues grants and serves their reads.
    Push,
    /// Both (the default, for tokens with the rights).
    #[default]
    Both,
}

impl ThirdParty {
    /// The setting named `name` (`off`, `pull`, `push`, `both`).
    pub fn from_name(name: &str) -> Option<ThirdParty> {
        match name {
            "off" => Some(ThirdParty::Off),
            "pull" => Some(ThirdParty::Pull),
            "push" => Some(ThirdParty::Push),
            "both" => Some(ThirdParty::Both),
            _ => None,
        }
    }

    /// Whether this server issues grants and serves their reads (a source).
    pub fn pushes(self) -> bool {
        matches!(self, ThirdParty::Push | ThirdParty::Both)
    }

    /// Whether this server takes jobs and dials sources (a destination).
    pub fn pulls(self) -> bool {
        matches!(self, ThirdParty::Pull | ThirdParty::Both)
    }
}

/// One entry of a destination's list of whom it dials: a source's fingerprint, or a network
/// its address must be in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DialRule {
    /// A source with this certificate.
    Fingerprint(Fingerprint),
    /// A source whose address is in this network (address and prefix length).
    Network(IpAddr, u8),
}

impl FromStr for DialRule {
    type Err = String;

    fn from_str(s: &str) -> Result<DialRule, String> {
        if s.starts_with("SHA256:") {
            return s.parse().map(DialRule::Fingerprint).map_err(|e| format!("{s}: {e}"));
        }
        let (addr, len) = match s.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: neither a fingerprint (SHA256:...) nor a network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(len) => len
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{s:?}: a prefix length from 0 to {max}"))?,
        };
        Ok(DialRule::Network(addr, len))
    }
}

impl DialRule {
    fn allows(&self, addr: IpAddr, fingerprint: &Fingerprint) -> bool {
        match self {
            DialRule::Fingerprint(allowed) => allowed == fingerprint,
            DialRule::Network(net, len) => in_network(addr.to_canonical(), *net, *len),
        }
    }
}

fn in_network(addr: IpAddr, net: IpAddr, len: u8) -> bool {
    let (a, n, bits) = match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    let shift = bits - u32::from(len);
    shift >= bits || (a >> shift) == (n >> shift)
}

/// A server's part in third-party transfers.
#[derive(Debug, Clone, Default)]
pub struct ThirdPartyConfig {
    /// Which ends it takes.
    pub mode: ThirdParty,
    /// Whom it dials as a destination: empty allows any source the client names; else the
    /// source must match an entry (its fingerprint as the client pinned it, or its address).
    pub dial: Vec<DialRule>,
}

impl ThirdPartyConfig {
    /// Whether a destination may dial `source`, whose fingerprint the client pinned as
    /// `fingerprint`; the refusal says why.
    pub fn may_dial(
        &self,
        source: SocketAddr,
        fingerprint: &Fingerprint,
    ) -> Result<(), SessionError> {
        if self.dial.is_empty() || self.dial.iter().any(|r| r.allows(source.ip(), fingerprint)) {
            return Ok(());
        }
        Err(SessionError::Refused(format!(
            "this server does not dial {source} ({fingerprint}): it is not on its list of \
             sources (serve --third-party-dial)"
        )))
    }
}

/// A source's secret for its grants, and the jobs that ended under them.
pub(crate) struct Grants {
    key: [u8; 32],
    /// Where the ended jobs are kept (`None`: in memory only, a one-shot server's).
    ended_file: Option<PathBuf>,
    /// Jobs that ended, with their grants' expiry: their grants are refused from then on.
    ended: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Grants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grants").finish_non_exhaustive()
    }
}

impl Grants {
    /// The key kept in `state_dir` (made, owner-only, on first start), and the ended jobs
    /// recorded there.
    pub(crate) fn load_or_create(state_dir: &Path) -> Result<Grants, SessionError> {
        let path = state_dir.join(GRANT_KEY_FILE);
        let key = match fs::read(&path) {
            Ok(bytes) => {
                check_private(&path, "grant key file")?;
                bytes.try_into().map_err(|_| {
                    SessionError::Config(format!(
                        "{} is not a grant key (32 bytes): remove it to make a new one (grants \
                         issued before are then void)",
                        path.display()
                    ))
                })?
            }
            // The state directory is the identity's, made before this.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = random_key()?;
                write_private(&path, &key)?;
                key
            }
            Err(e) => return Err(SessionError::io(format!("reading {}", path.display()), e)),
        };
        let ended_file = state_dir.join(ENDED_FILE);
        let ended = read_ended(&ended_file, now_secs());
        Ok(Grants { key, ended_file: Some(ended_file), ended: Mutex::new(ended) })
    }

    /// A key that lives in memory only (a one-shot server's).
    pub(crate) fn ephemeral() -> Result<Grants, SessionError> {
        Ok(Grants { key: random_key()?, ended_file: None, ended: Mutex::default() })
    }

    /// A grant for `reader` to read `paths` under token number `token` (its index), for a new
    /// job.
    pub(crate) fn issue(
        &self,
        tokens: &TokenSet,
        token: usize,
        reader: &str,
        paths: &[String],
    ) -> Result<(String, String, u64), SessionError> {
        let digest = tokens
            .digest(token)
            .ok_or_else(|| SessionError::Refused("this session's token is gone".into()))?;
        let job = super::keys::SessionId::random()?.to_string();
        let now = now_secs();
        let request = GrantRequest {
            job: &job,
            reader,
            paths,
            token: token as u32,
            token_digest: digest,
            now_secs: now,
            lifetime_secs: GRANT_LIFETIME_SECS,
        };
        let wire = grant::issue(&self.key, &request).map_err(grant_refusal)?;
        Ok((wire, job, now + GRANT_LIFETIME_SECS))
    }

    /// Checks a grant presented in a handshake by the peer whose TLS certificate has
    /// fingerprint `presenter` (`None`: it proved none): the grant's MAC, life, reader and
    /// job, that its job has not ended, and that its token still stands. Returns the grant and
    /// its token's index; the refusal is for the reader (it names no secret).
    pub(crate) fn check(
        &self,
        tokens: &TokenSet,
        claim: &GrantClaim,
        presenter: Option<&Fingerprint>,
    ) -> Result<(Grant, usize), String> {
        let presenter = presenter.map_or("(no certificate)", |f| f.as_str());
        let now = now_secs();
        let grant = grant::verify_holder(&claim.grant, &self.key, now, presenter, &claim.job)
            .map_err(|e| e.to_string())?;
        if self.has_ended(&grant.job, now) {
            return Err(format!(
                "job {} has ended: its grant reads nothing more; a new copy needs a new grant",
                grant.job
            ));
        }
        let token = grant.token as usize;
        grant.check_token(&self.key, tokens.digest(token)).map_err(|e| e.to_string())?;
        Ok((grant, token))
    }

    /// Records that `grant`'s job ended (its read was verified by the reader): the grant is
    /// refused from now on. Kept in the state directory until the grant expires.
    pub(crate) fn end(&self, grant: &Grant) {
        let now = now_secs();
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.retain(|_, expires| *expires > now);
        ended.insert(grant.job.clone(), grant.expires_at);
        let Some(path) = &self.ended_file else { return };
        let text: String =
            ended.iter().map(|(job, expires)| format!("{job} {expires}\n")).collect();
        if let Err(e) = write_private(path, text.as_bytes()) {
            tracing::warn!(error = %e, file = %path.display(), "could not record an ended job");
        }
    }

    fn has_ended(&self, job: &str, now: u64) -> bool {
        let ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        ended.get(job).is_some_and(|expires| *expires > now)
    }
}

/// The refusal of a grant's issue, for the client.
fn grant_refusal(e: GrantError) -> SessionError {
    match e {
        GrantError::BadPath { .. } | GrantError::NoPaths | GrantError::BadReader(_) => {
            SessionError::Config(e.to_string())
        }
        other => SessionError::Refused(other.to_string()),
    }
}

fn random_key() -> Result<[u8; 32], SessionError> {
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key)
        .map_err(|_| SessionError::Config("no randomness for the grant key".into()))?;
    Ok(key)
}

/// Seconds since the Unix epoch, now.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn read_ended(path: &Path, now: u64) -> HashMap<String, u64> {
    let Ok(text) = fs::read_to_string(path) else { return HashMap::new() };
    text.lines()
        .filter_map(|line| {
            let (job, expires) = line.split_once(' ')?;
            let expires: u64 = expires.trim().parse().ok()?;
            (expires > now).then(|| (job.to_owned(), expires))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dial_rules_parse_and_match_networks_and_fingerprints() {
        let fp = Fingerprint::of_der(b"one server");
        let other = Fingerprint::of_der(b"another server");
        let net: DialRule = "198.18.4.0/24".parse().unwrap();
        let host: DialRule = "198.18.4.1".parse().unwrap();
        let by_fp: DialRule = fp.to_string().parse().unwrap();
        let a: IpAddr = "198.18.4.1".parse().unwrap();
        let b: IpAddr = "198.18.5.1".parse().unwrap();
        assert!(net.allows(a, &other) && !net.allows(b, &other));
        assert!(host.allows(a, &other) && !host.allows("198.18.4.2".parse().unwrap(), &other));
        assert!(by_fp.allows(b, &fp) && !by_fp.allows(b, &other));
        let any: DialRule = "0.0.0.0/0".parse().unwrap();
        assert!(any.allows(b, &other) && !any.allows("::1".parse().unwrap(), &other));
        for bad in ["198.18.4.0/33", "host.example", "SHA256:short", "10.0.0.0/x"] {
            assert!(bad.parse::<DialRule>().is_err(), "{bad}");
        }
        let config = ThirdPartyConfig { mode: ThirdParty::Both, dial: vec![net] };
        assert!(config.may_dial(SocketAddr::new(a, 1), &other).is_ok());
        let err = config.may_dial(SocketAddr::new(b, 1), &other).unwrap_err();
        assert!(err.to_string().contains("not on its list"), "{err}");
    }

    #[test]
    fn an_ended_job_refuses_its_grant_after_a_restart_too() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = TokenSet::parse("tok-a\n").unwrap();
        let presenter = Fingerprint::of_der(b"the reader");
        let reader = presenter.to_string();
        let grants = Grants::load_or_create(dir.path()).unwrap();
        let (wire, job, _) = grants.issue(&tokens, 0, &reader, &["data".to_owned()]).unwrap();
        let claim = GrantClaim { grant: wire, job: job.clone() };
        let (grant, token) = grants.check(&tokens, &claim, Some(&presenter)).unwrap();
        assert_eq!((token, grant.paths.clone()), (0, vec!["data".to_owned()]));
        // Another reader, another job, no certificate: refused.
        let stranger = Fingerprint::of_der(b"a stranger");
        assert!(grants.check(&tokens, &claim, Some(&stranger)).is_err());
        assert!(grants.check(&tokens, &claim, None).is_err());
        let other_job = GrantClaim { job: "another".into(), ..claim.clone() };
        assert!(grants.check(&tokens, &other_job, Some(&presenter)).unwrap_err().contains("job"));
        grants.end(&grant);
        assert!(grants.check(&tokens, &claim, Some(&presenter)).unwrap_err().contains("ended"));
        // The same key and the ended job after a restart.
        let again = Grants::load_or_create(dir.path()).unwrap();
        assert!(again.check(&tokens, &claim, Some(&presenter)).unwrap_err().contains("ended"));
        // A new key voids the grant.
        let fresh = Grants::ephemeral().unwrap();
        assert!(fresh.check(&tokens, &claim, Some(&presenter)).is_err());
    }
}
