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

The index is kept across steps and grows with the requests' block_hashes (O(new hashes) a
step, plus one length read per live request, in C); a request's entries go when vLLM drops
it.
Equal hashes name equal tokens, so when live requests share a hash the first still there
answers.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from itertools import compress, repeat
from typing import Any

from schedcheck.engines.vllm.v1 import eras

_BLOCK_HASHES = operator.attrgetter("block_hashes")


class BlockHashIndex:
    """block hash (bytes, no group id) -> [(request id, block index)], for live requests."""

    def __init__(self) -> None:
        self._where: dict[bytes, list[tuple[str, int]]] = {}
        self._hashes_of: dict[str, list[bytes]] = {}  # request id -> its indexed hashes

    def update(self, requests: Mapping[str, Any]) -> None:
        """Index the hashes vLLM computed since the last update; drop requests it dropped.

        Each step reads every live (or waiting) request's hash count, in C (map); only the
        requests whose count grew are walked, over their new hashes."""
        hashes_of, where = self._hashes_of, self._where
        for request_id in hashes_of.keys() - requests.keys():  # any order: the same index
            for h in hashes_of.pop(request_id):
                named = [w for w in where[h] if w[0] != request_id]
                if named:
                    where[h] = named
                else:
                    del where[h]
        request_ids = list(requests)
        lists = list(map(_BLOCK_HASHES, requests.values()))  # every release: the hasher's
        counts = list(map(len, lists))
        done = map(len, map(hashes_of.get, request_ids, repeat(())))
        for i in compress(range(len(counts)), map(operator.gt, counts, done)):  # grown only
            request_id, block_hashes = request_ids[i], lists[i]
            indexed = hashes_of.setdefault(request_id, [])
            for j in range(len(indexed), counts[i]):  # bounded: the new hashes
                h = eras.request_hash_key(block_hashes[j])
                indexed.append(h)
                where.setdefault(h, []).append((request_id, j))

    def positions(
        self, hashes: Sequence[bytes], block_size: int, grouped: bool
    ) -> list[tuple[str, int, int] | None]:
        """Per cached hash (with vLLM's group id when `grouped`): (request id, position of
        the block's last token, KV-cache group), or None for a hash no live request names
        (or, before 0.11.0, any hash with a group id: those are not bytes to split)."""
        assert block_size >= 1
        split = eras.block_hash_group_split() if grouped else None
        out: list[tuple[str, int, int] | None] = []
        for h in hashes:
            plain, group = (h, 0) if split is None else split(h)
            where = None if grouped and split is None else self._where.get(plain)
            if where is None:
                out.append(None)
                continue
            request_id, block_index = where[0]
            out.append((request_id, (block_index + 1) * block_size - 1, group))
        return out
