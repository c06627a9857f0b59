//! The TBSCertificate a precertificate entry logs (RFC 6962 §3.2 `PreCert.tbs_certificate`).
//!
//! It must equal, byte for byte, the TBSCertificate of the final certificate the CA will issue,
//! minus that certificate's SCT list extension: that is what a TLS client rebuilds to check an
//! embedded SCT. So the precertificate's TBSCertificate is kept as submitted except for what
//! RFC 6962 §3.1 says differs: the poison extension is removed (every other extension keeps its
//! place), and when a Precertificate Signing Certificate signed it, the issuer name and the
//! Authority Key Identifier are those of the CA that will sign the final certificate.

use der::Encode;
use x509_cert::spki::ObjectIdentifier;

use super::{CT_POISON, ChainError, Parsed, Poison, encoding, poison};

/// id-ce-authorityKeyIdentifier (RFC 5280 §4.2.1.1).
const AUTHORITY_KEY_IDENTIFIER: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.35");

/// The DER TBSCertificate to log for `precert`, signed either by the CA that will issue the
/// final certificate (`precert_signing_certificate` is `None`) or by a Precertificate Signing
/// Certificate that CA certified (RFC 6962 §3.1).
///
/// With a signing certificate, the issuer becomes the signing certificate's issuer, and an
/// Authority Key Identifier in the precertificate gets the signing certificate's Authority Key
/// Identifier value (its criticality is kept); a precertificate without one is left without
/// one. As in Google's CTFE, a precertificate with an Authority Key Identifier signed by a
/// signing certificate without one is refused: RFC 6962 §3.1 says the signing certificate must
/// then carry one.
///
/// The precertificate (and the signing certificate whose issuer name is copied) must be
/// canonical DER, so that re-encoding changes nothing else. Signatures are not checked here;
/// [`check_pre_chain`](super::check_pre_chain) does that.
pub fn precert_tbs_certificate(
    precert: &[u8],
    precert_signing_certificate: Option<&[u8]>,
) -> Result<Vec<u8>, ChainError> {
    let leaf = Parsed::parse_at(precert, 0)?;
    match poison(&leaf.cert) {
        Poison::WellFormed => {}
        Poison::Absent => return Err(ChainError::NotAPrecertificate),
        Poison::Malformed(reason) => return Err(ChainError::MalformedPoison { reason }),
    }
    let signing = match precert_signing_certificate {
        Some(der) => {
            let signing = Parsed::parse_at(der, 1)?;
            if !signing.is_precert_signing_certificate(1)? {
                return Err(ChainError::NotAPrecertificateSigningCertificate);
            }
            Some(signing)
        }
        None => None,
    };
    build_tbs(&leaf, signing.as_ref())
}

/// [`precert_tbs_certificate`] on certificates already parsed and checked.
pub(super) fn build_tbs(
    leaf: &Parsed<'_>,
    signing: Option<&Parsed<'_>>,
) -> Result<Vec<u8>, ChainError> {
    leaf.check_canonical(0)?;
    let mut tbs = leaf.cert.tbs_certificate.clone();
    let mut extensions = tbs.extensions.take().unwrap_or_default();
    extensions.retain(|ext| ext.extn_id != CT_POISON);

    if let Some(signing) = signing {
        signing.check_canonical(1)?;
        let signing_tbs = &signing.cert.tbs_certificate;
        tbs.issuer = signing_tbs.issuer.clone();
        if let Some(aki) = extensions
            .iter_mut()
            .find(|ext| ext.extn_id == AUTHORITY_KEY_IDENTIFIER)
        {
            let final_issuer_aki = signing_tbs
                .extensions
                .iter()
                .flatten()
                .find(|ext| ext.extn_id == AUTHORITY_KEY_IDENTIFIER)
                .ok_or(ChainError::SigningCertificateWithoutAki)?;
            aki.extn_value = final_issuer_aki.extn_value.clone();
        }
    }

    // Extensions is SIZE (1..MAX) (RFC 5280 §4.1): when the poison was the only extension, the
    // field goes, as it would from the final certificate minus its SCT list.
    tbs.extensions = if extensions.is_empty() {
        None
    } else {
        Some(extensions)
    };
    tbs.to_der().map_err(encoding)
}
