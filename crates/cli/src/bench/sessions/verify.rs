//! What a client checks of the certificate a done session carries, before acknowledging it: the
//! chain is its leaf and the cluster CA, the leaf's signature verifies with the CA's key (the
//! CT log's chain checker, code that is not the issuer's), and the leaf certifies the
//! applicant's key for exactly its name.

use certus_ct::chain::{AcceptedRoots, ChainLimits, check_chain};
use x509_cert::Certificate;
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::applicants::Applicant;

/// The cluster CA, as a client that trusts it holds it.
#[derive(Debug)]
pub(super) struct CertificateCheck {
    ca_der: Vec<u8>,
    roots: AcceptedRoots,
}

impl CertificateCheck {
    /// Trusts the CA certificate `ca_pem`.
    pub(super) fn new(ca_pem: &str) -> Result<CertificateCheck, String> {
        let roots = AcceptedRoots::from_pem(ca_pem)
            .map_err(|error| format!("the cluster CA certificate: {error}"))?;
        let [ca_der] = roots.certificates() else {
            return Err(format!(
                "the cluster CA file holds {} certificates, expected one",
                roots.certificates().len()
            ));
        };
        Ok(CertificateCheck {
            ca_der: ca_der.clone(),
            roots,
        })
    }

    /// Whether `chain_pem` is a certificate for `applicant` from the cluster CA; if not, what
    /// is wrong.
    pub(super) fn check(&self, chain_pem: &str, applicant: &Applicant) -> Result<(), String> {
        let chain = Certificate::load_pem_chain(chain_pem.as_bytes())
            .map_err(|error| format!("the chain does not parse: {error}"))?
            .iter()
            .map(Certificate::to_der)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("a certificate does not re-encode: {error}"))?;
        match chain.as_slice() {
            [_, ca] if *ca == self.ca_der => {}
            _ => {
                return Err(format!(
                    "the chain holds {} certificates; expected the leaf, then the cluster CA",
                    chain.len()
                ));
            }
        }
        check_chain(&chain, &self.roots, &ChainLimits::default())
            .map_err(|error| format!("the chain does not check: {error}"))?;
        let leaf = Certificate::from_der(&chain[0])
            .map_err(|error| format!("the leaf does not parse: {error}"))?;
        let tbs = &leaf.tbs_certificate;
        let key = tbs
            .subject_public_key_info
            .to_der()
            .map_err(|error| format!("the leaf's key does not re-encode: {error}"))?;
        if key != applicant.public_key_info_der {
            return Err("the leaf certifies another key than the CSR's".to_owned());
        }
        let names: Vec<String> = match tbs.get::<SubjectAltName>() {
            Ok(Some((_, alt_names))) => alt_names
                .0
                .iter()
                .map(|name| match name {
                    GeneralName::DnsName(dns) => dns.to_string(),
                    other => format!("{other:?}"),
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(error) => return Err(format!("the leaf's subjectAltName: {error}")),
        };
        if names != [applicant.name.as_str()] {
            return Err(format!(
                "the leaf names {names:?}; expected only {:?}",
                applicant.name
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use certus_ca::csr::CheckedCsr;
    use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};

    use super::super::applicants::Applicants;
    use super::*;

    const NOW_MS: u64 = 1_750_000_000_000;

    fn issue(ca: &CaIdentity, applicant: &Applicant) -> String {
        let csr = CheckedCsr::from_der(&applicant.csr_der).expect("a checked CSR");
        ca.issue(
            &csr,
            SerialNumber::from_random_bytes([7; 16]),
            NOW_MS,
            LEAF_VALIDITY_DEFAULT,
        )
        .expect("issued")
        .chain_pem
    }

    #[test]
    fn only_the_cluster_cas_certificate_for_the_applicant_passes() {
        let applicants = Applicants::generate(2).expect("applicants");
        let [mine, other] = applicants.all() else {
            panic!("two applicants");
        };
        let ca = CaIdentity::generate("Bench CA", NOW_MS).expect("a CA");
        let check = CertificateCheck::new(ca.certificate_pem()).expect("the CA");
        let chain = issue(&ca, mine);
        assert_eq!(check.check(&chain, mine), Ok(()));

        let error = check.check(&chain, other).expect_err("another applicant's");
        assert!(error.contains("another key"), "{error}");

        let stranger = CaIdentity::generate("Bench CA", NOW_MS).expect("another CA");
        let error = check
            .check(&issue(&stranger, mine), mine)
            .expect_err("a stranger CA's");
        assert!(
            error.contains("expected the leaf, then the cluster CA"),
            "{error}"
        );

        // The right CA certificate after a leaf it did not sign: the signature check catches it.
        let forged =
            issue(&stranger, mine).replace(stranger.certificate_pem(), ca.certificate_pem());
        let error = check.check(&forged, mine).expect_err("a forged chain");
        assert!(error.contains("does not check"), "{error}");

        let leaf_only = chain.replace(ca.certificate_pem(), "");
        assert!(check.check(&leaf_only, mine).is_err(), "the CA is required");
    }
}
