//! The `ct_json` fuzz target: a libFuzzer wrapper around `certus_fuzz_targets::ct::ct_json`
//! (docs/fuzzing.md says what it covers).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certus_fuzz_targets::ct::ct_json(data));
