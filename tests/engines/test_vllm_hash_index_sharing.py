"""BlockHashIndex (engines/vllm/v1/hash_index.py) under heavy sharing, without vLLM (plain
bytes hashes): requests added, grown, added again under their id and dropped in any order
answer every hash as a list of namings in naming order would (the oldest live one, at
its first block)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from schedcheck.engines.vllm.v1.hash_index import BlockHashIndex

HASHES = [bytes([k]) * 8 for k in range(4)]  # few: most hashes are shared
RIDS = ["r0", "r1", "r2", "r3", "r4"]


class NamingLists:
    """The model: per hash, the (request id, block index) namings in naming order."""

    def __init__(self) -> None:
        self.namings: dict[bytes, list[tuple[str, int]]] = {}

    def name(self, rid: str, hashes: list[bytes], start: int) -> None:
        for j, h in enumerate(hashes[start:], start):
            named = self.namings.setdefault(h, [])
            if all(r != rid for r, _ in named):  # a request naming it again keeps its first
                named.append((rid, j))

    def drop(self, rid: str) -> None:
        for named in self.namings.values():
            named[:] = [w for w in named if w[0] != rid]

    def answer(self, h: bytes, live: dict[str, object]) -> tuple[str, int, int] | None:
        named = next((w for w in self.namings.get(h, ()) if w[0] in live), None)
        return None if named is None else (named[0], (named[1] + 1) * 4 - 1, 0)


steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "grow", "drop"]),
        st.sampled_from(RIDS),
        st.lists(st.sampled_from(HASHES), min_size=1, max_size=3),
    ),
    max_size=30,
)


@given(steps)
def test_shared_hashes_answer_as_lists_of_namings_would(ops):
    index, model = BlockHashIndex(), NamingLists()
    live: dict[str, SimpleNamespace] = {}
    for op, rid, hashes in ops:  # bounded: 30
        if op == "drop" or (op == "grow" and rid not in live):
            live.pop(rid, None)
            model.drop(rid)
        elif op == "add":  # a new Request under the id: its old namings go
            model.drop(rid)
            live[rid] = SimpleNamespace(request_id=rid, block_hashes=list(hashes))
            model.name(rid, hashes, 0)
        else:  # a decode filled more blocks
            start = len(live[rid].block_hashes)
            live[rid].block_hashes.extend(hashes)
            model.name(rid, live[rid].block_hashes, start)
        index.note(rid)
        index.update(dict(live))
        assert index.positions(HASHES, 4, grouped=False) == [model.answer(h, live) for h in HASHES]
    for rid in list(live):  # all gone: nothing is left indexed
        del live[rid]
        index.note(rid)
        index.update(dict(live))
    assert index._where == {}
