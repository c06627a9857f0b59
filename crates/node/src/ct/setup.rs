//! What a node needs to take part in the CT log, and loading it from the files the node's
//! configuration names.

use std::sync::Arc;

use certus_ct::chain::{AcceptedRoots, ChainLimits};
use certus_ct::signer::{EcdsaP256Signer, Signer};

use crate::config::CtFiles;

/// What a node needs to take part in the log: the log's key and the roots it accepts.
#[derive(Debug, Clone)]
pub struct CtSetup {
    /// The log's signing key (the same on every node).
    pub signer: Arc<dyn Signer>,
    /// The accepted roots.
    pub roots: AcceptedRoots,
    /// Bounds on submitted chains.
    pub limits: ChainLimits,
}

/// Loads the CT log's key and roots named by the node's configuration.
pub fn load_ct_setup(files: &CtFiles) -> Result<Option<CtSetup>, String> {
    let Some(key_file) = &files.key_file else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    let signer = EcdsaP256Signer::from_pkcs8_pem(&read(key_file)?)
        .map_err(|error| format!("ct.key_file {}: {error}", key_file.display()))?;
    let roots = match &files.roots_file {
        Some(path) => AcceptedRoots::from_pem(&read(path)?)
            .map_err(|error| format!("ct.roots_file {}: {error}", path.display()))?,
        None => AcceptedRoots::new(),
    };
    Ok(Some(CtSetup {
        signer: Arc::new(signer),
        roots,
        limits: ChainLimits::default(),
    }))
}
