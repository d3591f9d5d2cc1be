"""The provider's Airflow UI plugin: the Streams pages (streams_plugin.py)."""
