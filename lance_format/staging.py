"""Staged writes: data files written by many calls (or processes) under a job id, committed
later as one version or aborted.  pylance's nearest equivalent is ``write_fragments`` plus
``LanceDataset.commit``; this adds the job bookkeeping a service needs so that a crash
leaves nothing committed by half.  Public: the names a service builds staged puts on."""

from __future__ import annotations

from .table.staging import (
    ABORTED,
    COMMITTED,
    JOB_ID_RULE,
    STAGING_DIR,
    StagingJob,
    commit_staged,
    referenced_data_files,
    valid_job_id,
)
from .table.write import (
    fragment_from_json,
    fragment_to_json,
    remove_fragment_files,
    write_fragments,
)

__all__ = [
    "ABORTED",
    "COMMITTED",
    "JOB_ID_RULE",
    "STAGING_DIR",
    "StagingJob",
    "commit_staged",
    "fragment_from_json",
    "fragment_to_json",
    "referenced_data_files",
    "remove_fragment_files",
    "valid_job_id",
    "write_fragments",
]
