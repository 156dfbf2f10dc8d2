"""The words of a bad read: what the shadow KV found instead, how the reader got there,
and the violation that says so (a mixin of the symbolic executor, sim/symbolic.py).

A bad read's signature case (invariants/violation.py) is `WHAT via PATH`::

    WHAT   never-written, another-request, own-stale, wrong-token, rejected-draft, draft
    PATH   draft, this-step, prefix-hit, resume, earlier-chunk, decode (read_path)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.engines.protocol import KVCacheGroup, ScheduledRequest
from schedcheck.invariants import hash_model
from schedcheck.invariants.violation import Violation


class BadReads:
    """Reports the symbolic executor's bad reads; reads the executor's own state."""

    block_size: int
    num_slots: int
    req_names: list[str]
    requests: Mapping[str, Any]  # request id -> its _ShadowRequest
    writer_req: np.ndarray
    writer_pos: np.ndarray
    writer_step: np.ndarray
    violations: list[Violation]

    def _report_read(
        self,
        meta: RunnerMetadata,
        index: int,
        req: Any,  # its _ShadowRequest
        read: tuple[int, int, np.uint64, np.uint64],
        kv_group: KVCacheGroup | None = None,
    ) -> None:
        """Report request `index`'s bad read of `read` = (key, slot, found, expected)."""
        key, slot, found, expected = read
        name = self.req_names[req.index]
        step = meta.output.step
        block = slot // self.block_size if slot >= 0 else -1
        want = f"the KV of {name} position {key}"
        if kv_group is not None:
            want += f" (KV-cache group {kv_group.label})"
        if slot < 0 or slot >= self.num_slots:
            msg = f"reads key {key} past the end of its block table (an illegal memory access)"
            self._violate(
                "shadow-kv.block-table-out-of-bounds",
                step,
                name,
                msg,
                position=key,
                slot=slot,
                expected=want,
                found="no block",
            )
            return
        what, got = self._describe(slot, found, name)
        if expected == 0:
            msg = f"reads key {key}, but the request has only {req.num_tokens} tokens"
            self._violate(
                "shadow-kv.read-past-tokens",
                step,
                name,
                msg,
                position=key,
                slot=slot,
                block=block,
                expected="no read",
                found=got,
            )
            return
        self._violate(
            "shadow-kv.read",
            step,
            name,
            f"key {key} holds {got}, expected {want}",
            position=key,
            slot=slot,
            block=block,
            expected=want,
            found=got,
            case=f"{what} via {read_path(meta.output.scheduled[index], key, req.resumed)}",
        )

    def _describe(self, slot: int, found: np.uint64, reader: str) -> tuple[str, str]:
        """(what was read, as a signature's case word; the message's words for it)."""
        if found == 0:
            return "never-written", "nothing (never written)"
        writer = int(self.writer_req[slot])
        who = self.req_names[writer] if writer >= 0 else "?"
        pos, step = int(self.writer_pos[slot]), int(self.writer_step[slot])
        req = self.requests.get(who)
        truth = req.ids[pos] if req is not None and pos < req.num_tokens else None
        untagged, group = _untag(found, truth)  # a hybrid cache: the writer's group tag
        where = f", KV-cache group {group}" if group else ""
        if found == hash_model.DRAFT:
            what, words = "draft", "the draft KV (speculative decoding)"
        elif truth is None or untagged == truth:
            what = "own-stale" if who == reader else "another-request"
            words = "the KV"
        elif untagged ^ truth == hash_model.POISON:
            what, words = "wrong-token", "a KV entry computed from a wrong token"
        else:  # its own position, computed after drafted tokens
            what, words = "rejected-draft", "a rejected draft's KV"
        return what, f"{words} of {who} position {pos} (written at step {step}{where})"

    def _violate(self, invariant: str, step: int, request_id: str, message: str, **kw) -> None:
        self.violations.append(Violation(invariant, step, message, request_id=request_id, **kw))


GROUPS_MAX = 8  # KV-cache groups whose tags `_untag` tries (a hybrid model has 2 or 3)


def _untag(found: np.uint64, truth: np.uint64 | None) -> tuple[np.uint64, int]:
    """(the identity without its KV-cache group's tag, that group): the group whose tag
    makes `found` the true identity or a poisoned one; else (found, 0)."""
    if truth is None:
        return found, 0
    for group in range(GROUPS_MAX):  # bounded: only for a violation's message
        untagged = found ^ hash_model.group_tag(group)
        if untagged in (truth, truth ^ hash_model.POISON):
            return untagged, group
    return found, 0


def read_path(sched: ScheduledRequest, key: int, resumed: bool) -> str:
    """How the reading request came to read `key` this step, for a finding's signature::

    draft          a draft token's position (past the tokens it knows)
    this-step      KV the step itself writes (its chunk)
    prefix-hit     KV granted as a prefix-cache hit at (re)admission
    resume         KV recomputed since the request was preempted
    earlier-chunk  an earlier chunk of its prefill
    decode         KV of an earlier step, the prompt done
    """
    if sched.spec_token_ids and key >= sched.num_tokens:
        return "draft"
    if key >= sched.num_computed_tokens:
        return "this-step"
    if key < sched.num_cached_tokens:
        return "prefix-hit"
    if resumed:
        return "resume"
    return "earlier-chunk" if sched.num_computed_tokens < sched.num_prompt_tokens else "decode"
