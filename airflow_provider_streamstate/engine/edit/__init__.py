"""Offline state edits: from a snapshot at committed batch N, batch N+1 holding N's state
with keys deleted or set (the same source offsets, so the stream resumes where it was),
written without Spark on a copy, verified, then swapped in or kept as a clone
(engine/edit/repair.py)."""
