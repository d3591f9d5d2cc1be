"""Configuration as users and Hadoop write it: durations and flags (`values`), which values
are secrets (`redact`), the `*-site.xml` files a Hadoop client reads (`hadoop_conf`)."""
