//! The web app's TLS identity: the operator's certificate (`--web-cert`, `--web-key`, PEM), or
//! else the server's own self-signed identity from its state directory, the one QUIC clients
//! pin, so that a browser's warning shows the same fingerprint the server prints.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice::session::Identity;
use sluice::session::identity::https_tls_from_pem;
use tokio_rustls::rustls::ServerConfig;

/// Where the web app's certificate comes from.
#[derive(Debug, Clone)]
pub(crate) enum WebCert {
    /// The operator's chain and key.
    Given { cert: PathBuf, key: PathBuf },
    /// The server's identity in its state directory.
    Own { state_dir: PathBuf },
}

/// The TLS configuration and the certificate's fingerprint.
pub(crate) fn load(cert: &WebCert) -> anyhow::Result<(Arc<ServerConfig>, String)> {
    match cert {
        WebCert::Given { cert, key } => {
            let (tls, fingerprint) = https_tls_from_pem(cert, key)?;
            Ok((Arc::new(tls), fingerprint.to_string()))
        }
        WebCert::Own { state_dir } => own(state_dir),
    }
}

fn own(state_dir: &Path) -> anyhow::Result<(Arc<ServerConfig>, String)> {
    let identity = Identity::load_or_create(state_dir)?;
    Ok((Arc::new(identity.https_tls()?), identity.fingerprint().to_string()))
}
