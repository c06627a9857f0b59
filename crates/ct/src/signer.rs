//! Signers and verifiers.
