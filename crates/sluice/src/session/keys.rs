//! Data-channel keys, exported from the session's TLS 1.3 connection (RFC 8446 section 7.5,
//! RFC 9001 keeps the exporter for QUIC).
//!
//! Both ends call the exporter with the label [`DATA_KEY_LABEL`] and the context
//!
//! ```text
//! session_id (16 bytes) | request_id (u64 BE) | channel (u32 BE) | purpose (1 byte)
//! ```
//!
//! where `request_id` is the QUIC stream id of the request (both ends see the same one) and
//! `purpose` is 0 for the client-to-server direction, 1 for server-to-client (each 32 key bytes
//! and 12 IV bytes), and 2 for the channel parameters (the 31-bit `initial_dsn` and the
//! controller seed). Different contexts give independent outputs, so every direction, channel
//! and request has its own key, and a packet number reused across them never meets the same key
//! twice. No key crosses the network.

use std::fmt;

use sluice_proto::crypto::{Algorithm, PacketKey};

use super::SessionError;
use crate::datapath::ChannelKeys;

/// Exporter label of the data-channel secrets.
pub const DATA_KEY_LABEL: &[u8] = b"EXPORTER-sluice-data-v1";

/// Anything that can run the TLS exporter of an established session.
pub trait KeyExporter {
    /// Fills `out` from the exporter with `label` and `context`.
    fn export(&self, out: &mut [u8], label: &[u8], context: &[u8]) -> Result<(), SessionError>;
}

impl KeyExporter for quinn::Connection {
    fn export(&self, out: &mut [u8], label: &[u8], context: &[u8]) -> Result<(), SessionError> {
        self.export_keying_material(out, label, context)
            .map_err(|_| SessionError::Protocol("the TLS exporter is not available".into()))
    }
}

/// Random identifier of a session, chosen by the server in `Welcome`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub [u8; 16]);

impl SessionId {
    /// A fresh random id.
    pub fn random() -> Result<SessionId, SessionError> {
        let mut id = [0u8; 16];
        aws_lc_rs::rand::fill(&mut id)
            .map_err(|_| SessionError::Config("the system random generator failed".into()))?;
        Ok(SessionId(id))
    }

    /// Parses the 32 lowercase hex digits of [`SessionId`]'s `Display`.
    pub fn from_hex(hex: &str) -> Option<SessionId> {
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(SessionId(id))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

/// Which end of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that opened the QUIC connection.
    Client,
    /// The end that accepted it.
    Server,
}

/// One data channel of one request of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelRef {
    /// The session.
    pub session_id: SessionId,
    /// The request: its QUIC stream id.
    pub request_id: u64,
    /// The channel's number within the request: its index, plus 64 ([`super::MAX_CHANNELS`])
    /// for each repair round before (each data phase has keys of its own).
    pub channel: u32,
}

/// Purpose byte of the context.
const CLIENT_TO_SERVER: u8 = 0;
const SERVER_TO_CLIENT: u8 = 1;
const PARAMETERS: u8 = 2;
/// A TCP data stream's hello key ([`super::streams`]).
const HELLO: u8 = 3;

impl ChannelRef {
    fn context(&self, purpose: u8) -> [u8; 29] {
        let mut ctx = [0u8; 29];
        ctx[..16].copy_from_slice(&self.session_id.0);
        ctx[16..24].copy_from_slice(&self.request_id.to_be_bytes());
        ctx[24..28].copy_from_slice(&self.channel.to_be_bytes());
        ctx[28] = purpose;
        ctx
    }

    /// The context of a TCP data stream's hello key.
    pub(crate) fn hello_context(&self) -> [u8; 29] {
        self.context(HELLO)
    }
}

/// The secret of one direction: an AEAD key and IV.
#[derive(Clone, PartialEq, Eq)]
pub struct DirectionSecret {
    /// AEAD key.
    pub key: [u8; 32],
    /// IV, XORed with the packet number into the nonce.
    pub iv: [u8; 12],
}

impl fmt::Debug for DirectionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DirectionSecret(..)")
    }
}

impl DirectionSecret {
    fn export(
        exporter: &impl KeyExporter,
        label: &[u8],
        at: &ChannelRef,
        purpose: u8,
    ) -> Result<Self, SessionError> {
        let mut out = [0u8; 44];
        exporter.export(&mut out, label, &at.context(purpose))?;
        let mut secret = DirectionSecret { key: [0; 32], iv: [0; 12] };
        secret.key.copy_from_slice(&out[..32]);
        secret.iv.copy_from_slice(&out[32..]);
        Ok(secret)
    }

    fn packet_key(&self, alg: Algorithm) -> PacketKey {
        PacketKey::new(alg, &self.key, self.iv)
    }
}

/// Everything both ends of one data channel must agree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSecrets {
    /// Seals what the client sends.
    pub client_to_server: DirectionSecret,
    /// Seals what the server sends.
    pub server_to_client: DirectionSecret,
    /// First data sequence number (31 bits).
    pub initial_dsn: u32,
    /// Seed of the congestion controller's randomness.
    pub seed: u64,
}

impl ChannelSecrets {
    /// Derives the secrets of channel `at` from the session's exporter.
    pub fn derive(exporter: &impl KeyExporter, at: &ChannelRef) -> Result<Self, SessionError> {
        Self::derive_labelled(exporter, DATA_KEY_LABEL, at)
    }

    /// Derives the secrets of `at` under the exporter label `label` (the UDP channels' or the
    /// TCP streams').
    pub fn derive_labelled(
        exporter: &impl KeyExporter,
        label: &[u8],
        at: &ChannelRef,
    ) -> Result<Self, SessionError> {
        let mut params = [0u8; 12];
        exporter.export(&mut params, label, &at.context(PARAMETERS))?;
        let mut dsn = [0u8; 4];
        dsn.copy_from_slice(&params[..4]);
        let mut seed = [0u8; 8];
        seed.copy_from_slice(&params[4..]);
        Ok(ChannelSecrets {
            client_to_server: DirectionSecret::export(exporter, label, at, CLIENT_TO_SERVER)?,
            server_to_client: DirectionSecret::export(exporter, label, at, SERVER_TO_CLIENT)?,
            initial_dsn: u32::from_be_bytes(dsn) & 0x7fff_ffff,
            seed: u64::from_be_bytes(seed),
        })
    }

    /// The keys of `role`'s end: it seals with its own direction and opens the peer's.
    pub fn keys(&self, role: Role, alg: Algorithm) -> ChannelKeys {
        let (mine, theirs) = match role {
            Role::Client => (&self.client_to_server, &self.server_to_client),
            Role::Server => (&self.server_to_client, &self.client_to_server),
        };
        ChannelKeys { seal: mine.packet_key(alg), open: theirs.packet_key(alg) }
    }
}
