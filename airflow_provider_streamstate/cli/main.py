"""The `streamstate` command: the engine for people at a terminal and for scripts.

Each command group is a module of this package (snapshots, retention, gc, clone, replicate,
state, failover, stream, rescale, pipeline) with its synopsis in its docstring; docs/cli.md has them all.

SNAPSHOT is a snapshot id or `latest` (the newest on the stream's current timeline).
Exit codes: 0 success; 1 failure, with one line on stderr saying what is wrong and what
to do; 2 usage error; 130 interrupted. `--debug` shows the traceback of a failure,
`--verbose` what the engine does. S3 stores take their endpoint and credentials from the
standard AWS environment variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_PROFILE) or an Airflow connection.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from airflow_provider_streamstate.cli import (
    clone,
    failover,
    gc,
    pipeline,
    replicate,
    rescale,
    retention,
    snapshots,
    state,
    stream,
)
from airflow_provider_streamstate.cli.common import EXIT_FAILURE, EXIT_USAGE, Handlers, Parser, UsageFailure

# One module per command group, each with `register(commands) -> Handlers`.
COMMAND_GROUPS = (snapshots, retention, gc, clone, replicate, state, failover, stream, rescale, pipeline)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="streamstate",
        description="Consistent snapshots, restore and verification of Spark Structured Streaming state.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of failures")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the engine does on stderr")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for group in COMMAND_GROUPS:
        COMMANDS.update(group.register(commands))
    return parser


COMMANDS: Handlers = {}


class _Version(argparse.Action):
    """`--version`: the installed distribution's version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from airflow_provider_streamstate import __version__

        print(f"streamstate {__version__}")
        parser.exit()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record is emitted: `main` may run in-process
    more than once (an embedding program, a test capturing stderr), each time with another."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _configure_logging(verbose: bool) -> None:
    """The engine logs to the `streamstate` logger hierarchy; --verbose shows it on stderr.
    Each call replaces the handler an earlier call installed (its verbosity was that call's)."""
    logger = logging.getLogger("streamstate")
    for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(old)
    if logger.handlers:
        return  # the embedding program configured logging itself
    handler = _StderrHandler()
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.setLevel(logging.INFO)
    else:  # warnings only, in the CLI's own voice (not Python's bare last-resort handler)
        handler.setFormatter(logging.Formatter("streamstate: warning: %(message)s"))
        handler.setLevel(logging.WARNING)
    logger.addHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    from airflow_provider_streamstate.engine.core.errors import StreamstateError, UsageError, missing_extra_of

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageFailure as exc:
        print(f"{exc}; see `streamstate --help`", file=sys.stderr)
        return EXIT_USAGE
    key = (args.command, getattr(args, "snapshot_command", None) or getattr(args, "subcommand", None))
    handler = COMMANDS.get(key)
    if handler is None:  # a command group without its subcommand
        getattr(args, "help_parser", parser).print_help(sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.verbose)
    if getattr(args, "parallelism", 1) < 1:
        print("streamstate: error: --parallelism must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "kafka_config", None) and not getattr(args, "kafka_bootstrap", None):
        print("streamstate: error: --kafka-config needs --kafka-bootstrap; give the brokers the settings are for",
              file=sys.stderr)
        return EXIT_USAGE
    logger = logging.getLogger("streamstate")
    propagate, logger.propagate = logger.propagate, False  # not to a root handler Airflow prints to stdout with
    try:
        return handler(args)
    except StreamstateError as exc:
        if args.debug:
            raise
        print(f"streamstate: error: {exc.one_line()}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILURE
    except KeyboardInterrupt:
        print("streamstate: interrupted; nothing was published", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `streamstate ... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - the CLI owns the last line of defence
        if args.debug:
            raise
        missing = missing_extra_of(exc)  # pyspark, GX... of an extra not installed here
        if missing is not None:
            print(f"streamstate: error: {missing.one_line()}", file=sys.stderr)
            return EXIT_USAGE
        print(
            f"streamstate: error: unexpected {type(exc).__name__}: {exc}; rerun with --debug for a traceback",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    finally:
        logger.propagate = propagate  # as the embedding program had it (main may run in-process)


if __name__ == "__main__":
    sys.exit(main())
