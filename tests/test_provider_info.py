"""The provider is installable, valid against Airflow's schema and discovered by Airflow."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from importlib.resources import files

import jsonschema

from airflow_provider_streamstate.get_provider_info import get_provider_info


def test_provider_info_validates_against_airflows_schema() -> None:
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_entry_point_points_at_get_provider_info() -> None:
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.value.startswith("airflow_provider_streamstate")]
    assert len(eps) == 1
    assert eps[0].load()() == get_provider_info()


def test_providers_manager_discovers_streamstate() -> None:
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-provider-streamstate" in providers
    info = providers["airflow-provider-streamstate"]
    assert info.data["name"] == "streamstate"


def test_importing_the_package_pulls_no_heavy_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, airflow_provider_streamstate, airflow_provider_streamstate.get_provider_info;"
        "heavy = [m for m in ('pyspark', 'great_expectations', 'boto3', 'pandas') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_providers_manager_offers_the_hdfs_connection_type_with_its_hook() -> None:
    from airflow.providers_manager import ProvidersManager

    hooks = ProvidersManager().hooks
    assert "streamstate_hdfs" in hooks
    info = hooks["streamstate_hdfs"]
    assert info is not None
    assert info.hook_class_name == "airflow_provider_streamstate.backends.hdfs.hook.StreamstateHdfsHook"
    assert info.connection_id_attribute_name == "hdfs_conn_id"
