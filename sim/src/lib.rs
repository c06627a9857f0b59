//! The deterministic simulation of Certus. Everything here builds only under `--cfg madsim`
//! (in its own target directory: `cargo xtask test` runs it); a normal build is empty.
//!
//! A cluster of real [`certus_node::Node`]s runs on madsim's simulated network and time, each on
//! its own [`certus_store::SimDisk`] that outlives crashes (a crash drops what was not flushed).

#![cfg(madsim)]
#![deny(missing_docs, unreachable_pub)]

pub mod cluster;
