"""The `streamstate` command line: one module per command group, the helpers they share in
`common`, the parser and the exit paths in `main`."""

from airflow_provider_streamstate.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
