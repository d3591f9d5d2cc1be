"""A StreamSpec through the engine, for operators, DAGs and CLI: start, rescale, edit, state jobs."""
