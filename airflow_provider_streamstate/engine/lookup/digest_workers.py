"""Worker processes for a digest computed on this host: one core each, when no Spark is at hand.

Each worker is `python -m` this module (the interpreter running the caller): no fork of a
process that may run threads (an Airflow task, boto3), and, unlike multiprocessing's spawn,
no re-import of the caller's main script. A worker is sent the checkpoint's `Reach` once,
then one task at a time, and answers each with its `PartitionDigest` (frames: an 8-byte
length, then a pickle, over its stdin and stdout; anything a library prints goes to
stderr). A worker that dies leaves its task to the caller, which runs it in-process: a
crash there raises with its traceback.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from airflow_provider_streamstate.engine.lookup.digest_tasks import (
    DigestTask,
    PartitionDigest,
    digest_on_worker,
)
from airflow_provider_streamstate.engine.lookup.reading.reach import Reach

_LEN = struct.Struct("<Q")


def _send(out: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def _receive(inp: IO[bytes]) -> Any:
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("the other side closed the pipe")
    (n,) = _LEN.unpack(head)
    data = inp.read(n)
    if len(data) < n:
        raise EOFError("the other side closed the pipe mid-frame")
    return pickle.loads(data)  # noqa: S301 - frames of this module's own worker, over its own pipe


def run_in_workers(tasks: Sequence[DigestTask], reach: Reach, workers: int,
                   on_result: Callable[[PartitionDigest], None]) -> list[DigestTask]:
    """Run `tasks` in `workers` worker processes (the first ones first), calling
    `on_result` (from one thread at a time) with each result; the tasks no worker could
    finish (it died, or could not start)."""
    todo: queue.Queue[DigestTask] = queue.Queue()
    for t in tasks:
        todo.put(t)
    lock = threading.Lock()
    left: list[DigestTask] = []

    def drive() -> None:
        task = None
        try:
            proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError:
            return
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _send(proc.stdin, reach)
            while True:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    task = None
                    break
                _send(proc.stdin, task)
                result = _receive(proc.stdout)
                with lock:
                    on_result(result)
                task = None
        except (OSError, EOFError, pickle.UnpicklingError):
            if task is not None:
                with lock:
                    left.append(task)
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
            proc.wait()

    threads = [threading.Thread(target=drive, name=f"digest-worker-{i}", daemon=True) for i in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    while True:  # what no worker took (none could start)
        try:
            left.append(todo.get_nowait())
        except queue.Empty:
            return left


def _serve() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the frames
    inp = sys.stdin.buffer
    reach = _receive(inp)
    while True:
        try:
            task = _receive(inp)
        except EOFError:
            return
        _send(out, digest_on_worker(task, reach))


if __name__ == "__main__":
    _serve()
