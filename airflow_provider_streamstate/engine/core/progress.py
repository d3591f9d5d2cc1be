"""Progress reporting from long transfers, without tying the engine to a terminal."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Called from worker threads: implementations must be thread-safe."""

    def start(self, phase: str, total_files: int, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def start(self, phase: str, total_files: int, total_bytes: int) -> None:
        pass

    def advance(self, nbytes: int) -> None:
        pass

    def finish(self) -> None:
        pass
