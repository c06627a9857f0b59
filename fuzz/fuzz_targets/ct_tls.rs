//! The `ct_tls` fuzz target: a libFuzzer wrapper around `certus_fuzz_targets::ct::ct_tls`
//! (docs/fuzzing.md says what it covers).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certus_fuzz_targets::ct::ct_tls(data));
