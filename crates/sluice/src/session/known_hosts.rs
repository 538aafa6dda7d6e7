//! Client-side trust in servers: a known-hosts file of pinned fingerprints, the policies for a
//! first contact, and the rustls verifier that applies them during the TLS handshake.
//!
//! The file has one `host:port SHA256:...` entry per line; blank lines and `#` comments are
//! ignored. A server whose fingerprint differs from its entry is always refused, whatever the
//! policy: the error names the file and the line to edit if the change is expected.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::SessionError;
use super::identity::Fingerprint;

/// How the client decides to trust a server it connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustPolicy {
    /// Trust only this fingerprint (given by the user, e.g. `--fingerprint`). A different entry
    /// for the host in the known-hosts file is still a changed key and refused.
    Pinned(Fingerprint),
    /// Trust a host seen for the first time and pin it in the known-hosts file
    /// (`--accept-new-host`); known hosts must match their entry.
    AcceptNew,
    /// Trust only hosts already in the known-hosts file.
    KnownOnly,
}

/// Why the server's identity was not trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostKeyError {
    /// The server presented a fingerprint other than the one pinned for it.
    #[error(
        "HOST KEY CHANGED for {host}: {file} line {line} pins {known}, but the server presented \
         {presented}. Someone may be intercepting the connection, or the server made a new \
         identity. If you have confirmed the new fingerprint with the server's operator, edit or \
         delete line {line} of {file}."
    )]
    Changed {
        /// `host:port` as written in the file.
        host: String,
        /// The known-hosts file.
        file: PathBuf,
        /// The line of the entry (1-based).
        line: usize,
        /// What the entry says.
        known: String,
        /// What the server presented.
        presented: Fingerprint,
    },
    /// First contact and the policy does not allow pinning on first contact.
    #[error(
        "unknown host {host}: it presented {presented}, which is not in {file}. Check the \
         fingerprint with the server's operator, then pass --accept-new-host to pin it, or \
         --fingerprint {presented}"
    )]
    Unknown {
        /// `host:port`.
        host: String,
        /// The known-hosts file.
        file: PathBuf,
        /// What the server presented.
        presented: Fingerprint,
    },
    /// The server is not the one the user pinned explicitly.
    #[error(
        "{host} presented {presented}, but {pinned} was required (--fingerprint): refusing to \
         connect"
    )]
    PinMismatch {
        /// `host:port`.
        host: String,
        /// The fingerprint the user required.
        pinned: Fingerprint,
        /// What the server presented.
        presented: Fingerprint,
    },
}

/// The known-hosts key of a server: `host:port`, with IPv6 literals in brackets.
pub fn host_key(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One entry of the file.
#[derive(Debug, Clone)]
struct Entry {
    host: String,
    /// Kept as text: an entry that does not parse still pins the host (and never matches).
    fingerprint: String,
    line: usize,
}

/// The entries of a known-hosts file, read once.
#[derive(Debug, Clone)]
pub struct KnownHosts {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl KnownHosts {
    /// Reads `path`; a missing file has no entries. Lines that are not `host fingerprint` are
    /// skipped with a warning.
    pub fn load(path: &Path) -> Result<KnownHosts, SessionError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(SessionError::io(format!("reading {}", path.display()), e)),
        };
        Ok(KnownHosts::parse(path, &text))
    }

    /// The entries of `text`, the contents of the file at `path`.
    pub fn parse(path: &Path, text: &str) -> KnownHosts {
        let mut entries = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match (fields.next(), fields.next(), fields.next()) {
                (Some(host), Some(fingerprint), None) => entries.push(Entry {
                    host: host.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                    line: index + 1,
                }),
                _ => {
                    tracing::warn!(file = %path.display(), line = index + 1, "skipping a malformed known-hosts line")
                }
            }
        }
        KnownHosts { path: path.to_owned(), entries }
    }

    /// The file these entries came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint pinned for `host` (a `host:port` key) and its line, if any: the first
    /// entry for the host.
    pub fn get(&self, host: &str) -> Option<(&str, usize)> {
        self.entries.iter().find(|e| e.host == host).map(|e| (e.fingerprint.as_str(), e.line))
    }

    /// Whether some entry for `host` pins exactly `fingerprint`.
    fn matches(&self, host: &str, fingerprint: &Fingerprint) -> bool {
        self.entries.iter().any(|e| e.host == host && e.fingerprint == fingerprint.as_str())
    }

    /// Decides whether to trust `presented` for `host` under `policy`.
    pub fn decide(
        &self,
        policy: &TrustPolicy,
        host: &str,
        presented: &Fingerprint,
    ) -> Result<HostDecision, HostKeyError> {
        if let TrustPolicy::Pinned(pinned) = policy
            && pinned != presented
        {
            return Err(HostKeyError::PinMismatch {
                host: host.to_owned(),
                pinned: pinned.clone(),
                presented: presented.clone(),
            });
        }
        if self.matches(host, presented) {
            return Ok(HostDecision::Known);
        }
        if let Some((known, line)) = self.get(host) {
            return Err(HostKeyError::Changed {
                host: host.to_owned(),
                file: self.path.clone(),
                line,
                known: known.to_owned(),
                presented: presented.clone(),
            });
        }
        match policy {
            TrustPolicy::Pinned(_) => Ok(HostDecision::Pinned),
            TrustPolicy::AcceptNew => Ok(HostDecision::New),
            TrustPolicy::KnownOnly => Err(HostKeyError::Unknown {
                host: host.to_owned(),
                file: self.path.clone(),
                presented: presented.clone(),
            }),
        }
    }

    /// Appends `host fingerprint` to the file at `path`, creating it (mode 0600, its directory
    /// 0700) if needed.
    pub fn append(path: &Path, host: &str, fingerprint: &Fingerprint) -> Result<(), SessionError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| SessionError::io(format!("creating {}", dir.display()), e))?;
        }
        let ctx = || format!("adding {host} to {}", path.display());
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| SessionError::io(ctx(), e))?;
        writeln!(file, "{host} {fingerprint}").map_err(|e| SessionError::io(ctx(), e))?;
        file.sync_all().map_err(|e| SessionError::io(ctx(), e))
    }
}

/// A trusted server, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostDecision {
    /// Its entry in the known-hosts file matches.
    Known,
    /// It matches the user's explicit pin and has no entry.
    Pinned,
    /// First contact under [`TrustPolicy::AcceptNew`]: pin it once the handshake completes.
    New,
}

/// The rustls verifier of Sluice clients: instead of a chain to a root, the certificate's
/// fingerprint must be trusted by the known-hosts file and the policy. The TLS 1.3 handshake
/// signature is still verified with the aws-lc-rs provider's algorithms, so the server proves it
/// holds the certificate's key.
pub struct HostVerifier {
    policy: TrustPolicy,
    known: KnownHosts,
    host: String,
    algorithms: WebPkiSupportedAlgorithms,
    outcome: Mutex<Option<(Fingerprint, Result<HostDecision, HostKeyError>)>>,
}

impl fmt::Debug for HostVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostVerifier")
            .field("policy", &self.policy)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl HostVerifier {
    /// A verifier for one connection to `host` (a `host:port` key, see [`host_key`]).
    pub fn new(policy: TrustPolicy, known: KnownHosts, host: String) -> Arc<HostVerifier> {
        let algorithms =
            rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms;
        Arc::new(HostVerifier { policy, known, host, algorithms, outcome: Mutex::new(None) })
    }

    /// What the handshake decided: the presented fingerprint and the verdict; `None` before the
    /// server's certificate arrived.
    pub fn outcome(&self) -> Option<(Fingerprint, Result<HostDecision, HostKeyError>)> {
        self.outcome.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A QUIC client configuration (TLS 1.3 only, ALPN `sluice/1`, no 0-RTT) that trusts servers
    /// through this verifier.
    pub fn client_tls(
        self: &Arc<Self>,
    ) -> Result<quinn::crypto::rustls::QuicClientConfig, SessionError> {
        self.client_tls_as(None)
    }

    /// [`HostVerifier::client_tls`], proving `identity`'s certificate to the server when given
    /// (a server reading for a third-party job).
    pub(crate) fn client_tls_as(
        self: &Arc<Self>,
        identity: Option<&super::Identity>,
    ) -> Result<quinn::crypto::rustls::QuicClientConfig, SessionError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| SessionError::Config(format!("TLS 1.3 setup: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(self.clone());
        let mut tls = match identity {
            None => builder.with_no_client_auth(),
            Some(identity) => {
                let (certs, key) = identity.client_auth();
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| SessionError::Config(format!("the client certificate: {e}")))?
            }
        };
        tls.alpn_protocols = vec![super::ALPN.to_vec()];
        tls.enable_early_data = false;
        quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| SessionError::Config(format!("QUIC TLS setup: {e}")))
    }
}

impl ServerCertVerifier for HostVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let presented = Fingerprint::of_der(end_entity);
        let verdict = self.known.decide(&self.policy, &self.host, &presented);
        let trusted = verdict.is_ok();
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some((presented, verdict));
        if trusted {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
