"""SGLang's rows read as slot tuples and page tables (engines/sglang/rows.py), on a
stand-in req_to_token: the same objects while a row is unchanged, extended by the new
slots and pages when it grows (equal to reading it afresh), read afresh when rewritten.
No SGLang needed."""

from __future__ import annotations

import numpy as np

from schedcheck.engines.sglang.rows import RowReader, page_table


class _Tensor:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def numpy(self) -> np.ndarray:
        return self.array


def test_a_row_read_again_grows_by_its_new_slots_and_pages_only():
    for page in (1, 4, 16):
        rows = np.zeros((2, 64), np.int32)
        rows[1] = np.arange(100, 164)
        reader = RowReader(_Tensor(rows), page)
        slots, pages = reader.slots_and_pages("a", 1, 5)
        assert slots == tuple(range(100, 105)) and pages == page_table(np.array(slots), page)
        assert reader.slots_and_pages("a", 1, 5) == (slots, pages)
        again = reader.slots_and_pages("a", 1, 5)
        assert again[0] is slots and again[1] is pages  # unchanged: the same objects
        for length in (6, 8, 9, 33, 64):  # grown: across page boundaries
            slots, pages = reader.slots_and_pages("a", 1, length)
            assert slots == tuple(range(100, 100 + length))
            assert pages == page_table(np.array(slots), page), (page, length)
            assert (pages is slots) == (page == 1)
        rows[1, 2] = 7  # rewritten in place (the tree's dedup): read afresh
        slots, pages = reader.slots_and_pages("a", 1, 64)
        assert slots[:4] == (100, 101, 7, 103) and pages == page_table(np.array(slots), page)
        reader.forget("a")
        assert reader.slots_and_pages("a", 1, 3)[0] == (100, 101, 7)


def test_a_page_table_names_the_page_of_every_page_sizeth_slot():
    assert page_table(np.array([8, 9, 10, 11, 40, 41]), 4) == (2, 10)
    assert page_table(np.array([8, 9, 10]), 1) == (8, 9, 10)
