//! `certus.v1.Log`: the CT log over gRPC, for programs (and the simulation, which has no HTTP).
//! Each call is wiring: its conversions are [`crate::convert::log`]; submissions go through the
//! CT node, control writes through the replica (unnumbered), reads through the CT node's reads.

use std::sync::Arc;

use certus_core::ct::CtCommand;
use certus_proto::v1;
use certus_proto::v1::log_server::Log;
use tonic::{Request, Response, Status};

use crate::convert::log as convert;
use crate::ct::node::CtNode;
use crate::ct::peers::PROXIED_KEY;
use crate::ct::reads::{Read, ReadReply};
use crate::raft::replica::Replica;

/// `certus.v1.Log` for one node.
#[derive(Debug, Clone)]
pub struct LogService {
    replica: Arc<Replica>,
    ct: Arc<CtNode>,
}

impl LogService {
    /// The log service of `replica`.
    pub fn new(replica: Arc<Replica>, ct: Arc<CtNode>) -> LogService {
        LogService { replica, ct }
    }

    /// Proposes a control command and waits until this node has applied it too: a follower
    /// forwarded the write, and the answer is built from this node's state.
    async fn control(&self, command: CtCommand) -> Result<(), Status> {
        self.replica.propose(None, command).await?;
        Ok(self.replica.read_barrier().await?)
    }

    /// Answers a read here, or forwards it when this node is behind, unless the request was
    /// itself forwarded.
    async fn read<T>(&self, request: &Request<T>, read: Read) -> Result<ReadReply, Status> {
        let may_proxy = !request.metadata().contains_key(PROXIED_KEY);
        self.ct
            .read(&self.replica, read, may_proxy)
            .await
            .map_err(convert::read_status)
    }

    fn log_status(&self) -> Result<v1::LogStatus, Status> {
        let mut reply = self
            .replica
            .reader
            .read(|applied| convert::log_status(&applied.state));
        #[cfg(not(madsim))]
        if let Some(mirror) = reply.mirror.as_mut() {
            let progress = self.ct.mirror_progress();
            mirror.source_sth = progress
                .source_sth
                .as_ref()
                .map(convert::sth_to_proto)
                .transpose()?;
            mirror.last_error = progress.last_error.unwrap_or_default();
        }
        reply.local_tree_size = self.ct.db().tree_size();
        reply.local_contiguous_size = self.ct.db().contiguous_size();
        reply.public_key = self.ct.public_key_der().to_vec();
        reply.log_id = certus_ct::sha256(self.ct.public_key_der()).to_vec();
        Ok(reply)
    }
}

#[tonic::async_trait]
impl Log for LogService {
    async fn add_chain(
        &self,
        request: Request<v1::AddChainRequest>,
    ) -> Result<Response<v1::AddChainReply>, Status> {
        let request = request.into_inner();
        let sct = self
            .ct
            .submit(&self.replica, &request.chain, request.precertificate)
            .await
            .map_err(convert::submit_status)?;
        Ok(Response::new(convert::added(&sct)?))
    }

    async fn get_sth(
        &self,
        request: Request<v1::GetSthRequest>,
    ) -> Result<Response<v1::SignedTreeHead>, Status> {
        let reply = self.read(&request, Read::Sth).await?;
        Ok(Response::new(convert::sth(reply)?))
    }

    async fn get_consistency(
        &self,
        request: Request<v1::GetConsistencyRequest>,
    ) -> Result<Response<v1::GetConsistencyReply>, Status> {
        let read = Read::Consistency {
            first: request.get_ref().first,
            second: request.get_ref().second,
        };
        let reply = self.read(&request, read).await?;
        Ok(Response::new(convert::consistency(reply)?))
    }

    async fn get_proof_by_hash(
        &self,
        request: Request<v1::GetProofByHashRequest>,
    ) -> Result<Response<v1::GetProofByHashReply>, Status> {
        let read = Read::ProofByHash {
            leaf_hash: convert::leaf_hash(&request.get_ref().leaf_hash)?,
            tree_size: request.get_ref().tree_size,
        };
        let reply = self.read(&request, read).await?;
        Ok(Response::new(convert::proof(reply)?))
    }

    async fn get_entries(
        &self,
        request: Request<v1::GetEntriesRequest>,
    ) -> Result<Response<v1::GetEntriesReply>, Status> {
        let read = Read::Entries {
            start: request.get_ref().start,
            end: request.get_ref().end,
        };
        let reply = self.read(&request, read).await?;
        Ok(Response::new(convert::entries(reply)?))
    }

    async fn get_entry_and_proof(
        &self,
        request: Request<v1::GetEntryAndProofRequest>,
    ) -> Result<Response<v1::GetEntryAndProofReply>, Status> {
        let read = Read::EntryAndProof {
            leaf_index: request.get_ref().leaf_index,
            tree_size: request.get_ref().tree_size,
        };
        let reply = self.read(&request, read).await?;
        Ok(Response::new(convert::entry_and_proof(reply)?))
    }

    async fn fetch_entries(
        &self,
        request: Request<v1::FetchEntriesRequest>,
    ) -> Result<Response<v1::FetchEntriesReply>, Status> {
        let request = request.into_inner();
        let limit =
            usize::try_from(request.limit.min(crate::ct::peers::FETCH_BATCH)).unwrap_or(usize::MAX);
        let stored = self
            .ct
            .stored_entries(request.start, limit)
            .map_err(convert::read_status)?;
        Ok(Response::new(convert::fetched(stored)))
    }

    async fn get_roots(
        &self,
        _request: Request<v1::GetRootsRequest>,
    ) -> Result<Response<v1::GetRootsReply>, Status> {
        Ok(Response::new(v1::GetRootsReply {
            certificates: self.ct.roots().certificates().to_vec(),
        }))
    }

    async fn status(
        &self,
        _request: Request<v1::LogStatusRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        Ok(Response::new(self.log_status()?))
    }

    async fn set_config(
        &self,
        request: Request<v1::SetLogConfigRequest>,
    ) -> Result<Response<v1::LogConfig>, Status> {
        let (config, dedupe_window_entries) = convert::set_config(request.into_inner())?;
        self.control(CtCommand::Configure(config)).await?;
        if let Some(entries) = dedupe_window_entries {
            self.control(CtCommand::SetDedupeWindow { entries }).await?;
        }
        let reply = self
            .replica
            .reader
            .read(|applied| convert::log_config_to_proto(&applied.state));
        Ok(Response::new(reply))
    }

    async fn set_frozen(
        &self,
        request: Request<v1::SetFrozenRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        self.control(convert::set_frozen(request.into_inner()))
            .await?;
        Ok(Response::new(self.log_status()?))
    }

    async fn start_mirror(
        &self,
        request: Request<v1::StartMirrorRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        self.control(convert::start_mirror(request.into_inner())?)
            .await?;
        Ok(Response::new(self.log_status()?))
    }
}
