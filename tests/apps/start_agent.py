"""An Airflow worker's start task, as a process of its own (run on a simulated host): start
the stream of the spec given as JSON exactly as StartStreamOperator does, print its handle
and status as one JSON line, and exit (the task, and its process tree, end).

    start_agent.py SPEC_JSON
"""

from __future__ import annotations

import json
import logging
import sys

from airflow_provider_streamstate.spec import StreamSpec
from airflow_provider_streamstate.streams.start import start_stream

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    handle, status, reconnected = start_stream(StreamSpec.from_value(sys.argv[1]), startup_timeout_s=480,
                                               log=logging.getLogger("start"))
    print(json.dumps({"handle": handle.to_json(), "status": status.to_json(), "reconnected": reconnected}), flush=True)
