"""What a vLLM v1 block hash means: the request and the token range it was computed from.

vLLM names a cached block by `Request.block_hashes[i]`, the hash of the request's tokens
[0, (i + 1) * block_size) (chained through its parent). A block cached under that hash must
hold the KV of exactly those tokens. The pool check compares a freshly cached block's
content with the identity the shadow KV expects at the block's last token::

    request r:     tokens  0 ............. (i+1)*bs-1          block_hashes[i] = H
    cached block b under H:  its last slot must hold r's KV of position (i+1)*bs - 1

A block whose slots were all written, but for other tokens (the previous holder's KV, left
when a chunk that was cached at scheduling never ran), passes "all slots written" and is
caught here, in the step it is cached.

The index is kept across steps and grows with the requests' block_hashes. vLLM appends to
a request's block_hashes only through the request's block hasher (at construction and
when tokens are appended), so the adapters hand vLLM `block_hasher`, which notes the
request it hashed for; `update` walks only the noted requests, over their new hashes:
O(requests that gained hashes) a step, not O(waiting requests). A request vLLM dropped
answers nothing from then on (`positions` reads only requests still in vLLM's
`requests`); its entries go once dropped requests outnumber live ones by PRUNE_SLACK.
Equal hashes name equal tokens, so when live requests share a hash the first still there
answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import Any

from schedcheck.engines.vllm.v1 import eras

# dropped requests' entries kept at most this many beyond the live requests' count
PRUNE_SLACK = 256
Named = tuple[str, int]  # (request id, block index)


class BlockHashIndex:
    """block hash (bytes, no group id) -> (request id, block index) of the request that
    named it, or {request id: block index} of them, oldest first, where several did (most
    hashes have one naming: a tuple, made in bulk; a dict only for the shared ones, so that
    dropping one of many requests sharing a prefix costs O(1), not a pass over them all).
    A request naming a hash twice is kept at its first block."""

    def __init__(self, block_hasher: Callable[[Any], list[Any]] | None = None) -> None:
        self._where: dict[bytes, Named | dict[str, int]] = {}
        self._hashes_of: dict[str, list[bytes]] = {}  # request id -> its indexed hashes
        self._lists: dict[str, list[Any]] = {}  # request id -> the block_hashes indexed
        self._noted: dict[str, None] = {}  # requests hashed since the last update, in order
        self._requests: Mapping[str, Any] = {}  # vLLM's requests as of the last update
        # what to hand vLLM's Request as its block_hasher: vLLM's, noting the request
        self.block_hasher = None if block_hasher is None else self._noting(block_hasher)

    def _noting(self, block_hasher: Callable[[Any], list[Any]]) -> Callable[[Any], list[Any]]:
        def noting(request: Any) -> list[Any]:
            new = block_hasher(request)
            if new:
                self.note(request.request_id)
            return new

        return noting

    def note(self, request_id: str) -> None:
        """`request_id`'s block_hashes may have grown (or it is a new request)."""
        self._noted[request_id] = None

    def renew(self, request_id: str) -> None:
        """`request_id`'s block_hashes were cut back in place (a streaming-input session's
        next chunk drops its last token's): indexed again from the start at the next update."""
        self._drop(request_id)
        self.note(request_id)

    def update(self, requests: Mapping[str, Any]) -> None:
        """Index the hashes vLLM computed since the last update (`requests`: vLLM's, by
        id); a noted request no longer there, or there as a new Request, is dropped."""
        self._requests = requests
        noted, self._noted = self._noted, {}
        for request_id in noted:  # bounded: the requests hashed since the last update
            request = requests.get(request_id)
            block_hashes = None if request is None else request.block_hashes
            if block_hashes is not self._lists.get(request_id):
                self._drop(request_id)
            if block_hashes is not None:
                self._index_new(request_id, block_hashes)
        if len(self._hashes_of) > len(requests) + PRUNE_SLACK:
            for request_id in sorted(self._hashes_of.keys() - requests.keys()):  # bounded
                self._drop(request_id)

    def _index_new(self, request_id: str, block_hashes: list[Any]) -> None:
        self._lists[request_id] = block_hashes
        indexed = self._hashes_of.setdefault(request_id, [])
        start = len(indexed)
        new = eras.request_hash_keys(block_hashes[start:])
        where = self._where
        js = range(start, start + len(new))
        pairs: Iterable[tuple[int, bytes]]
        if len(set(new)) == len(new):  # distinct (the common case): the unnamed in bulk
            named_before = list(map(where.__contains__, new))
            unnamed = [not n for n in named_before]
            names = zip(repeat(request_id), compress(js, unnamed), strict=False)  # repeat: endless
            where.update(zip(compress(new, unnamed), names, strict=True))
            pairs = compress(zip(js, new, strict=True), named_before)
        else:  # a hash the request names twice: one by one, in order
            pairs = zip(js, new, strict=True)
        for j, h in pairs:  # bounded: the new hashes
            self._name(h, (request_id, j))
        indexed.extend(new)

    def _name(self, h: bytes, named: Named) -> None:
        """One more request names `h` (after those that did; a request that named it
        already keeps its first block)."""
        before = self._where.get(h)
        if before is None:
            self._where[h] = named
        elif isinstance(before, dict):
            before.setdefault(*named)
        elif before[0] != named[0]:
            self._where[h] = dict((before, named))

    def _drop(self, request_id: str) -> None:
        self._lists.pop(request_id, None)
        where = self._where
        for h in self._hashes_of.pop(request_id, ()):  # bounded: its indexed hashes
            named = where.get(h)
            if named is None:  # gone already: a hash the request named twice
                continue
            if not isinstance(named, dict):  # one request named it (most)
                if named[0] == request_id:
                    del where[h]
                continue
            named.pop(request_id, None)
            if len(named) == 1:
                where[h] = next(iter(named.items()))

    def positions(
        self, hashes: Sequence[bytes], block_size: int, grouped: bool
    ) -> list[tuple[str, int, int] | None]:
        """Per cached hash (with vLLM's group id when `grouped`): (request id, position of
        the block's last token, KV-cache group), or None for a hash no live request names
        (or, before 0.11.0, any hash with a group id: those are not bytes to split)."""
        assert block_size >= 1
        split = eras.block_hash_group_split() if grouped else None
        live = self._requests
        out: list[tuple[str, int, int] | None] = []
        for h in hashes:  # bounded: the blocks cached since the last check
            plain, group = (h, 0) if split is None else split(h)
            where = None if grouped and split is None else self._where.get(plain)
            named: Named | None
            if where is None:
                named = None
            elif isinstance(where, dict):  # the first live one of several
                named = next((w for w in where.items() if w[0] in live), None)
            else:  # one request named it (most)
                named = where if where[0] in live else None
            if named is None:
                out.append(None)
                continue
            request_id, block_index = named
            out.append((request_id, (block_index + 1) * block_size - 1, group))
        return out
