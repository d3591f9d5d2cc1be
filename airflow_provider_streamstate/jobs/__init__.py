"""PySpark applications and their runtime helpers (imported only where Spark runs)."""
