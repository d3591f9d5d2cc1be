"""What the operators, sensors, DAGs and CLI share: configured streams, task errors, OpenLineage, spark-submit."""
