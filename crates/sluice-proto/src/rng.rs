//! A small seeded pseudo-random generator (SplitMix64), so every run is reproducible from a seed.

/// SplitMix64: tiny, fast, and good enough for protocol jitter and simulation. Not for secrets.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p` (`p <= 0` never, `p >= 1` always).
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// A uniform integer in `[0, n)`; `n == 0` gives 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { ((self.next_u64() as u128 * n as u128) >> 64) as u64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_fair_bits() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        let mut ones = 0u32;
        for _ in 0..10_000 {
            let x = a.next_u64();
            assert_eq!(x, b.next_u64());
            ones += x.count_ones();
        }
        let share = f64::from(ones) / 640_000.0;
        assert!((share - 0.5).abs() < 0.01, "bit share {share}");
        assert!(Rng::new(1).below(10) < 10);
        assert_eq!(Rng::new(1).below(0), 0);
    }
}
