"""OpenLineage for the operators: which datasets a snapshot, validation, replication or
failover read and wrote, named as the OpenLineage spec names them, so a lineage backend
joins them with what Spark and other tools report about the same checkpoint, bucket or topic:

    S3 object or prefix   namespace s3://<bucket>                  name <key>
    local file or dir     namespace file                           name </abs/path>
    Kafka topic           namespace kafka://<bootstrap host:port>  name <topic>

(`openlineage.client.naming.dataset`: S3, LocalFileSystem, Kafka.) A stream's snapshots in
a store are one dataset, `<store>/streams/<stream>`, whose version is the snapshot id: the
same location as the stream's Airflow asset (assets/streams.py).

    snapshot   checkpoint + the Kafka topics its batch read  ->  snapshots (version: the id)
    validate   snapshots (version; GX results as dataQualityAssertions)  ->  validation results
    replicate  snapshots in the source  ->  snapshots in the destination (version: the newest)
    failover   snapshots in the DR store (version) + the DR topics  ->  the DR checkpoint

apache-airflow-providers-openlineage is optional: it is imported only when its listener
asks an operator for lineage, so nothing here runs without it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow_provider_streamstate.assets.streams import location_uri


def dataset_name(location: str) -> tuple[str, str]:
    """(namespace, name) of a store, checkpoint or path, as the OpenLineage spec names it."""
    uri = location_uri(location)
    parts = urlsplit(uri)
    if parts.scheme == "s3":
        return f"s3://{parts.netloc}", parts.path.lstrip("/") or "/"
    if parts.scheme == "file":
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path or "/"


def snapshots_location(store: str, stream: str) -> str:
    """Where a stream's snapshots live in a store (the dataset of its snapshots)."""
    return f"{location_uri(store)}/streams/{stream}"


def kafka_namespace(bootstrap: str | None) -> str | None:
    """`kafka://host:port` of the first bootstrap server (the spec names a cluster by one)."""
    first = (bootstrap or "").split(",")[0].strip()
    if not first:
        return None
    return "kafka://" + first.split("://", 1)[-1]


def _dataset(kind: str, location: str, *, version: str | None = None, input_facets: dict[str, Any] | None = None) -> Any:
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset

    namespace, name = dataset_name(location)
    facets: dict[str, Any] = {}
    if version:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=version)
    if kind == "input":
        return InputDataset(namespace=namespace, name=name, facets=facets, inputFacets=input_facets or {})
    return OutputDataset(namespace=namespace, name=name, facets=facets)


def _topics(bootstrap: str | None, topics: Any) -> list[Any]:
    from openlineage.client.event_v2 import InputDataset

    namespace = kafka_namespace(bootstrap)
    if namespace is None:  # the cluster is unknown: a topic name alone names no dataset
        return []
    return [InputDataset(namespace=namespace, name=str(t)) for t in sorted(topics or [])]


def _lineage(inputs: list[Any], outputs: list[Any]) -> Any:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=inputs, outputs=outputs)


def empty_lineage() -> Any:
    """What a task that produced nothing reports."""
    return _lineage([], [])


def snapshot_lineage(*, checkpoint: str, store: str, result: dict[str, Any], kafka_bootstrap: str | None) -> Any:
    """A snapshot read the checkpoint (and, through it, the topics its batches consumed) and
    wrote a version of the stream's snapshots."""
    stream = result["stream"]
    inputs = [_dataset("input", checkpoint), *_topics(kafka_bootstrap, (result.get("kafka_offsets") or {}).keys())]
    return _lineage(inputs, [_dataset("output", snapshots_location(store, stream), version=result["snapshot_id"])])


def assertions_facet(expectations: list[dict[str, Any]], failed: list[dict[str, Any]]) -> Any:
    """GX results as OpenLineage's dataQualityAssertions: one assertion per expectation of the
    suite, failed when the result lists it (by type and column)."""
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dq

    failing = [(f.get("type"), f.get("column")) for f in failed]
    assertions = []
    for e in expectations:
        column = (e.get("kwargs") or {}).get("column")
        key = (e.get("type"), column)
        ok = key not in failing
        if not ok:
            failing.remove(key)  # one failure answers one expectation
        assertions.append(dq.Assertion(assertion=str(e.get("type")), success=ok,
                                       column=column if isinstance(column, str) else None))
    return dq.DataQualityAssertionsDatasetFacet(assertions=assertions)


def validation_lineage(*, store: str, result: dict[str, Any], expectations: list[dict[str, Any]]) -> Any:
    """A validation read a version of the stream's snapshots (its results as a data quality
    facet of that input) and wrote the stream's validation results."""
    stream = result["stream"]
    facet = assertions_facet(expectations, result.get("failed") or [])
    snapshots = _dataset("input", snapshots_location(store, stream), version=result["snapshot_id"],
                         input_facets={"dataQualityAssertions": facet})
    records = _dataset("output", snapshots_location(store, stream) + "/validations", version=result["snapshot_id"])
    return _lineage([snapshots], [records])


def replication_lineage(*, result: dict[str, Any]) -> Any:
    """A replication read the stream's snapshots in one store and wrote them in another; the
    version is the newest snapshot handled."""
    handled = [s for s in result.get("snapshots") or [] if s.get("snapshot_id")]
    if not handled:
        return empty_lineage()
    stream, newest = result["stream"], handled[-1]["snapshot_id"]
    return _lineage([_dataset("input", snapshots_location(result["source"], stream), version=newest)],
                    [_dataset("output", snapshots_location(result["destination"], stream), version=newest)])


def failover_lineage(*, store: str, checkpoint: str, result: dict[str, Any], kafka_bootstrap: str | None,
                     topics: list[str]) -> Any:
    """A failover read a version of the stream's snapshots in the DR store and wrote the DR
    checkpoint, which resumes from the mirrored topics."""
    stream = result["stream"]
    inputs = [_dataset("input", snapshots_location(store, stream), version=result["snapshot_id"]),
              *_topics(kafka_bootstrap, topics)]
    return _lineage(inputs, [_dataset("output", checkpoint)])
