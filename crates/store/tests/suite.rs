//! openraft's own storage test suite, run against both stacks: simulated files and disk, and
//! files in a temporary directory beside sled.

mod common;

use std::sync::Arc;

use certus_store::{
    Disk, Files, LogStore, OsFiles, SimDisk, SimFiles, SledDisk, StateMachineStore,
};
use common::{TEST_SEGMENT_BYTES, TestConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

type Stores<D> = (LogStore<TestConfig, D>, StateMachineStore<TestConfig, D>);

fn stores<D: Disk>(disk: D, files: Arc<dyn Files>) -> Result<Stores<D>, StorageError<u64>> {
    let disk = Arc::new(disk);
    let machine = StateMachineStore::open(Arc::clone(&disk))
        .map_err(|e| openraft::StorageIOError::read_state_machine(&e))?;
    // Small segments: the suite's logs span several, so rollover, truncation across segments
    // and whole-segment purges are all exercised.
    let log = LogStore::open(disk, files, TEST_SEGMENT_BYTES)
        .map_err(|e| openraft::StorageIOError::read_logs(&e))?;
    Ok((log, machine))
}

struct SimBuilder;

impl StoreBuilder<TestConfig, LogStore<TestConfig, SimDisk>, StateMachineStore<TestConfig, SimDisk>>
    for SimBuilder
{
    async fn build(
        &self,
    ) -> Result<
        (
            (),
            LogStore<TestConfig, SimDisk>,
            StateMachineStore<TestConfig, SimDisk>,
        ),
        StorageError<u64>,
    > {
        let (log, sm) = stores(SimDisk::new(), Arc::new(SimFiles::new()))?;
        Ok(((), log, sm))
    }
}

struct SledBuilder;

impl
    StoreBuilder<
        TestConfig,
        LogStore<TestConfig, SledDisk>,
        StateMachineStore<TestConfig, SledDisk>,
        tempfile::TempDir,
    > for SledBuilder
{
    async fn build(
        &self,
    ) -> Result<
        (
            tempfile::TempDir,
            LogStore<TestConfig, SledDisk>,
            StateMachineStore<TestConfig, SledDisk>,
        ),
        StorageError<u64>,
    > {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let disk =
            SledDisk::open(&dir.path().join("raft")).expect("sled opens in a fresh directory");
        let files = OsFiles::open(&dir.path().join("raft-log")).expect("a fresh log directory");
        let (log, sm) = stores(disk, Arc::new(files))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn the_simulated_store_passes_the_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(SimBuilder)
}

#[test]
fn the_sled_and_file_store_passes_the_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(SledBuilder)
}
