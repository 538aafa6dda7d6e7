//! Data-channel keys from the TLS exporter: both ends agree, and every direction, channel,
//! request, session and connection has its own.

use std::sync::Arc;

use sluice::session::keys::{ChannelRef, ChannelSecrets, Role, SessionId};
use sluice::session::known_hosts::{HostVerifier, KnownHosts, host_key};
use sluice::session::{Identity, TrustPolicy};
use sluice_proto::crypto::Algorithm;
use sluice_proto::wire::{HEADER_LEN, Header, Kind, TAG_LEN};

/// A QUIC connection pair on loopback: (client's, server's).
async fn connection_pair(
    identity: &Identity,
) -> (quinn::Endpoint, quinn::Endpoint, quinn::Connection, quinn::Connection) {
    let server_config = quinn::ServerConfig::with_crypto(Arc::new(identity.server_tls().unwrap()));
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let verifier = HostVerifier::new(
        TrustPolicy::Pinned(identity.fingerprint().clone()),
        KnownHosts::load(&dir.path().join("known_hosts")).unwrap(),
        host_key("127.0.0.1", addr.port()),
    );
    let client_config = quinn::ClientConfig::new(Arc::new(verifier.client_tls().unwrap()));
    let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let connecting = client.connect_with(client_config, addr, "sluice").unwrap();
    let (client_conn, server_conn) =
        tokio::join!(connecting, async { server.accept().await.unwrap().await.unwrap() });
    (client, server, client_conn.unwrap(), server_conn)
}

fn at(session: u8, request_id: u64, channel: u32) -> ChannelRef {
    ChannelRef { session_id: SessionId([session; 16]), request_id, channel }
}

#[tokio::test]
async fn client_and_server_derive_equal_keys() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let (_c, _s, client, server) = connection_pair(&identity).await;
    for reference in [at(1, 0, 0), at(1, 4, 0), at(2, 8, 3)] {
        let on_client = ChannelSecrets::derive(&client, &reference).unwrap();
        let on_server = ChannelSecrets::derive(&server, &reference).unwrap();
        assert_eq!(on_client, on_server, "{reference:?}");
        assert!(on_client.initial_dsn < (1 << 31));
    }
}

#[tokio::test]
async fn keys_differ_per_direction_request_channel_session_and_connection() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let (_c, _s, client, _server) = connection_pair(&identity).await;
    let base = ChannelSecrets::derive(&client, &at(1, 4, 0)).unwrap();
    assert_ne!(base.client_to_server.key, base.server_to_client.key);
    assert_ne!(base.client_to_server.iv, base.server_to_client.iv);

    let mut seen = vec![base.client_to_server.key, base.server_to_client.key];
    for other in [at(1, 8, 0), at(1, 4, 1), at(2, 4, 0)] {
        let secrets = ChannelSecrets::derive(&client, &other).unwrap();
        assert_ne!(secrets, base, "{other:?}");
        seen.push(secrets.client_to_server.key);
        seen.push(secrets.server_to_client.key);
    }
    // A second connection with the same identity and the same reference: new keys.
    let (_c2, _s2, client2, _server2) = connection_pair(&identity).await;
    let again = ChannelSecrets::derive(&client2, &at(1, 4, 0)).unwrap();
    seen.push(again.client_to_server.key);
    seen.push(again.server_to_client.key);

    let count = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), count, "every key is distinct");
}

/// A sealed data packet with packet number `pn` and `body`.
fn sealed(key: &sluice_proto::crypto::PacketKey, pn: u64, body: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN + body.len() + TAG_LEN];
    Header { kind: Kind::Data, flags: 0, pn, timestamp_us: 7 }.emit(&mut buf).unwrap();
    buf[HEADER_LEN..HEADER_LEN + body.len()].copy_from_slice(body);
    let len = key.seal(&mut buf, body.len()).unwrap();
    buf.truncate(len);
    buf
}

#[tokio::test]
async fn each_end_opens_what_the_other_seals_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity::load_or_create(dir.path()).unwrap();
    let (_c, _s, client, server) = connection_pair(&identity).await;
    let reference = at(9, 12, 0);
    for alg in [Algorithm::Aes256Gcm, Algorithm::ChaCha20Poly1305] {
        let client_keys =
            ChannelSecrets::derive(&client, &reference).unwrap().keys(Role::Client, alg);
        let server_keys =
            ChannelSecrets::derive(&server, &reference).unwrap().keys(Role::Server, alg);

        let mut packet = sealed(&client_keys.seal, 1, b"client to server");
        let (header, len) = server_keys.open.open(&mut packet).unwrap();
        assert_eq!(header.pn, 1);
        assert_eq!(&packet[HEADER_LEN..HEADER_LEN + len], b"client to server");

        let mut packet = sealed(&server_keys.seal, 1, b"server to client");
        client_keys.open.open(&mut packet).unwrap();

        // A packet reflected back to its sender does not open.
        let mut reflected = sealed(&client_keys.seal, 2, b"reflected");
        assert!(client_keys.open.open(&mut reflected).is_err());
        // Another request's key does not open it either.
        let other = ChannelSecrets::derive(&server, &at(9, 16, 0)).unwrap().keys(Role::Server, alg);
        let mut packet = sealed(&client_keys.seal, 3, b"wrong request");
        assert!(other.open.open(&mut packet).is_err());
    }
}

#[test]
fn session_ids_round_trip_as_hex() {
    let id = SessionId::random().unwrap();
    let text = id.to_string();
    assert_eq!(text.len(), 32);
    assert_eq!(SessionId::from_hex(&text), Some(id));
    assert_eq!(SessionId::from_hex("zz"), None);
    assert_eq!(SessionId::from_hex(&"g".repeat(32)), None);
    assert_ne!(SessionId::random().unwrap(), id);
}

#[tokio::test]
async fn keys_never_show_in_debug_output() {
    let identity = Identity::ephemeral().unwrap();
    let (_c, _s, client, _server) = connection_pair(&identity).await;
    let secrets = ChannelSecrets::derive(&client, &at(3, 1, 0)).unwrap();
    let keys = secrets.keys(Role::Client, Algorithm::Aes256Gcm);
    let shown = format!("{secrets:?} {:?} {:?}", keys.seal, keys.open);
    for secret in [&secrets.client_to_server, &secrets.server_to_client] {
        let hex: String = secret.key.iter().map(|b| format!("{b:02x}")).collect();
        let list = format!("{:?}", secret.key);
        let first = secret.key[0].to_string() + ", " + &secret.key[1].to_string();
        for form in [hex.as_str(), &hex[..8], list.as_str(), first.as_str()] {
            assert!(!shown.contains(form), "a key shows in {shown}");
        }
    }
    assert!(!format!("{identity:?}").contains("PRIVATE"), "{identity:?}");
}
