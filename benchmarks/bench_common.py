"""What the benchmarks share: where they work, and the synthetic input every one of them reads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

WORK = REPO / ".bench"
MiB = 1 << 20


def rate_rows(spark: Any, rows_per_batch: int) -> Any:
    """A streaming DataFrame of `rows_per_batch` rows (`timestamp`, `value`) per micro-batch:
    deterministic batch sizes, unlike the wall-clock `rate` source."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 4)
        .load()
    )
