"""What the Streams pages of the Airflow UI show, read from the stores and the records beside
the checkpoints: a row per stream (streams.py), a stream's history on its timelines
(history.py) and one snapshot (snapshot.py). Read-only: nothing here writes to a store, a
checkpoint or its records (the catalog index is read, never updated). Pure Python: the
Airflow plugin (airflow_provider_streamstate/plugins/) decides which streams and stores."""
