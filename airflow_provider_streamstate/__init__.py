"""streamstate: a state lifecycle (snapshot, validate, restore, clone, replicate, expire)
for PySpark stateful streams, with an Airflow provider and a CLI on one engine.

Importing this package is cheap and makes no network call: Airflow imports it while
discovering providers and parsing DAGs.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("airflow-provider-streamstate")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
