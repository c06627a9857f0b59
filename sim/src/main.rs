//! `certus-sim`: run, sweep and replay simulation seeds (`cargo xtask sim` builds and runs it).

#[cfg(madsim)]
fn main() -> std::process::ExitCode {
    certus_sim::cli::main()
}

#[cfg(not(madsim))]
fn main() -> std::process::ExitCode {
    eprintln!(
        "certus-sim runs only in a simulation build: use `cargo xtask sim` \
         (it builds with RUSTFLAGS=\"--cfg madsim\" and CARGO_PROFILE_DEV_OPT_LEVEL=1 in target-sim)"
    );
    std::process::ExitCode::from(2)
}
