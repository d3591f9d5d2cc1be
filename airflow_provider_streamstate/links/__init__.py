"""Operator extra links of the provider: from a task instance to its page in the Streams UI."""
