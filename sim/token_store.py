"""The shadow KV's per-request state as arrays indexed by request (sim/symbolic.py).

Every request's true tokens and their identities lie in one arena (two flat arrays), each
request in a region of its own, and its counts (tokens known, keys verified, blocks
verified) in arrays indexed by the request's index. A step then reads the truth of every
scheduled row with one gather and appends every sampled token with one scatter::

    arena     | 0 | tokens of r0 ....... (room) | 0 | tokens of r3 ... (room) | ...
                    ^ base[0]                         ^ base[3]
    identity of position p of request i = ids[base[i] + p]   (p < num_tokens[i])
    identity of position n, appended    = ids[base[i] + n - 1] + term(n, token)

The entry before each region holds identity 0, so an append at position 0 chains from 0;
entry 0 of the arena holds token -1 and identity 0, what a gather past a request's known
tokens reads (the truth there: no token).
A request's region is allocated the first time its tokens are read (a request waiting in
the engine's queue costs nothing), with room for a quarter more tokens (at least 16); a
region that fills is moved to the end of the arena with twice its room. When the arena is
full, the regions of live requests are compacted to its start (those of finished requests
are dropped), and the arena grows to four times them if they fill more than a quarter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from schedcheck.invariants import hash_model
from schedcheck.traces.mix64 import mix64
from schedcheck.traces.tokens import FIRST_TOKEN_ID

I64 = np.int64
U64 = np.uint64
_MASK64 = (1 << 64) - 1
_S32 = U64(32)


class TokenStore:
    """Per request index: tokens known, verified keys and blocks, its region of the arena."""

    def __init__(self, arena: int = 1 << 12, requests: int = 64) -> None:
        self.tokens = np.zeros(arena, dtype=I64)
        self.tokens[0] = -1  # entry 0: no token
        self.ids = np.zeros(arena, dtype=U64)
        self.end = 1  # arena entries in use (entry 0, live or dropped regions)
        self.count = 0  # request indices handed out
        self.num_tokens = np.zeros(requests, dtype=I64)
        self.base = np.full(requests, -1, dtype=I64)  # -1: no region (not built, or freed)
        self.cap = np.zeros(requests, dtype=I64)
        self.verified_len = np.zeros(requests, dtype=I64)  # keys [0, n) verified
        self.verified_blocks = np.zeros(requests, dtype=I64)  # len(its verified_table)
        self.unbuilt: set[int] = set()  # request indices added, neither built nor freed

    def add(self, num_tokens: int) -> int:
        """A new request index, knowing `num_tokens` tokens (no region yet)."""
        index = self.count
        if index == self.base.size:
            grow = self.base.size
            self.num_tokens = np.concatenate([self.num_tokens, np.zeros(grow, I64)])
            self.base = np.concatenate([self.base, np.full(grow, -1, I64)])
            self.cap = np.concatenate([self.cap, np.zeros(grow, I64)])
            self.verified_len = np.concatenate([self.verified_len, np.zeros(grow, I64)])
            self.verified_blocks = np.concatenate([self.verified_blocks, np.zeros(grow, I64)])
        self.num_tokens[index] = num_tokens
        self.count = index + 1
        self.unbuilt.add(index)
        return index

    def build(self, index: int, prompt: np.ndarray, salt: int) -> None:
        """Give request `index` its region, holding `prompt` and its identities."""
        n = int(prompt.size)
        cap = n + max(16, n // 4)
        base = self._alloc(cap)
        self.tokens[base : base + n] = prompt
        self.ids[base : base + n] = hash_model.identities(np.asarray(prompt, I64), salt)
        self.base[index], self.cap[index] = base, cap
        self.unbuilt.discard(index)

    def free(self, index: int) -> None:
        """Request `index` finished: its region is dropped at the next compaction."""
        self.base[index] = -1
        self.cap[index] = 0
        self.unbuilt.discard(index)

    def region(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, identities) of request `index`'s region: views, valid until the next
        allocation; [0, num_tokens) known."""
        base, cap = int(self.base[index]), int(self.cap[index])
        return self.tokens[base : base + cap], self.ids[base : base + cap]

    def append(self, index: int, token: int, term: int) -> None:
        """Append one token to request `index` (built), whose term is `term`."""
        n = int(self.num_tokens[index])
        if n >= self.cap[index]:
            self._grow(index)
        at = int(self.base[index]) + n
        self.tokens[at] = token
        self.ids[at] = (int(self.ids[at - 1]) + term) & _MASK64
        self.num_tokens[index] = n + 1

    def append_many(self, indices: np.ndarray, tokens: np.ndarray, terms: np.ndarray) -> None:
        """Append tokens[k] (term terms[k]) to request indices[k], each index once."""
        n = self.num_tokens[indices]
        full = n >= self.cap[indices]
        if np.count_nonzero(full):
            for index in indices[full].tolist():  # rare: a region filled up
                self._grow(index)
        at = self.base[indices] + n
        self.tokens[at] = tokens
        self.ids[at] = self.ids[at - 1] + terms  # modulo 2**64
        self.num_tokens[indices] = n + 1

    def truth(self, indices: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(identity, token) of position positions[k] of request indices[k] (built), or
        (0, -1) past its known tokens."""
        at = (self.base[indices] + positions) * (positions < self.num_tokens[indices])
        return self.ids[at], self.tokens[at]  # entry 0 past the known tokens

    def _grow(self, index: int) -> None:
        """Move request `index`'s region to the end with twice its room."""
        n, cap = int(self.num_tokens[index]), int(self.cap[index])
        new = self._alloc(2 * cap)  # may compact: read the old base after it
        old = int(self.base[index])
        self.tokens[new : new + n] = self.tokens[old : old + n]
        self.ids[new : new + n] = self.ids[old : old + n]
        self.base[index], self.cap[index] = new, 2 * cap

    def _alloc(self, cap: int) -> int:
        """The base of a new region of `cap` entries (after its zero entry)."""
        if self.end + cap + 1 > self.tokens.size:
            self._compact(cap + 1)
        base = self.end + 1
        self.ids[self.end] = 0
        self.end = base + cap
        return base

    def _compact(self, need: int) -> None:
        """Move the live regions down to the start of the arena, in place and in arena
        order; then, if they fill more than a quarter of it (with `need` more entries), a
        new arena of four times that (a compaction copies at most a third of what was
        allocated since the last one)."""
        live = np.flatnonzero(self.base[: self.count] >= 0)
        live = live[np.argsort(self.base[live], kind="stable")]
        sizes = self.cap[live] + 1  # each region and its zero entry
        starts = 1 + np.cumsum(sizes) - sizes  # entry 0 first
        for old, new, n in zip(  # bounded: the live regions; each moves down, or stays
            (self.base[live] - 1).tolist(), starts.tolist(), sizes.tolist(), strict=True
        ):
            if new != old:
                self.tokens[new : new + n] = self.tokens[old : old + n]
                self.ids[new : new + n] = self.ids[old : old + n]
        self.base[live] = starts + 1
        self.end = used = 1 + int(sizes.sum())
        if 4 * (used + need) > self.tokens.size:
            size = 4 * (used + need)
            tokens, ids = np.zeros(size, I64), np.zeros(size, U64)
            tokens[:used], ids[:used] = self.tokens[:used], self.ids[:used]
            self.tokens, self.ids = tokens, ids


def sample_and_terms(
    identity: np.ndarray, positions: np.ndarray, vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(hash_model.sample_tokens(identity), hash_model.terms(positions, those tokens)):
    the same values, with fewer array passes."""
    tokens = mix64(identity ^ hash_model.SAMPLE_SALT)
    tokens %= U64(vocab_size - FIRST_TOKEN_ID)
    tokens += U64(FIRST_TOKEN_ID)
    keys = tokens << _S32
    keys |= positions.astype(U64)
    return tokens.astype(I64), mix64(keys)


@dataclass(slots=True, eq=False)
class ShadowRequest:
    """What the executor knows of one live request: its true tokens and what it verified.

    Memory: a request that waits in the engine's queue costs only a reference to its prompt
    (the array the loop already holds); its region of the store is built the first time
    its tokens are read (its first scheduled step)."""

    store: TokenStore
    index: int  # into SymbolicExecutor.req_names and the store's arrays
    # the prompt as added (read-only; not copied until first read), or how to get it then
    prompt: np.ndarray | Callable[[], np.ndarray]
    salt: int  # hash_model.salt_identity of its cache salt (0: none)
    verified_table: tuple[int, ...] = ()  # block table prefix covering the verified keys
    seen_table: tuple[int, ...] | None = None  # the block table of the last check
    resumed: bool = False  # preempted at least once (its KV recomputed since)

    def build(self) -> None:
        prompt = self.prompt if isinstance(self.prompt, np.ndarray) else self.prompt()
        self.store.build(self.index, prompt, self.salt)

    @property
    def buffers(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(tokens int64, ids uint64) of its region, None before its first read."""
        if self.store.base[self.index] < 0:
            return None
        return self.store.region(self.index)

    @property
    def tokens(self) -> np.ndarray:
        """int64 buffer, [0, num_tokens) valid."""
        if self.store.base[self.index] < 0:
            self.build()
        return self.store.region(self.index)[0]

    @property
    def ids(self) -> np.ndarray:
        """uint64 buffer: identity of each known position."""
        if self.store.base[self.index] < 0:
            self.build()
        return self.store.region(self.index)[1]

    @property
    def num_tokens(self) -> int:
        return int(self.store.num_tokens[self.index])

    @num_tokens.setter
    def num_tokens(self, n: int) -> None:
        self.store.num_tokens[self.index] = n

    @property
    def verified_len(self) -> int:
        """Count of keys [0, verified_len) read and found right."""
        return int(self.store.verified_len[self.index])

    def append(self, token: int, term: int) -> None:
        """Append a sampled token whose hash-model term (for its position) is `term`."""
        if self.store.base[self.index] < 0:
            self.build()
        self.store.append(self.index, token, term)
