//! The server's identity: a self-signed ECDSA P-256 certificate and its key, made on first start
//! and kept in the state directory with owner-only permissions.
//!
//! Clients do not check a chain or a name: they pin the certificate's [`Fingerprint`], as SSH
//! clients pin host keys. The certificate's validity period is therefore irrelevant and left at
//! rcgen's default (it never expires in practice).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::SessionError;

/// File name of the certificate (PEM) in the state directory.
pub const CERT_FILE: &str = "server-cert.pem";
/// File name of the private key (PKCS#8 PEM) in the state directory.
pub const KEY_FILE: &str = "server-key.pem";
/// The DNS name in the certificate. Clients pin the fingerprint and ignore names.
pub(crate) const CERT_NAME: &str = "sluice";

/// A certificate fingerprint as OpenSSH prints host keys: `SHA256:` and the unpadded base64 of
/// the SHA-256 of the certificate DER.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

/// Characters of the base64 part: 32 bytes unpadded.
const FINGERPRINT_B64_LEN: usize = 43;

impl Fingerprint {
    /// The fingerprint of a DER-encoded certificate.
    pub fn of_der(der: &[u8]) -> Self {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, der);
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest.as_ref());
        Fingerprint(format!("SHA256:{b64}"))
    }

    /// The text form, `SHA256:...`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string that is not a `SHA256:` fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a fingerprint: {0:?} (expected SHA256: and 43 base64 characters)")]
pub struct BadFingerprint(pub String);

impl FromStr for Fingerprint {
    type Err = BadFingerprint;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadFingerprint(s.to_owned());
        let b64 = s.strip_prefix("SHA256:").ok_or_else(bad)?;
        if b64.len() != FINGERPRINT_B64_LEN {
            return Err(bad());
        }
        let bytes =
            base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64).map_err(|_| bad())?;
        if bytes.len() != 32 {
            return Err(bad());
        }
        Ok(Fingerprint(s.to_owned()))
    }
}

/// The server's certificate and key.
pub struct Identity {
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
    fingerprint: Fingerprint,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity").field("fingerprint", &self.fingerprint).finish_non_exhaustive()
    }
}

impl Identity {
    /// Loads the identity from `state_dir`, or makes one there if the directory has neither file.
    ///
    /// A new directory is created with mode 0700 and both files with 0600. A key file that group
    /// or others may read is refused: the error says how to fix it.
    pub fn load_or_create(state_dir: &Path) -> Result<Identity, SessionError> {
        let cert_path = state_dir.join(CERT_FILE);
        let key_path = state_dir.join(KEY_FILE);
        match (cert_path.exists(), key_path.exists()) {
            (true, true) => Self::load(&cert_path, &key_path),
            (false, false) => Self::create(state_dir, &cert_path, &key_path),
            (cert, _) => {
                let (present, missing) =
                    if cert { (&cert_path, &key_path) } else { (&key_path, &cert_path) };
                Err(SessionError::Config(format!(
                    "found {} but not {}: restore the missing file, or remove the other to make a \
                     new identity (clients will then see a changed fingerprint)",
                    present.display(),
                    missing.display()
                )))
            }
        }
    }

    fn load(cert_path: &Path, key_path: &Path) -> Result<Identity, SessionError> {
        check_private(key_path, "server key file")?;
        let key_pem = fs::read(key_path)
            .map_err(|e| SessionError::io(format!("reading {}", key_path.display()), e))?;
        let key = PrivatePkcs8KeyDer::from_pem_slice(&key_pem).map_err(|e| {
            SessionError::Config(format!("{} is not a PKCS#8 PEM key: {e}", key_path.display()))
        })?;
        let cert_pem = fs::read(cert_path)
            .map_err(|e| SessionError::io(format!("reading {}", cert_path.display()), e))?;
        let cert = CertificateDer::from_pem_slice(&cert_pem).map_err(|e| {
            SessionError::Config(format!("{} is not a PEM certificate: {e}", cert_path.display()))
        })?;
        let fingerprint = Fingerprint::of_der(&cert);
        let identity = Identity { cert, key, fingerprint };
        // Fail at start, not at the first handshake, if the two files do not belong together.
        identity.server_tls()?;
        Ok(identity)
    }

    fn create(
        state_dir: &Path,
        cert_path: &Path,
        key_path: &Path,
    ) -> Result<Identity, SessionError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|e| SessionError::io(format!("creating {}", state_dir.display()), e))?;
        let (key_pair, cert) = generate()?;
        // Key first: a crash between the two writes leaves a key without a certificate, which
        // load_or_create reports instead of silently making a second identity.
        write_private(key_path, key_pair.serialize_pem().as_bytes())?;
        write_private(cert_path, cert.pem().as_bytes())?;
        sync_dir(state_dir);
        let identity = Identity::from_generated(&key_pair, &cert);
        tracing::info!(fingerprint = %identity.fingerprint, dir = %state_dir.display(), "made a new server identity");
        Ok(identity)
    }

    /// A new identity that lives only in memory: for a one-shot server, whose clients learn the
    /// fingerprint over another authenticated channel (ssh) and never pin it.
    pub fn ephemeral() -> Result<Identity, SessionError> {
        let (key_pair, cert) = generate()?;
        Ok(Identity::from_generated(&key_pair, &cert))
    }

    fn from_generated(key_pair: &rcgen::KeyPair, cert: &rcgen::Certificate) -> Identity {
        Identity {
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key_pair.serialize_der()),
            fingerprint: Fingerprint::of_der(cert.der()),
        }
    }

    /// The fingerprint clients pin.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The certificate, DER-encoded.
    pub fn certificate_der(&self) -> &[u8] {
        &self.cert
    }

    /// The certificate chain and key this identity presents as a TLS client: a server that
    /// reads from another for a third-party job proves its own identity to it, and the source
    /// checks that the grant names it.
    pub(crate) fn client_auth(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (vec![self.cert.clone()], PrivateKeyDer::Pkcs8(self.key.clone_key()))
    }

    /// An HTTPS server configuration presenting this identity (for `sluice serve --web`
    /// without a certificate of the operator's): browsers see the same fingerprint as clients.
    pub fn https_tls(&self) -> Result<rustls::ServerConfig, SessionError> {
        https_tls(vec![self.cert.clone()], PrivateKeyDer::Pkcs8(self.key.clone_key()))
    }

    /// A QUIC server configuration presenting this identity (TLS 1.3 only, ALPN `sluice/1`,
    /// no 0-RTT). A client may prove a certificate of its own ([`PeerCertificate`]): only a
    /// server reading for a third-party job does, and only its fingerprint is used.
    pub fn server_tls(&self) -> Result<quinn::crypto::rustls::QuicServerConfig, SessionError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let peers =
            Arc::new(PeerCertificate { algorithms: provider.signature_verification_algorithms });
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| SessionError::Config(format!("TLS 1.3 setup: {e}")))?
            .with_client_cert_verifier(peers)
            .with_single_cert(vec![self.cert.clone()], PrivateKeyDer::Pkcs8(self.key.clone_key()))
            .map_err(|e| SessionError::Config(format!("the server key and certificate: {e}")))?;
        tls.alpn_protocols = vec![super::ALPN.to_vec()];
        // The token travels in the first message; 0-RTT data could be replayed.
        tls.max_early_data_size = 0;
        quinn::crypto::rustls::QuicServerConfig::try_from(tls)
            .map_err(|e| SessionError::Config(format!("QUIC TLS setup: {e}")))
    }
}

/// The fingerprint of the certificate the peer of `conn` proved in TLS, if it presented one
/// (only a server reading for a third-party job does). Valid once the handshake completed.
pub(crate) fn peer_fingerprint(conn: &quinn::Connection) -> Option<Fingerprint> {
    let identity = conn.peer_identity()?;
    let certs = identity.downcast_ref::<Vec<CertificateDer<'static>>>()?;
    certs.first().map(|cert| Fingerprint::of_der(cert))
}

/// A server's acceptance of client certificates: optional, any certificate, with the TLS 1.3
/// handshake signature verified (so the client holds the certificate's key). No chain or name
/// is checked: the certificate is a self-signed identity, known by its fingerprint alone, and
/// whoever asks for one (a grant's reader) compares fingerprints.
#[derive(Debug)]
struct PeerCertificate {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::server::danger::ClientCertVerifier for PeerCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// An HTTPS server configuration (TLS 1.3, ALPN `http/1.1`, no client certificates) presenting
/// `certs` (the server's first, then any chain) and `key`, on the workspace's one crypto
/// provider (aws-lc-rs).
pub fn https_tls(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ServerConfig, SessionError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| SessionError::Config(format!("TLS 1.3 setup: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| SessionError::Config(format!("the web key and certificate: {e}")))?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// [`https_tls`] for a certificate chain and key the operator gives as PEM files (`sluice serve
/// --web-cert --web-key`), and the fingerprint of the server's certificate (the first).
pub fn https_tls_from_pem(
    cert_path: &Path,
    key_path: &Path,
) -> Result<(rustls::ServerConfig, Fingerprint), SessionError> {
    check_private(key_path, "web key file")?;
    let read = |path: &Path| {
        fs::read(path).map_err(|e| SessionError::io(format!("reading {}", path.display()), e))
    };
    let cert_pem = read(cert_path)?;
    let certs =
        CertificateDer::pem_slice_iter(&cert_pem).collect::<Result<Vec<_>, _>>().map_err(|e| {
            SessionError::Config(format!("{} is not a PEM certificate: {e}", cert_path.display()))
        })?;
    let first = certs.first().ok_or_else(|| {
        SessionError::Config(format!("{} holds no certificate", cert_path.display()))
    })?;
    let fingerprint = Fingerprint::of_der(first);
    let key = PrivateKeyDer::from_pem_slice(&read(key_path)?).map_err(|e| {
        SessionError::Config(format!("{} is not a PEM private key: {e}", key_path.display()))
    })?;
    Ok((https_tls(certs, key)?, fingerprint))
}

/// A new P-256 key and a self-signed certificate for it.
fn generate() -> Result<(rcgen::KeyPair, rcgen::Certificate), SessionError> {
    let key_pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| SessionError::Config(format!("generating the server key: {e}")))?;
    let cert = rcgen::CertificateParams::new(vec![CERT_NAME.to_owned()])
        .and_then(|params| params.self_signed(&key_pair))
        .map_err(|e| SessionError::Config(format!("making the server certificate: {e}")))?;
    Ok((key_pair, cert))
}

/// Refuses a secret file that group or others may access, or that is not a regular file.
pub fn check_private(path: &Path, what: &str) -> Result<(), SessionError> {
    let meta = fs::metadata(path)
        .map_err(|e| SessionError::io(format!("reading {what} {}", path.display()), e))?;
    if !meta.is_file() {
        return Err(SessionError::Config(format!(
            "{what} {} is not a regular file",
            path.display()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SessionError::Config(format!(
            "{what} {} has mode {mode:03o}: group or others can access it; run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// Writes a new owner-only file under a temporary name, syncs it and renames it into place.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), SessionError> {
    let temp: PathBuf = {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".tmp");
        path.with_file_name(name)
    };
    let ctx = |what: &str| format!("{what} {}", temp.display());
    // A temporary file left by a crash is ours to replace.
    let _ = fs::remove_file(&temp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| SessionError::io(ctx("creating"), e))?;
    file.write_all(bytes).map_err(|e| SessionError::io(ctx("writing"), e))?;
    file.sync_all().map_err(|e| SessionError::io(ctx("syncing"), e))?;
    fs::rename(&temp, path).map_err(|e| SessionError::io(format!("renaming {}", temp.display()), e))
}

/// Best effort: a directory sync makes the renames durable; failure only weakens crash safety.
fn sync_dir(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}
