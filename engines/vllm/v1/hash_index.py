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
step, plus one length read per live request); a request's entries go when vLLM drops it.
Equal hashes name equal tokens, so when live requests share a hash the first still there
answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from schedcheck.engines.vllm.v1 import eras


class BlockHashIndex:
    """block hash (bytes, no group id) -> [(request id, block index)], for live requests."""

    def __init__(self) -> None:
        self._where: dict[bytes, list[tuple[str, int]]] = {}
        self._hashes_of: dict[str, list[bytes]] = {}  # request id -> its indexed hashes

    def update(self, requests: Mapping[str, Any]) -> None:
        """Index the hashes vLLM computed since the last update; drop requests it dropped."""
        for request_id in [r for r in self._hashes_of if r not in requests]:
            for h in self._hashes_of.pop(request_id):
                named = [w for w in self._where[h] if w[0] != request_id]
                if named:
                    self._where[h] = named
                else:
                    del self._where[h]
        for request_id, request in requests.items():
            indexed = self._hashes_of.setdefault(request_id, [])
            block_hashes = request.block_hashes  # every release: computed by the block hasher
            for i in range(len(indexed), len(block_hashes)):  # bounded: the new hashes
                h = eras.request_hash_key(block_hashes[i])
                indexed.append(h)
                self._where.setdefault(h, []).append((request_id, i))

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
