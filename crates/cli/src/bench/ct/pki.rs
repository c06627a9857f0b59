//! The benchmark's test PKI: one ECDSA P-256 root, and a pool of distinct leaves it issued,
//! all made before anything is measured (issuing during a run would measure rcgen).

use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};

/// The root and the leaves; each leaf is handed out once.
#[derive(Debug)]
pub(super) struct TestPki {
    /// The root, PEM: the log's roots file.
    pub(super) root_pem: String,
    /// The root, DER: the last certificate of every submitted chain.
    pub(super) root_der: Vec<u8>,
    leaves: Vec<Vec<u8>>,
    next: AtomicUsize,
}

impl TestPki {
    /// A new root and `leaves` leaves issued by it (ECDSA P-256 with SHA-256 throughout, as a
    /// Web PKI CA issues), made on every core.
    pub(super) fn generate(leaves: usize) -> Result<TestPki, String> {
        let failed = |what: &str, error: rcgen::Error| format!("test PKI: {what}: {error}");
        let mut root_params = CertificateParams::default();
        root_params
            .distinguished_name
            .push(DnType::CommonName, "Certus Bench Root");
        root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let root_key = KeyPair::generate().map_err(|e| failed("root key", e))?;
        let root = root_params
            .self_signed(&root_key)
            .map_err(|e| failed("root", e))?;
        // One subject key for every leaf: what makes the leaves distinct entries is their
        // serial number and name, and the log never looks at the subject key.
        let leaf_key = KeyPair::generate().map_err(|e| failed("leaf key", e))?;

        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let per_thread = leaves.div_ceil(threads).max(1);
        let chunks: Vec<Result<Vec<Vec<u8>>, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..leaves)
                .step_by(per_thread)
                .map(|first| {
                    let last = (first + per_thread).min(leaves);
                    let (root_params, root_key, leaf_key) = (&root_params, &root_key, &leaf_key);
                    scope.spawn(move || {
                        let issuer = Issuer::from_params(root_params, root_key);
                        (first..last)
                            .map(|n| issue_leaf(n, &issuer, leaf_key))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|e| failed("leaf", e))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err("test PKI: a leaf thread panicked".to_owned()))
                })
                .collect()
        });
        let mut all = Vec::with_capacity(leaves);
        for chunk in chunks {
            all.extend(chunk?);
        }
        assert_eq!(all.len(), leaves, "every leaf was issued");
        Ok(TestPki {
            root_pem: root.pem(),
            root_der: root.der().to_vec(),
            leaves: all,
            next: AtomicUsize::new(0),
        })
    }

    /// The next unused leaf: its number and DER; `None` once all were handed out.
    pub(super) fn take_leaf(&self) -> Option<(usize, &[u8])> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        self.leaves
            .get(number)
            .map(|leaf| (number, leaf.as_slice()))
    }

    /// Leaf `number` (handed out before).
    pub(super) fn leaf(&self, number: usize) -> &[u8] {
        &self.leaves[number]
    }

    /// The mean DER size of a leaf, in bytes.
    pub(super) fn mean_leaf_bytes(&self) -> usize {
        let total: usize = self.leaves.iter().map(Vec::len).sum();
        total / self.leaves.len().max(1)
    }
}

/// Leaf `n`: serial `n + 1`, one DNS name.
fn issue_leaf(
    n: usize,
    issuer: &Issuer<'_, &KeyPair>,
    key: &KeyPair,
) -> Result<Vec<u8>, rcgen::Error> {
    let mut params = CertificateParams::new(vec![format!("leaf-{n}.bench.certus.example")])?;
    params.serial_number = Some(SerialNumber::from(n as u64 + 1));
    params
        .distinguished_name
        .push(DnType::CommonName, format!("leaf-{n}"));
    Ok(params.signed_by(key, issuer)?.der().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_distinct_issued_by_the_root_and_handed_out_once() {
        let pki = TestPki::generate(5).expect("a PKI");
        assert!(pki.root_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let mut seen = std::collections::BTreeSet::new();
        while let Some((number, leaf)) = pki.take_leaf() {
            assert!(seen.insert(leaf.to_vec()), "leaves are distinct");
            assert_eq!(pki.leaf(number), leaf);
            let chain = [leaf.to_vec(), pki.root_der.clone()];
            let roots =
                certus_ct::chain::AcceptedRoots::from_pem(&pki.root_pem).expect("the root parses");
            certus_ct::chain::check_chain(&chain, &roots, &Default::default())
                .expect("the log accepts the chain");
        }
        assert_eq!(seen.len(), 5);
        assert!(pki.take_leaf().is_none(), "still none");
        assert!(pki.mean_leaf_bytes() > 100, "{}", pki.mean_leaf_bytes());
    }
}
