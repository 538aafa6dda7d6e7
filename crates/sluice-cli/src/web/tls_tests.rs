//! The web app over real HTTPS on loopback: the listener's TLS with the server's own identity,
//! and an operator's PEM certificate and key.

use std::sync::Arc;

use sluice::session::Identity;
use sluice::session::tokens::TokenSet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::app::router;
use super::auth::LoginLimits;
use super::request::{AppState, CSP};
use super::tls::{WebCert, load};
use super::{Limits, Listener};

/// Serves the app with `tls` on 127.0.0.1 and asks for `/` over TLS, trusting `cert` only.
async fn fetch_page(
    tls: Arc<tokio_rustls::rustls::ServerConfig>,
    cert: CertificateDer<'static>,
    name: &str,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let gate = sluice::session::Gate::new(dir.path(), TokenSet::single("t")).unwrap();
    let app = router(AppState::new(gate, "SHA256:x".into(), LoginLimits::DEFAULT));
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), "test", Limits::WEB)
        .await
        .unwrap()
        .with_tls(tls);
    let addr = listener.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(listener.serve(app, async move {
        let _ = stopped.await;
    }));
    // Plain HTTP to the HTTPS port gets no page.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let mut junk = Vec::new();
    let _ = plain.read_to_end(&mut junk).await;
    assert!(!String::from_utf8_lossy(&junk).contains("200 OK"));

    let mut roots = RootCertStore::empty();
    roots.add(cert).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let server_name = ServerName::try_from(name.to_owned()).unwrap();
    let mut tls = TlsConnector::from(Arc::new(client)).connect(server_name, tcp).await.unwrap();
    tls.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    let _ = tls.read_to_end(&mut reply).await;
    let _ = stop.send(());
    serving.await.unwrap();
    String::from_utf8(reply).unwrap()
}

#[tokio::test]
async fn the_app_is_served_over_https_with_the_servers_own_identity() {
    let state = tempfile::tempdir().unwrap();
    let (tls, fingerprint) = load(&WebCert::Own { state_dir: state.path().to_owned() }).unwrap();
    let identity = Identity::load_or_create(state.path()).unwrap();
    assert_eq!(fingerprint, identity.fingerprint().to_string(), "the CLI's fingerprint");
    let cert = CertificateDer::from(identity.certificate_der().to_vec());
    let page = fetch_page(tls, cert, "sluice").await;
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains(&format!("content-security-policy: {CSP}")), "{page}");
    assert!(page.contains("<script type=\"module\" src=\"/js/main.js\">"));
}

#[tokio::test]
async fn an_operators_pem_certificate_is_served_and_its_key_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["files.example".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (dir.path().join("web.crt"), dir.path().join("web.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let given = WebCert::Given { cert: cert_path.clone(), key: key_path.clone() };
    let err = load(&given).unwrap_err().to_string();
    assert!(err.contains("chmod 600"), "{err}");
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (tls, fingerprint) = load(&given).unwrap();
    assert_eq!(fingerprint, sluice::session::Fingerprint::of_der(cert.der()).to_string());
    let page = fetch_page(tls, cert.der().clone(), "files.example").await;
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    // Not PEM: a clear error naming the file.
    std::fs::write(&cert_path, "not a certificate").unwrap();
    let err = load(&given).unwrap_err().to_string();
    assert!(err.contains("web.crt"), "{err}");
}
