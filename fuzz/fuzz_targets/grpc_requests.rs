//! The `grpc_requests` fuzz target: a libFuzzer wrapper around `certus_fuzz_targets::grpc::grpc_requests`
//! (docs/fuzzing.md says what it covers).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| certus_fuzz_targets::grpc::grpc_requests(data));
