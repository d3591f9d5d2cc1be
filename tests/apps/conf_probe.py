"""A Spark application that writes what its SparkSession's conf holds for the keys it is
given (as sha256 digests, never the values) to a JSON file, then exits: proof that a conf
reached Spark without the test writing the secret anywhere itself.

    conf_probe.py OUT.json KEY [KEY...]
"""

from __future__ import annotations

import hashlib
import json
import sys

from pyspark.sql import SparkSession

if __name__ == "__main__":
    out, keys = sys.argv[1], sys.argv[2:]
    spark = SparkSession.builder.appName("conf-probe").getOrCreate()
    conf = spark.sparkContext.getConf()
    digests = {k: (hashlib.sha256(v.encode()).hexdigest() if (v := conf.get(k, None)) is not None else None)
               for k in keys}
    with open(out, "w") as f:
        json.dump(digests, f)
    spark.stop()
