//! What a test does when it cannot run here (not root, no network namespace, no IPv6 loopback,
//! no UDP GSO, ...): outside CI it says why and passes as skipped; in CI it fails, so that a
//! green CI run means every test ran.
//!
//! One file for the tests of every crate: each crate's `tests/common` (and linkem's test)
//! includes it with `#[path]`, so the rule is written once without a crate of its own.

/// Whether every test must run here: `CI` is `true` or `1` (as CI services set it), or
/// `SLUICE_REQUIRE_ALL_TESTS` is `1` (as `.ci/run` sets it).
fn all_tests_required() -> bool {
    let is = |var: &str, values: &[&str]| {
        std::env::var(var).is_ok_and(|v| values.iter().any(|want| v.eq_ignore_ascii_case(want)))
    };
    is("CI", &["true", "1"]) || is("SLUICE_REQUIRE_ALL_TESTS", &["1"])
}

/// For a test (or a part of one) that cannot run here, where it would skip: fails the test
/// (naming `why`) where every test must run, else prints `skipped: {why}` and carries on.
#[track_caller]
pub fn skip_or_fail(why: &str) {
    assert!(
        !all_tests_required(),
        "{why}; no test may skip where CI or SLUICE_REQUIRE_ALL_TESTS=1 is set"
    );
    eprintln!("skipped: {why}");
}
