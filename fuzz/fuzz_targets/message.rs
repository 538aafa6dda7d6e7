//! Fuzz target: `sluice::fuzzing::message` on libFuzzer's bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::message(data));
