//! Fuzz target: `sluice::fuzzing::datagram` on libFuzzer's bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzzing::datagram(data));
