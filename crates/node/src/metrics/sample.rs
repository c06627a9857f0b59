//! Reading a node's levels at scrape time into the plain samples the metrics render: Raft's
//! metrics and the applied state through the [`Replica`], the local CT tree through
//! [`LocalTree`], which the CT node implements (the metrics do not know the CT node).

use certus_core::State;
use certus_core::pipelines::{QueueType, TxStatus};
use certus_core::sessions::Stage;

use super::{
    CtSample, LocalTree, NODE_GROUPS_SAMPLED, NodeGroupSample, NodeSample, QueuesSample,
    RaftSample, ServingSample, StageSample,
};
use crate::raft::replica::Replica;

impl NodeSample {
    /// Reads the node now: Raft and the applied state through `replica`, and the local CT tree
    /// (on a node that runs the log) through what the CT node hands over.
    pub fn of(replica: &Replica, ct: Option<&dyn LocalTree>) -> NodeSample {
        let commit_index = replica.commit_index();
        let raft = {
            let metrics = replica.raft.metrics();
            let metrics = metrics.borrow();
            RaftSample {
                term: metrics.current_term,
                commit_index,
                applied_index: metrics.last_applied.map_or(0, |log_id| log_id.index),
                last_log_index: metrics.last_log_index.unwrap_or(0),
                snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
                voters: metrics.membership_config.membership().voter_ids().count() as u64,
                is_leader: metrics.state == openraft::ServerState::Leader,
            }
        };
        let now_ms = replica.clock.now_ms();
        let queues = replica
            .reader
            .read(|applied| QueuesSample::of(&applied.state, now_ms));
        let ct = ct.map(|ct| {
            let mut sample = replica.reader.read(|applied| {
                let state = &applied.state;
                CtSample {
                    local_tree_size: 0,
                    local_contiguous_size: 0,
                    serving: state.ct_serving().map(|serving| ServingSample {
                        tree_size: serving.sth.tree_size,
                        age_ms: now_ms.saturating_sub(serving.sth.timestamp_ms),
                    }),
                    next_sequence: state.ct_next_sequence(),
                    unsequenced: state.ct_unsequenced_count() as u64,
                    held: state.ct_held_count() as u64,
                    frozen: state.ct_frozen(),
                }
            });
            sample.local_tree_size = ct.tree_size();
            sample.local_contiguous_size = ct.contiguous_size();
            sample
        });
        NodeSample { raft, queues, ct }
    }
}

impl QueuesSample {
    /// Reads `state`'s queues at `now_ms`. Bounded work (it runs while `apply` waits): at most
    /// [`NODE_GROUPS_SAMPLED`] node groups, one head lookup per queue.
    pub fn of(state: &State, now_ms: u64) -> QueuesSample {
        let pipelines = state.pipelines();
        let mut node_groups = Vec::new();
        let mut node_groups_omitted = 0u64;
        for (group, counts) in pipelines.node_groups() {
            if node_groups.len() == NODE_GROUPS_SAMPLED {
                node_groups_omitted += 1;
                continue;
            }
            let mut sample = NodeGroupSample {
                name: group.as_str().to_owned(),
                running: counts.running as u64,
                sleeping: counts.sleeping as u64,
                ..NodeGroupSample::default()
            };
            for (slot, queue) in QueueType::PRIORITY.into_iter().enumerate() {
                sample.queued[slot] = counts.in_queue(queue) as u64;
                sample.oldest_age_ms[slot] = pipelines
                    .queue(group, queue, 1)
                    .first()
                    .and_then(|head| head.queued())
                    .map(|entry| now_ms.saturating_sub(entry.at_ms));
            }
            node_groups.push(sample);
        }
        let mut transactions = [0u64; 8];
        for (count, status) in transactions.iter_mut().zip(TxStatus::ALL) {
            *count = pipelines.status_count(status) as u64;
        }
        let session_stages = [
            Stage::MakeChallenge,
            Stage::TestChallenge,
            Stage::Issue,
            Stage::Done,
        ]
        .into_iter()
        .filter_map(|stage| {
            state
                .sessions_queue_stats(stage, now_ms)
                .map(|stats| StageSample {
                    stage,
                    waiting: stats.waiting as u64,
                    claimed: stats.claimed as u64,
                    oldest_age_ms: stats.oldest_age_ms,
                })
        })
        .collect();
        QueuesSample {
            node_groups,
            node_groups_omitted,
            transactions,
            webhooks_pending: pipelines.webhooks_pending() as u64,
            notices: pipelines.notices(None, usize::MAX).len() as u64,
            session_stages,
            leases: state.lease_count() as u64,
        }
    }
}
