//! The server identity: made once, kept owner-only, refused when exposed.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use sluice::session::identity::{CERT_FILE, KEY_FILE};
use sluice::session::{Fingerprint, Identity, Server, SessionError};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn identity_persists_across_restarts_with_owner_only_files() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first = Identity::load_or_create(&state).unwrap();
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join(KEY_FILE)), 0o600);
    assert_eq!(mode(&state.join(CERT_FILE)), 0o600);
    let second = Identity::load_or_create(&state).unwrap();
    assert_eq!(first.fingerprint(), second.fingerprint());
    assert_eq!(first.certificate_der(), second.certificate_der());
    // Nothing else is left in the directory (no temporary files).
    assert_eq!(common::listing(&state), vec![CERT_FILE.to_owned(), KEY_FILE.to_owned()]);
}

#[test]
fn fingerprint_is_sha256_of_the_certificate_in_unpadded_base64() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let text = identity.fingerprint().to_string();
    assert!(text.starts_with("SHA256:"), "{text}");
    assert_eq!(text.len(), "SHA256:".len() + 43, "{text}");
    assert!(!text.ends_with('='));
    assert_eq!(identity.fingerprint(), &Fingerprint::of_der(identity.certificate_der()));
    assert_eq!(text.parse::<Fingerprint>().unwrap(), *identity.fingerprint());
    assert!("SHA256:short".parse::<Fingerprint>().is_err());
    assert!("MD5:aaaa".parse::<Fingerprint>().is_err());
    // A different identity has a different fingerprint.
    let other = tempfile::tempdir().unwrap();
    assert_ne!(
        Identity::load_or_create(other.path()).unwrap().fingerprint(),
        identity.fingerprint()
    );
}

#[test]
fn group_readable_key_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    Identity::load_or_create(dir.path()).unwrap();
    let key = dir.path().join(KEY_FILE);
    for exposed in [0o640, 0o604, 0o644] {
        fs::set_permissions(&key, fs::Permissions::from_mode(exposed)).unwrap();
        match Identity::load_or_create(dir.path()) {
            Err(SessionError::Config(message)) => {
                assert!(message.contains("chmod 600"), "{message}");
                assert!(message.contains(&key.display().to_string()), "{message}");
            }
            other => panic!("mode {exposed:o}: expected a refusal, got {other:?}"),
        }
    }
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    Identity::load_or_create(dir.path()).unwrap();
}

#[test]
fn half_an_identity_is_reported_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    Identity::load_or_create(dir.path()).unwrap();
    fs::remove_file(dir.path().join(CERT_FILE)).unwrap();
    match Identity::load_or_create(dir.path()) {
        Err(SessionError::Config(message)) => assert!(message.contains(CERT_FILE), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!dir.path().join(CERT_FILE).exists());
}

#[tokio::test]
async fn server_keeps_its_fingerprint_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::server_config(dir.path());
    let first = Server::bind(config.clone()).unwrap().fingerprint().clone();
    let second = Server::bind(config.clone()).unwrap().fingerprint().clone();
    assert_eq!(first, second);
    assert_eq!(
        &first,
        Identity::load_or_create(&common::state_dir(dir.path())).unwrap().fingerprint()
    );
}

#[tokio::test]
async fn server_refuses_an_exposed_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::server_config(dir.path());
    Server::bind(config.clone()).unwrap();
    let key = common::state_dir(dir.path()).join(KEY_FILE);
    fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).unwrap();
    let err = Server::bind(config).unwrap_err();
    assert!(matches!(err, SessionError::Config(_)), "{err:?}");
}
