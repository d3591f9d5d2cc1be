"""One simulated host's side of the concurrent-start test: at each round's instant it starts
the stream of that round's checkpoint through the launcher, and prints one JSON line per
round: whether its launch won, and its generation or the refusal.

    launch_agent.py T0 PERIOD CHECKPOINT [CHECKPOINT...]
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

from airflow_provider_streamstate.engine.core.errors import StreamRunningError
from airflow_provider_streamstate.engine.streams import launcher

DRIVER = Path(__file__).resolve().parent / "race_driver.py"

if __name__ == "__main__":
    t0, period, checkpoints = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    for i, checkpoint in enumerate(checkpoints):
        time.sleep(max(0.0, t0 + i * period - time.time()))
        row: dict[str, object] = {"round": i, "host": socket.gethostname()}
        try:
            handle = launcher.launch([sys.executable, str(DRIVER)], stream="race", checkpoint=checkpoint)
            row |= {"won": True, "generation": handle.generation, "launch_id": handle.launch_id}
        except StreamRunningError as exc:
            row |= {"won": False, "error": exc.message}
        print(json.dumps(row), flush=True)
    # This process is its host's first: when it exits, the host's other processes go with it.
    # Stay until the last round's driver has left its mark (it waits 1.5 s).
    time.sleep(4)
