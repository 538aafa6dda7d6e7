//! Sealing and opening packets with an AEAD at the packet boundary.
//!
//! Every datagram is `header (16) | body | tag (16)`. The header is the associated data: it is
//! authenticated but travels in the clear, because the receiver needs the packet number before it
//! can decrypt. The body is encrypted in place.
//!
//! The 12-byte nonce is the key's IV XOR (4 zero bytes ‖ packet number as u64 big-endian), as in
//! TLS 1.3 and QUIC. The packet number is read from the header bytes themselves, so the nonce and
//! the authenticated header can never disagree, and changing the packet number in flight fails
//! authentication. A packet number must never be used twice under one key: a retransmission
//! carries a new packet number (see [`crate::wire`]).
//!
//! Sealing and opening work in the caller's buffer and allocate nothing.
//!
//! Without the `channel` feature only [`Algorithm`] is here (the session plane names it; the
//! browser's build has no AEAD of its own: WebTransport's QUIC seals its packets).

#[cfg(feature = "channel")]
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

#[cfg(feature = "channel")]
use crate::wire::{HEADER_LEN, Header, TAG_LEN};

/// The AEAD used for a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// AES-256-GCM (default; fast where AES-NI exists).
    Aes256Gcm,
    /// ChaCha20-Poly1305 (where AES is slow).
    ChaCha20Poly1305,
}

#[cfg(feature = "channel")]
impl Algorithm {
    fn aead(self) -> &'static aead::Algorithm {
        match self {
            Algorithm::Aes256Gcm => &aead::AES_256_GCM,
            Algorithm::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// Why a packet could not be sealed or opened.
#[cfg(feature = "channel")]
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

/// Bytes of the AEAD nonce.
#[cfg(feature = "channel")]
const NONCE_LEN: usize = 12;
/// Where the packet number sits in the nonce: after 4 zero bytes.
#[cfg(feature = "channel")]
const NONCE_PN_AT: usize = NONCE_LEN - 8;

/// One direction's packet protection key. The nonce is the IV XOR the packet number, so a
/// packet number must never be used twice under one key.
#[cfg(feature = "channel")]
pub struct PacketKey {
    alg: Algorithm,
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
}

#[cfg(feature = "channel")]
impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketKey").field("alg", &self.alg).finish_non_exhaustive()
    }
}

#[cfg(feature = "channel")]
impl PacketKey {
    /// A key for `alg` from 32 secret bytes and a 12-byte IV.
    pub fn new(alg: Algorithm, key: &[u8; 32], iv: [u8; 12]) -> Self {
        // Both algorithms take exactly 32 key bytes, so this cannot fail.
        let unbound = UnboundKey::new(alg.aead(), key).expect("a 32-byte key fits both AEADs");
        Self { alg, key: LessSafeKey::new(unbound), iv }
    }

    /// The AEAD this key uses.
    pub fn algorithm(&self) -> Algorithm {
        self.alg
    }

    /// Seals in place: `buf[..HEADER_LEN]` holds the emitted header (its packet number is the
    /// nonce), `buf[HEADER_LEN..HEADER_LEN + body_len]` the plaintext. Writes the tag after the
    /// body and returns the packet's total length.
    ///
    /// Errors: `Truncated` if `buf` has no room for header, body and tag; `Header` if the header
    /// bytes do not parse (a peer would drop the packet anyway).
    pub fn seal(&self, buf: &mut [u8], body_len: usize) -> Result<usize, CryptoError> {
        let total = HEADER_LEN
            .checked_add(body_len)
            .and_then(|n| n.checked_add(TAG_LEN))
            .ok_or(CryptoError::Truncated)?;
        let packet = buf.get_mut(..total).ok_or(CryptoError::Truncated)?;
        let header = Header::parse(packet).map_err(|_| CryptoError::Header)?;
        let (aad, rest) = packet.split_at_mut(HEADER_LEN);
        let (body, tag_out) = rest.split_at_mut(body_len);
        // aws-lc refuses only inputs far beyond any datagram's size.
        let tag = self
            .key
            .seal_in_place_separate_tag(self.nonce(header.pn), Aad::from(&*aad), body)
            .map_err(|_| CryptoError::Auth)?;
        tag_out.copy_from_slice(tag.as_ref());
        Ok(total)
    }

    /// Opens in place: returns the header and the plaintext length; the plaintext is at
    /// `buf[HEADER_LEN..HEADER_LEN + len]`.
    ///
    /// `buf` is exactly one received datagram. Errors: `Truncated` below `HEADER_LEN + TAG_LEN`
    /// bytes, `Header` for a header that does not parse, `Auth` for anything that does not
    /// authenticate under this key (then the body bytes are unspecified).
    pub fn open(&self, buf: &mut [u8]) -> Result<(Header, usize), CryptoError> {
        if buf.len() < HEADER_LEN + TAG_LEN {
            return Err(CryptoError::Truncated);
        }
        let header = Header::parse(buf).map_err(|_| CryptoError::Header)?;
        let (aad, sealed) = buf.split_at_mut(HEADER_LEN);
        let plaintext = self
            .key
            .open_in_place(self.nonce(header.pn), Aad::from(&*aad), sealed)
            .map_err(|_| CryptoError::Auth)?;
        Ok((header, plaintext.len()))
    }

    /// IV XOR (4 zero bytes ‖ `pn` big-endian).
    fn nonce(&self, pn: u64) -> Nonce {
        let mut nonce = self.iv;
        for (n, p) in nonce[NONCE_PN_AT..].iter_mut().zip(pn.to_be_bytes()) {
            *n ^= p;
        }
        Nonce::assume_unique_for_key(nonce)
    }
}
