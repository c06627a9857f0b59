use super::*;
use crate::limits::{PIPELINE_NOTICES_MAX, PIPELINE_NOTIFICATIONS_MAX, PIPELINE_STATS_ROWS_MAX};

const T0: u64 = 1_700_000_000_000;
const SECOND_MS: u64 = 1_000;

fn pipeline(s: &str) -> PipelineName {
    PipelineName::new(s).unwrap()
}
fn group(s: &str) -> NodeGroup {
    NodeGroup::new(s).unwrap()
}
fn worker(s: &str) -> WorkerId {
    WorkerId::new(s).unwrap()
}
fn json(s: &str) -> JsonDocument {
    JsonDocument::new(s).unwrap()
}
fn url(s: &str) -> WebhookUrl {
    WebhookUrl::new(s).unwrap()
}
fn switch(s: &str) -> SwitchName {
    SwitchName::new(s).unwrap()
}
fn external(s: &str) -> ExternalId {
    ExternalId::new(s).unwrap()
}
fn reason(s: &str) -> crate::sessions::Reason {
    crate::sessions::Reason::new(s).unwrap()
}

/// A new transaction for pipeline `p`, in queue in, without external id or webhook.
fn new_tx() -> NewTransaction {
    NewTransaction {
        owner: Owner::new("acme").unwrap(),
        external_id: None,
        route: Route::Pipeline(pipeline("p")),
        queue: QueueType::In,
        state: json(r#"{"order":1}"#),
        event: Some(json(r#"{"step":"start"}"#)),
        metadata: TxMetadata::default(),
    }
}

fn with_webhook(mut new: NewTransaction) -> NewTransaction {
    new.metadata.webhook_url = Some(url("https://hooks.example/tx"));
    new
}

/// Drives one pipelines table with increasing log indexes and a clock the test moves, checking
/// every invariant after each command and that a refused command changed nothing.
struct Machine {
    table: Pipelines,
    index: u64,
    now_ms: u64,
}

impl Machine {
    /// A table with pipeline `p` on node group `g`.
    fn new() -> Machine {
        let mut m = Machine {
            table: Pipelines::default(),
            index: 0,
            now_ms: T0,
        };
        m.ok(PipelineCommand::Define {
            name: pipeline("p"),
            node_group: group("g"),
        });
        m
    }

    fn run(&mut self, command: PipelineCommand) -> Result<PipelineReply, PipelineError> {
        self.index += 1;
        let before = self.table.clone();
        let reply = self.table.apply(command, self.now_ms, self.index);
        self.table.check(self.now_ms).unwrap();
        if reply.is_err() {
            assert_eq!(self.table, before, "a refused command changed the table");
        }
        reply
    }

    fn ok(&mut self, command: PipelineCommand) -> PipelineReply {
        self.run(command).unwrap()
    }

    fn refused(&mut self, command: PipelineCommand) -> PipelineError {
        self.run(command).unwrap_err()
    }

    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
    }

    fn tick(&mut self) -> PipelineTickReport {
        self.index += 1;
        let report = self.table.tick(self.now_ms, self.index);
        self.table.check(self.now_ms).unwrap();
        report
    }

    fn configure(&mut self, change: impl FnOnce(&mut PipelineConfig)) {
        let mut config = self.table.config;
        change(&mut config);
        self.ok(PipelineCommand::Configure(config));
    }

    fn enqueue_new(&mut self, new: NewTransaction) -> TransactionId {
        match self.ok(PipelineCommand::Enqueue(new)) {
            PipelineReply::Enqueued {
                transaction,
                duplicate: false,
            } => transaction,
            other => panic!("enqueue answered {other:?}"),
        }
    }

    fn enqueue(&mut self, queue: QueueType) -> TransactionId {
        self.enqueue_new(NewTransaction { queue, ..new_tx() })
    }

    fn dequeue(&mut self, node_group: &str, max: u32) -> Vec<Transaction> {
        match self.ok(PipelineCommand::Dequeue {
            node_group: group(node_group),
            worker: worker("w-1"),
            max,
        }) {
            PipelineReply::Dequeued(transactions) => transactions,
            other => panic!("dequeue answered {other:?}"),
        }
    }

    /// Dequeues one transaction of `g`, which must be `id`, and returns its token.
    fn dequeue_one(&mut self, id: TransactionId) -> u64 {
        let node_group = self.tx(id).node_group.to_string();
        let dequeued = self.dequeue(&node_group, 1);
        assert_eq!(ids(&dequeued), [id]);
        dequeued[0].claim().unwrap().token
    }

    fn complete(
        &mut self,
        id: TransactionId,
        token: u64,
        status: TxStatus,
    ) -> Result<PipelineReply, PipelineError> {
        self.run(PipelineCommand::Complete {
            transaction: id,
            token,
            status,
            state: None,
        })
    }

    /// Enqueues, dequeues and completes a transaction made by `new` with `status`.
    fn finished(&mut self, new: NewTransaction, status: TxStatus) -> TransactionId {
        let id = self.enqueue_new(new);
        let token = self.dequeue_one(id);
        self.complete(id, token, status).unwrap();
        id
    }

    fn tx(&self, id: TransactionId) -> &Transaction {
        self.table.get(id).unwrap()
    }

    fn queue(&self, node_group: &str, queue: QueueType) -> Vec<TransactionId> {
        self.table
            .queue(&group(node_group), queue, LIST_PAGE_MAX)
            .into_iter()
            .map(|tx| tx.id)
            .collect()
    }

    fn take_webhooks(&mut self, max: u32) -> Vec<Webhook> {
        match self.ok(PipelineCommand::TakeWebhooks { max }) {
            PipelineReply::WebhooksTaken(hooks) => hooks,
            other => panic!("take answered {other:?}"),
        }
    }

    fn webhook_result(
        &mut self,
        hook: &Webhook,
        outcome: WebhookOutcome,
    ) -> Result<WebhookSettlement, PipelineError> {
        match self.run(PipelineCommand::WebhookResult {
            event: hook.event,
            attempt: hook.attempts,
            outcome,
        })? {
            PipelineReply::WebhookRecorded { event, settlement } => {
                assert_eq!(event, hook.event);
                Ok(settlement)
            }
            other => panic!("webhook result answered {other:?}"),
        }
    }

    fn notices(&self) -> Vec<NoticeKind> {
        self.table
            .webhooks()
            .notices(None, LIST_PAGE_MAX)
            .into_iter()
            .map(|notice| notice.kind.clone())
            .collect()
    }
}

fn ids(transactions: &[Transaction]) -> Vec<TransactionId> {
    transactions.iter().map(|tx| tx.id).collect()
}

fn failed(why: &str) -> WebhookOutcome {
    WebhookOutcome::Failed {
        reason: reason(why),
    }
}

#[test]
fn names_urls_and_json_documents_are_validated_when_made_and_when_decoded() {
    assert!(PipelineName::new("issue/dv-2024.v1").is_ok());
    assert!(PipelineName::new("has space").is_err());
    assert!(NodeGroup::new("n".repeat(129)).is_err());
    assert!(Owner::new("tenant#42").is_ok());
    assert!(ExternalId::new("order 42").is_err());
    assert!(ExternalId::new("o".repeat(257)).is_err());
    assert!(WebhookUrl::new("https://hooks.example/a?b=c").is_ok());
    let message = WebhookUrl::new("ftp://hooks.example")
        .unwrap_err()
        .to_string();
    assert!(message.contains("http:// or https://"), "{message}");
    let message = WebhookUrl::new("https:///path").unwrap_err().to_string();
    assert!(message.contains("no host"), "{message}");
    for good in [
        "{}",
        "[1, 2]",
        r#"{"a": {"b": null}}"#,
        "\"text\"",
        "42",
        " true\n",
    ] {
        assert!(JsonDocument::new(good).is_ok(), "{good}");
    }
    for bad in ["{", "{} {}", "{'a': 1}", "[1,]", "nul"] {
        let message = JsonDocument::new(bad).unwrap_err().to_string();
        assert!(message.contains("not one JSON value"), "{bad}: {message}");
    }
    assert_eq!(
        JsonDocument::new(""),
        Err(TextError::Empty {
            kind: TextKind::Json
        })
    );
    let big = format!("\"{}\"", "x".repeat(PIPELINE_JSON_BYTES_MAX - 1));
    assert!(matches!(
        JsonDocument::new(big),
        Err(TextError::TooLong {
            kind: TextKind::Json,
            ..
        })
    ));
    // Decoding runs the same checks.
    let encoded = postcard::to_stdvec("{not json").unwrap();
    assert!(postcard::from_bytes::<JsonDocument>(&encoded).is_err());
    let encoded = postcard::to_stdvec("mailto:x").unwrap();
    assert!(postcard::from_bytes::<WebhookUrl>(&encoded).is_err());
}

#[test]
fn pipelines_are_defined_moved_and_deleted_only_when_nothing_is_in_play() {
    let mut m = Machine::new();
    assert_eq!(
        m.table.definition(&pipeline("p")).unwrap().node_group,
        group("g")
    );
    let moved = m.ok(PipelineCommand::Define {
        name: pipeline("p"),
        node_group: group("h"),
    });
    assert_eq!(
        moved,
        PipelineReply::Defined {
            previous: Some(group("g"))
        }
    );
    let id = m.enqueue(QueueType::In);
    assert_eq!(m.tx(id).node_group, group("h"));
    let error = m.refused(PipelineCommand::Delete {
        name: pipeline("p"),
    });
    assert_eq!(
        error,
        PipelineError::PipelineInUse {
            name: pipeline("p"),
            in_play: 1
        }
    );
    m.ok(PipelineCommand::Cancel { transaction: id });
    // Finished transactions do not hold their pipeline.
    assert_eq!(
        m.ok(PipelineCommand::Delete {
            name: pipeline("p")
        }),
        PipelineReply::Deleted { existed: true }
    );
    assert_eq!(
        m.ok(PipelineCommand::Delete {
            name: pipeline("p")
        }),
        PipelineReply::Deleted { existed: false }
    );
    let error = m.refused(PipelineCommand::Enqueue(new_tx()));
    assert_eq!(
        error,
        PipelineError::UnknownPipeline {
            name: pipeline("p")
        }
    );
    assert_eq!(m.tx(id).status(), TxStatus::Aborted);
}

#[test]
fn at_most_pipelines_max_are_defined() {
    let mut m = Machine::new();
    for i in 1..PIPELINES_MAX {
        m.table
            .define(pipeline(&format!("p{i}")), group("g"), m.now_ms)
            .unwrap();
    }
    let error = m.refused(PipelineCommand::Define {
        name: pipeline("one-too-many"),
        node_group: group("g"),
    });
    assert!(
        matches!(error, PipelineError::TooMany { max: 1024, .. }),
        "{error}"
    );
    // Redefining an existing one still works.
    m.ok(PipelineCommand::Define {
        name: pipeline("p7"),
        node_group: group("other"),
    });
    let page = m.table.definitions(Some(&pipeline("p1")), 2);
    assert_eq!(
        page.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["p10", "p100"]
    );
}

#[test]
fn enqueue_saves_the_transaction_and_queues_it_in_its_pipelines_node_group() {
    let mut m = Machine::new();
    m.index = 41;
    let id = m.enqueue(QueueType::In);
    assert_eq!(id, TransactionId(42));
    let tx = m.tx(id);
    assert_eq!(tx.status(), TxStatus::Queued);
    assert_eq!(tx.pipeline, Some(pipeline("p")));
    assert_eq!(tx.node_group, group("g"));
    assert_eq!(tx.state, json(r#"{"order":1}"#));
    assert_eq!(tx.event, Some(json(r#"{"step":"start"}"#)));
    assert_eq!(
        tx.queued(),
        Some(QueueEntry {
            queue: QueueType::In,
            seq: 1,
            at_ms: T0
        })
    );
    assert_eq!((tx.created_at_ms, tx.attempts, tx.version), (T0, 0, 42));
    assert_eq!(m.queue("g", QueueType::In), [id]);
    assert_eq!(
        m.table.group_counts(&group("g")),
        GroupCounts {
            queued: [0, 0, 1],
            running: 0,
            sleeping: 0
        }
    );
    assert_eq!(m.table.status_count(TxStatus::Queued), 1);
    let rows = m.table.stats().rows(Resolution::Minute, 0, 10);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].pipeline, Some(pipeline("p")));
    assert_eq!(rows[0].counts.enqueued, 1);
    // Routed by node group: no pipeline, the group's own queue.
    let direct = m.enqueue_new(NewTransaction {
        route: Route::NodeGroup(group("direct")),
        queue: QueueType::Admin,
        ..new_tx()
    });
    assert_eq!(m.tx(direct).pipeline, None);
    assert_eq!(m.queue("direct", QueueType::Admin), [direct]);
}

#[test]
fn an_external_id_is_taken_for_its_window_and_a_repeat_answers_the_first_transaction() {
    let mut m = Machine::new();
    m.configure(|c| c.external_id_window_ms = 10 * SECOND_MS);
    let keyed = |key: &str| NewTransaction {
        external_id: Some(external(key)),
        ..new_tx()
    };
    let first = m.enqueue_new(keyed("order-1"));
    let before = m.table.clone();
    m.advance(9 * SECOND_MS);
    // Even with other content and a pipeline that no longer matters, the first one wins.
    let repeat = m.ok(PipelineCommand::Enqueue(NewTransaction {
        route: Route::Pipeline(pipeline("undefined")),
        ..keyed("order-1")
    }));
    assert_eq!(
        repeat,
        PipelineReply::Enqueued {
            transaction: first,
            duplicate: true
        }
    );
    assert_eq!(m.table, before, "a duplicate enqueue changed the table");
    assert_eq!(
        m.table
            .by_external_id(&external("order-1"), m.now_ms)
            .map(|tx| tx.id),
        Some(first)
    );
    // At the end of the window the id is free, before any tick removed it.
    m.advance(SECOND_MS);
    assert_eq!(m.table.by_external_id(&external("order-1"), m.now_ms), None);
    let second = m.enqueue_new(keyed("order-1"));
    assert_ne!(second, first);
    assert_eq!(m.tx(second).external_id, Some(external("order-1")));
    // The tick ends windows.
    let other = m.enqueue_new(keyed("order-2"));
    m.advance(10 * SECOND_MS);
    let report = m.tick();
    assert_eq!(report.external_ids_expired, 2);
    assert!(m.table.external_ids.is_empty());
    assert_eq!(m.tx(other).external_id, Some(external("order-2")));
}

#[test]
fn transactions_max_counts_every_stored_transaction() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.transactions_max = 2;
        c.archive_delay_ms = 0;
        c.archive_retention_ms = 1;
    });
    let first = m.finished(new_tx(), TxStatus::Success);
    m.enqueue(QueueType::In);
    let error = m.refused(PipelineCommand::Enqueue(new_tx()));
    assert!(
        matches!(error, PipelineError::TooMany { max: 2, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("transactions_max"), "{error}");
    // Archived still counts; deleted does not.
    let report = m.tick();
    assert_eq!(report.archived, [first]);
    assert!(report.deleted.is_empty());
    m.refused(PipelineCommand::Enqueue(new_tx()));
    m.advance(1);
    assert_eq!(m.tick().deleted, [first]);
    m.enqueue(QueueType::In);
}

#[test]
fn dequeue_serves_admin_then_out_then_in_each_first_in_first_out() {
    let mut m = Machine::new();
    let in1 = m.enqueue(QueueType::In);
    let out1 = m.enqueue(QueueType::Out);
    let admin1 = m.enqueue(QueueType::Admin);
    let in2 = m.enqueue(QueueType::In);
    let out2 = m.enqueue(QueueType::Out);
    let admin2 = m.enqueue(QueueType::Admin);
    // Another group's queues are not touched.
    let elsewhere = m.enqueue_new(NewTransaction {
        route: Route::NodeGroup(group("other")),
        queue: QueueType::Admin,
        ..new_tx()
    });
    let first = m.dequeue("g", 3);
    assert_eq!(ids(&first), [admin1, admin2, out1]);
    let rest = m.dequeue("g", 10);
    assert_eq!(ids(&rest), [out2, in1, in2]);
    assert!(m.dequeue("g", 10).is_empty());
    assert_eq!(m.queue("other", QueueType::Admin), [elsewhere]);
    // Each remembers the queue it came from, for the reaper.
    let queues: Vec<QueueType> = first
        .iter()
        .chain(&rest)
        .map(|tx| tx.claim().unwrap().queue)
        .collect();
    let (admin, out, r#in) = (QueueType::Admin, QueueType::Out, QueueType::In);
    assert_eq!(queues, [admin, admin, out, out, r#in, r#in]);
}

#[test]
fn dequeue_claims_with_one_token_per_command_and_a_deadline() {
    let mut m = Machine::new();
    m.configure(|c| c.running_timeout_ms = 30 * SECOND_MS);
    let a = m.enqueue(QueueType::In);
    let b = m.enqueue(QueueType::In);
    m.index = 99;
    m.advance(5);
    let dequeued = m.dequeue("g", 2);
    for tx in &dequeued {
        assert_eq!(tx.status(), TxStatus::Running);
        assert_eq!(
            tx.claim().cloned(),
            Some(TxClaim {
                worker: worker("w-1"),
                token: 100,
                started_at_ms: T0 + 5,
                deadline_ms: T0 + 5 + 30 * SECOND_MS,
                queue: QueueType::In,
            })
        );
        assert_eq!((tx.attempts, tx.last_started_at_ms), (1, Some(T0 + 5)));
        assert_eq!(tx, m.tx(tx.id), "the reply is the stored transaction");
    }
    assert_eq!(m.table.group_counts(&group("g")).running, 2);
    // The processing set lists them by start time: the stuck list.
    m.advance(60 * SECOND_MS);
    let stuck: Vec<TransactionId> = m
        .table
        .stuck(60 * SECOND_MS, m.now_ms, 10)
        .into_iter()
        .map(|tx| tx.id)
        .collect();
    assert_eq!(stuck, [a, b]);
    assert!(m.table.stuck(61 * SECOND_MS, m.now_ms, 10).is_empty());
    // Nothing to take changes nothing; a batch out of range is refused.
    let before = m.table.clone();
    assert!(m.dequeue("g", 5).is_empty());
    assert_eq!(m.table, before);
    for max in [0, PIPELINE_DEQUEUE_BATCH_MAX + 1] {
        let error = m.refused(PipelineCommand::Dequeue {
            node_group: group("g"),
            worker: worker("w"),
            max,
        });
        assert!(matches!(error, PipelineError::OutOfRange { .. }), "{error}");
    }
}

#[test]
fn commands_sharing_a_log_entry_get_distinct_increasing_ids_and_tokens() {
    let mut m = Machine::new();
    m.index = 10;
    let mut issued = Vec::new();
    for _ in 0..3 {
        let reply = m
            .table
            .apply(PipelineCommand::Enqueue(new_tx()), m.now_ms, 10);
        let Ok(PipelineReply::Enqueued { transaction, .. }) = reply else {
            panic!("{reply:?}");
        };
        issued.push(transaction.0);
    }
    assert_eq!(issued, [10, 11, 12]);
    // The next entry's index is below the last id: ids still increase.
    let next = m
        .table
        .apply(PipelineCommand::Enqueue(new_tx()), m.now_ms, 11);
    assert!(matches!(
        next,
        Ok(PipelineReply::Enqueued {
            transaction: TransactionId(13),
            ..
        })
    ));
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let reply = m.table.apply(
            PipelineCommand::Dequeue {
                node_group: group("g"),
                worker: worker("w"),
                max: 1,
            },
            m.now_ms,
            12,
        );
        let Ok(PipelineReply::Dequeued(txs)) = reply else {
            panic!("{reply:?}");
        };
        tokens.push(txs[0].claim().unwrap().token);
    }
    assert_eq!(tokens, [12, 13]);
    m.table.check(m.now_ms).unwrap();
}

#[test]
fn complete_finishes_a_running_transaction_with_a_terminal_status() {
    let mut m = Machine::new();
    let id = m.enqueue_new(with_webhook(new_tx()));
    let token = m.dequeue_one(id);
    m.advance(7);
    for status in [TxStatus::Queued, TxStatus::Running, TxStatus::Sleeping] {
        let error = m.refused(PipelineCommand::Complete {
            transaction: id,
            token,
            status,
            state: None,
        });
        assert_eq!(error, PipelineError::NotTerminal { status });
    }
    let error = m.refused(PipelineCommand::Complete {
        transaction: id,
        token: token + 1,
        status: TxStatus::Success,
        state: None,
    });
    assert!(matches!(error, PipelineError::StaleClaim { .. }), "{error}");
    let reply = m.ok(PipelineCommand::Complete {
        transaction: id,
        token,
        status: TxStatus::Success,
        state: Some(json(r#"{"certificate":"..."}"#)),
    });
    assert_eq!(
        reply,
        PipelineReply::Completed {
            transaction: id,
            status: TxStatus::Success
        }
    );
    let tx = m.tx(id);
    assert_eq!(tx.status(), TxStatus::Success);
    assert_eq!(tx.state, json(r#"{"certificate":"..."}"#));
    assert_eq!((tx.event.as_ref(), tx.claim()), (None, None));
    assert_eq!(tx.completed_at_ms(), Some(T0 + 7));
    // Its webhook is scheduled, due now, with an id kept across attempts.
    let hook = m.table.webhooks().for_transaction(id).unwrap().clone();
    assert_eq!(
        hook.kind,
        WebhookKind::Completed {
            status: TxStatus::Success
        }
    );
    assert_eq!((hook.next_attempt_at_ms, hook.attempts), (T0 + 7, 0));
    assert_eq!(hook.event, WebhookEventId(m.index));
    // A completion notification is numbered for the streams.
    let page = m.table.notifications().after(0, Some(&group("g")), 10);
    assert_eq!(page.notifications.len(), 1);
    assert_eq!(page.notifications[0].transaction, id);
    assert_eq!(
        page.notifications[0].kind,
        NotificationKind::Completed {
            status: TxStatus::Success
        }
    );
    let counts = m.table.stats().rows(Resolution::Day, 0, 1)[0].counts;
    assert_eq!(
        (
            counts.enqueued,
            counts.dequeued,
            counts.success,
            counts.finished()
        ),
        (1, 1, 1, 1)
    );
    // Without a webhook URL nothing is scheduled.
    let plain = m.finished(new_tx(), TxStatus::Failed);
    assert!(m.table.webhooks().for_transaction(plain).is_none());
}

#[test]
fn a_retried_step_gets_the_same_reply_and_changes_nothing() {
    let mut m = Machine::new();
    let id = m.enqueue_new(with_webhook(new_tx()));
    let token = m.dequeue_one(id);
    let first = m.complete(id, token, TxStatus::Failed).unwrap();
    let before = m.table.clone();
    m.advance(SECOND_MS);
    // The retry may even say something else: what was accepted stands.
    let again = m.complete(id, token, TxStatus::Success).unwrap();
    assert_eq!(again, first);
    assert_eq!(m.table, before, "a retried completion changed the table");
    assert_eq!(m.table.webhooks().pending_count(), 1);
    // Requeue and sleep are steps too.
    let id = m.enqueue(QueueType::In);
    let token = m.dequeue_one(id);
    let requeue = PipelineCommand::Requeue {
        transaction: id,
        token,
        route: None,
        queue: QueueType::Out,
        state: None,
        event: None,
    };
    let first = m.ok(requeue.clone());
    let before = m.table.clone();
    assert_eq!(m.ok(requeue.clone()), first);
    assert_eq!(m.table, before);
    // Once claimed again, the old token is stale for everything but its own retry.
    let newer = m.dequeue_one(id);
    assert!(newer > token);
    assert_eq!(m.ok(requeue), first);
    let error = m.complete(id, token + 100, TxStatus::Success).unwrap_err();
    assert!(matches!(error, PipelineError::StaleClaim { .. }));
}

#[test]
fn requeue_hands_a_running_transaction_to_a_queue_with_new_state() {
    let mut m = Machine::new();
    m.ok(PipelineCommand::Define {
        name: pipeline("q"),
        node_group: group("h"),
    });
    let id = m.enqueue(QueueType::In);
    let token = m.dequeue_one(id);
    let reply = m.ok(PipelineCommand::Requeue {
        transaction: id,
        token,
        route: Some(Route::Pipeline(pipeline("q"))),
        queue: QueueType::In,
        state: Some(json(r#"{"order":1,"step":2}"#)),
        event: Some(json(r#"{"step":"issue"}"#)),
    });
    assert_eq!(
        reply,
        PipelineReply::Requeued {
            transaction: id,
            node_group: group("h"),
            queue: QueueType::In
        }
    );
    let tx = m.tx(id);
    assert_eq!((tx.status(), tx.attempts), (TxStatus::Queued, 0));
    assert_eq!(tx.pipeline, Some(pipeline("q")));
    assert_eq!(tx.state, json(r#"{"order":1,"step":2}"#));
    assert_eq!(tx.event, Some(json(r#"{"step":"issue"}"#)));
    assert!(tx.claim().is_none());
    assert_eq!(m.queue("h", QueueType::In), [id]);
    assert!(
        m.table.stuck(0, m.now_ms, 10).is_empty(),
        "it left processing"
    );
    // Back to the first node group's out queue by node group: the pipeline stays.
    let token = m.dequeue_one(id);
    m.ok(PipelineCommand::Requeue {
        transaction: id,
        token,
        route: Some(Route::NodeGroup(group("g"))),
        queue: QueueType::Out,
        state: None,
        event: None,
    });
    assert_eq!(m.queue("g", QueueType::Out), [id]);
    assert_eq!(m.tx(id).pipeline, Some(pipeline("q")));
    assert_eq!(m.tx(id).state, json(r#"{"order":1,"step":2}"#));
    // To an undefined pipeline: refused.
    let token = m.dequeue_one(id);
    let error = m.refused(PipelineCommand::Requeue {
        transaction: id,
        token,
        route: Some(Route::Pipeline(pipeline("nope"))),
        queue: QueueType::In,
        state: None,
        event: None,
    });
    assert!(matches!(error, PipelineError::UnknownPipeline { .. }));
    // A queued transaction cannot be requeued: it is not running.
    m.ok(PipelineCommand::Requeue {
        transaction: id,
        token,
        route: None,
        queue: QueueType::In,
        state: None,
        event: None,
    });
    let error = m.refused(PipelineCommand::Requeue {
        transaction: id,
        token: token + 1,
        route: None,
        queue: QueueType::In,
        state: None,
        event: None,
    });
    assert_eq!(
        error,
        PipelineError::StaleClaim {
            transaction: id,
            token: token + 1,
            status: TxStatus::Queued
        }
    );
}

#[test]
fn progress_records_the_report_moves_the_deadline_and_notifies() {
    let mut m = Machine::new();
    m.configure(|c| c.running_timeout_ms = 10 * SECOND_MS);
    let mut new = with_webhook(new_tx());
    new.metadata.progress_reports = true;
    let id = m.enqueue_new(new);
    let token = m.dequeue_one(id);
    m.advance(8 * SECOND_MS);
    let reply = m.ok(PipelineCommand::Progress {
        transaction: id,
        token,
        report: json(r#"{"percent":50}"#),
    });
    assert_eq!(
        reply,
        PipelineReply::ProgressRecorded {
            transaction: id,
            deadline_ms: m.now_ms + 10 * SECOND_MS,
            cancel_requested: false
        }
    );
    assert_eq!(m.tx(id).progress, Some(json(r#"{"percent":50}"#)));
    let progress_hook = m.table.webhooks().for_transaction(id).unwrap().clone();
    assert_eq!(progress_hook.kind, WebhookKind::Progress);
    // Past the first deadline, but alive by its report: not reaped.
    m.advance(5 * SECOND_MS);
    assert!(m.tick().retried.is_empty());
    // The completion replaces the undelivered progress event.
    m.complete(id, token, TxStatus::Success).unwrap();
    let hook = m.table.webhooks().for_transaction(id).unwrap();
    assert_ne!(hook.event, progress_hook.event);
    assert_eq!(m.table.webhooks().pending_count(), 1);
    let kinds: Vec<NotificationKind> = m
        .table
        .notifications()
        .after(0, None, 10)
        .notifications
        .iter()
        .map(|n| n.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            NotificationKind::Progress,
            NotificationKind::Completed {
                status: TxStatus::Success
            }
        ]
    );
    // Progress needs the current claim.
    let error = m.refused(PipelineCommand::Progress {
        transaction: id,
        token,
        report: json("{}"),
    });
    assert!(matches!(
        error,
        PipelineError::StaleClaim {
            status: TxStatus::Success,
            ..
        }
    ));
    // Without progress_reports, a report is recorded and notified but not sent by webhook.
    let quiet = m.enqueue_new(with_webhook(new_tx()));
    let token = m.dequeue_one(quiet);
    m.ok(PipelineCommand::Progress {
        transaction: quiet,
        token,
        report: json("1"),
    });
    assert!(m.table.webhooks().for_transaction(quiet).is_none());
}

#[test]
fn a_sleeper_wakes_at_its_time_into_the_queue_it_chose() {
    let mut m = Machine::new();
    let id = m.enqueue(QueueType::In);
    let token = m.dequeue_one(id);
    let until_ms = m.now_ms + 30 * SECOND_MS;
    let reply = m.ok(PipelineCommand::Sleep {
        transaction: id,
        token,
        until_ms,
        switch: None,
        queue: QueueType::Out,
        state: Some(json(r#"{"waiting":"upstream"}"#)),
    });
    assert_eq!(
        reply,
        PipelineReply::Sleeping {
            transaction: id,
            until_ms
        }
    );
    let tx = m.tx(id);
    assert_eq!(tx.status(), TxStatus::Sleeping);
    assert_eq!(tx.state, json(r#"{"waiting":"upstream"}"#));
    assert_eq!(m.table.group_counts(&group("g")).sleeping, 1);
    m.advance(30 * SECOND_MS - 1);
    assert!(m.tick().woken.is_empty());
    m.advance(1);
    assert_eq!(m.tick().woken, [id]);
    let tx = m.tx(id);
    assert_eq!((tx.status(), tx.attempts), (TxStatus::Queued, 0));
    assert_eq!(m.queue("g", QueueType::Out), [id]);
    // Too long a sleep is refused.
    let token = m.dequeue_one(id);
    let error = m.refused(PipelineCommand::Sleep {
        transaction: id,
        token,
        until_ms: m.now_ms + PIPELINE_SLEEP_MS_MAX + 1,
        switch: None,
        queue: QueueType::In,
        state: None,
    });
    assert!(matches!(error, PipelineError::OutOfRange { .. }), "{error}");
}

#[test]
fn a_switch_change_wakes_its_sleepers_and_only_a_change_does() {
    let mut m = Machine::new();
    let mut sleepers = Vec::new();
    for on in ["renewals", "renewals", "other"] {
        let id = m.enqueue(QueueType::In);
        let token = m.dequeue_one(id);
        m.ok(PipelineCommand::Sleep {
            transaction: id,
            token,
            until_ms: m.now_ms + 60 * SECOND_MS,
            switch: Some(switch(on)),
            queue: QueueType::In,
            state: None,
        });
        sleepers.push(id);
    }
    let set = |value| PipelineCommand::SetSwitch {
        name: switch("renewals"),
        value,
    };
    // Setting the value it has (0 until set) changes nothing.
    let before = m.table.clone();
    assert_eq!(
        m.ok(set(0)),
        PipelineReply::SwitchSet {
            changed: false,
            woken: vec![]
        }
    );
    assert_eq!(m.table, before);
    assert_eq!(
        m.ok(set(7)),
        PipelineReply::SwitchSet {
            changed: true,
            woken: sleepers[..2].to_vec()
        }
    );
    assert_eq!(m.table.switch(&switch("renewals")), 7);
    assert_eq!(m.queue("g", QueueType::In), sleepers[..2]);
    assert_eq!(m.tx(sleepers[2]).status(), TxStatus::Sleeping);
    // Back to 0: the switch is not stored.
    m.ok(set(0));
    assert!(m.table.switches.is_empty());
    // The sleeper on the other switch still wakes at its time.
    m.advance(60 * SECOND_MS);
    assert_eq!(m.tick().woken, [sleepers[2]]);
}

#[test]
fn a_switch_has_a_bounded_number_of_sleepers_and_switches_are_bounded() {
    let mut m = Machine::new();
    // Straight to the table: checking every invariant after each of these takes long.
    for _ in 0..PIPELINE_SWITCH_SLEEPERS_MAX {
        m.index += 1;
        let enqueued = m
            .table
            .apply(PipelineCommand::Enqueue(new_tx()), m.now_ms, m.index);
        let Ok(PipelineReply::Enqueued { transaction, .. }) = enqueued else {
            panic!("{enqueued:?}");
        };
        let dequeue = PipelineCommand::Dequeue {
            node_group: group("g"),
            worker: worker("w"),
            max: 1,
        };
        let Ok(PipelineReply::Dequeued(txs)) = m.table.apply(dequeue, m.now_ms, m.index) else {
            panic!("nothing to dequeue");
        };
        let sleep = PipelineCommand::Sleep {
            transaction,
            token: txs[0].claim().unwrap().token,
            until_ms: m.now_ms + 1,
            switch: Some(switch("s")),
            queue: QueueType::In,
            state: None,
        };
        m.table.apply(sleep, m.now_ms, m.index).unwrap();
    }
    m.table.check(m.now_ms).unwrap();
    let id = m.enqueue(QueueType::In);
    let token = m.dequeue_one(id);
    let error = m.refused(PipelineCommand::Sleep {
        transaction: id,
        token,
        until_ms: m.now_ms + 1,
        switch: Some(switch("s")),
        queue: QueueType::In,
        state: None,
    });
    assert!(
        matches!(error, PipelineError::TooMany { max: 1024, .. }),
        "{error}"
    );
    let woken = m.ok(PipelineCommand::SetSwitch {
        name: switch("s"),
        value: 1,
    });
    assert!(matches!(woken, PipelineReply::SwitchSet { ref woken, .. } if woken.len() == 1024));
    for i in 1..PIPELINE_SWITCHES_MAX {
        m.table.switches.insert(switch(&format!("s{i}")), 1);
    }
    let error = m.refused(PipelineCommand::SetSwitch {
        name: switch("new"),
        value: 1,
    });
    assert!(matches!(error, PipelineError::TooMany { .. }), "{error}");
    // Changing or clearing a stored one still works at the bound.
    m.ok(PipelineCommand::SetSwitch {
        name: switch("s"),
        value: 0,
    });
}

#[test]
fn cancel_aborts_waiting_transactions_at_once_and_flags_running_ones() {
    let mut m = Machine::new();
    let queued = m.enqueue_new(with_webhook(new_tx()));
    let cancel = |id| PipelineCommand::Cancel { transaction: id };
    assert_eq!(
        m.ok(cancel(queued)),
        PipelineReply::Cancelled {
            transaction: queued,
            outcome: CancelOutcome::Aborted
        }
    );
    let tx = m.tx(queued);
    assert_eq!(
        (tx.status(), tx.completed_at_ms()),
        (TxStatus::Aborted, Some(T0))
    );
    assert!(m.queue("g", QueueType::In).is_empty());
    assert!(m.table.webhooks().for_transaction(queued).is_some());
    // A cancelled transaction is never handed out.
    assert!(m.dequeue("g", 10).is_empty());
    assert_eq!(
        m.ok(cancel(queued)),
        PipelineReply::Cancelled {
            transaction: queued,
            outcome: CancelOutcome::Finished {
                status: TxStatus::Aborted
            }
        }
    );
    // Running: flagged, seen by the worker, which may only complete it.
    let running = m.enqueue(QueueType::In);
    let token = m.dequeue_one(running);
    assert!(matches!(
        m.ok(cancel(running)),
        PipelineReply::Cancelled {
            outcome: CancelOutcome::Requested,
            ..
        }
    ));
    let before = m.table.clone();
    assert!(matches!(
        m.ok(cancel(running)),
        PipelineReply::Cancelled {
            outcome: CancelOutcome::AlreadyRequested,
            ..
        }
    ));
    assert_eq!(m.table, before);
    let seen = m.ok(PipelineCommand::Progress {
        transaction: running,
        token,
        report: json("{}"),
    });
    assert!(matches!(
        seen,
        PipelineReply::ProgressRecorded {
            cancel_requested: true,
            ..
        }
    ));
    for step in [
        PipelineCommand::Requeue {
            transaction: running,
            token,
            route: None,
            queue: QueueType::In,
            state: None,
            event: None,
        },
        PipelineCommand::Sleep {
            transaction: running,
            token,
            until_ms: m.now_ms,
            switch: None,
            queue: QueueType::In,
            state: None,
        },
    ] {
        assert_eq!(
            m.refused(step),
            PipelineError::CancelRequested {
                transaction: running
            }
        );
    }
    m.complete(running, token, TxStatus::Aborted).unwrap();
    assert!(!m.tx(running).cancel_requested());
    // Sleeping: aborted at once.
    let sleeping = m.enqueue(QueueType::In);
    let token = m.dequeue_one(sleeping);
    m.ok(PipelineCommand::Sleep {
        transaction: sleeping,
        token,
        until_ms: m.now_ms + 1,
        switch: Some(switch("s")),
        queue: QueueType::In,
        state: None,
    });
    assert!(matches!(
        m.ok(cancel(sleeping)),
        PipelineReply::Cancelled {
            outcome: CancelOutcome::Aborted,
            ..
        }
    ));
    assert_eq!(m.table.sleepers_on(&switch("s")).count(), 0);
    assert_eq!(
        m.refused(cancel(TransactionId(999))),
        PipelineError::UnknownTransaction {
            transaction: TransactionId(999)
        }
    );
}

#[test]
fn mark_replied_records_the_reply_and_cancels_a_finished_transactions_webhook_if_asked() {
    let mut m = Machine::new();
    let mut new = with_webhook(new_tx());
    new.metadata.cancel_webhook_on_longpoll = true;
    let id = m.enqueue_new(new.clone());
    // While running, a long-poll reply (with progress) leaves the webhook alone.
    let token = m.dequeue_one(id);
    m.advance(3);
    let reply = m.ok(PipelineCommand::MarkReplied { transaction: id });
    let PipelineReply::Replied {
        transaction,
        webhook_cancelled,
    } = reply
    else {
        panic!("{reply:?}");
    };
    assert_eq!(
        (transaction.notified_at_ms, webhook_cancelled),
        (Some(T0 + 3), false)
    );
    assert_eq!(*transaction, *m.tx(id));
    m.complete(id, token, TxStatus::Success).unwrap();
    assert!(m.table.webhooks().for_transaction(id).is_some());
    let reply = m.ok(PipelineCommand::MarkReplied { transaction: id });
    assert!(matches!(
        reply,
        PipelineReply::Replied {
            webhook_cancelled: true,
            ..
        }
    ));
    assert!(m.table.webhooks().for_transaction(id).is_none());
    // Without the option, the webhook is still sent.
    new.metadata.cancel_webhook_on_longpoll = false;
    let plain = m.finished(new, TxStatus::Failed);
    let reply = m.ok(PipelineCommand::MarkReplied { transaction: plain });
    assert!(matches!(
        reply,
        PipelineReply::Replied {
            webhook_cancelled: false,
            ..
        }
    ));
    assert!(m.table.webhooks().for_transaction(plain).is_some());
    assert!(matches!(
        m.refused(PipelineCommand::MarkReplied {
            transaction: TransactionId(999)
        }),
        PipelineError::UnknownTransaction { .. }
    ));
}

#[test]
fn the_reaper_retries_a_stuck_transaction_then_times_it_out() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.running_timeout_ms = 10 * SECOND_MS;
        c.max_attempts = 2;
    });
    let id = m.enqueue_new(NewTransaction {
        queue: QueueType::Out,
        ..with_webhook(new_tx())
    });
    let later = m.enqueue(QueueType::Out);
    let first = m.dequeue_one(id);
    m.advance(10 * SECOND_MS - 1);
    assert!(m.tick().is_empty());
    m.advance(1);
    let report = m.tick();
    assert_eq!(report.retried, [id]);
    // Back on the queue it came from, behind what was waiting there.
    assert_eq!(m.queue("g", QueueType::Out), [later, id]);
    assert_eq!(
        (m.tx(id).status(), m.tx(id).attempts),
        (TxStatus::Queued, 1)
    );
    // The reaped worker's late answer is refused.
    let error = m.complete(id, first, TxStatus::Success).unwrap_err();
    assert!(matches!(
        error,
        PipelineError::StaleClaim {
            status: TxStatus::Queued,
            ..
        }
    ));
    m.dequeue_one(later);
    let second = m.dequeue_one(id);
    assert_eq!(m.tx(id).attempts, 2);
    m.advance(10 * SECOND_MS);
    let report = m.tick();
    assert_eq!(report.timed_out, [id]);
    assert_eq!(report.retried, [later]);
    let tx = m.tx(id);
    assert_eq!(
        (tx.status(), tx.completed_at_ms()),
        (TxStatus::Timeout, Some(m.now_ms))
    );
    assert_eq!(
        m.table.webhooks().for_transaction(id).unwrap().kind,
        WebhookKind::Completed {
            status: TxStatus::Timeout
        }
    );
    let error = m.complete(id, second, TxStatus::Success).unwrap_err();
    assert!(matches!(
        error,
        PipelineError::StaleClaim {
            status: TxStatus::Timeout,
            ..
        }
    ));
    let counts = m.table.stats().rows(Resolution::Hour, 0, 10)[0].counts;
    assert_eq!((counts.retried, counts.timeout), (2, 1));
}

#[test]
fn the_reaper_aborts_a_stuck_transaction_whose_cancel_was_asked_for() {
    let mut m = Machine::new();
    m.configure(|c| c.running_timeout_ms = SECOND_MS);
    let id = m.enqueue(QueueType::In);
    m.dequeue_one(id);
    m.ok(PipelineCommand::Cancel { transaction: id });
    m.advance(SECOND_MS);
    let report = m.tick();
    assert_eq!(
        (report.aborted.as_slice(), report.retried.len()),
        (&[id][..], 0)
    );
    assert_eq!(m.tx(id).status(), TxStatus::Aborted);
}

#[test]
fn finished_transactions_are_archived_after_the_delay_and_deleted_after_the_retention() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.archive_delay_ms = 60 * SECOND_MS;
        c.archive_retention_ms = 600 * SECOND_MS;
    });
    let id = m.enqueue(QueueType::In);
    let token = m.dequeue_one(id);
    m.complete(id, token, TxStatus::Success).unwrap();
    m.advance(60 * SECOND_MS - 1);
    assert!(m.tick().archived.is_empty());
    m.advance(1);
    let report = m.tick();
    assert_eq!(report.archived, [id]);
    let tx = m.tx(id);
    assert_eq!(tx.archived_at_ms(), Some(m.now_ms));
    assert_eq!(tx.status(), TxStatus::Success);
    // Archived transactions stay readable, answer retries and long-polls.
    assert_eq!(
        m.complete(id, token, TxStatus::Success).unwrap(),
        PipelineReply::Completed {
            transaction: id,
            status: TxStatus::Success
        }
    );
    let version = m.tx(id).version;
    m.ok(PipelineCommand::MarkReplied { transaction: id });
    assert!(
        m.tx(id).version > version,
        "a change after archiving bumps the version"
    );
    m.advance(600 * SECOND_MS);
    assert_eq!(m.tick().deleted, [id]);
    assert!(m.table.get(id).is_none());
    assert!(matches!(
        m.complete(id, token, TxStatus::Success),
        Err(PipelineError::UnknownTransaction { .. })
    ));
}

#[test]
fn each_tick_step_touches_a_bounded_number_of_transactions() {
    let mut m = Machine::new();
    m.configure(|c| c.archive_delay_ms = 0);
    let count = PIPELINE_TICK_BATCH_MAX + 3;
    for _ in 0..count {
        let id = m.table.last_transaction_id + 1;
        m.table
            .apply(PipelineCommand::Enqueue(new_tx()), m.now_ms, id)
            .unwrap();
        m.table
            .apply(
                PipelineCommand::Cancel {
                    transaction: TransactionId(id),
                },
                m.now_ms,
                id,
            )
            .unwrap();
    }
    m.index = m.table.last_transaction_id;
    let report = m.tick();
    assert_eq!(report.archived.len(), PIPELINE_TICK_BATCH_MAX);
    assert!(report.more);
    let report = m.tick();
    assert_eq!(report.archived.len(), 3);
    assert!(!report.more);
}

#[test]
fn webhooks_are_taken_with_backoff_and_settled_by_their_results() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.webhook_backoff_base_ms = SECOND_MS;
        c.webhook_backoff_cap_ms = 3 * SECOND_MS;
        c.webhook_attempts_max = 4;
        c.url_failure_limit = 100;
    });
    let id = m.finished(with_webhook(new_tx()), TxStatus::Success);
    let event = m.table.webhooks().for_transaction(id).unwrap().event;
    let mut delays = Vec::new();
    for attempt in 1..=3 {
        let taken = m.take_webhooks(10);
        assert_eq!(taken.len(), 1);
        let hook = &taken[0];
        assert_eq!((hook.event, hook.attempts), (event, attempt));
        delays.push(hook.next_attempt_at_ms - m.now_ms);
        // Taken, it is not due again until its backoff passes.
        assert!(m.take_webhooks(10).is_empty());
        let settled = m.webhook_result(hook, failed("503")).unwrap();
        assert_eq!(
            settled,
            WebhookSettlement::RetryAt {
                next_attempt_at_ms: hook.next_attempt_at_ms
            }
        );
        m.advance(hook.next_attempt_at_ms - m.now_ms);
    }
    assert_eq!(delays, [SECOND_MS, 2 * SECOND_MS, 3 * SECOND_MS]);
    let hook = m.take_webhooks(1).remove(0);
    // A report for an earlier attempt is stale; one beyond the latest is refused.
    let stale = m
        .run(PipelineCommand::WebhookResult {
            event,
            attempt: 2,
            outcome: failed("timeout"),
        })
        .unwrap();
    assert!(matches!(
        stale,
        PipelineReply::WebhookRecorded {
            settlement: WebhookSettlement::Stale,
            ..
        }
    ));
    let error = m.refused(PipelineCommand::WebhookResult {
        event,
        attempt: 5,
        outcome: WebhookOutcome::Delivered,
    });
    assert!(matches!(
        error,
        PipelineError::OutOfRange { got: 5, max: 4, .. }
    ));
    // Any attempt that got through ends it.
    assert_eq!(
        m.webhook_result(&hook, WebhookOutcome::Delivered),
        Ok(WebhookSettlement::Delivered)
    );
    assert_eq!(m.table.webhooks().pending_count(), 0);
    assert_eq!(
        m.webhook_result(&hook, WebhookOutcome::Delivered),
        Ok(WebhookSettlement::Unknown)
    );
    assert!(m.notices().is_empty());
}

#[test]
fn a_delivery_that_fails_its_last_attempt_is_given_up_and_the_administrator_told() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.webhook_attempts_max = 2;
        c.url_failure_limit = 100;
    });
    let id = m.finished(with_webhook(new_tx()), TxStatus::Failed);
    let first = m.take_webhooks(1).remove(0);
    m.webhook_result(&first, failed("500")).unwrap();
    m.advance(first.next_attempt_at_ms - m.now_ms);
    let second = m.take_webhooks(1).remove(0);
    assert_eq!(
        second.event, first.event,
        "every attempt carries the same event id"
    );
    assert_eq!(
        m.webhook_result(&second, failed("502")),
        Ok(WebhookSettlement::Exhausted)
    );
    assert_eq!(m.table.webhooks().pending_count(), 0);
    assert_eq!(
        m.notices(),
        [NoticeKind::RetriesExhausted {
            event: first.event,
            transaction: id,
            url: url("https://hooks.example/tx"),
            attempts: 2,
            last_error: Some(reason("502")),
        }]
    );
    // Taken as often as allowed without any report (a processor that keeps crashing): given up
    // when next due.
    let silent = m.finished(with_webhook(new_tx()), TxStatus::Success);
    for _ in 0..2 {
        let taken = m.take_webhooks(1);
        assert_eq!(taken.len(), 1);
        m.advance(taken[0].next_attempt_at_ms - m.now_ms);
    }
    assert!(m.take_webhooks(1).is_empty());
    assert!(matches!(
        m.notices().last(),
        Some(NoticeKind::RetriesExhausted { transaction, last_error: None, .. })
            if *transaction == silent
    ));
    // Acknowledging drops notices up to the one read.
    let first_notice = m.table.webhooks().notices(None, 1)[0].id;
    assert_eq!(
        m.ok(PipelineCommand::AcknowledgeNotices {
            up_to: first_notice
        }),
        PipelineReply::NoticesAcknowledged { removed: 1 }
    );
    assert_eq!(m.notices().len(), 1);
}

#[test]
fn a_url_that_keeps_failing_is_paused_and_its_deliveries_deferred() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.url_failure_limit = 2;
        c.url_failure_window_ms = 60 * SECOND_MS;
        c.url_pause_ms = 600 * SECOND_MS;
        c.webhook_attempts_max = 10;
    });
    let a = m.finished(with_webhook(new_tx()), TxStatus::Success);
    let b = m.finished(with_webhook(new_tx()), TxStatus::Success);
    let c = m.finished(with_webhook(new_tx()), TxStatus::Success);
    let taken = m.take_webhooks(2);
    assert_eq!(
        taken.iter().map(|h| h.transaction).collect::<Vec<_>>(),
        [a, b]
    );
    let settled = m.webhook_result(&taken[0], failed("503")).unwrap();
    assert!(matches!(settled, WebhookSettlement::RetryAt { .. }));
    let health = *m
        .table
        .webhooks()
        .url(&url("https://hooks.example/tx"))
        .unwrap();
    assert_eq!((health.failures, health.paused_until_ms), (1, None));
    let settled = m.webhook_result(&taken[1], failed("503")).unwrap();
    let until_ms = m.now_ms + 600 * SECOND_MS;
    assert_eq!(
        settled,
        WebhookSettlement::RetryAt {
            next_attempt_at_ms: until_ms
        }
    );
    assert_eq!(
        m.notices(),
        [NoticeKind::UrlPaused {
            url: url("https://hooks.example/tx"),
            failures: 2,
            until_ms
        }]
    );
    // The third delivery is due but its URL is paused: a take defers it to the pause's end.
    assert!(m.table.webhooks().due(m.now_ms, 10).is_empty());
    assert!(m.take_webhooks(10).is_empty());
    assert_eq!(
        m.table
            .webhooks()
            .for_transaction(c)
            .unwrap()
            .next_attempt_at_ms,
        until_ms
    );
    // After the pause the deliveries flow; a success forgets the URL's failures.
    m.advance(600 * SECOND_MS);
    let taken = m.take_webhooks(10);
    assert_eq!(taken.len(), 3);
    m.webhook_result(&taken[0], WebhookOutcome::Delivered)
        .unwrap();
    assert!(
        m.table
            .webhooks()
            .url(&url("https://hooks.example/tx"))
            .is_none()
    );
    // One failure record is forgotten by the tick when its window is over.
    m.webhook_result(&taken[1], failed("503")).unwrap();
    m.advance(60 * SECOND_MS);
    assert_eq!(m.tick().urls_forgotten, 1);
    assert!(
        m.table
            .webhooks()
            .url(&url("https://hooks.example/tx"))
            .is_none()
    );
}

#[test]
fn notices_are_bounded_and_the_dropped_ones_counted() {
    let mut m = Machine::new();
    let mut webhooks = Webhooks::default();
    for i in 0..PIPELINE_NOTICES_MAX + 2 {
        webhooks.notify(
            NoticeKind::WebhookDropped {
                transaction: TransactionId(i as u64 + 1),
                url: url("https://hooks.example/x"),
            },
            m.now_ms,
        );
    }
    assert_eq!(webhooks.notices_dropped(), 2);
    let notices = webhooks.notices(None, LIST_PAGE_MAX);
    assert_eq!(notices.len(), PIPELINE_NOTICES_MAX);
    assert_eq!(notices[0].id, NoticeId(3));
    webhooks.check(m.now_ms).unwrap();
    m.table.webhooks = webhooks;
    assert_eq!(
        m.ok(PipelineCommand::AcknowledgeNotices {
            up_to: NoticeId(10)
        }),
        PipelineReply::NoticesAcknowledged { removed: 8 }
    );
    assert_eq!(
        m.table.webhooks().notices(Some(NoticeId(10)), 1)[0].id,
        NoticeId(11)
    );
}

#[test]
fn take_webhooks_refuses_batches_out_of_range() {
    let mut m = Machine::new();
    for max in [0, PIPELINE_WEBHOOK_BATCH_MAX + 1] {
        let error = m.refused(PipelineCommand::TakeWebhooks { max });
        assert!(matches!(error, PipelineError::OutOfRange { .. }), "{error}");
    }
    // Nothing due: nothing changes.
    let before = m.table.clone();
    assert!(m.take_webhooks(5).is_empty());
    assert_eq!(m.table, before);
}

#[test]
fn backoff_doubles_from_the_base_up_to_the_cap() {
    let config = PipelineConfig {
        webhook_backoff_base_ms: 1_000,
        webhook_backoff_cap_ms: 300_000,
        ..PipelineConfig::default()
    };
    let delays: Vec<u64> = (1..=10)
        .map(|attempt| webhooks::backoff_ms(&config, attempt))
        .collect();
    assert_eq!(
        delays,
        [
            1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000
        ]
    );
    assert_eq!(webhooks::backoff_ms(&config, 100), 300_000);
}

#[test]
fn statistics_fill_three_resolutions_and_forget_old_buckets() {
    let mut m = Machine::new();
    // 00:01:30 on the day after T0.
    m.now_ms = Resolution::Day.bucket_of(T0) + 86_400_000 + 90_000;
    m.enqueue(QueueType::In);
    m.advance(60_000); // 00:02:30
    m.enqueue(QueueType::In);
    let minutes = m.table.stats().rows(Resolution::Minute, 0, 10);
    assert_eq!(
        minutes
            .iter()
            .map(|r| (r.bucket_start_ms % 86_400_000, r.counts.enqueued))
            .collect::<Vec<_>>(),
        [(60_000, 1), (120_000, 1)]
    );
    for resolution in [Resolution::Hour, Resolution::Day] {
        let rows = m.table.stats().rows(resolution, 0, 10);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].counts.enqueued, 2);
        assert_eq!(rows[0].bucket_start_ms, resolution.bucket_of(m.now_ms));
    }
    // Two hours later the minute buckets are gone, the hour and day ones stay.
    m.advance(120 * 60_000);
    let report = m.tick();
    assert_eq!(report.stats_rows_pruned, 2);
    assert!(m.table.stats().rows(Resolution::Minute, 0, 10).is_empty());
    assert_eq!(m.table.stats().rows(Resolution::Hour, 0, 10).len(), 1);
    // Each resolution holds a bounded number of rows, dropping the oldest.
    let mut stats = Stats::default();
    for i in 0..=PIPELINE_STATS_ROWS_MAX {
        let name = pipeline(&format!("p{i:05}"));
        stats.record(Some(&name), Counted::Enqueued, m.now_ms);
    }
    let rows = stats.rows(Resolution::Day, 0, 1);
    assert_eq!(rows[0].pipeline, Some(pipeline("p00001")));
    stats.check(m.now_ms).unwrap();
}

#[test]
fn notifications_resume_from_a_number_and_say_when_some_were_missed() {
    let mut notifications = Notifications::default();
    let total = PIPELINE_NOTIFICATIONS_MAX + 5;
    for i in 0..total {
        let node_group = group(if i % 2 == 0 { "even" } else { "odd" });
        notifications.push(
            TransactionId(i as u64 + 1),
            node_group,
            NotificationKind::Progress,
            T0,
        );
    }
    notifications.check(T0).unwrap();
    let page = notifications.after(total as u64 - 2, None, 10);
    assert_eq!(
        page.notifications.iter().map(|n| n.seq).collect::<Vec<_>>(),
        [total as u64 - 1, total as u64]
    );
    assert!(!page.missed);
    assert_eq!(page.last_seq, total as u64);
    let odd = notifications.after(total as u64 - 4, Some(&group("odd")), 10);
    assert!(
        odd.notifications
            .iter()
            .all(|n| n.node_group == group("odd"))
    );
    assert_eq!(odd.notifications.len(), 2);
    // The first five were dropped: a reader at 3 missed some, one at 5 did not.
    assert!(notifications.after(3, None, 1).missed);
    assert!(!notifications.after(5, None, 1).missed);
    assert!(!notifications.after(total as u64, None, 1).missed);
    assert!(
        Notifications::default()
            .after(0, None, 1)
            .notifications
            .is_empty()
    );
}

#[test]
fn configure_names_the_field_out_of_range() {
    let mut m = Machine::new();
    /// The field, and how to put it out of range.
    type Case = (&'static str, fn(&mut PipelineConfig));
    let cases: [Case; 5] = [
        ("running_timeout_ms", |c| c.running_timeout_ms = 999),
        ("max_attempts", |c| c.max_attempts = 0),
        ("webhook_backoff_cap_ms", |c| {
            c.webhook_backoff_base_ms = 5_000;
            c.webhook_backoff_cap_ms = 4_000;
        }),
        ("transactions_max", |c| {
            c.transactions_max = PIPELINE_TRANSACTIONS_MAX as u64 + 1;
        }),
        ("url_pause_ms", |c| {
            c.url_pause_ms = PIPELINE_URL_PAUSE_MS_MAX + 1;
        }),
    ];
    for (field, change) in cases {
        let mut config = PipelineConfig::default();
        change(&mut config);
        let error = m.refused(PipelineCommand::Configure(config));
        assert!(
            matches!(&error, PipelineError::InvalidConfig { field: f, .. } if f == field),
            "{field}: {error}"
        );
    }
    PipelineConfig::default().validate().unwrap();
}

#[test]
fn in_play_lists_and_group_counts_follow_the_transactions() {
    let mut m = Machine::new();
    let done = m.finished(new_tx(), TxStatus::Success);
    let queued = m.enqueue(QueueType::Admin);
    let running = m.enqueue(QueueType::In);
    let sleeping = m.enqueue(QueueType::In);
    m.dequeue_one(queued);
    let token = m.dequeue_one(running);
    let sleep_token = m.dequeue_one(sleeping);
    m.ok(PipelineCommand::Sleep {
        transaction: sleeping,
        token: sleep_token,
        until_ms: m.now_ms + 1,
        switch: None,
        queue: QueueType::In,
        state: None,
    });
    m.ok(PipelineCommand::Requeue {
        transaction: queued,
        token: m.tx(queued).claim().unwrap().token,
        route: None,
        queue: QueueType::Admin,
        state: None,
        event: None,
    });
    let in_play: Vec<TransactionId> = m
        .table
        .in_play(&group("g"), None, 10)
        .into_iter()
        .map(|tx| tx.id)
        .collect();
    assert_eq!(in_play, [queued, running, sleeping]);
    let page: Vec<TransactionId> = m
        .table
        .in_play(&group("g"), Some(queued), 1)
        .into_iter()
        .map(|tx| tx.id)
        .collect();
    assert_eq!(page, [running]);
    assert_eq!(
        m.table.group_counts(&group("g")),
        GroupCounts {
            queued: [1, 0, 0],
            running: 1,
            sleeping: 1
        }
    );
    assert_eq!(m.table.status_count(TxStatus::Success), 1);
    assert_eq!(m.tx(done).status(), TxStatus::Success);
    // A group with nothing in play is not listed.
    m.complete(running, token, TxStatus::Success).unwrap();
    m.ok(PipelineCommand::Cancel {
        transaction: queued,
    });
    m.ok(PipelineCommand::Cancel {
        transaction: sleeping,
    });
    assert_eq!(m.table.node_groups().count(), 0);
    assert_eq!(m.table.group_counts(&group("g")), GroupCounts::default());
}

/// A table with transactions in every place, a webhook, a URL record, a notice, a switch, an
/// external id, notifications and statistics.
fn table_in_every_place() -> Machine {
    let mut m = Machine::new();
    m.configure(|c| {
        c.archive_delay_ms = 0;
        c.url_failure_limit = 1;
    });
    let archived = m.finished(with_webhook(new_tx()), TxStatus::Success);
    m.tick();
    assert!(m.tx(archived).archived_at_ms().is_some());
    let hook = m.take_webhooks(1).remove(0);
    m.webhook_result(&hook, failed("503")).unwrap();
    m.finished(new_tx(), TxStatus::Failed);
    m.enqueue_new(NewTransaction {
        external_id: Some(external("order-1")),
        ..new_tx()
    });
    let running = m.enqueue(QueueType::Out);
    m.dequeue_one(running);
    let sleeping = m.enqueue(QueueType::Admin);
    let token = m.dequeue_one(sleeping);
    m.ok(PipelineCommand::Sleep {
        transaction: sleeping,
        token,
        until_ms: m.now_ms + SECOND_MS,
        switch: Some(switch("s")),
        queue: QueueType::In,
        state: None,
    });
    m.ok(PipelineCommand::SetSwitch {
        name: switch("other"),
        value: 3,
    });
    m.enqueue(QueueType::In);
    m
}

#[test]
fn snapshot_records_rebuild_the_same_table() {
    let m = table_in_every_place();
    let bytes = postcard::to_stdvec(&m.table.records()).unwrap();
    let records: PipelineRecords = postcard::from_bytes(&bytes).unwrap();
    let rebuilt = Pipelines::from_records(records).unwrap();
    assert_eq!(rebuilt, m.table);
    assert_eq!(postcard::to_stdvec(&rebuilt.records()).unwrap(), bytes);
    // The same transaction twice is refused.
    let mut records: PipelineRecords = postcard::from_bytes(&bytes).unwrap();
    let copy = records.transactions[0].clone();
    records.transactions.push(copy);
    assert!(
        Pipelines::from_records(records)
            .unwrap_err()
            .contains("twice")
    );
}

#[test]
fn check_finds_transactions_out_of_place_and_broken_indexes() {
    let m = table_in_every_place();
    m.table.check(m.now_ms).unwrap();
    /// What is wrong, and how to make it so.
    type Corruption = (&'static str, fn(&mut TransactionRecord));
    let corruptions: [Corruption; 9] = [
        ("a claim token above the last issued", |tx| {
            if let Some(claim) = &mut tx.claim {
                claim.token += 100;
            }
        }),
        ("a queued transaction with a claim", |tx| {
            if tx.status == TxStatus::Queued {
                tx.claim = Some(TxClaim {
                    worker: WorkerId::new("w").unwrap(),
                    token: 1,
                    started_at_ms: tx.created_at_ms,
                    deadline_ms: tx.created_at_ms,
                    queue: QueueType::In,
                });
            }
        }),
        ("a running transaction marked sleeping", |tx| {
            if tx.status == TxStatus::Running {
                tx.status = TxStatus::Sleeping;
            }
        }),
        ("a time after the clock", |tx| tx.created_at_ms = u64::MAX),
        ("a cancel pending on a finished transaction", |tx| {
            if tx.status.is_terminal() {
                tx.cancel_requested = true;
            }
        }),
        ("an archived transaction still in play", |tx| {
            if tx.status == TxStatus::Queued {
                tx.archived_at_ms = Some(tx.created_at_ms);
            }
        }),
        ("two transactions at one queue position", |tx| {
            if let Some(entry) = &mut tx.queued {
                entry.seq = 1;
            }
        }),
        ("a finished transaction with an event", |tx| {
            if tx.status.is_terminal() {
                tx.event = Some(JsonDocument::new("{}").unwrap());
            }
        }),
        ("a step record not newer than the claim", |tx| {
            if let Some(claim) = &tx.claim {
                tx.last_step = Some(StepRecord {
                    token: claim.token,
                    reply: PipelineReply::Completed {
                        transaction: tx.id,
                        status: TxStatus::Success,
                    },
                });
            }
        }),
    ];
    for (what, corrupt) in corruptions {
        let mut records: PipelineRecords =
            postcard::from_bytes(&postcard::to_stdvec(&m.table.records()).unwrap()).unwrap();
        for tx in &mut records.transactions {
            corrupt(tx);
        }
        let broken = Pipelines::from_records(records).and_then(|table| table.check(m.now_ms));
        assert!(broken.is_err(), "{what} went unnoticed");
    }
    // Indexes and counters that disagree with the table.
    let mut broken = m.table.clone();
    let (key, entries) = broken.queues.pop_first().unwrap();
    let (seq, id) = entries.first().copied().unwrap();
    broken
        .queues
        .insert((key.0, QueueType::Admin), BTreeSet::from([(seq, id)]));
    assert!(
        broken.check(m.now_ms).is_err(),
        "a queue entry in the wrong queue"
    );
    let mut broken = m.table.clone();
    broken.status_counts[TxStatus::Queued.slot()] += 1;
    assert!(broken.check(m.now_ms).is_err(), "a counter off by one");
    let mut broken = m.table.clone();
    broken.groups.values_mut().next().unwrap().running += 1;
    assert!(broken.check(m.now_ms).is_err(), "a group count off by one");
    let mut broken = m.table.clone();
    broken.definitions.clear();
    assert!(
        broken.check(m.now_ms).is_err(),
        "in play in an undefined pipeline"
    );
    let mut broken = m.table.clone();
    broken.switches.insert(switch("zero"), 0);
    assert!(broken.check(m.now_ms).is_err(), "a switch stored at 0");
    let mut broken = m.table.clone();
    broken.external_id_expiry.clear();
    assert!(
        broken.check(m.now_ms).is_err(),
        "an external id without its expiry"
    );
}

#[test]
fn refusals_read_as_sentences_that_say_what_to_do() {
    let id = TransactionId(7);
    let messages = [
        PipelineError::UnknownTransaction { transaction: id }.to_string(),
        PipelineError::StaleClaim {
            transaction: id,
            token: 3,
            status: TxStatus::Queued,
        }
        .to_string(),
        PipelineError::NotTerminal {
            status: TxStatus::Running,
        }
        .to_string(),
        PipelineError::PipelineInUse {
            name: pipeline("p"),
            in_play: 2,
        }
        .to_string(),
        PipelineError::CancelRequested { transaction: id }.to_string(),
    ];
    assert_eq!(
        messages,
        [
            "no transaction 7 exists (never enqueued, or deleted after its archive retention); \
             check the id",
            "claim token 3 does not hold transaction 7, which is queued now: the claim ended (it \
             was completed, handed on or reaped) and someone else may hold it; drop this work",
            "running is not a terminal status; complete with success, failed, aborted, timeout \
             or internal-error",
            "pipeline p has 2 transactions in play (queued, running or sleeping); wait for them \
             to finish or cancel them first",
            "transaction 7 was cancelled while running; complete it with status aborted instead \
             of handing it on",
        ]
    );
    assert_eq!(TxStatus::InternalError.to_string(), "internal-error");
    assert_eq!(
        QueueType::PRIORITY.map(|q| q.to_string()),
        ["admin", "out", "in"]
    );
}

// ---- the archive export ----------------------------------------------------------------

/// Reads the archive after `after`, `limit` at a time, as of the table's clock `m.now_ms`.
fn archive_page(m: &Machine, after: Option<ArchiveCursor>, limit: usize) -> Vec<TransactionId> {
    m.table
        .archived(after, m.now_ms, limit)
        .into_iter()
        .map(|tx| tx.id)
        .collect()
}

fn cursor_of(m: &Machine, id: TransactionId) -> ArchiveCursor {
    ArchiveCursor::after(m.tx(id)).unwrap()
}

#[test]
fn the_archive_is_read_in_archive_order_after_a_cursor_and_only_before_the_clock() {
    let mut m = Machine::new();
    m.configure(|c| {
        c.archive_delay_ms = 0;
        c.archive_retention_ms = 100 * SECOND_MS;
    });
    let first = m.finished(new_tx(), TxStatus::Success);
    let second = m.finished(new_tx(), TxStatus::Failed);
    m.advance(1);
    let third = m.finished(new_tx(), TxStatus::Aborted);
    // Finished but not archived: not in the archive.
    assert_eq!(archive_page(&m, None, 10), []);
    assert_eq!(m.tick().archived, [first, second, third]);
    let archived_at_ms = m.now_ms;
    assert_eq!(
        archive_page(&m, None, 10),
        [],
        "archived at the clock: a later tick in the same millisecond could still archive one \
         that sorts before them"
    );
    m.advance(1);
    assert_eq!(archive_page(&m, None, 10), [first, second, third]);
    assert_eq!(
        cursor_of(&m, second),
        ArchiveCursor {
            archived_at_ms,
            transaction: second
        }
    );
    // Paging: a cursor resumes just after the transaction it came from.
    assert_eq!(archive_page(&m, None, 2), [first, second]);
    let after_second = Some(cursor_of(&m, second));
    assert_eq!(archive_page(&m, after_second, 2), [third]);
    assert_eq!(archive_page(&m, Some(cursor_of(&m, third)), 2), []);
    // `transaction: 0` starts at a time; a time after everything reads nothing.
    let at = |archived_at_ms, id| {
        Some(ArchiveCursor {
            archived_at_ms,
            transaction: TransactionId(id),
        })
    };
    assert_eq!(
        archive_page(&m, at(archived_at_ms, 0), 10),
        [first, second, third]
    );
    assert_eq!(archive_page(&m, at(archived_at_ms + 1, 0), 10), []);
    assert_eq!(
        archive_page(&m, at(u64::MAX, u64::MAX), 10),
        [],
        "no panic past the end"
    );
    assert_eq!(archive_page(&m, at(m.now_ms, 0), 10), [], "the end itself");
    // A page is bounded.
    assert!(m.table.archived(None, m.now_ms, usize::MAX).len() <= LIST_PAGE_MAX);

    // Later archives come after; the cursor handed out stays valid when retention deletes
    // the transaction it came from.
    let fourth = m.finished(new_tx(), TxStatus::Success);
    m.advance(100 * SECOND_MS - 2);
    assert_eq!(m.tick().archived, [fourth]);
    m.advance(1);
    assert_eq!(m.tick().deleted, [first, second, third]);
    assert!(m.table.get(second).is_none());
    assert_eq!(archive_page(&m, after_second, 10), [fourth]);
    assert_eq!(archive_page(&m, None, 10), [fourth]);
}

#[test]
fn an_export_never_skips_a_transaction_archived_later_in_the_same_millisecond() {
    let mut m = Machine::new();
    m.configure(|c| c.archive_delay_ms = 10);
    // `small` has the smaller id but finishes 5 ms after `big`.
    let small = m.enqueue(QueueType::In);
    let big = m.enqueue(QueueType::In);
    let dequeued = m.dequeue("g", 2);
    let token = dequeued[0].claim().unwrap().token;
    m.complete(big, token, TxStatus::Success).unwrap();
    m.advance(5);
    m.complete(small, token, TxStatus::Success).unwrap();
    m.advance(5);
    assert_eq!(m.tick().archived, [big]);
    // A configuration change in the same millisecond makes `small` due: archived at the same
    // time as `big`, it sorts before it.
    m.configure(|c| c.archive_delay_ms = 5);
    assert_eq!(m.tick().archived, [small]);
    assert!(cursor_of(&m, small) < cursor_of(&m, big));
    // Had the first read returned `big` (archived at the clock), its cursor would have skipped
    // `small`. Reads stop before the clock, so both come once it moves on, in order.
    assert_eq!(archive_page(&m, None, 10), []);
    m.advance(1);
    assert_eq!(archive_page(&m, None, 10), [small, big]);
}

#[test]
fn archive_cursors_are_displayed_as_time_colon_id() {
    let cursor = ArchiveCursor {
        archived_at_ms: T0,
        transaction: TransactionId(42),
    };
    assert_eq!(cursor.to_string(), "1700000000000:42");
    let m = table_in_every_place();
    let in_play = m.table.in_play(&group("g"), None, 1)[0];
    assert_eq!(
        ArchiveCursor::after(in_play),
        None,
        "not archived: no cursor"
    );
}

mod archive_export_properties {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// Enqueue, dequeue and complete a transaction.
        Finish,
        /// Complete the running transaction of a dequeued pair (ids out of finishing order).
        FinishPair,
        Advance(u64),
        Tick,
        /// Change the archive delay and tick, in the same millisecond as the step before: a
        /// shorter delay can archive a transaction with a smaller id at the same time as the
        /// ones a tick just archived.
        DelayAndTick(u64),
        /// Read the next page of the export with this page size.
        Export(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Finish),
            1 => Just(Step::FinishPair),
            3 => (0u64..4).prop_map(Step::Advance),
            3 => Just(Step::Tick),
            2 => (0u64..6).prop_map(Step::DelayAndTick),
            3 => (1usize..5).prop_map(Step::Export),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Paging through the archive with any page sizes, interleaved with archiving and
        /// deleting, yields every transaction archived once, in `(archived_at_ms, id)` order:
        /// none skipped (unless retention deleted it first), none twice.
        #[test]
        fn paging_yields_the_archive_in_order_without_gaps_or_repeats(
            steps in proptest::collection::vec(step(), 1..60),
            retention_ms in prop_oneof![Just(0u64), Just(3), Just(1_000_000)],
            final_page in 1usize..7,
        ) {
            let mut m = Machine::new();
            m.configure(|c| {
                c.archive_delay_ms = 2;
                c.archive_retention_ms = retention_ms;
            });
            let mut cursor: Option<ArchiveCursor> = None;
            let mut exported: Vec<(ArchiveCursor, TransactionId)> = Vec::new();
            let mut archived: Vec<TransactionId> = Vec::new();
            let mut deleted: Vec<TransactionId> = Vec::new();
            // Reads one page after `cursor`, moving it; answers how many were read.
            let mut export = |m: &Machine, cursor: &mut Option<ArchiveCursor>, limit: usize| {
                let page = m.table.archived(*cursor, m.now_ms, limit);
                assert!(page.len() <= limit);
                for tx in &page {
                    let at = ArchiveCursor::after(tx).unwrap();
                    exported.push((at, tx.id));
                    *cursor = Some(at);
                }
                page.len()
            };
            for step in steps {
                match step {
                    Step::Finish => {
                        m.finished(new_tx(), TxStatus::Success);
                    }
                    Step::FinishPair => {
                        let first = m.enqueue(QueueType::In);
                        let second = m.enqueue(QueueType::In);
                        let token = m.dequeue("g", 2)[0].claim().unwrap().token;
                        m.complete(second, token, TxStatus::Success).unwrap();
                        m.advance(1);
                        m.complete(first, token, TxStatus::Failed).unwrap();
                    }
                    Step::Advance(ms) => m.advance(ms),
                    Step::Tick => {
                        let report = m.tick();
                        archived.extend(report.archived);
                        deleted.extend(report.deleted);
                    }
                    Step::DelayAndTick(ms) => {
                        m.configure(|c| c.archive_delay_ms = ms);
                        let report = m.tick();
                        archived.extend(report.archived);
                        deleted.extend(report.deleted);
                    }
                    Step::Export(limit) => {
                        export(&m, &mut cursor, limit);
                    }
                }
            }
            // Archive everything finished, let the clock move past it, and read to the end.
            m.advance(10);
            let report = m.tick();
            archived.extend(report.archived);
            deleted.extend(report.deleted);
            m.advance(1);
            while export(&m, &mut cursor, final_page) > 0 {}
            // In order, none twice, each at its own cursor.
            for pair in exported.windows(2) {
                prop_assert!(pair[0].0 < pair[1].0, "{:?}", pair);
            }
            for (at, id) in &exported {
                prop_assert_eq!(at.transaction, *id);
                prop_assert!(archived.contains(id));
            }
            // Every transaction archived was exported, unless retention deleted it first.
            let exported_ids: BTreeSet<TransactionId> =
                exported.iter().map(|(_, id)| *id).collect();
            for id in &archived {
                prop_assert!(
                    exported_ids.contains(id) || deleted.contains(id),
                    "transaction {} was archived, is not deleted, yet was skipped",
                    id
                );
            }
            if deleted.is_empty() {
                prop_assert_eq!(exported_ids.len(), archived.len());
            }
        }
    }
}

fn batch_answers(reply: PipelineReply) -> Vec<Result<PipelineReply, PipelineError>> {
    match reply {
        PipelineReply::Batch(answers) => answers,
        other => panic!("a batch answered {other:?}"),
    }
}

fn enqueued(transaction: TransactionId, duplicate: bool) -> Result<PipelineReply, PipelineError> {
    Ok(PipelineReply::Enqueued {
        transaction,
        duplicate,
    })
}

#[test]
fn an_enqueue_batch_answers_each_item_as_its_own_enqueue_in_one_command() {
    let mut m = Machine::new();
    let keyed = NewTransaction {
        external_id: Some(external("order-1")),
        ..new_tx()
    };
    let unknown = NewTransaction {
        route: Route::Pipeline(pipeline("nowhere")),
        ..new_tx()
    };
    let direct = NewTransaction {
        route: Route::NodeGroup(group("g")),
        queue: QueueType::Admin,
        ..new_tx()
    };
    let answers = batch_answers(m.ok(PipelineCommand::EnqueueBatch(vec![
        keyed.clone(),
        unknown,
        keyed,
        direct,
    ])));
    // One command at one log index: ids from the index on, one more per transaction made.
    let index = m.index;
    let (first, second) = (TransactionId(index), TransactionId(index + 1));
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0], enqueued(first, false));
    assert_eq!(
        answers[1],
        Err(PipelineError::UnknownPipeline {
            name: pipeline("nowhere")
        })
    );
    // The external id taken by the first item answers the repeat within the same batch.
    assert_eq!(answers[2], enqueued(first, true));
    assert_eq!(answers[3], enqueued(second, false));
    assert_eq!(
        m.table.len(),
        2,
        "the refused item and the duplicate made nothing"
    );
    assert_eq!(m.queue("g", QueueType::In), [first]);
    assert_eq!(m.queue("g", QueueType::Admin), [second]);
    // The next command's ids stay above the batch's.
    let later = m.enqueue(QueueType::In);
    assert!(later > second, "{later} after {second}");
}

#[test]
fn an_enqueue_batch_fills_the_table_up_to_its_bound_and_refuses_the_rest_item_by_item() {
    let mut m = Machine::new();
    m.configure(|c| c.transactions_max = 2);
    let answers = batch_answers(m.ok(PipelineCommand::EnqueueBatch(vec![new_tx(); 3])));
    assert!(answers[0].is_ok() && answers[1].is_ok(), "{answers:?}");
    assert!(
        matches!(answers[2], Err(PipelineError::TooMany { max: 2, .. })),
        "{answers:?}"
    );
    assert_eq!(m.table.len(), 2);
}

#[test]
fn a_batch_of_no_items_or_too_many_is_refused_whole_and_changes_nothing() {
    let mut m = Machine::new();
    for len in [0, PIPELINE_ENQUEUE_BATCH_MAX + 1] {
        let error = m.refused(PipelineCommand::EnqueueBatch(vec![new_tx(); len]));
        assert_eq!(
            error,
            PipelineError::OutOfRange {
                field: "items".to_owned(),
                got: len as u64,
                min: 1,
                max: PIPELINE_ENQUEUE_BATCH_MAX as u64,
            }
        );
    }
    let full = m.ok(PipelineCommand::EnqueueBatch(vec![
        new_tx();
        PIPELINE_ENQUEUE_BATCH_MAX
    ]));
    assert_eq!(batch_answers(full).len(), PIPELINE_ENQUEUE_BATCH_MAX);
    let running = m.dequeue("g", 1);
    let completion = TxCompletion {
        transaction: running[0].id,
        token: running[0].claim().unwrap().token,
        status: TxStatus::Success,
        state: None,
    };
    for len in [0, PIPELINE_COMPLETE_BATCH_MAX + 1] {
        let error = m.refused(PipelineCommand::CompleteBatch(vec![
            completion.clone();
            len
        ]));
        assert!(
            matches!(&error, PipelineError::OutOfRange { field, got, .. }
                if field == "items" && *got == len as u64),
            "{error}"
        );
    }
}

#[test]
fn a_complete_batch_fails_a_stale_token_only_for_its_item() {
    let mut m = Machine::new();
    let ids: Vec<TransactionId> = (0..4).map(|_| m.enqueue(QueueType::In)).collect();
    let token = m.dequeue("g", 4)[0].claim().unwrap().token;
    let item = |id: TransactionId, token: u64, status: TxStatus| TxCompletion {
        transaction: id,
        token,
        status,
        state: Some(json(r#"{"done":true}"#)),
    };
    let answers = batch_answers(m.ok(PipelineCommand::CompleteBatch(vec![
        item(ids[0], token, TxStatus::Success),
        item(ids[1], token + 1, TxStatus::Success),
        item(ids[2], token, TxStatus::Running),
        item(TransactionId(9_999), token, TxStatus::Failed),
        item(ids[3], token, TxStatus::Failed),
    ])));
    assert_eq!(
        answers[0],
        Ok(PipelineReply::Completed {
            transaction: ids[0],
            status: TxStatus::Success
        })
    );
    assert!(
        matches!(answers[1], Err(PipelineError::StaleClaim { token: t, .. }) if t == token + 1),
        "{answers:?}"
    );
    assert_eq!(
        answers[2],
        Err(PipelineError::NotTerminal {
            status: TxStatus::Running
        })
    );
    assert_eq!(
        answers[3],
        Err(PipelineError::UnknownTransaction {
            transaction: TransactionId(9_999)
        })
    );
    assert!(answers[4].is_ok(), "{answers:?}");
    let statuses: Vec<TxStatus> = ids.iter().map(|&id| m.tx(id).status()).collect();
    assert_eq!(
        statuses,
        [
            TxStatus::Success,
            TxStatus::Running,
            TxStatus::Running,
            TxStatus::Failed
        ]
    );
    // Both completions are numbered for the streams, in item order.
    let page = m.table.notifications().after(0, None, 10);
    let notified: Vec<TransactionId> = page.notifications.iter().map(|n| n.transaction).collect();
    assert_eq!(notified, [ids[0], ids[3]]);
    // Sent again (a lost answer), a finished item replays its answer and changes nothing;
    // the items that failed can succeed now.
    let before = m.table.clone();
    let again = batch_answers(m.ok(PipelineCommand::CompleteBatch(vec![item(
        ids[0],
        token,
        TxStatus::Failed,
    )])));
    assert_eq!(again[0], answers[0]);
    assert_eq!(m.table, before, "a replayed completion changed the table");
    let rest = batch_answers(m.ok(PipelineCommand::CompleteBatch(vec![
        item(ids[1], token, TxStatus::Success),
        item(ids[2], token, TxStatus::Aborted),
    ])));
    assert!(rest.iter().all(Result::is_ok), "{rest:?}");
    assert_eq!(m.tx(ids[2]).status(), TxStatus::Aborted);
}
