"""Errors the engine raises on purpose: each says what is wrong and what to do."""

from __future__ import annotations


class StreamstateError(Exception):
    """A failure with a one-line, user-facing explanation.

    `retryable` tells callers (Airflow operators) whether trying again can help:
    bad input and corrupt data cannot; a store or broker that is unreachable can.
    """

    retryable: bool = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class UsageError(StreamstateError):
    """The caller asked for something that cannot be done with these arguments."""


class NotFoundError(StreamstateError):
    """A snapshot, stream, checkpoint or batch that does not exist."""


class UnsupportedCheckpointError(StreamstateError):
    """A checkpoint layout the engine does not understand; it is refused, never half-copied."""


class CorruptionError(StreamstateError):
    """Bytes that do not match their recorded sha256, or a missing blob."""


class UnsafeManifestError(StreamstateError):
    """A manifest whose content could make a restore write outside its target."""


class TransientError(StreamstateError):
    """A failure that a retry may fix (network, throttling, concurrent checkpoint change)."""

    retryable = True


class CheckpointChanged(TransientError):
    """A checkpoint file changed or vanished while it was read: plan the cut again."""


class MissingBlobError(CorruptionError):
    """A blob a manifest references is absent from the store (deleted, or never copied)."""


class StreamRunningError(StreamstateError):
    """The stream is running on the checkpoint an operation would replace."""


class Cancelled(StreamstateError):
    """The operation was cancelled (Ctrl-C, a task timeout, `on_kill`); nothing was published."""
