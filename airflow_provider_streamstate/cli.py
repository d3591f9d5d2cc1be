"""The `streamstate` command: the engine for people at a terminal and for scripts.

Exit codes: 0 success, 1 failure (one line on stderr saying what is wrong and what to
do), 2 usage error. `--debug` shows the traceback of an unexpected failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from airflow_provider_streamstate import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamstate",
        description="Snapshots, restore and verification of Spark Structured Streaming state.",
    )
    parser.add_argument("--version", action="version", version=f"streamstate {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected failures")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
