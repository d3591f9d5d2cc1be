"""How Spark's answer on an edited copy is compared with the engine's verification
(engine/edit/spark_check.py): absolute counts against a digest of the whole state, or,
for an edit proved by its changes, the difference Spark counts between the batch before
and the edit batch against the edit's."""

from __future__ import annotations

from airflow_provider_streamstate.engine.edit.spark_check import ExpectedEntries, problems, request
from airflow_provider_streamstate.engine.edit.verify import BatchProof, StoreChange


def _proof() -> BatchProof:
    return BatchProof(8, 8, 3, 40, 3, (StoreChange(0, "stateStoreSave", "default", deleted=2, added=0, replaced=1),
                                      StoreChange(1, "dedupe", "default")))


def test_an_edit_proved_by_its_changes_asks_spark_to_count_the_batch_before_and_every_store() -> None:
    req = request(8, ExpectedEntries.of_change(_proof()), [])
    assert req["batch_id"] == 8 and req["base_batch_id"] == 7
    assert req["stores"] == [{"operator_id": 0, "store": "default"}, {"operator_id": 1, "store": "default"}]


def test_spark_agrees_when_it_counts_the_edits_change_and_each_difference_is_named_otherwise() -> None:
    expected = ExpectedEntries.of_change(_proof())
    agree = {"entries": {"0/default": 98, "1/default": 50}, "base_entries": {"0/default": 100, "1/default": 50},
             "keys": []}
    assert problems(agree, expected) == []
    off = {**agree, "entries": {"0/default": 99, "1/default": 50}}
    assert problems(off, expected) == ["operator/store 0/default: Spark reads 99 entries, 100 at batch 7 (-1), "
                                       "the edit's change is -2"]
    uncounted = {**agree, "base_entries": {"0/default": 100}}
    assert problems(uncounted, expected) == ["operator/store 1/default: Spark did not count batch 7"]


def test_against_a_digest_spark_must_read_its_counts_exactly() -> None:
    expected = ExpectedEntries({"0/default": 98})
    assert request(8, expected, [])["base_batch_id"] is None
    assert problems({"entries": {"0/default": 98}, "keys": []}, expected) == []
    assert problems({"entries": {"0/default": 97}, "keys": []}, expected) == [
        "operator/store 0/default: Spark reads 97 entries, the engine 98"]


class _Conf:
    """A Spark session's runtime conf, as the check job uses it."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


def test_the_check_job_reads_each_copy_with_its_pinned_confs_and_then_puts_the_applications_back() -> None:
    """Several copies in one application: each one's confs over the application's own, and
    the application's own again after it (a conf given at spark-submit is restored, one it
    did not give is unset), so the next copy reads with none of this one's."""
    from types import SimpleNamespace

    from airflow_provider_streamstate.engine.checkpoint.reader import (
        FORMAT_VERSION_CONF,
        PROVIDER_CONF,
        ROCKSDB_PROVIDER,
        CheckpointReader,
    )
    from airflow_provider_streamstate.jobs.edit_check_job import pin_confs, unpin_confs
    from tests.goldens import golden

    g = golden("windowed_aggregation_rocksdb_changelog_format_2")
    given = {PROVIDER_CONF: "org.example.SubmittedProvider", "spark.app.name": "check"}
    spark = SimpleNamespace(conf=_Conf(given))
    was: dict[str, str | None] = {}
    pin_confs(spark, CheckpointReader(g.checkpoint), g.last_batch, was)
    assert spark.conf.values[PROVIDER_CONF] == ROCKSDB_PROVIDER and spark.conf.values[FORMAT_VERSION_CONF] == "2"
    assert was[PROVIDER_CONF] == "org.example.SubmittedProvider" and was[FORMAT_VERSION_CONF] is None
    unpin_confs(spark, was)
    assert spark.conf.values == given
