//! Data sequence numbers: 31 bits on the wire, 64 bits inside.
//!
//! CONTRACT STUB: helper 1 replaces the bodies; the signatures are fixed.

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
    pub fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }
    /// Signed distance `self - other` on the circle, in `[-2^30, 2^30)`.
    pub fn distance_from(self, other: Seq31) -> i32 {
        let _ = other;
        unimplemented!()
    }
    /// The 64-bit extended number whose low 31 bits are `self` and that lies nearest to
    /// `reference` (ties go up). Never below zero.
    pub fn extend(self, reference: u64) -> u64 {
        let _ = reference;
        unimplemented!()
    }
}
