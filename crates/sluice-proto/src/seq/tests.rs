use std::fmt::Debug;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::Seq31;

const M: u64 = Seq31::MODULUS;
const HALF: u64 = M / 2;

/// Seed of the property tests in this crate; `SLUICE_TEST_SEED=<u64>` runs another.
const DEFAULT_SEED: u64 = 0x511c_e5ee_d000_0001;

/// Runs `test` on `cases` inputs drawn from `strategy` with a ChaCha generator from a fixed,
/// printed seed, and panics with the seed and the shrunk input on failure.
pub(crate) fn run_seeded<S>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let seed = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(DEFAULT_SEED);
    eprintln!("{name}: seed {seed} (SLUICE_TEST_SEED={seed} reproduces it)");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{name} (seed {seed}): {e}");
    }
}

/// Extended numbers that matter: anywhere, near zero, near each wrap of 31 bits (the first
/// few), near u64::MAX.
fn interesting_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..4 * M,
        (0..8u64, -2048i64..2048).prop_map(|(k, d)| (k * M).saturating_add_signed(d)),
        (0..8u64, -2048i64..2048).prop_map(|(k, d)| (k * M + HALF).saturating_add_signed(d)),
        (0..4096u64).prop_map(|d| u64::MAX - d),
    ]
}

/// The extended number `≡ wire (mod 2^31)` in `0..=u64::MAX` nearest to `reference`, ties up,
/// by brute force over the candidates in i128.
fn extend_oracle(wire: u32, reference: u64) -> u64 {
    let (m, r) = (i128::from(M), i128::from(reference));
    let base = r - r % m + i128::from(wire);
    [base - m, base, base + m]
        .into_iter()
        .filter(|&c| (0..=i128::from(u64::MAX)).contains(&c))
        .min_by_key(|&c| ((c - r).abs(), c < r))
        .map(|c| c as u64)
        .unwrap()
}

/// `(a - b) mod 2^31`, as a signed number in `[-2^30, 2^30)`.
fn distance_oracle(a: u64, b: u64) -> i32 {
    let d = (i128::from(a) - i128::from(b)).rem_euclid(i128::from(M));
    (if d >= i128::from(HALF) { d - i128::from(M) } else { d }) as i32
}

#[test]
fn new_and_from_ext_keep_31_bits() {
    assert_eq!(Seq31::new(u32::MAX).get(), Seq31::MAX);
    assert_eq!(Seq31::new(1 << 31).get(), 0);
    assert_eq!(Seq31::from_ext(M).get(), 0);
    assert_eq!(Seq31::from_ext(M - 1).get(), Seq31::MAX);
    assert_eq!(Seq31::from_ext(u64::MAX).get(), Seq31::MAX);
}

#[test]
fn add_wraps_at_2_pow_31() {
    let max = Seq31::new(Seq31::MAX);
    assert_eq!(max.add(1), Seq31::new(0));
    assert_eq!(max.add(2), Seq31::new(1));
    assert_eq!(Seq31::new(0).add(Seq31::MAX), max);
    // u32::MAX is 2^31 - 1 modulo 2^31: adding it steps back by one.
    assert_eq!(Seq31::new(0).add(u32::MAX), max);
    assert_eq!(Seq31::new(7).add(u32::MAX), Seq31::new(6));
}

#[test]
fn distance_across_wrap_and_at_half() {
    let zero = Seq31::new(0);
    let max = Seq31::new(Seq31::MAX);
    assert_eq!(zero.distance_from(max), 1);
    assert_eq!(max.distance_from(zero), -1);
    assert_eq!(zero.distance_from(zero), 0);
    let half = HALF as u32;
    assert_eq!(Seq31::new(half - 1).distance_from(zero), (half - 1) as i32);
    // Exactly half-way is reported as behind: the range is [-2^30, 2^30).
    assert_eq!(Seq31::new(half).distance_from(zero), -(half as i32));
    assert_eq!(zero.distance_from(Seq31::new(half)), -(half as i32));
    assert_eq!(Seq31::new(half + 1).distance_from(zero), -(half as i32) + 1);
    assert_eq!(Seq31::new(5).distance_from(Seq31::new(Seq31::MAX - 4)), 10);
}

#[test]
fn extend_near_zero_is_never_negative() {
    assert_eq!(Seq31::new(0).extend(0), 0);
    assert_eq!(Seq31::new(5).extend(0), 5);
    // The nearest candidate would be -1; the result must stay >= 0.
    assert_eq!(Seq31::new(Seq31::MAX).extend(0), M - 1);
    assert_eq!(Seq31::new(Seq31::MAX - 2).extend(3), M - 3);
    assert_eq!(Seq31::new(Seq31::MAX).extend(HALF), M - 1);
}

#[test]
fn extend_across_wrap() {
    // Reference just before a wrap, wire value just after it.
    assert_eq!(Seq31::new(1).extend(M - 2), M + 1);
    // Reference just after a wrap, wire value just before it (a late retransmission).
    assert_eq!(Seq31::new(Seq31::MAX).extend(M + 1), M - 1);
    assert_eq!(Seq31::new(0).extend(5 * M - 1), 5 * M);
    assert_eq!(Seq31::new(Seq31::MAX).extend(5 * M), 5 * M - 1);
}

#[test]
fn extend_ties_go_up() {
    let r = 3 * M;
    assert_eq!(Seq31::new(HALF as u32).extend(r), r + HALF);
    assert_eq!(Seq31::new(HALF as u32 + 1).extend(r), r - HALF + 1);
    assert_eq!(Seq31::new(HALF as u32 - 1).extend(r), r + HALF - 1);
    let r = 3 * M + 10;
    assert_eq!(Seq31::new(HALF as u32 + 10).extend(r), r + HALF);
}

#[test]
fn extend_near_u64_max_does_not_overflow() {
    for r in [u64::MAX, u64::MAX - 1, u64::MAX - HALF, u64::MAX - M] {
        for w in [0, 1, HALF as u32 - 1, HALF as u32, Seq31::MAX] {
            let e = Seq31::new(w).extend(r);
            assert_eq!(Seq31::from_ext(e), Seq31::new(w), "w={w} r={r}");
            assert_eq!(e, extend_oracle(w, r), "w={w} r={r}");
        }
    }
}

#[test]
fn display_prints_the_number() {
    assert_eq!(Seq31::new(42).to_string(), "42");
    assert_eq!(Seq31::new(Seq31::MAX).to_string(), "2147483647");
    assert_eq!(format!("{:>5}", Seq31::new(7)), "    7");
}

#[test]
fn prop_extend_round_trips_within_half_window() {
    let strategy = (interesting_u64(), -(HALF as i64) + 1..HALF as i64);
    run_seeded("prop_extend_round_trips_within_half_window", 4000, strategy, |(r, d)| {
        // x = r + d, skipped when it falls outside u64 (|x - r| < 2^30 holds by construction).
        let Some(x) = r.checked_add_signed(d) else { return Ok(()) };
        prop_assert_eq!(Seq31::from_ext(x).extend(r), x);
        Ok(())
    });
}

#[test]
fn prop_extend_matches_nearest_candidate_oracle() {
    // The wire number's offset from the reference: anything, or close to a tie, or close by.
    let half = HALF as i64;
    let offset = prop_oneof![
        any::<i64>(),
        (-4..=4i64).prop_map(move |d| half + d),
        (-4..=4i64).prop_map(move |d| -half + d),
        -4..=4i64,
    ];
    let strategy = (interesting_u64(), offset);
    run_seeded("prop_extend_matches_nearest_candidate_oracle", 4000, strategy, |(r, offset)| {
        // Wrapping at 2^64 keeps the value modulo 2^31.
        let wire = Seq31::from_ext(r.wrapping_add_signed(offset));
        prop_assert_eq!(wire.extend(r), extend_oracle(wire.get(), r));
        Ok(())
    });
}

#[test]
fn prop_distance_matches_modular_oracle() {
    let strategy = (interesting_u64(), interesting_u64(), -(HALF as i64)..HALF as i64);
    run_seeded("prop_distance_matches_modular_oracle", 4000, strategy, |(a, b, d)| {
        let (sa, sb) = (Seq31::from_ext(a), Seq31::from_ext(b));
        prop_assert_eq!(sa.distance_from(sb), distance_oracle(a, b));
        let dist = sa.distance_from(sb);
        prop_assert!((-(HALF as i64)..HALF as i64).contains(&i64::from(dist)));
        // Antisymmetric, except at -2^30, which is its own negation on the circle.
        if dist != -(HALF as i32) {
            prop_assert_eq!(sb.distance_from(sa), -dist);
        }
        // Close extended numbers: the distance is their exact difference.
        if let Some(c) = b.checked_add_signed(d) {
            prop_assert_eq!(Seq31::from_ext(c).distance_from(sb) as i64, d);
        }
        Ok(())
    });
}

#[test]
fn prop_add_matches_u64_arithmetic_and_distance() {
    let strategy = (interesting_u64(), any::<u32>());
    run_seeded("prop_add_matches_u64_arithmetic_and_distance", 4000, strategy, |(x, n)| {
        let s = Seq31::from_ext(x);
        let expected = ((u128::from(x) + u128::from(n)) % u128::from(M)) as u32;
        prop_assert_eq!(s.add(n).get(), expected);
        prop_assert_eq!(s.add(n).distance_from(s), distance_oracle(u64::from(n), 0));
        // Stepping forward by the distance lands on the other number.
        let other = Seq31::new(n);
        prop_assert_eq!(s.add(other.distance_from(s) as u32), other);
        // A forward step from the reference extends to reference + step.
        let step = n % HALF as u32;
        if x.checked_add(u64::from(step)).is_some() {
            prop_assert_eq!(s.add(step).extend(x), x + u64::from(step));
        }
        Ok(())
    });
}
