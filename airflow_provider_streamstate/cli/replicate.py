"""`streamstate replicate`: copy snapshots of a stream from one store to another.

    streamstate replicate --from STORE --to STORE --stream NAME [SNAPSHOT...|--all|--since ID]
                          [--standby LOCATION] [--parallelism N] [--json]

`--standby` then brings the warm standby at LOCATION (a checkpoint location in the destination's
region) to the destination's newest snapshot, writing only the files that changed
(engine/dr/standby.py); `failover --standby` promotes it.

Each side of an S3 to S3 replication has its own client: by default both take endpoint and
credentials from the AWS_* environment; `--from-storage-conn-id`/`--to-storage-conn-id` take them
from an Airflow connection, and `--from-endpoint-url`/`--to-endpoint-url`,
`--from-region`/`--to-region` and `--from-profile`/`--to-profile` override the environment
for one side (another region's endpoint, another account's profile).
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_streamstate.cli.common import (
    EXIT_OK,
    add_parallelism,
    add_storage_conn_option,
    human_bytes,
    open_store_from_args,
    print_result,
)


def register(commands: Any) -> dict[tuple[str, str | None], Any]:
    p = commands.add_parser(
        "replicate", help="copy snapshots of a stream to another store (another region); only missing blobs",
    )
    p.add_argument("snapshot_ids", nargs="*", metavar="SNAPSHOT", help="snapshot ids or `latest` (default: latest)")
    p.add_argument("--from", dest="source", required=True, metavar="STORE", help="the store to copy from")
    p.add_argument("--to", dest="destination", required=True, metavar="STORE", help="the store to copy into")
    p.add_argument("--stream", required=True, help="the stream's name in both stores")
    p.add_argument("--all", action="store_true", help="every snapshot the destination does not hold yet (except those its retention deleted)")
    p.add_argument("--since", metavar="ID", default=None, help="this snapshot and every one created after it")
    for side, what in (("from", "source"), ("to", "destination")):
        add_storage_conn_option(
            p, f"--{side}-storage-conn-id",
            help=f"reach the {what} through this Airflow connection (aws for s3://, streamstate_hdfs for hdfs://)",
        )
        p.add_argument(
            f"--{side}-endpoint-url", metavar="URL", default=None,
            help=f"the {what}'s S3 endpoint, instead of AWS_ENDPOINT_URL (credentials still from the environment)",
        )
        p.add_argument(f"--{side}-region", metavar="REGION", default=None, help=f"the {what}'s S3 region")
        p.add_argument(f"--{side}-profile", metavar="PROFILE", default=None, help=f"the {what}'s AWS profile")
    p.add_argument("--standby", metavar="LOCATION", default=None,
                   help="then keep the warm standby at LOCATION (a new or empty location, or a standby) holding the "
                        "destination's newest snapshot: only the files that changed are written")
    add_parallelism(p)
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return {("replicate", None): cmd_replicate}


def _side(args: argparse.Namespace, side: str, url: str) -> Any:
    """One side's store: its own S3 client when any of its options is given."""
    from airflow_provider_streamstate.backends.s3.clients import client_config
    from airflow_provider_streamstate.backends.s3.errors import client_error
    from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError
    from airflow_provider_streamstate.engine.stores import open_store

    conn = getattr(args, f"{side}_storage_conn_id")
    endpoint = getattr(args, f"{side}_endpoint_url")
    region = getattr(args, f"{side}_region")
    profile = getattr(args, f"{side}_profile")
    overrides = [f"--{side}-{o}" for o, v in (("endpoint-url", endpoint), ("region", region), ("profile", profile)) if v]
    if overrides and not url.startswith("s3://"):
        raise UsageError(f"{overrides[0]} applies only to s3:// stores, not {url!r}", hint=f"drop {overrides[0]}")
    if conn:
        if overrides:
            raise UsageError(
                f"--{side}-storage-conn-id and {overrides[0]} both configure the same client",
                hint="put the endpoint, region or profile in the Airflow connection, or drop the connection",
            )
        return open_store_from_args(argparse.Namespace(store=url, storage_conn_id=conn, parallelism=args.parallelism))
    if not overrides:
        return open_store(url, parallelism=args.parallelism)
    try:
        import boto3

        session = boto3.session.Session(profile_name=profile, region_name=region)
        client = session.client(
            "s3", endpoint_url=endpoint,
            config=client_config(args.parallelism * 2, path_style=bool(endpoint) or _env_endpoint()),
        )
    except Exception as exc:  # noqa: BLE001 - building a client fails only on configuration
        if isinstance(exc, StreamstateError):
            raise
        raise _flag_error(exc, side, endpoint=endpoint, profile=profile, region=region) or client_error(exc) from None
    return open_store(url, connection=client, parallelism=args.parallelism)


def _flag_error(exc: Exception, side: str, *, endpoint: str | None, profile: str | None,
                region: str | None) -> Exception | None:
    """A configuration error caused by one of this side's options, naming that option (the
    environment's settings are not what to fix then)."""
    from botocore import exceptions as bx

    from airflow_provider_streamstate.engine.core.errors import UsageError

    if endpoint and isinstance(exc, ValueError) and str(exc).startswith("Invalid endpoint"):
        return UsageError(f"invalid S3 endpoint URL {endpoint!r} given by --{side}-endpoint-url",
                          hint=f"give --{side}-endpoint-url a full URL with its scheme, e.g. http://127.0.0.1:9000")
    if profile and isinstance(exc, bx.ProfileNotFound):
        return UsageError(
            f"AWS profile {profile!r} given by --{side}-profile is not in AWS_CONFIG_FILE or AWS_SHARED_CREDENTIALS_FILE",
            hint=f"fix --{side}-profile, or add the profile (`aws configure --profile {profile}`)",
        )
    if region and isinstance(exc, bx.InvalidRegionError | bx.UnknownRegionError):
        return UsageError(f"invalid AWS region {region!r} given by --{side}-region",
                          hint=f"give --{side}-region a region such as us-east-1")
    return None


def _env_endpoint() -> bool:
    import os

    return bool(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))


def cmd_replicate(args: argparse.Namespace) -> int:
    from airflow_provider_streamstate.engine.lifecycle.replicate import replicate

    source = _side(args, "from", args.source)
    destination = _side(args, "to", args.destination)
    result = replicate(
        source, destination, args.stream, snapshots=args.snapshot_ids, since=args.since, all_missing=args.all,
        parallelism=args.parallelism,
    )
    lines = []
    for s in result.snapshots:
        lag = f"lag {s.lag_seconds:.1f}s" if s.lag_seconds is not None else "lag unknown"
        if s.already_present:
            extra = f"; repaired {s.blobs_copied} missing blobs" if s.blobs_copied else ""
            lines.append(f"{s.snapshot_id} (batch {s.batch_id}) was already in {result.destination}{extra}")
        else:
            lines.append(
                f"{s.snapshot_id} (batch {s.batch_id}): copied {human_bytes(s.bytes_copied)} in {s.blobs_copied} "
                f"blobs, {human_bytes(s.bytes_skipped)} already there; {s.seconds:.2f}s, {lag}"
            )
    if not result.snapshots:
        lines.append(f"nothing to replicate: {result.destination} holds every snapshot of {args.stream} already")
    else:
        lines.append(
            f"{len(result.published)} snapshot(s) published in {result.destination}: copied "
            f"{human_bytes(result.bytes_copied)} in {result.blobs_copied} blobs"
            f"{' (server-side)' if result.server_side_copy else ''}, skipped {human_bytes(result.bytes_skipped)}; "
            f"{result.seconds:.2f}s"
        )
    out = result.to_json()
    if args.standby is not None:
        from airflow_provider_streamstate.engine.dr.standby import update_standby

        up = update_standby(destination, args.stream, args.standby, parallelism=args.parallelism)
        out["standby"] = up.to_json()
        lines.append(
            f"standby {up.location} holds {up.snapshot_id} (batch {up.batch_id})"
            + (" already" if up.unchanged else f": wrote {human_bytes(up.bytes_written)} in {up.files_written} files, "
               f"removed {up.files_removed}, kept {up.files_kept}; {up.seconds:.2f}s"))
    print_result(args, out, "\n".join(lines))
    return EXIT_OK
