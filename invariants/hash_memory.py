"""The pool check's memory of what each block hash named: hash -> identity, oldest first.

A mapping of bytes to 64-bit identities that remembers keys in insertion order and forgets
the oldest first, kept in arrays instead of a dict of bytes and ints (issue 30: a dict held
about 180 bytes a hash, 189 MB at the pool check's bound of 2^20 hashes, and each doubling
of its table set a peak of the whole-trace replay). Here a 32-byte hash costs about 64
bytes: 33 for its row, 8 for its identity, 16 for its share of the index::

    ring (capacity a power of two; the oldest at ring slot `_first`, `_size` live):
        _rows   [1 + slot, words]  uint64  the key's bytes, zero-padded to whole words
        _lens   [1 + slot]         uint8   its length + 1 (b"a" and b"a\\0" differ;
                                           uint32 once a key is longer than 254 bytes);
                                           DEAD (0) in row 0, in a row not written yet
                                           and once its key is forgotten: no key
                                           matches it, and a new ring costs no memory
                                           until written
        _values [slot]             uint64  the identity it named
    index (open addressing, linear probing, at most half its cells used):
        _table  [cell]                 int32   tag << row_bits | row (ring slot + 1),
                                               0 = empty; a probe reads a row only
                                               where the tag (the key's mix, 10 bits at
                                               2^20 keys) is the key's (hash_probe.py)

A cell may name a row whose key was forgotten since, or taken by a later key: a lookup
compares the row with the key it looks for, so such a cell only lengthens a probe until the
index is built again (when half its cells are used). Which cell a key lands in never
decides an answer: answers depend on the keys' bytes alone, and a key's first cell is a
function of its bytes (no `hash()`). The probes run in compiled loops, one call a batch
(`hash_probe.py`); growing the ring and building the index again are done here, before a
batch, so a batch never meets a full ring or a crowded index.

Identities are kept as uint64 (the shadow KV's identities are).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

U64 = np.uint64
I64Array = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]
DEAD = 0  # a row's length while it holds no key (a key's is its length + 1)
_MIN_CAPACITY = 8
_SMALL_CAPACITY = 1 << 16  # a ring this small grows by doubling (a fuzz example's stays so)


class HashMemory(Mapping[bytes, int]):
    """hash (bytes) -> identity (int), oldest first; see the module docstring."""

    def __init__(self, max_size: int = 0) -> None:
        # past _SMALL_CAPACITY the ring grows at once to hold `max_size` (the bound the
        # caller keeps): its rows cost memory only as they are written, and no later
        # growth copies the ring while the old one is still held
        self._max_capacity = 1 << max(max_size - 1, 0).bit_length()
        # the probes, compiled (numba): imported with the first memory (see sim/symbolic.py)
        from schedcheck.invariants import hash_probe

        self._kernels = hash_probe
        self._rows = np.zeros((1 + _MIN_CAPACITY, 1), dtype=U64)
        self._lens: npt.NDArray[np.unsignedinteger] = np.zeros(1 + _MIN_CAPACITY, np.uint8)
        self._values = np.zeros(_MIN_CAPACITY, dtype=U64)
        self._first = 0  # ring slot of the oldest entry
        self._size = 0
        self._table = np.zeros(4 * _MIN_CAPACITY, dtype=np.int32)
        self._used = 0  # cells written since the index was built
        self._kept_lens: I64Array = np.zeros(0, np.int64)  # see _equal_lens

    # -- the mapping -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        """The keys, oldest first."""
        for row in (self._live_slots() + 1).tolist():  # bounded: the live entries
            words = self._rows[row].tolist()
            yield struct.pack(f"<{len(words)}Q", *words)[: int(self._lens[row]) - 1]

    def __getitem__(self, key: bytes) -> int:
        row = int(self.find([key])[0])
        if row == 0:
            raise KeyError(key)
        return int(self._values[row - 1])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and int(self.find([key])[0]) != 0

    def __repr__(self) -> str:
        return f"HashMemory({len(self)} hashes)"

    # -- what the pool check does ------------------------------------------------------------

    def forget_oldest(self, count: int) -> None:
        """Forget the `count` oldest entries (all of them if there are fewer)."""
        count = min(max(count, 0), self._size)
        if count == 0:
            return
        slots = (self._first + np.arange(count)) & (self._capacity - 1)
        self._lens[slots + 1] = DEAD
        self._first = (self._first + count) & (self._capacity - 1)
        self._size -= count

    def remember(
        self, keys: Sequence[bytes], values: Sequence[int] | npt.NDArray[np.unsignedinteger]
    ) -> tuple[int, int]:
        """Walk the pairs in order: a key not remembered is remembered with its value (after
        every entry so far), a remembered one is compared. Stops at the first key that
        names another value than it did: returns (its index, the value it named), with the
        keys before it remembered and none after; (-1, 0) when every pair agrees."""
        if len(keys) == 0:
            return -1, 0
        query, lens = self._pack(keys)
        return self._remember_rows(query, lens, values)

    def remember_words(
        self, words: U64Array, values: npt.NDArray[np.unsignedinteger]
    ) -> tuple[int, int]:
        """remember() of keys given as rows of little-endian words, each key all of its
        row's bytes (a 32-byte hash: 4 words): no bytes object is built."""
        n, num_words = words.shape
        if n == 0:
            return -1, 0
        if num_words > self._rows.shape[1]:
            self._widen(num_words)
        self._fit_length(8 * num_words + 1)
        if num_words < self._rows.shape[1]:  # rows are wider: zero-padded, as _pack pads
            words = np.pad(words, ((0, 0), (0, self._rows.shape[1] - num_words)))
        lens = self._equal_lens(n, 8 * num_words + 1)
        return self._remember_rows(np.ascontiguousarray(words, dtype=U64), lens, values)

    def _equal_lens(self, n: int, length: int) -> I64Array:
        """`n` copies of `length`: a view of an array kept for the next call, most of which
        pass the same length (a step's hashes are all 32 bytes). The kernels only read it
        (writeable all the same: a read-only array would be another compiled signature)."""
        kept = self._kept_lens
        if kept.size < n or kept[0] != length:  # (size 0: the first test is true)
            kept = self._kept_lens = np.full(max(n, 2 * kept.size, 64), length, np.int64)
        return kept[:n]

    def _remember_rows(
        self,
        query: U64Array,
        lens: I64Array,
        values: Sequence[int] | npt.NDArray[np.unsignedinteger],
    ) -> tuple[int, int]:
        """remember() of keys already in rows (query) with their lengths + 1 (lens)."""
        n = query.shape[0]
        if isinstance(values, np.ndarray):
            given = values.astype(U64, copy=False)
        else:  # not np.asarray: a list of ints past 2**63 and below would become floats
            given = np.array(values, dtype=U64)
        if self._size + n > self._capacity:
            self._grow(self._size + n)
        if 2 * (self._used + n) > self._table.size:
            self._build_index(self._size + n)
        stop, named, appended = self._kernels.remember_walk(
            self._table, self._rows, self._lens, self._values, self._first, self._size,
            query, lens, given,
        )  # fmt: skip
        self._size += appended
        self._used += appended
        return (int(stop), int(named)) if stop >= 0 else (-1, 0)

    def find(self, keys: Sequence[bytes]) -> I64Array:
        """Each key's row (its ring slot + 1), or 0 where it is not remembered."""
        found = np.zeros(len(keys), dtype=np.int64)
        if keys and self._size:
            query, lens = self._pack(keys)
            self._kernels.find_rows(self._table, self._rows, self._lens, query, lens, found)
        return found

    # -- keys in arrays ----------------------------------------------------------------------

    @property
    def _capacity(self) -> int:
        return int(self._values.size)

    def _live_slots(self) -> I64Array:
        return (self._first + np.arange(self._size, dtype=np.int64)) & (self._capacity - 1)

    def _pack(self, keys: Sequence[bytes]) -> tuple[U64Array, I64Array]:
        """The keys as rows of words (zero-padded), and their lengths + 1 (widening the
        rows for a longer key)."""
        n, longest = len(keys), max(map(len, keys))
        num_words = self._rows.shape[1]
        if longest > 8 * num_words:
            num_words = -(-longest // 8)
            self._widen(num_words)
        self._fit_length(longest + 1)
        width = 8 * num_words
        joined = b"".join(keys)
        if len(joined) == n * width:  # none longer than width, so each exactly width
            lens = self._equal_lens(n, width + 1)
        else:
            joined = b"".join(k.ljust(width, b"\0") for k in keys)
            lens = np.fromiter(map(len, keys), np.int64, n) + 1
        return np.frombuffer(joined, dtype=U64).reshape(n, num_words), lens

    def _widen(self, num_words: int) -> None:
        """Rows of `num_words` words; only the live rows are copied (the rest hold no key:
        a ring allocated ahead costs nothing until written)."""
        rows = np.zeros((self._rows.shape[0], num_words), dtype=U64)
        live = self._live_slots() + 1
        rows[live, : self._rows.shape[1]] = self._rows[live]
        self._rows = rows

    def _fit_length(self, length: int) -> None:
        """Lengths in uint32 once one does not fit in uint8 (a key of 255 bytes or more)."""
        if length > 0xFF and self._lens.dtype == np.uint8:  # no key reaches 2**32 bytes
            self._lens = self._lens.astype(np.uint32)

    # -- the ring and its index -------------------------------------------------------------

    def _grow(self, size: int) -> None:
        """A ring of the next power of two that holds `size`, live entries first in order;
        its index is built again by the caller."""
        capacity = max(_MIN_CAPACITY, 1 << (size - 1).bit_length())
        if _SMALL_CAPACITY < capacity < self._max_capacity:
            capacity = self._max_capacity
        live = self._live_slots()
        rows = np.zeros((1 + capacity, self._rows.shape[1]), dtype=U64)  # untouched
        rows[1 : 1 + live.size] = self._rows[live + 1]
        lens = np.zeros(1 + capacity, dtype=self._lens.dtype)  # DEAD
        lens[1 : 1 + live.size] = self._lens[live + 1]
        self._lens = lens
        values = np.zeros(capacity, dtype=U64)
        values[: live.size] = self._values[live]
        self._rows, self._values, self._first = rows, values, 0
        self._table = np.zeros(0, dtype=np.int32)  # names old rows
        self._used = 0

    def _build_index(self, size: int) -> None:
        """An index of at least four cells per entry for `size` entries, naming the live
        rows only."""
        num_cells = max(4 * _MIN_CAPACITY, 1 << (4 * size - 1).bit_length())
        self._table = np.zeros(0, dtype=np.int32)  # the old one freed first
        self._table = np.zeros(num_cells, dtype=np.int32)
        self._kernels.index_rows(self._table, self._rows, self._lens, self._live_slots() + 1)
        self._used = self._size
