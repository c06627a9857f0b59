//! ACME (RFC 8555) at a node: the HTTP resources under `/acme/` on the node's HTTP port
//! (`http.rs`), and the validator that fetches HTTP-01 challenges while this node leads
//! (`validator.rs`).
//!
//! Every node answers every ACME request: reads are linearizable reads of the replicated state,
//! writes go through Raft (forwarded to the leader). What needs cryptography or IO is done here
//! before a command is proposed — the JWS is verified against the account's stored key, the CSR
//! is checked against the order's names, tokens are drawn — so the state machine
//! (`certus_core::acme`) stays pure. Nonces are the one piece of ACME state that is not
//! replicated: each node issues its own, with a prefix naming the node, and accepts each one
//! once; a nonce from another node is refused with `badNonce` and a fresh nonce, which clients
//! retry with (RFC 8555 §6.5).

#[cfg(not(madsim))]
pub(crate) mod http;
pub(crate) mod validator;

use std::sync::{Arc, Mutex};

use certus_acme::nonce::{NoncePrefix, NonceStore};
use certus_ca::issuer::CaIdentity;

use crate::raft::types::NodeId;
use crate::random::fill_random;

/// What a node's ACME resources share.
#[derive(Debug)]
pub struct AcmeServer {
    nonces: Mutex<NonceStore>,
    /// Whether the HTTP port speaks HTTPS: the scheme of every URL the resources name.
    https: bool,
    /// The cluster CA, which signs the CRL; none when the cluster issues through an upstream CA.
    ca: Option<Arc<CaIdentity>>,
}

impl AcmeServer {
    /// The ACME resources of node `id`.
    pub fn new(id: NodeId, https: bool, ca: Option<Arc<CaIdentity>>) -> AcmeServer {
        AcmeServer {
            nonces: Mutex::new(NonceStore::new(
                nonce_prefix(id),
                std::num::NonZeroUsize::new(certus_acme::limits::NONCES_OUTSTANDING_MAX)
                    .expect("the bound is not zero"),
            )),
            https,
            ca,
        }
    }

    /// A fresh nonce, good once, at this node only.
    pub fn new_nonce(&self) -> String {
        let mut random = [0u8; certus_acme::nonce::NONCE_RANDOM_BYTES];
        fill_random(&mut random);
        self.nonces
            .lock()
            .expect("the nonce store is never poisoned")
            .issue(random)
    }

    /// Whether `nonce` was issued here and not used yet; it is used up either way.
    pub fn use_nonce(&self, nonce: &str) -> bool {
        self.nonces
            .lock()
            .expect("the nonce store is never poisoned")
            .consume(nonce)
    }

    /// The scheme of this node's ACME URLs.
    pub fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// The cluster CA, if this cluster issues with one.
    pub fn ca(&self) -> Option<&Arc<CaIdentity>> {
        self.ca.as_ref()
    }
}

/// Four base64url characters naming node `id` (its low 24 bits), so that nodes' nonces differ.
fn nonce_prefix(id: NodeId) -> NoncePrefix {
    let bytes = id.to_be_bytes();
    NoncePrefix::new(&certus_acme::b64::encode(&bytes[5..]))
        .expect("four base64url characters are a nonce prefix")
}
