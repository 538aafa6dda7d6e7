//! Fuzz target: `sluice::fuzzing::manifest` on libFuzzer's bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::manifest(data));
