//! Compiles `proto/` with a vendored protoc, so a fresh machine needs no install step.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: a build script compiled for one checkout may be reused by another
    // sharing the target directory.
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        "certus/v1/raft.proto",
        "certus/v1/leases.proto",
        "certus/v1/admin.proto",
        "certus/v1/log.proto",
        "certus/v1/sessions.proto",
        "certus/v1/pipelines.proto",
        "certus/v1/clients.proto",
        "grpc/health/v1/health.proto",
    ]
    .map(|file| root.join(file));
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // The compiled descriptors, for gRPC server reflection and the request metrics' method names.
    config.file_descriptor_set_path(
        PathBuf::from(std::env::var("OUT_DIR")?).join("certus_descriptor.bin"),
    );
    tonic_build::configure().compile_protos_with_config(config, &files, &[root])?;
    Ok(())
}
