"""A stand-in driver for the concurrent-start test: it lives a moment (a launch that lost
kills its driver long before this), then leaves a mark of itself beside its checkpoint, so
the test counts the drivers that really ran per checkpoint."""

from __future__ import annotations

import os
import socket
import time

from airflow_provider_streamstate.engine.checkpoint.sidecar import open_sidecar

if __name__ == "__main__":
    time.sleep(1.5)
    open_sidecar(os.environ["STREAMSTATE_CHECKPOINT"]).write(
        f"_race/{socket.gethostname()}-{os.getpid()}", os.environ.get("STREAMSTATE_LAUNCH_ID", "").encode())
