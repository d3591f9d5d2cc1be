"""streamstate: a state lifecycle (snapshot, validate, restore, clone, replicate, expire)
for PySpark stateful streams, with an Airflow provider and a CLI on one engine.

Importing this package is cheap and makes no network call: Airflow imports it while
discovering providers and parsing DAGs.
"""

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    """`__version__`, read from the installed distribution when first asked for (finding it
    costs tens of milliseconds that `streamstate --help` and DAG parsing need not pay)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("airflow-provider-streamstate")
    except PackageNotFoundError:  # running from a source tree that was not installed
        value = "0.0.0+unknown"
    globals()["__version__"] = value
    return value
