//! Every bound the state machine enforces, in one place.
//!
//! These are part of the replicated behaviour: changing one changes what `apply` answers, so
//! every replica must run the same values. They are constants, not configuration, for that
//! reason.

/// Longest lease name, in bytes.
pub const LEASE_NAME_BYTES_MAX: usize = 256;
/// Longest lease holder identity, in bytes.
pub const HOLDER_ID_BYTES_MAX: usize = 256;
/// Shortest lease TTL. Shorter leases would expire within ordinary clock skew and network delay.
pub const LEASE_TTL_MS_MIN: u64 = 500;
/// Longest lease TTL: one day. A holder that needs longer renews.
pub const LEASE_TTL_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most leases held at once; an acquire beyond it is refused until others expire or are released.
pub const LEASES_MAX: usize = 100_000;
/// Most expired leases one `Tick` removes; the rest go on the next tick. Expiry itself never
/// waits for a tick (every lookup compares against the clock), so this bounds work, not safety.
pub const TICK_EXPIRED_LEASES_MAX: usize = 1024;

/// Longest HTTP-01 challenge token, in bytes (RFC 8555 tokens are about 43).
pub const CHALLENGE_TOKEN_BYTES_MAX: usize = 256;
/// Longest stored key authorization, in bytes.
pub const KEY_AUTHORIZATION_BYTES_MAX: usize = 1024;
/// Most challenge tokens stored at once.
pub const CHALLENGES_MAX: usize = 100_000;

/// Largest page a list query returns.
pub const LIST_PAGE_MAX: usize = 1000;

/// Largest MerkleTreeLeaf accepted (a certificate or TBSCertificate of up to 64 KiB, with room).
pub const CT_LEAF_INPUT_BYTES_MAX: usize = 128 * 1024;
/// Largest get-entries `extra_data` accepted (a chain of up to ten 64 KiB certificates).
pub const CT_EXTRA_DATA_BYTES_MAX: usize = 704 * 1024;
/// Largest SCT encoding accepted.
pub const CT_SCT_BYTES_MAX: usize = 4 * 1024;
/// Largest STH signature encoding accepted.
pub const CT_SIGNATURE_BYTES_MAX: usize = 1024;
/// Most submissions in one `Add` command.
pub const CT_ADD_BATCH_MAX: usize = 4096;
/// Most entries numbered by one `Sequence` command.
pub const CT_SEQUENCE_BATCH_MAX: usize = 10_000;
/// Most entries one `CleanUp` command drops.
pub const CT_CLEANUP_BATCH_MAX: usize = 10_000;
/// Most nodes whose reports are kept.
pub const CT_NODES_MAX: usize = 64;
/// Cleaned-up entries the replicated state remembers for deduplication by default: older
/// duplicates are caught by the submitting node's local entry-key index, and this is how far a
/// node's local tree may lag behind the clean-up point and still take submissions.
pub const CT_DEDUPE_WINDOW_ENTRIES_DEFAULT: u64 = 100_000;
/// The largest dedupe window an operator may set (each entry costs about 120 bytes of memory on
/// every node).
pub const CT_DEDUPE_WINDOW_ENTRIES_MAX: u64 = 10_000_000;
/// Hard bound on unsequenced entries; the configured watermark sits at or below it.
pub const CT_UNSEQUENCED_MAX: usize = 1_000_000;
/// Longest mirror source URL.
pub const CT_MIRROR_URL_BYTES_MAX: usize = 2048;
/// Largest source log public key (DER SubjectPublicKeyInfo; RSA-4096 is about 550 bytes).
pub const CT_PUBLIC_KEY_BYTES_MAX: usize = 1024;
/// Most entries one `MirrorAppend` command carries.
pub const CT_MIRROR_BATCH_MAX: usize = 1024;
/// Most source STHs a mirror keeps as candidates for serving.
pub const CT_MIRROR_TARGETS_MAX: usize = 64;

/// Longest DNS name in a session, in bytes (RFC 1035 §2.3.4, without the trailing dot).
pub const DNS_NAME_BYTES_MAX: usize = 253;
/// Longest label of a DNS name, in bytes (RFC 1035 §2.3.4).
pub const DNS_LABEL_BYTES_MAX: usize = 63;
/// Longest worker identity, in bytes.
pub const WORKER_ID_BYTES_MAX: usize = 128;
/// Longest client idempotency key of a session create, in bytes.
pub const REQUEST_KEY_BYTES_MAX: usize = 128;
/// Longest free-text reason (a failure, a kill, a test error, a release note), in bytes.
pub const REASON_BYTES_MAX: usize = 1024;
/// Largest CSR a session accepts (DER), in bytes. Real CSRs are under 4 KiB even with RSA-4096
/// and a hundred names.
pub const SESSION_CSR_BYTES_MAX: usize = 16 * 1024;
/// Largest issued certificate chain a session stores (PEM), in bytes.
pub const SESSION_CERT_BYTES_MAX: usize = 64 * 1024;
/// Most names one session certifies (the common limit of public CAs).
pub const SESSION_NAMES_MAX: usize = 100;
/// Most sessions one `Claim` hands out.
pub const SESSION_CLAIM_BATCH_MAX: u32 = 100;
/// Most completions one `CompleteBatch` carries: as many as one claim hands out, so a worker
/// finishes a claimed batch in one command.
pub const SESSION_COMPLETE_BATCH_MAX: usize = 100;
/// Shortest claim visibility: a worker needs at least this long to do anything.
pub const SESSION_VISIBILITY_MS_MIN: u64 = 1_000;
/// Longest claim visibility, and longest `Extend`: one hour. A longer step extends its claim.
pub const SESSION_VISIBILITY_MS_MAX: u64 = 60 * 60 * 1000;
/// Longest a session may be held out of its queue by a release delay or the configured test
/// retry delay: one hour.
pub const SESSION_DELAY_MS_MAX: u64 = 60 * 60 * 1000;
/// Hard bound on stored sessions (all of them: queued, claimed, done and archived); the
/// configured `sessions_max` sits at or below it.
pub const SESSIONS_MAX: usize = 1_000_000;
/// Most sessions each of a tick's four steps (reclaim, time out, archive, delete) touches; the
/// rest wait for the next tick, which the report asks for. Bounds the work of one command.
pub const SESSION_TICK_BATCH_MAX: usize = 1024;

/// Longest pipeline name, node group name or switch name, in bytes.
pub const PIPELINE_NAME_BYTES_MAX: usize = 128;
/// Longest transaction owner, in bytes.
pub const PIPELINE_OWNER_BYTES_MAX: usize = 128;
/// Longest external id (a client's idempotency key for an enqueue), in bytes.
pub const PIPELINE_EXTERNAL_ID_BYTES_MAX: usize = 256;
/// Longest webhook URL, in bytes.
pub const PIPELINE_WEBHOOK_URL_BYTES_MAX: usize = 2048;
/// Largest JSON document a transaction stores (its state, its event, a progress report), in
/// bytes. Every byte is replicated on every node, so large payloads belong elsewhere.
pub const PIPELINE_JSON_BYTES_MAX: usize = 64 * 1024;
/// Most pipeline definitions.
pub const PIPELINES_MAX: usize = 1024;
/// Hard bound on stored transactions (in play, completed and archived); the configured
/// `transactions_max` sits at or below it.
pub const PIPELINE_TRANSACTIONS_MAX: usize = 1_000_000;
/// Most external ids remembered at once (each for its uniqueness window).
pub const PIPELINE_EXTERNAL_IDS_MAX: usize = 1_000_000;
/// The hard bound on `external_id_window_ms`: thirty days.
pub const PIPELINE_EXTERNAL_ID_WINDOW_MS_MAX: u64 = 30 * 24 * 60 * 60 * 1000;
/// Most transactions one `Dequeue` hands out.
pub const PIPELINE_DEQUEUE_BATCH_MAX: u32 = 100;
/// Most transactions one `EnqueueBatch` creates: one Raft entry carries them all, and a request
/// is bounded in bytes too, so this bounds the work of one command when items are small.
pub const PIPELINE_ENQUEUE_BATCH_MAX: usize = 256;
/// Most transactions one `CompleteBatch` finishes (one Raft entry, like an enqueue batch).
pub const PIPELINE_COMPLETE_BATCH_MAX: usize = 256;
/// Longest a transaction may run between two signs of life (its dequeue or a progress report)
/// before the reaper takes it back: one day.
pub const PIPELINE_RUNNING_TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Latest wake time a `Sleep` may ask for, counted from now: one day (the seed's sleep is for
/// short durations; longer waits are new transactions).
pub const PIPELINE_SLEEP_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Most switches set at once (a switch at 0 is not stored).
pub const PIPELINE_SWITCHES_MAX: usize = 10_000;
/// Most transactions sleeping on one switch: a `SetSwitch` wakes them all in one command.
pub const PIPELINE_SWITCH_SLEEPERS_MAX: usize = 1024;
/// Most webhook deliveries pending at once; past it a new event is dropped and the
/// administrator is told.
pub const PIPELINE_WEBHOOKS_MAX: usize = 1_000_000;
/// Most webhook deliveries one `TakeWebhooks` hands out.
pub const PIPELINE_WEBHOOK_BATCH_MAX: u32 = 100;
/// Most due deliveries one `TakeWebhooks` looks at (handing out, deferring for a paused URL,
/// or giving up on); bounds the work of one command.
pub const PIPELINE_WEBHOOK_SCAN_MAX: usize = 1024;
/// Longest delay between two attempts of one webhook delivery: one day.
pub const PIPELINE_WEBHOOK_BACKOFF_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The hard bound on `webhook_attempts_max`, and so on any delivery's attempts.
pub const PIPELINE_WEBHOOK_ATTEMPTS_MAX: u32 = 100;
/// Longest pause of a failing webhook URL: one day.
pub const PIPELINE_URL_PAUSE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The hard bound on `url_failure_window_ms`.
pub const PIPELINE_URL_FAILURE_WINDOW_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The hard bound on `url_failure_limit`: a URL's failure count stays below it (the count
/// restarts when it reaches the configured limit).
pub const PIPELINE_URL_FAILURE_LIMIT_MAX: u32 = 1000;
/// Most webhook URLs whose failures are counted; past it the record that would be forgotten
/// soonest makes room.
pub const PIPELINE_URLS_MAX: usize = 10_000;
/// Most administrator notices kept; past it the oldest is dropped (and counted).
pub const PIPELINE_NOTICES_MAX: usize = 1000;
/// Most recent notifications (completions and progress reports) kept for streams to resume
/// from; a reader further behind is told it missed some.
pub const PIPELINE_NOTIFICATIONS_MAX: usize = 10_000;
/// Per-minute statistics buckets kept: two hours.
pub const PIPELINE_STATS_MINUTES_KEPT: u64 = 120;
/// Per-hour statistics buckets kept: two days.
pub const PIPELINE_STATS_HOURS_KEPT: u64 = 48;
/// Per-day statistics buckets kept: five weeks.
pub const PIPELINE_STATS_DAYS_KEPT: u64 = 35;
/// Most statistics rows (bucket × pipeline) kept per resolution; past it the oldest go first.
pub const PIPELINE_STATS_ROWS_MAX: usize = 8192;
/// Most transactions (or external ids, URLs or statistics rows) each step of a tick touches;
/// the rest wait for the next tick, which the report asks for.
pub const PIPELINE_TICK_BATCH_MAX: usize = 1024;

/// Most client sessions open at once; registering past it evicts the session idle longest, if it
/// has been idle at least [`CLIENT_SESSION_EVICTABLE_IDLE_MS`] (else registration is refused).
pub const CLIENT_SESSIONS_MAX: usize = 10_000;
/// The least idle time that lets a session be evicted to make room: longer than any call's
/// deadline, so a session is never evicted between two attempts of one call (which could then
/// apply the call twice).
pub const CLIENT_SESSION_EVICTABLE_IDLE_MS: u64 = 2 * 60 * 1000;
/// Largest answer a client session keeps for a copy of its request; a larger one is replaced by
/// a note that the request was applied (a copy gets that, and is still not applied again).
pub const CLIENT_ANSWER_BYTES_MAX: usize = 64 * 1024;
/// Most bytes of answers all client sessions keep together; past it, answers are replaced by
/// notes as above until clients acknowledge theirs.
pub const CLIENT_ANSWER_BYTES_TOTAL_MAX: usize = 256 * 1024 * 1024;
/// A client session unused for this long (machine time) expires: ten minutes, far longer than
/// any call's deadline, so a session never expires between two attempts of one call.
pub const CLIENT_SESSION_IDLE_MS: u64 = 10 * 60 * 1000;
/// How far past its first outstanding request a client may number a request: also the most
/// answers one session remembers.
pub const CLIENT_OUTSTANDING_MAX: u64 = 128;
/// Most idle client sessions one `Tick` removes; the rest go on the next tick. Expiry itself
/// never waits for a tick.
pub const TICK_EXPIRED_CLIENTS_MAX: usize = 1024;

/// Most ACME accounts stored; registering past it is refused.
pub const ACME_ACCOUNTS_MAX: usize = 100_000;
/// Most ACME orders stored, in every status; creating past it is refused (rate limited).
pub const ACME_ORDERS_MAX: usize = 100_000;
/// Most orders one account keeps stored (the others are deleted after their retention).
pub const ACME_ORDERS_PER_ACCOUNT_MAX: usize = 1_000;
/// Most new orders one account creates in one [`ACME_ORDERS_WINDOW_MS`] (Let's Encrypt allows
/// 300 per three hours).
pub const ACME_ORDERS_PER_WINDOW_MAX: u32 = 300;
/// The window [`ACME_ORDERS_PER_WINDOW_MAX`] counts over: three hours.
pub const ACME_ORDERS_WINDOW_MS: u64 = 3 * 60 * 60 * 1000;
/// Most identifiers in one order (Let's Encrypt's 100; sessions certify as many).
pub const ACME_IDENTIFIERS_MAX: usize = SESSION_NAMES_MAX;
/// Most contact URLs on one account.
pub const ACME_CONTACTS_MAX: usize = 10;
/// Longest contact URL.
pub const ACME_CONTACT_BYTES_MAX: usize = 512;
/// Largest account key (a public JWK as canonical JSON; an 8192-bit RSA key is about 1.4 KiB).
pub const ACME_JWK_BYTES_MAX: usize = 2048;
/// How long a pending or ready order (and its authorizations) stays usable: seven days.
pub const ACME_ORDER_LIFETIME_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// How long an order is kept after its creation before a tick deletes it (its certificate stays
/// downloadable until then); an order whose issuance still runs is kept until it ends.
pub const ACME_ORDER_RETENTION_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// Most orders one `Tick` deletes; the rest go on later ticks.
pub const TICK_ACME_ORDERS_MAX: usize = 1024;
/// Most revoked serial numbers recorded (the CRL's entries).
pub const ACME_REVOCATIONS_MAX: usize = 1_000_000;
/// Longest serial number, in hex digits (RFC 5280 §4.1.2.2: at most 20 octets).
pub const ACME_SERIAL_HEX_MAX: usize = 40;
