//! Fuzz target: `sluice::fuzzing::resume_record` on libFuzzer's bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::resume_record(data));
