//! Sealing and opening packets with an AEAD at the packet boundary.
//!
//! CONTRACT STUB: helper 2 replaces the bodies; the signatures are fixed.

use crate::wire::Header;

/// The AEAD used for a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// AES-256-GCM (default; fast where AES-NI exists).
    Aes256Gcm,
    /// ChaCha20-Poly1305 (where AES is slow).
    ChaCha20Poly1305,
}

/// Why a packet could not be sealed or opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// Authentication failed: corrupted, forged or under another key.
    #[error("packet failed authentication")]
    Auth,
    /// The buffer is too short for a header and a tag, or has no room for the tag.
    #[error("packet too short")]
    Truncated,
    /// The header is malformed.
    #[error("bad header")]
    Header,
}

/// One direction's packet protection key. The nonce is the IV XOR the packet number, so a
/// packet number must never be used twice under one key.
pub struct PacketKey {
    alg: Algorithm,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketKey").field("alg", &self.alg).finish_non_exhaustive()
    }
}

impl PacketKey {
    /// A key for `alg` from 32 secret bytes and a 12-byte IV.
    pub fn new(alg: Algorithm, key: &[u8; 32], iv: [u8; 12]) -> Self {
        let _ = (key, iv);
        Self { alg }
    }
    /// Seals in place: `buf[..HEADER_LEN]` holds the emitted header (its packet number is the
    /// nonce), `buf[HEADER_LEN..HEADER_LEN + body_len]` the plaintext. Writes the tag after the
    /// body and returns the packet's total length.
    pub fn seal(&self, buf: &mut [u8], body_len: usize) -> Result<usize, CryptoError> {
        let _ = (buf, body_len);
        unimplemented!()
    }
    /// Opens in place: returns the header and the plaintext length; the plaintext is at
    /// `buf[HEADER_LEN..HEADER_LEN + len]`.
    pub fn open(&self, buf: &mut [u8]) -> Result<(Header, usize), CryptoError> {
        let _ = buf;
        unimplemented!()
    }
}
