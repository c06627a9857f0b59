//! The pure pieces of the pipelines service against a state machine driven directly: stream
//! pages, long-poll looks, list and export pages, export cursors, a Work stream's credit.

use certus_core::limits::PIPELINE_NOTIFICATIONS_MAX;
use certus_core::pipelines::{
    ArchiveCursor, JsonDocument, NewTransaction, NodeGroup, Owner, QueueType, Route, TransactionId,
    TxMetadata, TxStatus,
};
use certus_core::{
    Command, PipelineCommand, PipelineConfig, PipelineReply, Response as CommandResponse, Stamp,
    State, WorkerId, apply,
};
use certus_proto::v1;
use prost::Message as _;
use tonic::Code;

use super::long_poll::{Look, look};
use super::streams::{export_page, stream_page};
use crate::convert::pipelines::check_cursor;
use crate::convert::pipelines::wire::transaction_page;
use crate::convert::pipelines::work::grant;
use crate::limits::{
    PIPELINE_LIST_REPLY_BYTES_MAX, PIPELINE_STREAM_PAGE_MAX, PIPELINE_WORK_CREDIT_MAX,
};

/// A state machine driven directly, one command per log entry.
struct Machine {
    state: State,
    index: u64,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            state: State::new(),
            index: 0,
        }
    }

    fn run(&mut self, command: PipelineCommand) -> PipelineReply {
        self.index += 1;
        let stamp = Stamp::new(self.index, 1_000_000 + self.index);
        match apply(&mut self.state, Command::Pipeline(command), stamp) {
            CommandResponse::Pipeline(Ok(reply)) => reply,
            other => panic!("refused: {other:?}"),
        }
    }

    fn tick(&mut self) {
        self.index += 1;
        let stamp = Stamp::new(self.index, 1_000_000 + self.index);
        apply(&mut self.state, Command::Tick, stamp);
    }

    /// Enqueues a transaction for `group` and dequeues it; returns its id and token.
    fn running(&mut self, group: &str) -> (TransactionId, u64) {
        let group = NodeGroup::new(group).expect("group");
        let PipelineReply::Enqueued { transaction, .. } =
            self.run(PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("o").expect("owner"),
                external_id: None,
                route: Route::NodeGroup(group.clone()),
                queue: QueueType::In,
                state: JsonDocument::new("{}").expect("json"),
                event: None,
                metadata: TxMetadata::default(),
            }))
        else {
            panic!("not enqueued");
        };
        let PipelineReply::Dequeued(taken) = self.run(PipelineCommand::Dequeue {
            node_group: group,
            worker: WorkerId::new("w").expect("worker"),
            max: 1,
        }) else {
            panic!("not dequeued");
        };
        assert_eq!(taken.len(), 1);
        (transaction, taken[0].claim().expect("claimed").token)
    }

    fn progress(&mut self, id: TransactionId, token: u64) {
        self.run(PipelineCommand::Progress {
            transaction: id,
            token,
            report: JsonDocument::new("1").expect("json"),
        });
    }

    fn complete(&mut self, id: TransactionId, token: u64) {
        self.run(PipelineCommand::Complete {
            transaction: id,
            token,
            status: TxStatus::Success,
            state: None,
        });
    }
}

fn kinds(items: &[v1::PipelineNotification]) -> Vec<(v1::NotificationKind, u64, u64)> {
    items
        .iter()
        .map(|item| (item.kind(), item.seq, item.transaction_id))
        .collect()
}

#[test]
fn a_stream_page_filters_by_group_and_kind_and_moves_past_what_it_read() {
    let mut machine = Machine::new();
    let (a, a_token) = machine.running("a");
    let (b, b_token) = machine.running("b");
    machine.progress(a, a_token); // 1
    machine.complete(b, b_token); // 2
    machine.complete(a, a_token); // 3
    let reads = machine.state.pipelines();
    let group_a = NodeGroup::new("a").expect("group");

    let (cursor, items) = stream_page(reads, 0, Some(&group_a), false);
    assert_eq!(kinds(&items), [(v1::NotificationKind::Completed, 3, a.0)]);
    assert_eq!(items[0].status(), v1::TxStatus::Success);
    assert_eq!(items[0].node_group, "a");
    assert_eq!(cursor, 3, "everything up to the last number was read");

    let (cursor, items) = stream_page(reads, 0, Some(&group_a), true);
    assert_eq!(
        kinds(&items),
        [
            (v1::NotificationKind::Progress, 1, a.0),
            (v1::NotificationKind::Completed, 3, a.0)
        ]
    );
    assert_eq!(cursor, 3);

    let (cursor, items) = stream_page(reads, 1, None, false);
    assert_eq!(
        kinds(&items),
        [
            (v1::NotificationKind::Completed, 2, b.0),
            (v1::NotificationKind::Completed, 3, a.0)
        ]
    );
    assert_eq!(cursor, 3);

    let (cursor, items) = stream_page(reads, 3, None, true);
    assert!(items.is_empty());
    assert_eq!(cursor, 3, "caught up: the cursor stays");
}

#[test]
fn a_stream_that_fell_behind_the_record_is_told_first_and_resumes_from_the_oldest_kept() {
    let mut machine = Machine::new();
    let (id, token) = machine.running("g");
    let reports = PIPELINE_NOTIFICATIONS_MAX + PIPELINE_STREAM_PAGE_MAX + 10;
    for _ in 0..reports {
        machine.progress(id, token);
    }
    let last = reports as u64;
    let oldest_kept = last - PIPELINE_NOTIFICATIONS_MAX as u64 + 1;
    let reads = machine.state.pipelines();
    assert_eq!(reads.last_notification_seq(), last);

    let (cursor, items) = stream_page(reads, 5, None, true);
    assert_eq!(
        kinds(&items[..2]),
        [
            (v1::NotificationKind::Missed, oldest_kept - 1, 0),
            (v1::NotificationKind::Progress, oldest_kept, id.0)
        ]
    );
    assert_eq!(
        items.len(),
        1 + PIPELINE_STREAM_PAGE_MAX,
        "one full page after the marker"
    );
    assert_eq!(
        cursor,
        oldest_kept - 1 + PIPELINE_STREAM_PAGE_MAX as u64,
        "a full page resumes after its last item"
    );
    // The next page goes on without another marker, in order.
    let (_, next) = stream_page(reads, cursor, None, true);
    assert_eq!(next[0].kind(), v1::NotificationKind::Progress);
    assert_eq!(next[0].seq, cursor + 1);

    // Filtered out entirely (another group): the marker still comes, and the cursor moves to
    // the end so the stream waits for news.
    let other = NodeGroup::new("other").expect("group");
    let (cursor, items) = stream_page(reads, 5, Some(&other), true);
    assert_eq!(
        kinds(&items),
        [(v1::NotificationKind::Missed, oldest_kept - 1, 0)]
    );
    assert_eq!(cursor, last);

    // A long-poll that far behind is told it may have missed progress.
    assert_eq!(look(reads, id, &mut 5), Look::News(v1::WaitOutcome::Missed));
    assert_eq!(
        look(reads, id, &mut (oldest_kept - 1)),
        Look::News(v1::WaitOutcome::Progress)
    );
}

#[test]
fn a_long_poll_sees_news_of_its_transaction_only() {
    let mut machine = Machine::new();
    let (a, a_token) = machine.running("g");
    let (b, b_token) = machine.running("g");
    machine.progress(b, b_token); // 1
    let mut cursor = 0;
    assert_eq!(
        look(machine.state.pipelines(), a, &mut cursor),
        Look::Nothing
    );
    assert_eq!(cursor, 1, "the look read past b's report");
    machine.progress(a, a_token); // 2
    assert_eq!(
        look(machine.state.pipelines(), a, &mut cursor),
        Look::News(v1::WaitOutcome::Progress)
    );
    let mut after_report = 2;
    assert_eq!(
        look(machine.state.pipelines(), a, &mut after_report),
        Look::Nothing
    );
    machine.complete(a, a_token);
    assert_eq!(
        look(machine.state.pipelines(), a, &mut after_report),
        Look::News(v1::WaitOutcome::Finished)
    );
    assert_eq!(
        look(machine.state.pipelines(), TransactionId(999), &mut 0),
        Look::Gone
    );
}

#[test]
fn transaction_pages_are_cut_by_count_and_by_size() {
    let mut machine = Machine::new();
    let big = format!("\"{}\"", "x".repeat(60 * 1024));
    for _ in 0..100 {
        machine.run(PipelineCommand::Enqueue(NewTransaction {
            owner: Owner::new("o").expect("owner"),
            external_id: None,
            route: Route::NodeGroup(NodeGroup::new("g").expect("group")),
            queue: QueueType::In,
            state: JsonDocument::new(big.clone()).expect("json"),
            event: Some(JsonDocument::new(big.clone()).expect("json")),
            metadata: TxMetadata::default(),
        }));
    }
    let reads = machine.state.pipelines();
    let group = NodeGroup::new("g").expect("group");
    let page = transaction_page(reads.in_play(&group, None, 11), 10);
    assert_eq!(page.transactions.len(), 10);
    assert_eq!(page.next_after, page.transactions[9].id);
    let page = transaction_page(reads.in_play(&group, None, 1001), 1000);
    let bytes: usize = page.transactions.iter().map(|tx| tx.encoded_len()).sum();
    assert!(bytes <= PIPELINE_LIST_REPLY_BYTES_MAX, "{bytes}");
    assert!(page.transactions.len() < 100 && page.transactions.len() > 10);
    assert_eq!(page.next_after, page.transactions.last().expect("some").id);
    let rest = transaction_page(reads.in_play(&group, None, 1001), 1000);
    assert_eq!(rest, page, "the same page again: nothing changed");
    let short = transaction_page(reads.in_play(&group, None, 5), 5);
    assert_eq!(short.transactions.len(), 5);
    assert_eq!(
        short.next_after, 0,
        "all that was found fits: no next page is claimed"
    );
}

#[test]
fn an_export_page_is_in_archive_order_cut_by_size_and_says_when_it_read_the_end() {
    let mut machine = Machine::new();
    machine.run(PipelineCommand::Configure(PipelineConfig {
        archive_delay_ms: 0,
        ..PipelineConfig::default()
    }));
    let big = format!("\"{}\"", "x".repeat(60 * 1024));
    for _ in 0..100 {
        let (id, token) = machine.running("g");
        machine.run(PipelineCommand::Complete {
            transaction: id,
            token,
            status: TxStatus::Success,
            state: Some(JsonDocument::new(big.clone()).expect("json")),
        });
    }
    machine.tick(); // archives all 100
    machine.tick(); // moves the clock past them
    let reads = machine.state.pipelines();
    let key = |item: &v1::ArchivedTransaction| {
        let cursor = item.cursor.expect("a cursor");
        let tx = item.transaction.as_ref().expect("a transaction");
        assert_eq!(
            (cursor.archived_at_ms, cursor.transaction_id),
            (tx.archived_at_ms, tx.id)
        );
        (cursor.archived_at_ms, cursor.transaction_id)
    };
    let cursor_of = |item: &v1::ArchivedTransaction| {
        let (archived_at_ms, id) = key(item);
        ArchiveCursor {
            archived_at_ms,
            transaction: TransactionId(id),
        }
    };

    let (page, end) = export_page(reads, None, PIPELINE_STREAM_PAGE_MAX);
    let bytes: usize = page.iter().map(|item| item.encoded_len()).sum();
    assert!(bytes <= PIPELINE_LIST_REPLY_BYTES_MAX, "{bytes}");
    assert!(page.len() > 10 && page.len() < 100, "{}", page.len());
    assert!(!end, "cut by size: more follow");
    assert!(page.windows(2).all(|pair| key(&pair[0]) < key(&pair[1])));
    let (rest, end) = export_page(reads, Some(cursor_of(&page[page.len() - 1])), 256);
    assert_eq!(page.len() + rest.len(), 100);
    assert!(end, "fewer than asked for: the end");
    assert!(key(&page[page.len() - 1]) < key(&rest[0]));
    let (short, end) = export_page(reads, None, 5);
    assert_eq!(short, page[..5]);
    assert!(!end, "as many as asked for: maybe more");
    let (none, end) = export_page(reads, Some(cursor_of(&rest[rest.len() - 1])), 5);
    assert!(none.is_empty() && end);
}

#[test]
fn an_export_cursor_must_lie_before_the_cluster_clock() {
    let at = |archived_at_ms| {
        Some(ArchiveCursor {
            archived_at_ms,
            transaction: TransactionId(1),
        })
    };
    assert!(check_cursor(None, 0).is_ok());
    assert!(check_cursor(at(99), 100).is_ok());
    for (cursor, clock_ms) in [(at(100), 100), (at(u64::MAX), 100), (at(0), 0)] {
        let refused = check_cursor(cursor, clock_ms).expect_err("refused");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert_eq!(
            refused
                .metadata()
                .get("certus-error")
                .and_then(|value| value.to_str().ok()),
            Some("out-of-range")
        );
        assert!(
            refused.message().contains("after.archived_at_ms"),
            "{}",
            refused.message()
        );
    }
}

#[test]
fn a_work_streams_credit_grows_by_grants_up_to_its_bound() {
    assert_eq!(grant(0, 1).unwrap(), 1);
    assert_eq!(
        grant(PIPELINE_WORK_CREDIT_MAX - 24, 24).unwrap(),
        PIPELINE_WORK_CREDIT_MAX
    );
    for (credit, more) in [
        (0, 0),
        (PIPELINE_WORK_CREDIT_MAX, 1),
        (PIPELINE_WORK_CREDIT_MAX - 24, 25),
        (0, u32::MAX),
    ] {
        let refused = grant(credit, more).unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{credit} + {more}");
        assert!(refused.message().starts_with("credit"), "{refused:?}");
    }
}
