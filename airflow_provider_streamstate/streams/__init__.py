"""What the operators, DAGs and CLI do with a StreamSpec through the engine: start, rescale, edit, state jobs."""
