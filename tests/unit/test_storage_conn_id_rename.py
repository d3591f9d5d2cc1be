"""A stream's connection is `storage_conn_id` (it reaches HDFS and registered backends, not only
S3); what was written under the old name `aws_conn_id` before the rename still works: specs,
pipeline and store entries, serialized triggers and run confs are read silently, DAG code
passing the old argument gets a deprecation warning, scripts passing `--aws-conn-id` a note."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import jinja2
import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_streamstate.cli.main import build_parser
from airflow_provider_streamstate.engine.core.config.renamed import with_current_names
from airflow_provider_streamstate.engine.core.errors import UsageError
from airflow_provider_streamstate.hooks.store import StreamstateStoreHook
from airflow_provider_streamstate.operators.base import ConfiguredPipeline
from airflow_provider_streamstate.operators.gc import GarbageCollectOperator
from airflow_provider_streamstate.operators.replicate import ReplicateSnapshotsOperator
from airflow_provider_streamstate.sensors.replicate import SnapshotReplicaSensor
from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.triggers.replicate import SnapshotReplicaTrigger

REPO = Path(__file__).resolve().parents[2]
SPEC = {"name": "orders", "checkpoint": "/data/ckpt/orders", "store": "s3://snaps/prod"}


def test_a_spec_dict_written_with_the_old_name_is_read_under_the_new_one() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # data written before the rename is read silently
        spec = StreamSpec.from_value(json.dumps({**SPEC, "aws_conn_id": "aws_snaps"}))
    assert spec.storage_conn_id == "aws_snaps"
    assert "aws_conn_id" not in spec.to_dict() and spec.to_dict()["storage_conn_id"] == "aws_snaps"


def test_a_spec_giving_both_names_is_refused_when_they_disagree() -> None:
    assert StreamSpec.from_value({**SPEC, "aws_conn_id": "a", "storage_conn_id": "a"}).storage_conn_id == "a"
    with pytest.raises(UsageError, match="storage_conn_id='b' and its old name aws_conn_id='a' disagree"):
        StreamSpec.from_value({**SPEC, "aws_conn_id": "a", "storage_conn_id": "b"})


def test_dag_code_constructing_a_spec_with_the_old_name_gets_a_warning_and_the_same_spec() -> None:
    with pytest.warns(DeprecationWarning, match="aws_conn_id is renamed storage_conn_id"):
        old = StreamSpec(**SPEC, aws_conn_id="aws_snaps")
    assert old == StreamSpec(**SPEC, storage_conn_id="aws_snaps")
    with pytest.warns(DeprecationWarning, match="renamed storage_conn_id"):
        assert old.aws_conn_id == "aws_snaps"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # derive and redact copy fields, never the old name
        assert old.derive(name="orders_clone").storage_conn_id == "aws_snaps"
        assert old.redacted().storage_conn_id == "aws_snaps"


def test_a_pipeline_dict_and_a_store_entry_with_the_old_name() -> None:
    pipeline = {"name": "p", "members": {"a": "/ckpt/a", "b": "/ckpt/b"},
                "links": [{"upstream": "a", "topic": "t", "downstream": "b"}], "store": "file:///s", "aws_conn_id": "c"}
    assert ConfiguredPipeline.of(pipeline).storage_conn_id == "c"
    assert with_current_names({"store": "s3://b", "aws_conn_id": None}, what="x") == {"store": "s3://b",
                                                                                     "storage_conn_id": None}
    assert with_current_names({"dr_store": "s3://dr", "dr_aws_conn_id": "aws_dr"}, what="x") == {
        "dr_store": "s3://dr", "dr_storage_conn_id": "aws_dr"}


def _dag_module(name: str) -> Any:
    path = REPO / "dags" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"{name}_for_rename_test", path)
    assert module_spec and module_spec.loader
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_the_store_maintenance_dag_reads_store_entries_written_with_the_old_name() -> None:
    configured_stores = _dag_module("streamstate_store_maintenance").configured_stores
    assert configured_stores({"stores": [{"store": "s3://b/p", "aws_conn_id": "aws_primary"}, "file:///s"]}) == [
        {"store": "s3://b/p", "storage_conn_id": "aws_primary"}, {"store": "file:///s", "storage_conn_id": None}]
    with pytest.raises(AirflowFailException, match="disagree"):
        configured_stores({"stores": [{"store": "s3://b/p", "aws_conn_id": "a", "storage_conn_id": "b"}]})


def test_operators_and_sensors_take_the_old_argument_names_with_a_deprecation_warning() -> None:
    with pytest.warns(AirflowProviderDeprecationWarning, match="aws_conn_id is renamed storage_conn_id"):
        gc = GarbageCollectOperator(task_id="gc", store="s3://b/p", aws_conn_id="aws_primary")
    assert gc.storage_conn_id == "aws_primary" and gc.subject().storage_conn_id == "aws_primary"
    with pytest.warns(AirflowProviderDeprecationWarning) as caught:
        rep = ReplicateSnapshotsOperator(task_id="r", stream=SPEC, destination_store="s3://dr/p",
                                         destination_aws_conn_id="aws_dr", source_aws_conn_id="aws_src")
    assert {str(w.message).split(": ")[1].split(" ")[0] for w in caught} == {"destination_aws_conn_id",
                                                                            "source_aws_conn_id"}
    assert (rep.destination_storage_conn_id, rep.source_storage_conn_id) == ("aws_dr", "aws_src")
    with pytest.warns(AirflowProviderDeprecationWarning):
        sensor = SnapshotReplicaSensor(task_id="s", stream=SPEC, store="s3://dr/p", aws_conn_id="aws_dr")
    assert sensor.storage_conn_id == "aws_dr"
    with pytest.warns(AirflowProviderDeprecationWarning):
        assert StreamstateStoreHook("s3://b/p", aws_conn_id="c").storage_conn_id == "c"
    with pytest.raises(UsageError, match="disagree"), pytest.warns(AirflowProviderDeprecationWarning):
        GarbageCollectOperator(task_id="gc2", store="s3://b/p", aws_conn_id="a", storage_conn_id="b")


def test_a_trigger_serialized_before_the_rename_resumes_under_the_new_names() -> None:
    old_kwargs = {"stream": "orders", "store": "s3://dr/p", "aws_conn_id": "aws_dr", "snapshot": "latest",
                  "source_store": "s3://snaps/prod", "source_aws_conn_id": "aws_src", "poke_interval": 5.0}
    trigger = SnapshotReplicaTrigger(**old_kwargs)
    _, kwargs = trigger.serialize()
    assert kwargs["storage_conn_id"] == "aws_dr" and kwargs["source_storage_conn_id"] == "aws_src"
    assert not {"aws_conn_id", "source_aws_conn_id"} & set(kwargs)
    with pytest.raises(TypeError, match="unexpected argument"):
        SnapshotReplicaTrigger(stream="orders", store="s3://dr/p", aws_conn=1)


def test_the_cli_takes_the_old_option_with_a_note_and_hides_it_from_help(capsys) -> None:
    parser = build_parser()
    args = parser.parse_args(["snapshot", "list", "--store", "s3://b/p", "--stream", "orders", "--aws-conn-id", "c"])
    assert args.storage_conn_id == "c"
    assert "--aws-conn-id is renamed --storage-conn-id" in capsys.readouterr().err
    args = parser.parse_args(["replicate", "--from", "s3://a", "--to", "s3://b", "--stream", "o",
                              "--from-aws-conn-id", "x", "--to-storage-conn-id", "y"])
    assert (args.from_storage_conn_id, args.to_storage_conn_id) == ("x", "y")
    listing = parser._subparsers._group_actions[0].choices["snapshot"]  # noqa: SLF001
    help_text = listing._subparsers._group_actions[0].choices["list"].format_help()  # noqa: SLF001
    assert "--storage-conn-id" in help_text and "--aws-conn-id" not in help_text


def test_default_args_partial_and_expand_take_the_old_names() -> None:
    with DAG("rename_defaults", schedule=None, default_args={"aws_conn_id": "aws_primary"}):
        with pytest.warns(AirflowProviderDeprecationWarning, match="aws_conn_id is renamed"):
            gc = GarbageCollectOperator(task_id="gc", store="s3://b/p")
        assert gc.storage_conn_id == "aws_primary"
        GarbageCollectOperator.partial(task_id="gc_mapped", aws_conn_id="aws_primary").expand(store=["s3://b/p"])
        ReplicateSnapshotsOperator.partial(task_id="r_mapped", stream=SPEC).expand(
            destination_store=["s3://dr/p"], destination_aws_conn_id=["aws_dr"])


def test_a_derived_spec_takes_the_old_name_as_the_new_connection() -> None:
    spec = StreamSpec(**SPEC, storage_conn_id="old")
    with pytest.warns(DeprecationWarning, match="renamed storage_conn_id"):
        assert spec.derive(aws_conn_id="new").storage_conn_id == "new"
    with pytest.warns(DeprecationWarning), pytest.raises(UsageError, match="disagree"):
        spec.derive(aws_conn_id="new", storage_conn_id="other")


@pytest.mark.parametrize("dag", ["streamstate_on_snapshot", "streamstate_scheduled_snapshot",
                                 "streamstate_pipeline_snapshot"])
def test_the_dags_dr_connection_is_read_from_a_run_conf_written_with_the_old_name(dag: str) -> None:
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(_dag_module(dag).DR_STORAGE_CONN)
    assert template.render(params={"dr_storage_conn_id": "", "dr_aws_conn_id": "aws_dr"}) == "aws_dr"
    assert template.render(params={"dr_storage_conn_id": "aws_dr2"}) == "aws_dr2"
    assert template.render(params={"dr_storage_conn_id": ""}) == "None"


def test_the_failback_dag_reads_the_old_name_in_its_stream_param() -> None:
    task = _dag_module("streamstate_dr_failback").dag.get_task("replicate_to_primary")
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(task.destination_storage_conn_id)
    assert template.render(params={"stream": {**SPEC, "aws_conn_id": "aws_home"}}) == "aws_home"
    assert template.render(params={"stream": {**SPEC, "storage_conn_id": "aws_home2"}}) == "aws_home2"
