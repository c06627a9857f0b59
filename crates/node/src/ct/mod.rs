//! The node's part in the clustered CT log (RFC 6962, seed 004): the [`CtNode`](node::CtNode)
//! and its background round, the mirror of another log, the other nodes as peers, and the
//! RFC 6962 HTTP API.
//!
//! The reads every API shares ([`reads`]), the conversions between `certus-core`'s and
//! `certus-ct`'s types ([`convert`]) and the round's writes ([`propose`]) have files of their
//! own, so the mirror and the peers use them without reaching back into [`node`].

pub mod convert;
#[cfg(not(madsim))]
pub mod http;
#[cfg(not(madsim))]
pub mod mirror;
pub mod node;
pub mod peers;
pub mod propose;
pub mod reads;
pub mod setup;
#[cfg(not(madsim))]
pub mod source;
