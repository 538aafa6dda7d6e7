//! The WebTransport certificate: self-signed ECDSA P-256, valid for [`VALIDITY`] (a browser
//! takes a certificate by its hash, `serverCertificateHashes`, only when it is valid at most 14
//! days), made anew every [`ROTATE_EVERY`] so the one served is never near its end.

use std::time::Duration;

use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};
use time::OffsetDateTime;
use wtransport::Identity;
use wtransport::tls::{Certificate, CertificateChain, PrivateKey};

/// From `not_before` to `not_after`: under the browsers' 14 days, with an hour before now for
/// a client clock a little behind.
pub(crate) const VALIDITY: Duration = Duration::from_secs(13 * 24 * 3600);
/// How far back `not_before` is set.
const BACKDATE: Duration = Duration::from_secs(3600);
/// How often the certificate is replaced: a page is handed the hash of the current one, and a
/// certificate is at least [`VALIDITY`] less this from its end while it is served.
pub(crate) const ROTATE_EVERY: Duration = Duration::from_secs(6 * 24 * 3600);

/// A certificate and key, and the SHA-256 of the certificate (what a page pins).
pub(crate) struct WtCert {
    pub(crate) identity: Identity,
    pub(crate) sha256: [u8; 32],
    pub(crate) not_before: OffsetDateTime,
    pub(crate) not_after: OffsetDateTime,
}

impl std::fmt::Debug for WtCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WtCert").field("sha256", &hex(&self.sha256)).finish_non_exhaustive()
    }
}

impl WtCert {
    /// Says which certificate is served, and until when.
    pub(crate) fn log(&self) {
        tracing::info!(
            sha256 = %hex(&self.sha256),
            not_before = %self.not_before,
            not_after = %self.not_after,
            "the WebTransport certificate"
        );
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new certificate for `names` (host names or addresses), valid from an hour before `now`.
pub(crate) fn make(names: Vec<String>, now: OffsetDateTime) -> anyhow::Result<WtCert> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::new(names)?;
    let (not_before, not_after) = (now - BACKDATE, now - BACKDATE + VALIDITY);
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.self_signed(&key)?;
    let der = cert.der().to_vec();
    let sha256: [u8; 32] = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &der)
        .as_ref()
        .try_into()
        .map_err(|_| anyhow::anyhow!("SHA-256 is not 32 bytes"))?;
    let chain = CertificateChain::single(Certificate::from_der(der)?);
    let identity = Identity::new(chain, PrivateKey::from_der_pkcs8(key.serialize_der()));
    Ok(WtCert { identity, sha256, not_before, not_after })
}
