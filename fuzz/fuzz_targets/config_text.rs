//! Fuzz target: `sluice::fuzzing::config_text` on libFuzzer's bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::config_text(data));
