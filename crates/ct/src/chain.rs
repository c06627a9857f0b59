//! Checks on submitted chains (add-chain, add-pre-chain).
