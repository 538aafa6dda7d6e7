//! Data sequence numbers: 31 bits on the wire, 64 bits inside.
//!
//! Inside the protocol every data packet has an "extended" 64-bit sequence number that never
//! wraps. Only its low 31 bits travel ([`Seq31`]); the receiver recovers the full number with
//! [`Seq31::extend`], choosing the candidate nearest to the number it expects next (the same
//! idea as QUIC's packet-number decoding). That is unambiguous as long as sender and receiver
//! are less than 2^30 packets apart, which the flow window guarantees by a wide margin.

use std::fmt;

/// A data sequence number as carried on the wire: 31 bits, wrapping (UDT's top bit is the NAK
/// range flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Seq31(u32);

impl Seq31 {
    /// Largest value a `Seq31` holds.
    pub const MAX: u32 = (1 << 31) - 1;
    /// Number of distinct values.
    pub const MODULUS: u64 = 1 << 31;

    /// Wraps `v` into 31 bits.
    pub fn new(v: u32) -> Self {
        Self(v & Self::MAX)
    }
    /// The raw 31-bit value.
    pub fn get(self) -> u32 {
        self.0
    }
    /// The wire form of an extended (64-bit) sequence number.
    pub fn from_ext(ext: u64) -> Self {
        Self((ext % Self::MODULUS) as u32)
    }
    /// `self + n`, wrapping.
    #[allow(clippy::should_implement_trait, reason = "name fixed by the crate's contract")]
    pub fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }
    /// Signed distance `self - other` on the circle, in `[-2^30, 2^30)`.
    pub fn distance_from(self, other: Seq31) -> i32 {
        // Both values are below 2^31, so the wrapped difference is exact modulo 2^31.
        let d = self.0.wrapping_sub(other.0) & Self::MAX;
        // Sign-extend the 31-bit difference: bit 30 set means "behind".
        ((d << 1) as i32) >> 1
    }
    /// The 64-bit extended number whose low 31 bits are `self` and that lies nearest to
    /// `reference` (ties go up). Never below zero.
    pub fn extend(self, reference: u64) -> u64 {
        // Forward distance from the reference to `self` on the circle, in [0, 2^31).
        let ahead = u64::from(self.0.wrapping_sub(Self::from_ext(reference).0) & Self::MAX);
        // `up` is the candidate at or above the reference, `down` the one below it; at most one
        // of them is out of u64's range.
        let up = reference.checked_add(ahead);
        let down = reference.checked_sub(Self::MODULUS - ahead);
        match (up, down) {
            (Some(up), Some(down)) => {
                if ahead <= HALF {
                    up
                } else {
                    down
                }
            }
            (Some(up), None) => up,
            (None, Some(down)) => down,
            // Unreachable: `up` and `down` are 2^31 apart, so one of them is in range.
            (None, None) => reference,
        }
    }
}

/// Half the circle, 2^30. A wire number exactly this far from the reference is a tie, which
/// [`Seq31::extend`] resolves upwards.
const HALF: u64 = 1 << 30;

impl fmt::Display for Seq31 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
pub(crate) mod tests;
