//! The store's bounds, named: what one replication read returns, the smallest log segment, and
//! what the CT hash indexes (leaf hashes, entry keys) hold in memory.

/// Largest number of entries one replication read returns; it asks again for the rest.
pub(crate) const REPLICATION_READ_ENTRIES_MAX: usize = 4096;
/// Encoded bytes of entries read for one replication message (at least one entry is always
/// read): keeps an append well under the transport's message limit however large entries are.
pub const REPLICATION_READ_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The smallest segment size that holds a header and a record header (32 + 16 bytes; the
/// segment log asserts the sum against its format).
pub const SEGMENT_BYTES_MIN: u64 = 32 + 16;

/// Records a CT hash index keeps in memory before they are written as a run: 65,536 (a few
/// MiB). Also what a restart reads back (from the tiles, or the entries), at most, and the
/// records per round when a store from before the entry-key index builds it.
pub(crate) const FRESH_RECORDS_MAX: usize = 1 << 16;
/// Words (8 bytes) per hash-index filter segment, at most: 64 KiB, what a run being written
/// holds of its filter in memory.
pub(crate) const FILTER_SEGMENT_WORDS_MAX: u64 = 8192;
/// Bytes of Bloom filters the leaf index keeps in memory by default: 128 MiB, the filters of
/// 1.07 × 10^8 records at `FILTER_BITS_PER_RECORD` (10) bits. A log of 10^8 entries keeps all of
/// its filters (119 MiB), and a node's store, about 165 MiB without them at that size, stays
/// well under its 512 MiB target whatever the log's size: past the bound, filters are dropped,
/// not added.
pub(crate) const LEAF_INDEX_FILTER_BYTES_MAX: usize = 128 << 20;
/// Bytes of Bloom filters the entry-key index keeps in memory by default: 64 MiB, the filters of
/// 5.4 × 10^7 records. Every add-chain of a certificate older than the replicated state's dedupe
/// window (or new) probes this index, usually for a key it does not hold; past the bound the
/// largest runs keep their filters (see `ct_hash_index.rs`), and a node's store stays under its
/// 512 MiB target beside the leaf index's 128 MiB.
pub(crate) const ENTRY_INDEX_FILTER_BYTES_MAX: usize = 64 << 20;
/// Interpolation steps a lookup in an index's in-memory records takes before it bisects what is
/// left: SHA-256 hashes are spread evenly, so two or three steps find the place among tens of
/// thousands, and the cap keeps hashes bunched on purpose from costing more than bisecting.
pub(crate) const INTERPOLATION_STEPS_MAX: usize = 4;
