"""A Spark application that runs two tasks and checks their answer: for tests that need only
an application's JVMs to start and work (tests/integration/test_yarn_cluster.py,
test_spark_cluster.py)."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
assert spark.range(0, 1000, numPartitions=2).filter("id % 7 = 0").count() == 143
spark.stop()
