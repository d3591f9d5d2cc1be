"""A stream's secrets are recognised by name wherever a user can pass them (Spark conf,
environment, application options), are hidden in what is written down, and are moved off
the spark-submit command line into a properties file only this user can read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from airflow_provider_streamstate.engine.core.config.redact import (
    REDACTED,
    is_sensitive,
    redact_command,
    redact_mapping,
    sensitive_values,
)
from airflow_provider_streamstate.engine.streams.secret_confs import (
    ENV_SECRETS_FILE,
    move_secrets_to_file,
    remove_secrets_file,
    split_secret_confs,
)


@pytest.mark.parametrize("name", [
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.yarn.appMasterEnv.AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "spark.kafka.sasl.jaas.config",
    "kafka.ssl.key.password",
    "spark.ssl.keyStorePassword",
    "DB_PASSWD",
    "--kafka-password",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "my_api_key",
    "apikey",
])
def test_names_that_carry_secrets_are_sensitive(name: str) -> None:
    assert is_sensitive(name)


@pytest.mark.parametrize("name", [
    "spark.sql.shuffle.partitions",
    "spark.kerberos.keytab",
    "spark.ssl.keyStoreType",
    "spark.master",
    "--checkpoint",
    "PYSPARK_PYTHON",
    "spark.sql.streaming.stateStore.providerClass",
])
def test_ordinary_names_are_not(name: str) -> None:
    assert not is_sensitive(name)


def test_sensitive_values_come_from_confs_env_and_options_of_both_spellings() -> None:
    found = sensitive_values(
        conf={"spark.hadoop.fs.s3a.secret.key": "S1", "spark.master": "yarn"},
        env={"AWS_SECRET_ACCESS_KEY": "S2", "PATH": "/bin"},
        args=["--kafka-password", "S3", "--token=S4", "--checkpoint", "/c", "--api-key"],
    )
    assert found == ["S1", "S2", "S3", "S4"]


def test_a_redacted_command_hides_sensitive_pairs_options_and_known_values_anywhere() -> None:
    command = ["spark-submit", "--conf", "spark.hadoop.fs.s3a.secret.key=S1", "--conf", "spark.master=yarn",
               "app.py", "--password", "S2", "--note", "prefix-S3-suffix"]
    assert redact_command(command, secrets=["S3"]) == [
        "spark-submit", "--conf", f"spark.hadoop.fs.s3a.secret.key={REDACTED}", "--conf", "spark.master=yarn",
        "app.py", "--password", REDACTED, "--note", f"prefix-{REDACTED}-suffix"]


def test_a_redacted_mapping_keeps_ordinary_values() -> None:
    assert redact_mapping({"AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "eu-west-1"}) == {
        "AWS_SECRET_ACCESS_KEY": REDACTED, "AWS_REGION": "eu-west-1"}


def test_secret_confs_leave_the_command_for_a_file_only_this_user_reads(tmp_path: Path) -> None:
    command = ["spark-submit", "--master", "local[1]", "--conf", "spark.hadoop.fs.s3a.secret.key=a=b: c\\d é",
               "--conf=spark.yarn.appMasterEnv.AWS_SESSION_TOKEN=T", "--conf", "spark.ui.enabled=false", "app.py"]
    path = tmp_path / "launch.properties"
    argv, moved = move_secrets_to_file(command, path)
    assert moved == ["spark.hadoop.fs.s3a.secret.key", "spark.yarn.appMasterEnv.AWS_SESSION_TOKEN"]
    assert argv == ["spark-submit", "--properties-file", str(path), "--master", "local[1]",
                    "--conf", "spark.ui.enabled=false", "app.py"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == ("spark.hadoop.fs.s3a.secret.key=a\\=b\\: c\\\\d \\u00e9\n"
                                "spark.yarn.appMasterEnv.AWS_SESSION_TOKEN=T\n")


def test_a_properties_file_the_command_named_is_merged(tmp_path: Path) -> None:
    own = tmp_path / "own.properties"
    own.write_text("spark.executor.memory=1g\n")
    path = tmp_path / "launch.properties"
    argv, moved = move_secrets_to_file(
        ["spark-submit", "--properties-file", str(own), "--conf", "spark.ssl.keyPassword=K", "app.py"], path)
    assert moved == ["spark.ssl.keyPassword"]
    assert argv == ["spark-submit", "--properties-file", str(path), "app.py"]
    assert path.read_text() == "spark.executor.memory=1g\nspark.ssl.keyPassword=K\n"


def test_a_command_without_secrets_is_left_alone_and_no_file_is_written(tmp_path: Path) -> None:
    command = ["spark-submit", "--conf", "spark.ui.enabled=false", "app.py", "--password", "not-a-conf"]
    path = tmp_path / "launch.properties"
    assert move_secrets_to_file(command, path) == (command, [])
    assert not path.exists()
    assert split_secret_confs(command)[1] == {}


def test_name_value_arguments_without_a_dash_and_the_short_conf_option_are_secrets_too(tmp_path: Path) -> None:
    assert sensitive_values(args=["app.py", "kafka.sasl.password=abc", "--conf", "spark.ssl.keyPassword=K"]) == [
        "abc", "K"]
    argv, moved = move_secrets_to_file(["spark-submit", "-c", "spark.ssl.keyPassword=K", "app.py"],
                                       tmp_path / "p.properties")
    assert moved == ["spark.ssl.keyPassword"] and "spark.ssl.keyPassword=K" not in argv


def test_spark_defaults_still_apply_when_secrets_go_to_a_properties_file(tmp_path: Path) -> None:
    """spark-submit reads no spark-defaults.conf once a properties file is named: its
    confs are copied in first (ours win), on any Spark version."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.eventLog.enabled true\n")
    path = tmp_path / "launch.properties"
    argv, _ = move_secrets_to_file(["spark-submit", "--conf", "spark.ssl.keyPassword=K", "app.py"], path,
                                   env={"SPARK_CONF_DIR": str(conf_dir)})
    assert argv == ["spark-submit", "--properties-file", str(path), "app.py"]
    assert path.read_text() == "spark.eventLog.enabled true\nspark.ssl.keyPassword=K\n"



def test_a_driver_removes_the_secrets_file_it_was_given_and_forgets_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets.properties"
    secrets.write_text("spark.hadoop.fs.s3a.secret.key=s3cr3t\n")
    monkeypatch.setenv(ENV_SECRETS_FILE, str(secrets))
    remove_secrets_file()
    assert not secrets.exists()
    assert ENV_SECRETS_FILE not in os.environ
    monkeypatch.setenv(ENV_SECRETS_FILE, str(secrets))  # already gone: nothing to do, nothing raised
    remove_secrets_file()
    assert ENV_SECRETS_FILE not in os.environ
