//! The `ct_chain` fuzz target: a libFuzzer wrapper around `certus_fuzz_targets::ct::ct_chain`
//! (docs/fuzzing.md says what it covers).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certus_fuzz_targets::ct::ct_chain(data));
