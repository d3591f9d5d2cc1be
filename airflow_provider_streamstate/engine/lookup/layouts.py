"""What each stateful operator keeps for one key, and which columns place it in a partition.

Every stateful operator requires `StatefulOpClusteredDistribution(keys, numPartitions)`
of its input, satisfied by `HashPartitioning(keys, numPartitions)`, and task p writes
state store partition p. The keys, per operator (Spark 4.1 `sql/core/.../streaming/`):

- streaming aggregation (`StateStoreSaveExec`, "stateStoreSave"): the grouping
  expressions (a window is one of them: the `window` struct of start, end), the whole state
  key (`StreamingAggregationStateManager` format 2: key = grouping row, value = buffer);
- dropDuplicates (`StreamingDeduplicateExec`, "dedupe") and dropDuplicatesWithinWatermark
  (`StreamingDeduplicateWithinWatermarkExec`, "dedupeWithinWatermark"): the key
  expressions (with a watermark the event-time column is one of them for dropDuplicates,
  not for WithinWatermark, whose value is the expiry);
- (flat)mapGroupsWithState ("flatMapGroupsWithState") and applyInPandasWithState
  ("applyInPandasWithState"): the grouping attributes (value: the state row, format 2 as
  `groupState` and `timeoutTimestamp`);
- stream-stream join (`StreamingSymmetricHashJoinExec`, "symmetricHashJoin"): each side
  by its join keys (left keys for the left input, right keys for the right: the same
  values and types), stores `<side>-keyToNumValues` (key -> count) and
  `<side>-keyWithIndexToValue` ((key, index) -> row, with `matched` in state format 2+);
  join state format 3 keeps them as column families of one store;
- transformWithState ("transformWithStateExec", "transformWithStateInPandasExec"): the
  grouping key; one store whose column families are the state variables (value: key ->
  row; list: key -> merged rows; map: (key, user key) with the key as scan prefix; timers
  (`$procTimers_keyToTimestamp` or `$eventTimers_...`): (key, expiry ms), prefix-scanned
  like a map, with a secondary index by time that a lookup does not need).

In all of them the partition is `pmod(murmur3(key columns, 42), numPartitions)` over the
key columns in order (`murmur3.partition_of`).
"""

from __future__ import annotations

from airflow_provider_streamstate.engine.core.errors import UnsupportedCheckpointError

JOIN = "symmetricHashJoin"
TRANSFORM_WITH_STATE = ("transformWithStateExec", "transformWithStateInPandasExec", "transformWithStateInPySparkExec")
# Operators whose float grouping/join keys Spark normalizes (-0.0 -> 0.0, NaN canonical).
NORMALIZED_KEYS = ("stateStoreSave", JOIN)
REFUSED = {
    "sessionWindowStateStoreSaveExec": "session window aggregation (several sessions per key, prefix-scanned)",
}
JOIN_SIDES = ("left", "right")
TIMERS = "$timers"  # a transformWithState operator's registered timers, as a state variable name
TIMER_FIELD = "expiration_timestamp_ms"  # a timer as Spark's state reader names it
SUPPORTED_OPERATORS = ("streaming aggregation (windowed too), dropDuplicates (with and without watermark, "
                       "WithinWatermark), flatMapGroupsWithState, applyInPandasWithState, stream-stream joins "
                       "(state formats 1-3), transformWithState value/list/map state (TTLs included) and timers")


def kind_of(name: str, has_state_variables: bool) -> str:
    """`single` (one store, key -> value), `join` or `tws`; unsupported ones refused."""
    if name in REFUSED:
        raise UnsupportedCheckpointError(
            f"key lookups do not read {REFUSED[name]} ({name})",
            hint=f"supported: {SUPPORTED_OPERATORS}; read this state with Spark (`streamstate state`)")
    if name == JOIN:
        return "join"
    if has_state_variables or name in TRANSFORM_WITH_STATE:
        return "tws"
    return "single"


def join_stores(side: str) -> tuple[str, str]:
    return f"{side}-keyToNumValues", f"{side}-keyWithIndexToValue"
