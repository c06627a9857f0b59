//! The benchmark's applicants: a fresh DNS name and a CSR for a key of its own each, all made
//! before anything is measured (key generation is the client's cost, not the cluster's).

use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rcgen::{CertificateParams, KeyPair, PublicKeyData as _};

/// One certificate request waiting to be made.
#[derive(Debug)]
pub(super) struct Applicant {
    /// The one DNS name the session certifies; no other applicant has it.
    pub(super) name: String,
    /// The CSR for `name`, DER.
    pub(super) csr_der: Vec<u8>,
    /// The CSR key's SubjectPublicKeyInfo, DER: the leaf must certify exactly this key.
    pub(super) public_key_info_der: Vec<u8>,
    /// `base64url(SHA-256(public_key_info_der))`: what the node's makechallenge daemon puts
    /// after the token in a key authorization (the CSR's key stands where ACME has the account
    /// key), so a web server that knows it answers any token for the name.
    pub(super) thumbprint: String,
    /// The session's request key: with one, a create is safe to retry.
    pub(super) request_key: String,
}

/// Every applicant of a bench; each is handed out once.
#[derive(Debug)]
pub(super) struct Applicants {
    applicants: Vec<Applicant>,
    next: AtomicUsize,
}

impl Applicants {
    /// `count` applicants (ECDSA P-256 keys, as the cluster CA's), made on every core.
    pub(super) fn generate(count: usize) -> Result<Applicants, String> {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let per_thread = count.div_ceil(threads).max(1);
        let chunks: Vec<Result<Vec<Applicant>, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..count)
                .step_by(per_thread)
                .map(|first| {
                    let last = (first + per_thread).min(count);
                    scope.spawn(move || (first..last).map(applicant).collect())
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err("an applicant thread panicked".to_owned()))
                })
                .collect()
        });
        let mut applicants = Vec::with_capacity(count);
        for chunk in chunks {
            applicants.extend(chunk?);
        }
        assert_eq!(applicants.len(), count, "every applicant was made");
        Ok(Applicants {
            applicants,
            next: AtomicUsize::new(0),
        })
    }

    /// The next applicant not handed out yet; `None` once all were.
    pub(super) fn take(&self) -> Option<&Applicant> {
        self.applicants
            .get(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Every applicant, handed out or not.
    pub(super) fn all(&self) -> &[Applicant] {
        &self.applicants
    }
}

/// Applicant `n`: the name `s{n}.sessions.bench.certus.example` and a new key.
fn applicant(n: usize) -> Result<Applicant, String> {
    let name = format!("s{n}.sessions.bench.certus.example");
    let failed = |error: rcgen::Error| format!("the CSR for {name}: {error}");
    let key = KeyPair::generate().map_err(failed)?;
    let csr_der = CertificateParams::new(vec![name.clone()])
        .and_then(|params| params.serialize_request(&key))
        .map_err(failed)?
        .der()
        .to_vec();
    let public_key_info_der = key.subject_public_key_info();
    let thumbprint = URL_SAFE_NO_PAD.encode(certus_ct::sha256(&public_key_info_der));
    Ok(Applicant {
        request_key: format!("bench-{n}"),
        name,
        csr_der,
        public_key_info_der,
        thumbprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use certus_ca::csr::CheckedCsr;

    #[test]
    fn applicants_are_distinct_checked_csrs_handed_out_once() {
        let applicants = Applicants::generate(5).expect("applicants");
        let mut names = std::collections::BTreeSet::new();
        let mut keys = std::collections::BTreeSet::new();
        while let Some(applicant) = applicants.take() {
            let csr = CheckedCsr::from_der(&applicant.csr_der).expect("the node's CSR check");
            assert_eq!(csr.names(), std::slice::from_ref(&applicant.name));
            assert_eq!(csr.public_key_info_der(), applicant.public_key_info_der);
            assert_eq!(
                applicant.thumbprint,
                URL_SAFE_NO_PAD.encode(certus_ct::sha256(csr.public_key_info_der()))
            );
            assert!(names.insert(applicant.name.clone()), "names are fresh");
            assert!(
                keys.insert(applicant.public_key_info_der.clone()),
                "keys too"
            );
        }
        assert_eq!(names.len(), 5);
        assert!(applicants.take().is_none(), "still none");
        assert_eq!(applicants.all().len(), 5);
    }
}
