"""A snapshot's file list, read when first used: what lets a manifest be opened for its
header alone (the catalog, the parent a snapshot builds on) without parsing tens of
thousands of entries, and a delta manifest give every reader its whole file list.

`FileList` is a read-only sequence that runs its loader once, on first use (thread-safe).
`ResolvedLists` remembers the last few whole lists by the sha256 of the manifest header
that names them: a header names the sha256 of its own file list and of every manifest its
delta builds on, so one hash identifies one list, whatever store it was read from.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar, overload

T = TypeVar("T")


class FileList(Sequence[T], Generic[T]):
    """The entries given, or those `loader()` returns when they are first needed."""

    def __init__(self, entries: Sequence[T] | None = None, *, loader: Callable[[], list[T]] | None = None) -> None:
        if (entries is None) == (loader is None):
            raise ValueError("give entries or a loader")
        self._entries: list[T] | None = list(entries) if entries is not None else None
        self._loader = loader
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._entries is not None

    def _get(self) -> list[T]:
        entries = self._entries
        if entries is not None:
            return entries
        with self._lock:
            if self._entries is None:
                assert self._loader is not None
                self._entries = self._loader()
                self._loader = None  # what it captured (bytes, a store) can go
            return self._entries

    def __len__(self) -> int:
        return len(self._get())

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self._get()[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self._get())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FileList):
            return self._get() == other._get()
        if isinstance(other, list | tuple):
            return self._get() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FileList({len(self._entries)} entries)" if self._entries is not None else "FileList(not read yet)"


class ResolvedLists(Generic[T]):
    """An LRU of whole file lists keyed by the sha256 of the manifest header naming them."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lists: OrderedDict[str, list[T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, header_sha256: str) -> list[T] | None:
        with self._lock:
            found = self._lists.get(header_sha256)
            if found is not None:
                self._lists.move_to_end(header_sha256)
            return found

    def put(self, header_sha256: str, entries: list[T]) -> None:
        with self._lock:
            self._lists[header_sha256] = entries
            self._lists.move_to_end(header_sha256)
            while len(self._lists) > self.size:
                self._lists.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._lists.clear()
