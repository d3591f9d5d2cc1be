"""Another worker's view of a stream (run on a simulated host): its status, or a stop, as
one JSON line.

    status_agent.py status|stop CHECKPOINT [TIMEOUT_S]
"""

from __future__ import annotations

import json
import socket
import sys

from airflow_provider_streamstate.engine.streams import launcher

if __name__ == "__main__":
    action, checkpoint = sys.argv[1], sys.argv[2]
    if action == "status":
        out = launcher.status(checkpoint).to_json()
    else:
        out = launcher.stop(checkpoint, timeout_s=float(sys.argv[3]), requested_by=socket.gethostname()).to_json()
    print(json.dumps({"host": socket.gethostname(), **out}), flush=True)
