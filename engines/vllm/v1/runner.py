"""What vLLM v1's model runner does with a SchedulerOutput's block ids (`_update_states`):
the runner-side block tables the adapter hands to attention, one per KV-cache group.

    scheduled_new_reqs      -> table set from block_ids[g]
    scheduled_cached_reqs   -> resumed: table replaced by new_block_ids[g]; running: appended
    finished_req_ids        -> dropped (by the adapter, before this)

Imports no vLLM (the resumed ids come through the era shim).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from schedcheck.engines.engine_fault import EngineFault
from schedcheck.engines.vllm.common import RunnerBlockTables
from schedcheck.engines.vllm.v1 import eras


def update_runner_tables(
    so: Any, groups: Sequence[RunnerBlockTables]
) -> tuple[dict[str, int], set[str]]:
    """Apply the step's block ids to the runner tables `groups` (one per KV-cache group).

    Returns request id -> num_computed_tokens before the step, and the ids (re)admitted
    this step (new or resumed), whose num_computed_tokens is their prefix-cache hit.
    """
    computed: dict[str, int] = {}
    for new in so.scheduled_new_reqs:
        for tables, block_ids in zip(groups, new.block_ids, strict=True):
            tables.set(new.req_id, block_ids)
        computed[new.req_id] = new.num_computed_tokens
    admitted = set(computed)
    cached = so.scheduled_cached_reqs
    resumed = eras.resumed_req_ids(cached)
    for i, rid in enumerate(cached.req_ids):
        new_block_ids = cached.new_block_ids[i]
        if rid in resumed:
            if new_block_ids is None:
                raise EngineFault(
                    "engine-crash",
                    f"vLLM resumed {rid} without a block table",
                    case="a resumed request without a block table",
                    request_id=rid,
                )
            for tables, block_ids in zip(groups, new_block_ids, strict=True):
                tables.set(rid, block_ids)
            admitted.add(rid)
        elif new_block_ids is not None:
            for tables, block_ids in zip(groups, new_block_ids, strict=True):
                tables.extend(rid, block_ids)
        computed[rid] = cached.num_computed_tokens[i]
    return computed, admitted


def check_drafts_follow_tokens(
    rid: str, num_computed: int, num_scheduled: int, spec_token_ids: Sequence[int]
) -> None:
    """A chunk with drafts holds at least one known token before them (the runner appends
    the drafts after the tokens it knows). vLLM 0.25.0 schedules a prefill whose whole
    chunk is drafts where the budget leaves room for nothing else; 0.33.0 on assert there
    (`num_new_tokens == 1 + num_spec_tokens`). The engine's fault, an engine-crash as in
    the later releases (so bisect sees one kind), with the values."""
    if num_scheduled > len(spec_token_ids):
        return
    raise EngineFault(
        "engine-crash",
        f"{rid}: vLLM scheduled {num_scheduled} tokens at position {num_computed}, all of "
        f"them drafts ({len(spec_token_ids)}): no known token before the drafts",
        case="a chunk of drafts only",
        request_id=rid,
    )


def sampled_lists(
    output: Any,
    sampled_token_ids: Mapping[str, int],
    accepted_token_ids: Mapping[str, tuple[int, ...]],
    live: Collection[str],
) -> list[list[int]]:
    """What the runner returns for a step (`output`, ours), in its batch order: for each
    request one token if it samples, none for a partial prefill chunk; a request with
    drafts gets its accepted drafts, then its sampled (bonus) token. `live`: the requests
    not reported finished (an aborted one may sample nothing)."""
    sampled: list[list[int]] = []
    for r in output.scheduled:  # bounded: the step's requests
        token = sampled_token_ids.get(r.request_id)
        assert (token is not None) <= r.samples, f"{r.request_id}: token but no sampling"
        assert token is not None or not r.samples or r.request_id not in live, (
            f"{r.request_id}: its chunk reaches num_tokens but no token was sampled"
        )
        accepted = list(accepted_token_ids.get(r.request_id, ()))
        assert len(accepted) <= r.num_draft_tokens, f"{r.request_id}: accepted > drafts"
        sampled.append([] if token is None else [*accepted, int(token)])
    return sampled
