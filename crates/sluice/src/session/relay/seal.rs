//! End-to-end sealing of relayed blocks: the sender seals each block with a key of its session
//! with the receiver, which no relay holds, and the receiver opens it. A relay stores and
//! forwards sealed bytes it cannot read; the block's transfer, index, length and compression
//! flag are the AEAD's associated data, so a relay that alters a block, passes one off as
//! another, or mixes blocks of two transfers is caught when the block is opened.
//!
//! The key and IV come from the TLS exporter of the sender-receiver session, with the label
//! [`RELAY_KEY_LABEL`] and the context of the relayed request (`keys` module: session id,
//! request id, channel 0, the direction's purpose byte). The nonce is the IV XOR the block's
//! index: one block, one nonce. A block sealed twice (striped again after a relay failed) has
//! the same plaintext, so the same ciphertext: no nonce meets two messages.
//!
//! A sealed block is `flag (1) | payload | tag (16)`: flag 1 when the payload is the block
//! compressed with zstd (only when that is smaller), 0 when it is the block itself.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use sluice_session::relay::SEAL_OVERHEAD;

use crate::session::keys::DirectionSecret;

/// Exporter label of the relayed blocks' key.
pub const RELAY_KEY_LABEL: &[u8] = b"EXPORTER-sluice-relay-v1";
/// The associated data's first bytes: a version, so no other use of the key could collide.
const AAD_TAG: &[u8] = b"sluice-relay-block-v1";
/// The flag of a compressed payload.
const COMPRESSED: u8 = 1;
/// The flag of a plain payload.
const PLAIN: u8 = 0;

/// Why a sealed block did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Too short, an unknown flag, or authentication failed: altered, another block, or
    /// another transfer's.
    #[error("block {0} failed authentication (altered, swapped or not this transfer's)")]
    Forged(u64),
    /// It authenticated but did not decompress to the block's length.
    #[error("block {0} did not decompress to its length")]
    Length(u64),
}

/// The key that seals and opens the blocks of one transfer.
pub struct BlockKey {
    key: LessSafeKey,
    iv: [u8; 12],
    transfer: [u8; 16],
    /// What it was made from, for a receiver that keeps a running collection across its
    /// restart (in its state directory, owner-only: `collect_record`).
    secret: DirectionSecret,
}

impl std::fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockKey(..)")
    }
}

impl BlockKey {
    /// The key of `transfer`'s blocks from an exported secret.
    pub fn new(secret: &DirectionSecret, transfer: [u8; 16]) -> BlockKey {
        // AES-256-GCM takes exactly 32 key bytes, so this cannot fail.
        let unbound = UnboundKey::new(&AES_256_GCM, &secret.key).expect("a 32-byte key");
        BlockKey { key: LessSafeKey::new(unbound), iv: secret.iv, transfer, secret: secret.clone() }
    }

    /// The secret it was made from ([`BlockKey::new`] of it and the transfer is this key).
    pub(crate) fn secret(&self) -> &DirectionSecret {
        &self.secret
    }

    fn nonce(&self, id: u64) -> Nonce {
        let mut nonce = self.iv;
        for (n, b) in nonce[4..].iter_mut().zip(id.to_be_bytes()) {
            *n ^= b;
        }
        Nonce::assume_unique_for_key(nonce)
    }

    fn aad(&self, id: u64, plain_len: u64, flag: u8) -> Vec<u8> {
        let mut aad = Vec::with_capacity(AAD_TAG.len() + 16 + 17);
        aad.extend_from_slice(AAD_TAG);
        aad.extend_from_slice(&self.transfer);
        aad.extend_from_slice(&id.to_be_bytes());
        aad.extend_from_slice(&plain_len.to_be_bytes());
        aad.push(flag);
        aad
    }

    /// Block `id` (the bytes `plain`) sealed; compressed first at `compress` (a zstd level)
    /// when that makes it smaller.
    pub fn seal(&self, id: u64, plain: &[u8], compress: Option<i32>) -> Vec<u8> {
        let packed = compress
            .and_then(|level| zstd::bulk::compress(plain, level).ok())
            .filter(|packed| packed.len() < plain.len());
        let (flag, payload) = match &packed {
            Some(packed) => (COMPRESSED, packed.as_slice()),
            None => (PLAIN, plain),
        };
        let mut out = Vec::with_capacity(payload.len() + SEAL_OVERHEAD as usize);
        out.push(flag);
        out.extend_from_slice(payload);
        let aad = self.aad(id, plain.len() as u64, flag);
        // aws-lc refuses only inputs far beyond a block's size.
        let tag = self
            .key
            .seal_in_place_separate_tag(self.nonce(id), Aad::from(aad), &mut out[1..])
            .expect("a block is within the AEAD's limits");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// Opens block `id`, which must hold `plain_len` bytes: the plaintext, or why not.
    pub fn open(&self, id: u64, plain_len: u64, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let (&flag, rest) = sealed.split_first().ok_or(SealError::Forged(id))?;
        if flag != PLAIN && flag != COMPRESSED {
            return Err(SealError::Forged(id));
        }
        let mut body = rest.to_vec();
        let aad = self.aad(id, plain_len, flag);
        let payload = self
            .key
            .open_in_place(self.nonce(id), Aad::from(aad), &mut body)
            .map_err(|_| SealError::Forged(id))?;
        let plain = if flag == COMPRESSED {
            // The capacity bounds what a forged frame could make us allocate, but this one
            // authenticated: only the sender could have made it.
            let cap = usize::try_from(plain_len).map_err(|_| SealError::Length(id))?;
            zstd::bulk::decompress(payload, cap).map_err(|_| SealError::Length(id))?
        } else {
            payload.to_vec()
        };
        if plain.len() as u64 != plain_len {
            return Err(SealError::Length(id));
        }
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(transfer: u8) -> BlockKey {
        BlockKey::new(&DirectionSecret { key: [7; 32], iv: [9; 12] }, [transfer; 16])
    }

    #[test]
    fn blocks_open_only_as_what_they_were_sealed() {
        let plain = b"marker marker marker marker marker marker".repeat(100);
        let k = key(1);
        for compress in [None, Some(3)] {
            let sealed = k.seal(5, &plain, compress);
            assert_eq!(sealed.len() < plain.len(), compress.is_some());
            assert_eq!(k.open(5, plain.len() as u64, &sealed).unwrap(), plain);
            assert!(!sealed.windows(6).any(|w| w == b"marker"), "plaintext shows");
            assert_eq!(k.open(6, plain.len() as u64, &sealed), Err(SealError::Forged(6)));
            assert_eq!(key(2).open(5, plain.len() as u64, &sealed), Err(SealError::Forged(5)));
            assert_eq!(k.open(5, 1, &sealed), Err(SealError::Forged(5)));
            for at in [0, 1, sealed.len() / 2, sealed.len() - 1] {
                let mut bad = sealed.clone();
                bad[at] ^= 1;
                assert!(k.open(5, plain.len() as u64, &bad).is_err(), "flip at {at}");
            }
            assert!(k.open(5, plain.len() as u64, &sealed[..sealed.len() - 1]).is_err());
        }
        assert!(k.open(0, 0, &[]).is_err());
    }
}
