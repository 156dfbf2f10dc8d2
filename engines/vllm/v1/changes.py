"""Which blocks vLLM v1's BlockPool changed: its own calls, observed on the instance.

The incremental block-pool check (invariants/pool_delta.py) reads only the blocks whose
ref_cnt, hash or free-queue position changed since it last looked. vLLM keeps no such
record, so this wraps the BlockPool methods that change a block (on the instance, as
`common.CallCounter` does; vLLM's class is untouched and each wrapper returns what the
original returns) and notes the ids of the blocks they were given or handed out:

    get_new_blocks       the blocks popped off the free queue (evicted, ref_cnt 1)
    touch                hit blocks: ref_cnt + 1, out of the free queue
    free_blocks          ref_cnt - 1, into the free queue at 0
    unpin_blocks         the same, for pinned blocks
    cache_full_blocks    blocks[num_cached_blocks:num_full_blocks] get a hash
    cache_partial_block  one block gets a (partial) hash
    move_block_hashes    a hash moves from one block to another
    _maybe_evict_cached_block / evict_blocks   a block loses its hash
    reset_prefix_cache   every hash dropped: the next check sweeps the whole pool

`free_blocks` may be handed a one-shot iterator (`reversed(...)`): the wrapper makes it a
list, passes that on, and vLLM iterates it in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from schedcheck.engines.vllm.v1 import eras

Ids = Callable[[tuple[Any, ...], dict[str, Any], Any], Iterable[int]]


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs[name]


def _ids(blocks: Iterable[Any]) -> list[int]:
    return [b.block_id for b in blocks]


def _touched(group_lists: bool) -> Ids:
    """touch() takes one list of blocks per KV-cache group (before 0.2x: eras.py's
    `touch_takes_group_lists`) or one list."""

    def ids(args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> list[int]:
        blocks = _arg(args, kwargs, 0, "blocks")
        return [b.block_id for group in blocks for b in group] if group_lists else _ids(blocks)

    return ids


def _cached_full(args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> list[int]:
    blocks = _arg(args, kwargs, 1, "blocks")
    first = _arg(args, kwargs, 2, "num_cached_blocks")
    end = _arg(args, kwargs, 3, "num_full_blocks")
    return _ids(blocks[first:end])


# method -> the ids of the blocks a call changes (from its arguments and result); and touch
# (`_touched`), whose argument's shape depends on the release
_CHANGES: dict[str, Ids] = {
    "get_new_blocks": lambda args, kwargs, result: _ids(result),
    "cache_full_blocks": _cached_full,
    "cache_partial_block": lambda args, kwargs, result: _ids([_arg(args, kwargs, 1, "block")]),
    "move_block_hashes": lambda args, kwargs, result: _ids(args[:2] or kwargs.values()),
    "_maybe_evict_cached_block": lambda args, kwargs, result: _ids(args[:1] or kwargs.values()),
    "evict_blocks": lambda args, kwargs, result: list(_arg(args, kwargs, 0, "block_ids")),
}
_TAKES_BLOCK_LISTS = ("free_blocks", "unpin_blocks")  # first argument may be an iterator


class BlockChangeLog:
    """Ids of the blocks vLLM's BlockPool changed since `take()` was last called."""

    def __init__(self, pool: Any) -> None:
        self._changed: set[int] | None = None  # None: unknown (before the first take)
        changes = {**_CHANGES, "touch": _touched(eras.touch_takes_group_lists(pool))}
        for name in eras.block_pool_methods(pool, changes):  # those the release has
            setattr(pool, name, self._noting(getattr(pool, name), changes[name]))
        for name in eras.block_pool_methods(pool, _TAKES_BLOCK_LISTS):
            setattr(pool, name, self._noting_list(getattr(pool, name)))
        reset = pool.reset_prefix_cache

        def reset_prefix_cache(*args: Any, **kwargs: Any) -> Any:
            self._changed = None  # every hash may be gone
            return reset(*args, **kwargs)

        pool.reset_prefix_cache = reset_prefix_cache

    def take(self) -> set[int] | None:
        """The ids noted since the last call (None the first time, or after a reset)."""
        changed, self._changed = self._changed, set()
        return changed

    def _noting(self, original: Callable[..., Any], ids: Ids) -> Callable[..., Any]:
        def noting(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if self._changed is not None:
                self._changed.update(ids(args, kwargs, result))
            return result

        return noting

    def _noting_list(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def noting(blocks: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
            blocks = list(blocks)
            result = original(blocks, *args, **kwargs)
            if self._changed is not None:
                self._changed.update(_ids(blocks))
            return result

        return noting
