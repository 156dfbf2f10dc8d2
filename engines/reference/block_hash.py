"""Chained block hashes: the identity of a full block of KV cache by its content.

The hash of logical block i of a request covers every token from position 0 to the end of
block i, through the chain of parent hashes, plus the extra keys (vLLM's cache_salt)::

    tokens      | t0 .. t15 | t16 .. t31 | t32 .. t47 | t48 .. t50 (partial: no hash)
    block       |     0     |     1      |     2      |     3
    hash        h0 = H(ROOT, t0..t15, salt)
                            h1 = H(h0, t16..t31)
                                         h2 = H(h1, t32..t47)

`H` is BLAKE2b-256 over the parent hash, the little-endian int64 bytes of the block's token
ids, and the extra keys (first block only: the chain carries them on). Python's `hash()` is
never used: it is salted per process and 64 bits wide. Equal hashes therefore imply equal
tokens, an equal chain of parents and equal extra keys (vllm#12621, GHSA-rm76-4mrf-v9r8).
"""

from __future__ import annotations

import hashlib

ROOT_HASH: bytes = hashlib.blake2b(b"schedcheck:block-hash-root", digest_size=32).digest()
"""Parent hash of block 0 (vLLM: NONE_HASH); fixed, so hashes agree across processes."""

HASH_NUM_BYTES = 32
_TOKEN_NUM_BYTES = 8  # int64


def salt_extra_key(cache_salt: str | None) -> bytes:
    """The extra-key bytes of block 0 for a cache salt (length-prefixed UTF-8), or b""."""
    if cache_salt is None:
        return b""
    raw = cache_salt.encode("utf-8")
    return b"salt:" + len(raw).to_bytes(8, "little") + raw


class BlockHasher:
    """Extends a request's list of block hashes over its full blocks.

    One instance per engine; it holds the block size.
    """

    __slots__ = ("block_size",)

    def __init__(self, block_size: int) -> None:
        assert block_size >= 1
        self.block_size = block_size

    def extend(
        self,
        block_hashes: list[bytes],
        token_bytes: memoryview,
        num_tokens: int,
        extra_key: bytes,
    ) -> None:
        """Append the hashes of the full blocks of `token_bytes[: num_tokens * 8]` not hashed yet.

        `token_bytes` is a byte view of the request's int64 token buffer (no copy is made:
        BLAKE2b reads the slice in place). Postcondition:
        len(block_hashes) == num_tokens // block_size.
        """
        num_full_blocks = num_tokens // self.block_size
        block_num_bytes = self.block_size * _TOKEN_NUM_BYTES
        index = len(block_hashes)
        assert index <= num_full_blocks, "hashes are only appended"
        parent = block_hashes[-1] if block_hashes else ROOT_HASH
        blake2b = hashlib.blake2b
        while index < num_full_blocks:
            start_byte = index * block_num_bytes
            h = blake2b(parent, digest_size=HASH_NUM_BYTES)
            h.update(token_bytes[start_byte : start_byte + block_num_bytes])
            if index == 0 and extra_key:
                h.update(extra_key)
            parent = h.digest()
            block_hashes.append(parent)
            index += 1
        assert len(block_hashes) == num_full_blocks
