"""The hash memory's index walked in compiled loops (numba): one call a batch of keys.

The arrays are those of `hash_memory.HashMemory` (see its docstring)::

    rows    [1 + slot, words]  uint64  each key's bytes, zero-padded to whole words
    lens    [1 + slot]         uint    its length + 1; DEAD (0): no key in that row
    values  [slot]             uint64  the identity it named
    table   [cell]             int32   tag << row_bits | row (ring slot + 1), 0 = empty;
                                       linear probing

A key's words and length are mixed into one uint64 (a function of its bytes alone, never
`hash()`): its top bits are its first cell, its low bits its tag. A row takes `row_bits`
bits (enough for the ring's capacity: 21 at 2^20 keys), the tag the rest of 31 (10 there).
A probe walks on from the first cell to the key's row or to an empty cell, and reads a row
only where the cell's tag is the key's: a cell of another key costs no read of the ring
but for one in 2^tag_bits. Which cell a key lands in never decides an answer: a probe
compares the row it finds with the key.

Each kernel's caller guarantees its bounds: room in the ring and in the index for every
key of the batch, checked here by assertions before any write.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# odd 64-bit multipliers, one per key word (cycled for longer keys)
MULTIPLIERS = np.array(
    [
        0x9E3779B97F4A7C15,
        0xBF58476D1CE4E5B9,
        0x94D049BB133111EB,
        0xD6E8FEB86659FD93,
        0xA0761D6478BD642F,
        0xE7037ED1A0B428DB,
        0x8EBC6AF09C88C6E3,
        0x589965CC75374CC3,
    ],
    dtype=np.uint64,
)
LENGTH_MULTIPLIER = np.uint64(0x1D8E4E27C47D124F)
BUCKET_MULTIPLIER = np.uint64(0xFF51AFD7ED558CCD)


@njit(cache=True, nogil=True)
def mixed(key, length):
    """A key's words (`key`) and length (`length`: its length + 1) mixed into one uint64."""
    out = np.uint64(0)
    for w in range(key.size):  # bounded: the key's words
        out += key[w] * MULTIPLIERS[w % MULTIPLIERS.size]
    out ^= np.uint64(length) * LENGTH_MULTIPLIER
    return out * BUCKET_MULTIPLIER


@njit(cache=True, nogil=True)
def bit_length(n):
    """The bits of a positive int64 (0 for 0)."""
    bits = 0
    while n >> bits:  # bounded: 64
        bits += 1
    return bits


@njit(cache=True, nogil=True)
def layout(table, rows):
    """(the bits a row of `rows` takes in a cell: its ring's capacity fits them, the tag
    takes the rest of 31; the bits of a cell index of `table`, a power of two), once a
    batch."""
    row_bits = bit_length(rows.shape[0] - 1)
    assert row_bits <= 31, "a row fits an int32 cell"
    return row_bits, bit_length(table.size - 1)


@njit(cache=True, nogil=True)
def probe(table, rows, lens, key, length, row_bits, cell_bits):
    """(the key's row or 0, the cell the probe ended at: the key's, or the empty cell
    where it would go, and the key's tag shifted above the row bits: a cell naming row r
    for this key is `tag | r`). `row_bits`, `cell_bits`: `layout(table, rows)`."""
    mix = mixed(key, length)
    tag = np.int64(mix & np.uint64((1 << (31 - row_bits)) - 1)) << row_bits
    cell = np.int64(mix >> np.uint64(64 - cell_bits))
    row_mask = (np.int64(1) << row_bits) - 1
    mask = table.size - 1
    for _ in range(table.size):  # bounded: a probe visits each cell at most once
        named = np.int64(table[cell])
        if named == 0:
            return 0, cell, tag
        if named & ~row_mask == tag:
            row = named & row_mask
            if lens[row] == length and _same(rows[row], key):
                return row, cell, tag
        cell = (cell + 1) & mask
    raise AssertionError("the index is never full")


@njit(cache=True, nogil=True)
def warm(table, rows, lens, query, query_lens, row_bits, cell_bits):
    """Read the cell each key's probe starts at, and the row it names where the tag is the
    key's, for every key before any probe walks. The reads are independent, so the CPU
    overlaps their cache misses: a probe's first read, at random in an index of megabytes,
    is a miss, and one probe after another pays each in turn (measured: 80 new keys into
    800,000, 20.5 -> 13-17 us a batch; 80 present ones found, 28 -> 21 us).

    Returns how many keys the first cell names with their tag and first word (found
    there, but for a rare tag twin): a count the probes do not need, returned so that the
    reads are not left out."""
    mask = table.size - 1
    row_mask = (np.int64(1) << row_bits) - 1
    num_first = 0
    for i in range(query.shape[0]):  # bounded: the keys
        mix = mixed(query[i], query_lens[i])
        tag = np.int64(mix & np.uint64((1 << (31 - row_bits)) - 1)) << row_bits
        named = np.int64(table[np.int64(mix >> np.uint64(64 - cell_bits)) & mask])
        if named != 0 and named & ~row_mask == tag:
            row = named & row_mask
            num_first += rows[row, 0] == query[i, 0] and lens[row] == query_lens[i]
    return num_first


@njit(cache=True, nogil=True)
def _same(row, key):
    for w in range(key.size):  # noqa: SIM110 (compiled: no generator)  # bounded: the words
        if row[w] != key[w]:
            return False
    return True


@njit(cache=True, nogil=True)
def find_rows(table, rows, lens, query, query_lens, found):
    """found[i] = the row of key i (query[i], query_lens[i]) or 0."""
    row_bits, cell_bits = layout(table, rows)
    warm(table, rows, lens, query, query_lens, row_bits, cell_bits)
    for i in range(query.shape[0]):  # bounded: the keys
        found[i] = probe(table, rows, lens, query[i], query_lens[i], row_bits, cell_bits)[0]


@njit(cache=True, nogil=True)
def index_rows(table, rows, lens, new_rows):
    """Put each of `new_rows` (keys absent from the index) in the first empty cell of its
    probe."""
    row_bits, cell_bits = layout(table, rows)
    for row in new_rows:  # bounded: the rows
        found, cell, tag = probe(table, rows, lens, rows[row], lens[row], row_bits, cell_bits)
        assert found == 0, "a row indexed twice"
        table[cell] = tag | row


@njit(cache=True, nogil=True)
def remember_walk(table, rows, lens, values, first, size, query, query_lens, given):
    """Walk the keys in order: one not remembered is appended to the ring (after every
    entry so far) with its value, and indexed; a remembered one is compared. Stops at the
    first key that names another value than it did.

    Returns (its index or -1, the value it named or 0, how many keys were appended). The
    caller has made room: the ring holds `size + len(query)`, the index stays at most half
    full with them."""
    n = query.shape[0]
    capacity = values.size
    assert size + n <= capacity and 2 * n <= table.size, "room for the batch"
    appended = 0
    row_bits, cell_bits = layout(table, rows)
    warm(table, rows, lens, query, query_lens, row_bits, cell_bits)
    for i in range(n):  # bounded: the keys
        row, cell, tag = probe(table, rows, lens, query[i], query_lens[i], row_bits, cell_bits)
        if row > 0:
            if values[row - 1] != given[i]:
                return i, values[row - 1], appended
            continue
        slot = (first + size + appended) & (capacity - 1)
        rows[slot + 1, :] = query[i]
        lens[slot + 1] = query_lens[i]
        values[slot] = given[i]
        table[cell] = tag | (slot + 1)
        appended += 1
    return -1, np.uint64(0), appended
