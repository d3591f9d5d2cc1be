"""A small bounded cache of decoded partitions, so a second lookup in the same partition
(of the same files) is served from memory.

Entries (decoded partitions, parsed RocksDB tables, schemas) are keyed by the identities of
the files they were decoded from (a blob's sha256, or a checkpoint file's path, size and
mtime) and the store/codec they were read as (engine/lookup/reading/partitions.py): a
checkpoint that moved on to a newer batch has other files, hence other keys, and can
never be answered from a stale entry. Only a partition that decoded completely is put
in; a corrupted file raises before anything is cached.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class PartitionCache:
    """LRU by entry count and by the total size (bytes of the files) of what it holds."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 512 << 20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_load(self, key: Hashable, load: Callable[[], tuple[T, int]]) -> tuple[T, bool]:
        """(value, True when it came from the cache). `load` returns (value, its size)."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return hit[0], True
            self.misses += 1
        value, size = load()  # outside the lock: decoding a partition takes a while
        with self._lock:
            if key not in self._items and size <= self.max_bytes:
                self._items[key] = (value, size)
                self._bytes += size
                while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                    _, (_, old) = self._items.popitem(last=False)
                    self._bytes -= old
        return value, False

    def peek(self, key: Hashable) -> Any:
        """The cached value or None, without loading (a hit makes it the most recent)."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    @property
    def bytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)


DEFAULT_CACHE = PartitionCache()
