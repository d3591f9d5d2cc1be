"""The core every other part of the engine stands on: errors, cancellation, parallel
transfers, progress, durability, digests, and the manifest (what a snapshot is).

May import: the standard library only (nothing else of the engine).
"""
