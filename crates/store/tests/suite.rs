//! openraft's own storage test suite, run against both disks.

mod common;

use std::sync::Arc;

use certus_store::{Disk, LogStore, SimDisk, SledDisk, StateMachineStore};
use common::TestConfig;
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};

type Stores<D> = (LogStore<TestConfig, D>, StateMachineStore<TestConfig, D>);

fn stores<D: Disk>(disk: D) -> Result<Stores<D>, StorageError<u64>> {
    let disk = Arc::new(disk);
    let machine = StateMachineStore::open(Arc::clone(&disk))
        .map_err(|e| openraft::StorageIOError::read_state_machine(&e))?;
    Ok((LogStore::new(disk), machine))
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
        let (log, sm) = stores(SimDisk::new())?;
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
        let disk = SledDisk::open(dir.path()).expect("sled opens in a fresh directory");
        let (log, sm) = stores(disk)?;
        Ok((dir, log, sm))
    }
}

#[test]
fn the_simulated_disk_store_passes_the_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(SimBuilder)
}

#[test]
fn the_sled_store_passes_the_openraft_suite() -> Result<(), StorageError<u64>> {
    Suite::test_all(SledBuilder)
}
