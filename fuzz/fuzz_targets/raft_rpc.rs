//! The `raft_rpc` fuzz target: a libFuzzer wrapper around `certus_fuzz_targets::raft::raft_rpc`
//! (docs/fuzzing.md says what it covers).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certus_fuzz_targets::raft::raft_rpc(data));
