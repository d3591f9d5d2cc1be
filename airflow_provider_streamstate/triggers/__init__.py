"""Triggers: the waiting of deferrable sensors, run in the triggerer instead of a worker slot."""
