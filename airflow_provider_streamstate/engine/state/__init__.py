"""State as data: reading a snapshot's state as a DataFrame, diffs, Great
Expectations validation, bisect, and the Spark session they need.

May import: core, stores, checkpoint, kafka, catalog, lifecycle. pyspark and
great_expectations are imported inside functions (the engine imports without them).
"""
