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
        _table  [cell]                 int32   a row (ring slot + 1), 0 = empty

A cell may name a row whose key was forgotten since, or taken by a later key: a lookup
compares the row with the key it looks for, so such a cell only lengthens a probe until the
index is built again (when half its cells are used). Which cell a key lands in never
decides an answer: answers depend on the keys' bytes alone, and a key's first cell is a
function of its bytes (no `hash()`). A few keys are walked in Python, more in arrays; both
probe the same cells.

Identities are kept as uint64 (the shadow KV's identities are).
"""

from __future__ import annotations

import itertools
import operator
import struct
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt

U64 = np.uint64
I64Array = npt.NDArray[np.int64]
U64Array = npt.NDArray[np.uint64]
DEAD = 0  # a row's length while it holds no key (a key's is its length + 1)
SMALL_BATCH = 16  # keys remembered one by one in Python up to this many; in arrays above
_PROBE_TAIL = 8  # a probe in arrays goes on in Python once this few keys are left
_MIN_CAPACITY = 8
_SMALL_CAPACITY = 1 << 16  # a ring this small grows by doubling (a fuzz example's stays so)
_INDEX_CHUNK = 1 << 16  # the index is built again this many keys at a time
# odd 64-bit multipliers, one per key word (cycled for longer keys)
_MULTIPLIERS = (
    0x9E3779B97F4A7C15,
    0xBF58476D1CE4E5B9,
    0x94D049BB133111EB,
    0xD6E8FEB86659FD93,
    0xA0761D6478BD642F,
    0xE7037ED1A0B428DB,
    0x8EBC6AF09C88C6E3,
    0x589965CC75374CC3,
)
_LENGTH_MULTIPLIER, _BUCKET_MULTIPLIER = 0x1D8E4E27C47D124F, 0xFF51AFD7ED558CCD
_MASK64 = (1 << 64) - 1


class HashMemory(Mapping[bytes, int]):
    """hash (bytes) -> identity (int), oldest first; see the module docstring."""

    def __init__(self, max_size: int = 0) -> None:
        # past _SMALL_CAPACITY the ring grows at once to hold `max_size` (the bound the
        # caller keeps): its rows cost memory only as they are written, and no later
        # growth copies the ring while the old one is still held
        self._max_capacity = 1 << max(max_size - 1, 0).bit_length()
        self._rows = np.zeros((1 + _MIN_CAPACITY, 1), dtype=U64)
        self._lens: npt.NDArray[np.unsignedinteger] = np.zeros(1 + _MIN_CAPACITY, np.uint8)
        self._values = np.zeros(_MIN_CAPACITY, dtype=U64)
        self._first = 0  # ring slot of the oldest entry
        self._size = 0
        self._table = np.zeros(4 * _MIN_CAPACITY, dtype=np.int32)
        self._used = 0  # cells written since the index was built
        self._views()

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
        n = len(keys)
        if n <= SMALL_BATCH:
            listed = values.tolist() if isinstance(values, np.ndarray) else values
            return self._remember_one_by_one(keys, listed)
        if isinstance(values, np.ndarray):
            given = values.astype(U64, copy=False)
        else:  # not np.asarray: a list of ints past 2**63 and below would become floats
            given = np.array(values, dtype=U64)
        query, lens = self._pack(keys)
        rows, ends = self._find(query, lens)
        known = rows > 0
        named = given.copy()  # what each key named before (a new key: its own value)
        named[known] = self._values[rows[known] - 1]
        new = np.flatnonzero(~known)
        if new.size > 1 and _repeats(ends[new]):  # two new keys at one cell: maybe one key
            first_index = dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True))
            first = np.fromiter(map(first_index.__getitem__, keys), np.int64, n)
            named[new] = given[first[new]]  # a new key's second time: its first value
            new = new[first[new] == new]
        differs = np.flatnonzero(named != given)
        stop = int(differs[0]) if differs.size else n
        new = new[new < stop]
        if new.size:
            self._append(query[new], lens[new], given[new], ends[new])
        return (stop, int(named[stop])) if stop < n else (-1, 0)

    def find(self, keys: Sequence[bytes]) -> I64Array:
        """Each key's row (its ring slot + 1), or 0 where it is not remembered."""
        if not keys:
            return np.zeros(0, dtype=np.int64)
        return self._find(*self._pack(keys))[0]

    # -- a few keys, in Python ---------------------------------------------------------------

    def _remember_one_by_one(self, keys: Sequence[bytes], values: Sequence[int]) -> tuple[int, int]:
        """remember() for a few keys, in Python: the same walk, the same cells."""
        for i, (key, value) in enumerate(zip(keys, values, strict=True)):  # bounded: a few
            packed, length = self._packed(key)
            row, cell = self._probe_from(self._first_cell(packed, length), packed, length)
            if row > 0:
                named = self._value_view[row - 1]
                if named != value:
                    return i, named
            elif self._size + 1 > self._capacity or 2 * (self._used + 1) > self._table.size:
                row_words = np.frombuffer(packed, dtype=U64).reshape(1, -1)
                self._append(row_words, np.array([length]), np.array([value], dtype=U64))
            else:
                row = 1 + ((self._first + self._size) & (self._capacity - 1))
                width = len(packed)
                self._row_bytes[row * width : (row + 1) * width] = packed
                self._lens_view[row] = length
                self._value_view[row - 1] = value
                self._table_view[cell] = row
                self._size += 1
                self._used += 1
        return -1, 0

    def _packed(self, key: bytes) -> tuple[bytes, int]:
        """The key as its row's bytes, and its length + 1 (widening for a longer key)."""
        width = 8 * self._rows.shape[1]
        if len(key) > width:
            self._widen(-(-len(key) // 8))
            width = 8 * self._rows.shape[1]
        if len(key) >= 0xFF:  # past uint8 (an uncommon key)
            self._fit_length(len(key) + 1)
        return key.ljust(width, b"\0"), len(key) + 1

    def _first_cell(self, packed: bytes, length: int) -> int:
        """_bucket() of one key, in Python ints."""
        words = struct.unpack(f"<{len(packed) // 8}Q", packed)
        mixed = sum(map(operator.mul, words, itertools.cycle(_MULTIPLIERS)))
        mixed ^= length * _LENGTH_MULTIPLIER
        bits = self._table.size.bit_length() - 1
        return ((mixed * _BUCKET_MULTIPLIER) & _MASK64) >> (64 - bits)

    def _probe_from(self, cell: int, packed: bytes, length: int) -> tuple[int, int]:
        """Probe on from `cell`: (the key's row or 0, the cell the probe ended at)."""
        table, row_bytes, lens = self._table_view, self._row_bytes, self._lens_view
        width = len(packed)
        cell_mask = len(table) - 1
        for _ in range(len(table)):  # bounded: a probe visits each cell at most once
            row = table[cell]
            if row == 0 or (
                lens[row] == length and row_bytes[row * width : (row + 1) * width] == packed
            ):
                return row, cell
            cell = (cell + 1) & cell_mask
        raise AssertionError("the index is never full")

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
            lens = np.full(n, width + 1, dtype=np.int64)
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
        self._views()

    def _fit_length(self, length: int) -> None:
        """Lengths in uint32 once one does not fit in uint8 (a key of 255 bytes or more)."""
        if length > np.iinfo(self._lens.dtype).max:
            self._lens = self._lens.astype(np.uint32)
            self._views()

    def _views(self) -> None:
        """Python views of the arrays (an element read costs 50 ns, not numpy's 100+)."""
        self._row_bytes = self._rows.data.cast("B")
        self._lens_view = self._lens.data
        self._value_view = self._values.data
        self._table_view = self._table.data

    def _bucket(self, query: U64Array, lens: npt.NDArray[np.integer]) -> I64Array:
        """Each key's first cell: its words and length mixed (a function of its bytes)."""
        multipliers = np.resize(np.array(_MULTIPLIERS, dtype=U64), query.shape[1])
        mixed = query @ multipliers  # wraps modulo 2**64
        mixed ^= lens.astype(U64) * U64(_LENGTH_MULTIPLIER)
        mixed *= U64(_BUCKET_MULTIPLIER)
        bits = self._table.size.bit_length() - 1
        return (mixed >> U64(64 - bits)).astype(np.int64)

    # -- the index ---------------------------------------------------------------------------

    def _find(self, query: U64Array, lens: I64Array) -> tuple[I64Array, I64Array]:
        """Each key's row or 0, and the cell its probe ended at (its own, or the empty cell
        where it would go): probe each key's cells until its own or an empty one."""
        n = query.shape[0]
        found = np.zeros(n, dtype=np.int64)
        table, rows, row_lens = self._table, self._rows, self._lens
        cell_mask = table.size - 1
        cells, todo = self._bucket(query, lens), np.arange(n)
        ends = np.empty(n, dtype=np.int64)
        for _ in range(table.size):  # bounded: a probe visits each cell at most once
            if todo.size <= _PROBE_TAIL:  # the few long probes left: on in Python
                for i, cell in zip(todo.tolist(), cells.tolist(), strict=True):
                    found[i], ends[i] = self._probe_from(cell, query[i].tobytes(), int(lens[i]))
                break
            at = table[cells]
            if todo.size == n:  # the first round: every key, in order
                hit = (row_lens[at] == lens) & (rows[at] == query).all(axis=1)
                found[hit] = at[hit]
            else:
                hit = (row_lens[at] == lens[todo]) & (rows[at] == query[todo]).all(axis=1)
                found[todo[hit]] = at[hit]
            ends[todo] = cells  # final for those that stop here
            going = (at != 0) & ~hit
            todo, cells = todo[going], (cells[going] + 1) & cell_mask
        return found, ends

    def _append(
        self, query: U64Array, lens: I64Array, values: U64Array, ends: I64Array | None = None
    ) -> None:
        """Remember keys known to be absent and distinct, after every entry so far (`ends`:
        where their probes ended, if the index has not changed since)."""
        n = query.shape[0]
        if self._size + n > self._capacity:
            self._grow(self._size + n)
            ends = None
        slots = (self._first + self._size + np.arange(n, dtype=np.int64)) & (self._capacity - 1)
        self._rows[slots + 1] = query
        self._lens[slots + 1] = lens
        self._values[slots] = values
        self._size += n
        if 2 * (self._used + n) > self._table.size:
            self._build_index()
        else:
            self._index(slots + 1, ends)

    def _grow(self, size: int) -> None:
        """A ring of the next power of two that holds `size`, live entries first in order."""
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
        self._table = np.zeros(0, dtype=np.int32)  # names old rows: built again by _append
        self._used = 0
        self._views()

    def _build_index(self) -> None:
        """An index of at least four cells per live entry, naming the live rows only."""
        num_cells = max(4 * _MIN_CAPACITY, 1 << (4 * self._size - 1).bit_length())
        self._table = self._table_view = None  # type: ignore[assignment]  # freed first
        self._table = np.zeros(num_cells, dtype=np.int32)
        self._used = 0
        self._views()
        for start in range(0, self._size, _INDEX_CHUNK):  # bounded: chunks of the ring
            slots = self._first + np.arange(start, min(start + _INDEX_CHUNK, self._size))
            self._index((slots & (self._capacity - 1)) + 1)  # a chunk's temporaries at once

    def _index(self, rows: I64Array, cells: I64Array | None = None) -> None:
        """Put each row (its key absent from the index) in the first empty cell of its
        probe (from `cells` on, if given: no empty cell before them); where several want
        one cell, one takes it and the rest probe on."""
        table, cell_mask = self._table, self._table.size - 1
        if cells is None:
            cells = self._bucket(self._rows[rows], self._lens[rows])
        marks = rows.astype(np.int32)
        self._used += rows.size
        for _ in range(table.size):  # bounded: each round fills a cell or moves keys on
            if rows.size <= _PROBE_TAIL:  # the few long probes left: on in Python
                view = self._table_view
                for row, cell in zip(rows.tolist(), cells.tolist(), strict=True):
                    for _ in range(table.size):  # bounded: to the first empty cell
                        if view[cell] == 0:
                            break
                        cell = (cell + 1) & cell_mask
                    view[cell] = row
                break
            empty = table[cells] == 0
            table[cells[empty]] = marks[empty]
            placed = empty & (table[cells] == marks)
            going = ~placed
            rows, marks, cells = rows[going], marks[going], (cells[going] + 1) & cell_mask


def _repeats(values: I64Array) -> bool:
    """Whether some value occurs twice (a sort: np.unique costs several times more)."""
    ordered = np.sort(values)
    return bool((ordered[1:] == ordered[:-1]).any())
