"""Prefix hits under an unbounded cache: a trie of prompt blocks, fed requests in order.

Each node is one block in the context of all blocks before it; children are found in one
dict keyed by `(parent node, block key)`, so memory is O(distinct blocks) and nothing is
ever iterated. A request's hit tokens are those of its leading blocks already in the trie;
then all its blocks are inserted.

    hash-id prompt  block key = hash id, block = hash_block_size tokens, the last one cut
                    to input_length; a cut last block hits when its id chain was seen
                    (equal ids mean equal content, as in Mooncake)
    token prompt    block key = the bytes of `token_block_size` token ids; only full
                    blocks can hit (a trailing partial block is never cached, as in vLLM)

    prompt   [ h0 ][ h1 ][ h2 ][ h3 ][h4]        trie after earlier requests: h0 -> h1 -> h9
    hits     [ h0 ][ h1 ]                        = 2 blocks (h2 differs from h9: stop)

Each hash block size and the token form have their own root, so they never share blocks.
"""

from __future__ import annotations

import numpy as np

from schedcheck.traces.schema import TraceRequest

DEFAULT_TOKEN_BLOCK_SIZE = 16  # vLLM's default block size
_TOKEN_ROOT = 0


class PrefixTrie:
    """The unbounded prefix cache; `hit_tokens(request)` looks up, then inserts."""

    __slots__ = ("_children", "token_block_size")

    def __init__(self, token_block_size: int = DEFAULT_TOKEN_BLOCK_SIZE) -> None:
        assert token_block_size >= 1
        self.token_block_size = token_block_size
        self._children: dict[tuple[int, int | bytes], int] = {}

    @property
    def num_blocks(self) -> int:
        """Count of distinct blocks (trie nodes below the roots) inserted so far."""
        return len(self._children)

    def hit_tokens(self, request: TraceRequest) -> int:
        """Tokens of the request's own prompt found cached; inserts its blocks afterwards."""
        keys: list[int] | list[bytes]
        if request.prompt_token_ids is not None:
            keys, lengths = self._token_blocks(request.prompt_token_ids)
            root = _TOKEN_ROOT
        else:
            assert request.hash_ids is not None and request.hash_block_size is not None
            assert request.input_length is not None
            keys = list(request.hash_ids)
            lengths = _hash_block_lengths(request.input_length, request.hash_block_size)
            root = -request.hash_block_size  # one root per hash block size, apart from tokens
        hit_count = self._walk_and_insert(root, keys)
        hits = sum(lengths[:hit_count])
        assert 0 <= hits <= request.num_own_prompt_tokens
        return hits

    def _walk_and_insert(self, root: int, keys: list[int] | list[bytes]) -> int:
        """Count of leading `keys` already present under `root`; inserts every key."""
        node = root
        hit_count = 0
        matching = True
        for key in keys:
            child = self._children.get((node, key))
            if child is None:
                matching = False
                child = len(self._children) + 1  # node ids 1, 2, ...; roots are <= 0
                self._children[(node, key)] = child
            elif matching:
                hit_count += 1
            node = child
        return hit_count

    def _token_blocks(self, tokens: tuple[int, ...]) -> tuple[list[bytes], list[int]]:
        """The full blocks of a token prompt as byte keys, and their lengths."""
        size = self.token_block_size
        full_count = len(tokens) // size
        array = np.asarray(tokens[: full_count * size], dtype=np.int32).reshape(full_count, size)
        return [row.tobytes() for row in array], [size] * full_count


def _hash_block_lengths(input_length: int, block_size: int) -> list[int]:
    """Token counts of the hash blocks of a prompt: all `block_size`, the last one cut."""
    blocks_count = -(-input_length // block_size)
    lengths = [block_size] * blocks_count
    lengths[-1] = input_length - (blocks_count - 1) * block_size
    assert sum(lengths) == input_length and lengths[-1] >= 1
    return lengths
