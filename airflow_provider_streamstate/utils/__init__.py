"""What the Airflow layer shares: configured streams, task errors, OpenLineage, spark-submit."""
