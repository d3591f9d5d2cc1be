"""Running streams: launching and stopping them, their health, the supervisor that
restarts or restores them, and clones (streams started from a snapshot) with their expiry.

May import: core, stores, checkpoint, kafka, catalog, lifecycle.
"""
