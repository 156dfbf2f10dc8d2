"""The one interface both block managers implement (hashed: vLLM v1; radix: SGLang).

The scheduler talks to a block manager only through `KVCacheManager`; the manager owns
the block tables and the prefix cache. Life of a request, in calls::

    waiting:   hit = get_computed_blocks(request)           # no side effect on ref counts
               allocate_slots(request, num_new_tokens, hit)  # False: nothing changed
    each step: allocate_slots(request, num_new_tokens)       # running: blocks for the chunk
    after it:  cache_blocks(request, num_computed_tokens)    # cache what is full and written
    end:       free(request, aborted=...)                    # finish, abort or preemption

Token/block ranges of `allocate_slots` (block_size 4)::

    | comp  | hit (new_computed) |   new (this step's chunk)   | lookahead |
    0    num_computed         +hit.num_tokens          +num_new_tokens  +num_lookahead
    [b0  ][b1 (cached)][b2 (cached)][b3 (new) ][b4 (new)][b5 (new)]
                                    |<----- allocated now ----->|
    blocks held afterwards = cdiv(num_computed + hit.num_tokens + num_new_tokens
                                  + num_lookahead_tokens, block_size)

A block is cached (offered to other requests) only once it is full and its tokens were
written, i.e. from `cache_blocks` after the step ran, never at allocation time (vLLM v0's
`compute_full_blocks_in_seq`; vllm#7822).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from schedcheck.engines.protocol import KVSnapshot
from schedcheck.engines.reference.request import Request


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """A prefix-cache hit found for a waiting request; valid only until the cache changes.

    `num_tokens == len(block_ids) * block_size` (hits are whole blocks). `node` is the
    radix tree node where the match ended (None for the hashed manager).
    """

    block_ids: tuple[int, ...] = ()
    num_tokens: int = 0
    node: object | None = None


EMPTY_HIT = PrefixHit()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager(Protocol):
    """What the scheduler needs from a block manager."""

    block_size: int
    num_blocks: int

    def get_computed_blocks(self, request: Request) -> PrefixHit:
        """The longest cached prefix of the request, capped at num_tokens - 1 (vllm#7753)."""
        ...

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        hit: PrefixHit = EMPTY_HIT,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """Take the hit (ref counts, locks) and blocks for `num_new_tokens` more tokens,
        plus `num_lookahead_tokens` slots past them for draft KV (speculative decoding).

        Returns False, changing nothing the scheduler can see, if the free (or evictable)
        blocks do not suffice.
        """
        ...

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> int:
        """After a step: cache the full blocks of tokens [0, num_computed_tokens).

        Returns the manager's count of computed tokens for the request, which the scheduler
        adopts (SGLang: the next chunk starts at len(prefix_indices)); a clean manager returns
        `num_computed_tokens` itself.
        """
        ...

    def free(self, request: Request, *, aborted: bool = False) -> None:
        """Release the request's blocks, in reverse order; cached content stays cached."""
        ...

    def block_table(self, request_id: str) -> tuple[int, ...]:
        """The request's block ids (a cached tuple, rebuilt only when the table changes)."""
        ...

    def num_free_blocks(self) -> int:
        """Blocks an allocation could take now: free, or cached and evictable."""
        ...

    def evict_cached_free(self, num_blocks_max: int) -> int:
        """Fault point: evict up to that many cached, unreferenced blocks; returns the count."""
        ...

    def num_computed_tokens_of(self, request_id: str) -> int:
        """The manager's own count for a request (vllm#11186); -1 if it holds none."""
        ...

    def kv_snapshot(self) -> KVSnapshot: ...

    def holders(self) -> Sequence[str]:
        """Request ids that hold blocks, in the order they first got them."""
        ...
