"""The free block queue (engines/reference/free_queue.py): LRU order in linked arrays."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedcheck.engines.reference.free_queue import FreeBlockQueue
from schedcheck.engines.reference.per_block import id_array


def _ids(*block_ids: int) -> np.ndarray:
    return np.array(block_ids, np.int64)


def _flags(queue: FreeBlockQueue) -> list[int]:
    return np.flatnonzero(queue.in_queue).tolist()


def test_all_blocks_queued_at_first_in_ascending_order():
    queue = FreeBlockQueue(5)
    assert list(queue) == [0, 1, 2, 3, 4]
    assert len(queue) == 5 and _flags(queue) == [0, 1, 2, 3, 4]
    assert queue.links[0].tolist() == [1, 2, 3, 4, 5, 0]  # 5 is the sentinel: 0 the head
    assert queue.links[1].tolist() == [5, 0, 1, 2, 3, 4]  # and 4 the tail


def test_the_docstring_walk():
    queue = FreeBlockQueue(10)
    queue.remove_many(_ids(*range(10)))
    queue.append_many(_ids(7, 3, 9, 4))
    assert queue.popleft() == 7 and queue.popleft_many(1).tolist() == [3]
    assert list(queue) == [9, 4]
    queue.append_many(_ids(3, 7))
    assert list(queue) == [9, 4, 3, 7]
    assert queue.remove_many(_ids(4)) == 1
    assert list(queue) == [9, 3, 7] and len(queue) == 3 and _flags(queue) == [3, 7, 9]


def test_remove_skips_blocks_not_queued_and_counts_a_repeated_id_once():
    queue = FreeBlockQueue(4)
    assert queue.remove_many(_ids(2, 2, 2)) == 1
    assert queue.remove_many(_ids(2, 0)) == 1
    assert list(queue) == [1, 3] and len(queue) == 2


def test_pop_everything_then_the_ring_is_empty_and_refills():
    queue = FreeBlockQueue(3)
    assert queue.popleft_many(3).tolist() == [0, 1, 2]
    assert list(queue) == [] and len(queue) == 0 and not queue.in_queue.any()
    assert queue.popleft_many(0).tolist() == []
    queue.append_many(_ids(2, 0))
    assert list(queue) == [2, 0] and queue.popleft_many(1).tolist() == [2]


def test_appending_a_queued_block_is_refused_and_the_queue_stays_whole():
    queue = FreeBlockQueue(4)
    queue.popleft_many(2)  # 0, 1 out
    with pytest.raises(AssertionError, match="block 3 is queued already"):
        queue.append_many(_ids(1, 3, 0))
    assert list(queue) == [2, 3, 1] and len(queue) == 3  # 1 linked, then the refusal
    with pytest.raises(AssertionError, match="caller checks the free count"):
        queue.popleft_many(4)
    queue.popleft_many(3)
    with pytest.raises(AssertionError, match="caller checks the free count"):
        queue.popleft()


def test_membership():
    queue = FreeBlockQueue(3)
    queue.popleft_many(1)
    assert [b in queue for b in (0, 1, 2)] == [False, True, True]
    assert np.int64(2) in queue
    assert -1 not in queue and 3 not in queue and "1" not in queue


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["pop", "pop one", "append", "remove"]), st.lists(st.integers(0, 11))
    ),
    max_size=40,
)


@given(_OPS)
def test_the_same_order_as_an_ordered_dict(ops):
    """Any sequence of pops, appends (of blocks not queued) and removals leaves the queue,
    its count and its flags as the OrderedDict queue it replaced leaves them."""
    num_blocks = 12
    queue, model = FreeBlockQueue(num_blocks), OrderedDict.fromkeys(range(num_blocks))
    for op, ids in ops:  # bounded: 40 operations
        if op == "pop one" and model:
            assert queue.popleft() == model.popitem(last=False)[0]
        elif op == "pop":
            n = min(len(ids), len(model))
            expected = [model.popitem(last=False)[0] for _ in range(n)]
            assert queue.popleft_many(n).tolist() == expected
        elif op == "append":
            fresh = list(dict.fromkeys(b for b in ids if b not in model))
            model.update(dict.fromkeys(fresh))
            queue.append_many(id_array(fresh))
        else:
            expected_count = len([b for b in dict.fromkeys(ids) if b in model])
            for b in ids:
                model.pop(b, None)
            assert queue.remove_many(id_array(ids)) == expected_count
        assert list(queue) == list(model)
        assert len(queue) == len(model)
        assert _flags(queue) == sorted(model)
