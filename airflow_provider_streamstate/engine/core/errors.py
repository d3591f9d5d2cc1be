"""Errors the engine raises on purpose: each says what is wrong and what to do."""

from __future__ import annotations


class StreamstateError(Exception):
    """A failure with a one-line, user-facing explanation.

    `retryable` tells callers (Airflow operators) whether trying again can help:
    bad input and corrupt data cannot; a store or broker that is unreachable can.
    """

    retryable: bool = False
    # What to do, when the raise site gives no `hint`: every error line ends with an action.
    default_hint: str | None = "retry; if it fails again, the log says what the engine did (`--verbose` in the CLI)"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint

    def one_line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class UsageError(StreamstateError):
    """The caller asked for something that cannot be done with these arguments."""

    default_hint = "fix the value named above and run it again"


class NotFoundError(StreamstateError):
    """A snapshot, stream, checkpoint or batch that does not exist."""

    default_hint = (
        "check the name above (`streamstate streams` and `streamstate snapshot list` show what "
        "the store holds)"
    )


class UnsupportedCheckpointError(StreamstateError):
    """A checkpoint layout the engine does not understand; it is refused, never half-copied."""

    default_hint = "check that it is a Spark 4.x checkpoint with a supported state store (docs/concepts.md)"


class CorruptionError(StreamstateError):
    """Bytes that do not match their recorded sha256, or a missing blob."""

    default_hint = (
        "run `streamstate verify` to list every damaged file; restore an older snapshot, or "
        "replicate this one again from a store that holds it intact"
    )


class ReadBudgetExceeded(StreamstateError):
    """A request would read more bytes than it was allowed (a key lookup's `max_bytes`)."""

    default_hint = "raise the byte budget, or read this state with Spark (`streamstate state show --where`)"


class UnsafeManifestError(StreamstateError):
    """A manifest whose content could make a restore write outside its target."""

    default_hint = (
        "the store's record is damaged or hostile: use another snapshot, or replicate it again "
        "from a store that holds it intact"
    )


class TransientError(StreamstateError):
    """A failure that a retry may fix (network, throttling, concurrent checkpoint change)."""

    default_hint = "retry; it can pass once the store, broker or checkpoint settles"
    retryable = True


class CheckpointChanged(TransientError):
    """A checkpoint file changed or vanished while it was read: plan the cut again."""


class MissingBlobError(CorruptionError):
    """A blob a manifest references is absent from the store (deleted, or never copied)."""


class BrokenChainError(CorruptionError):
    """A delta manifest builds on a manifest the store no longer holds (nor keeps aside)."""

    default_hint = (
        "replicate the missing manifest back from a store that holds it (or restore another "
        "snapshot); `streamstate verify` names every snapshot it breaks"
    )


class StreamRunningError(StreamstateError):
    """The stream is running on the checkpoint an operation would replace."""

    default_hint = "stop the stream first (StopStreamOperator, or a stop request beside its checkpoint), then retry"


class Cancelled(StreamstateError):
    """The operation was cancelled (Ctrl-C, a task timeout, `on_kill`); nothing was published."""

    default_hint = None  # the CLI says what was interrupted


class MissingExtraError(UsageError):
    """A path needs an optional dependency that is not installed: the error names the extra
    that brings it (pyproject.toml), never an ImportError trace."""


# The optional dependencies by the module they are imported as, and the extra of each.
EXTRA_OF_MODULE = {"pyspark": "spark", "py4j": "spark", "pandas": "spark", "pyarrow": "spark",
                   "great_expectations": "gx"}
_WHERE = {"spark": "here, or give a Spark connection (spark=SparkJobOptions(conn_id=...), --spark-conn-id) "
                   "to run it on the cluster",
          "gx": "where the state job's driver runs (here without a Spark connection)"}


def missing_extra(module: str, what: str = "this") -> MissingExtraError:
    """The one-line error for `what`, which needs `module` (one of EXTRA_OF_MODULE)."""
    extra = EXTRA_OF_MODULE[module]
    return MissingExtraError(f"{what} needs {module}, which is not installed (the [{extra}] extra)",
                             hint=f"pip install 'airflow-provider-streamstate[{extra}]' {_WHERE[extra]}")


def missing_extra_of(exc: BaseException) -> MissingExtraError | None:
    """`exc` as a MissingExtraError when it is the import of an optional dependency that is
    not installed; None for any other error (a bug, or a missing core dependency)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.partition(".")[0]
    return missing_extra(module) if module in EXTRA_OF_MODULE else None
