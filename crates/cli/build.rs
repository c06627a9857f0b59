//! Compiles `proto/etcd/rpc.proto` (the subset of etcd's API that `certus bench raft --peer`
//! calls) with a vendored protoc, as `certus-proto` does, so a fresh machine needs no install step.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: a build script compiled for one checkout may be reused by another
    // sharing the target directory.
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let file = root.join("etcd/rpc.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_server(false)
        .compile_protos_with_config(config, &[file], &[root])?;
    Ok(())
}
