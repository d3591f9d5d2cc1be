"""What a supervision round may decide before it touches a stream: which failures say the
checkpoint itself is unusable (so restoring a snapshot can help) and which do not (a bug,
a missing topic, an unreachable broker: rolling state back cannot fix them), and which
policies are refused."""

from __future__ import annotations

import pytest

from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.engine.streams.supervisor import SupervisionPolicy, checkpoint_unusable

UNUSABLE = [
    "[STREAM_FAILED] Query [id = 1f2e, runId = 9a8b] terminated with exception: [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] "
    "An error occurred during loading state. SQLSTATE: 58030",
    "[CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS] An error occurred during loading state. Cannot read "
    "delta file /ckpt/state/0/1/7.delta of HDFSStateStoreProvider[id = (op=0,part=1)]: /ckpt/state/0/1/7.delta does not exist.",
    "java.io.FileNotFoundException: File file:/data/ckpt/offsets/12 does not exist",
    "java.lang.IllegalStateException: Error reading delta file file:/x/state/0/0/3.delta of HDFSStateStoreProvider",
    "[STDS_FAILED_TO_READ_STATE_SCHEMA] Failed to read the state schema.",
]
APPLICATION = [
    "ZeroDivisionError: division by zero",
    "[STREAM_FAILED] Query terminated with exception: org.apache.kafka.common.KafkaException: Failed to construct kafka consumer",
    "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host this topic-partition.",
    "RuntimeError: card processor unreachable in batch 4",
    None,
    "",
]


@pytest.mark.parametrize("error", UNUSABLE, ids=range(len(UNUSABLE)))
def test_failures_to_load_state_or_read_the_checkpoint_make_it_unusable(error: str) -> None:
    assert checkpoint_unusable(error)


@pytest.mark.parametrize("error", APPLICATION, ids=range(len(APPLICATION)))
def test_failures_of_the_application_or_its_input_do_not(error: str | None) -> None:
    assert not checkpoint_unusable(error)


@pytest.mark.parametrize(("fields", "words"), [
    ({"restore": "sometimes"}, "restore must be one of checkpoint-errors, any-failure, never"),
    ({"freshness_s": 0}, "freshness must be a positive duration"),
    ({"max_lag": -1}, "max_lag must be a number of records >= 0"),
    ({"settle_s": 0}, "settle must be a positive duration"),
])
def test_a_policy_that_cannot_work_is_refused_in_one_line(fields: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        SupervisionPolicy(**fields)
