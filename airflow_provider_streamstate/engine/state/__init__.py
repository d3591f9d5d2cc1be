"""State as data: reading a snapshot's state as a DataFrame, diffs, Great
Expectations validation, bisect, the Spark session they need, and state jobs: the same
questions as one request and one small result, answered here or as a Spark application
on a cluster (jobs, submit) reading a scratch copy inside the store (scratch).

May import: core, stores, checkpoint, kafka, catalog, lifecycle, streams (the YARN
client and the secret confs of spark-submit). pyspark and great_expectations are
imported inside functions (the engine imports without them).
"""
