"""The symbolic executor: a shadow KV cache that sees every misaligned read, on a CPU.

Each step, for the metadata of that step (as a model runner would pass it to the kernels):

1. every scheduled row writes the identity of its KV entry into `slot_mapping[row]`
   (the identity the request expects at that position if the row's token is the request's
   true token there, else a poisoned identity, which any later reader will notice);
2. every key the attention kernel would read for that metadata is compared with the
   identity the request expects at that key. With causal, bottom-right alignment, request i
   reads keys 0 .. seq_lens[i] - 1 through its block table::

       keys of request i:   0 ........... verified_len ............. seq_lens[i]-1
                            | checked at earlier steps | checked now         |
       slot of key j:       block_table[j // block_size] * block_size + j % block_size

   Keys verified at an earlier step are not read again unless their block-table entry
   changed or a later write changed their slot (incremental, so long contexts cost little);
3. each sampling request gets `sample_token(identity of its last row)`, poisoned if any of
   its reads were wrong, so a misalignment also changes the output tokens;
4. with speculative decoding, each sampling request's drafter then writes draft KV (the
   identity `hash_model.DRAFT`: tokens not known yet) through `lookahead_slot_mapping`;
   a slot past the block table is an out-of-bounds write (vllm#16370), and a draft written
   into KV another request verified is caught like any other overwrite.

Scheduled draft tokens (speculative decoding with acceptance, `spec_token_ids`): for the
step, the request's tokens are extended by its drafts, so a draft row writes and reads the
identities of the drafted sequence (the KV a model computes for a draft is that of the
draft's prefix). Every row from the last known token on is sampled, and the rejection
sampler accepts the longest prefix of drafts equal to the samples before them, plus the
sample after the last accepted one (the bonus)::

    positions      n-1   n    n+1   n+2          n = num_tokens, drafts d1 d2 d3
    input          t     d1   d2    d3
    samples        s0    s1   s2    s3           d1 == s0, d2 == s1, d3 != s2
    generated      s0 s1 s2 (accepted d1, d2; bonus s2); KV of n+2 holds d3's: rejected

The request then knows n + 3 tokens; only keys [0, n + 2) keep verified KV, and slot
n + 2 (d3's KV) must be overwritten by the true KV of s2 before anyone reads it.

Hybrid KV cache: each KV-cache group writes `identity ^ group_tag(g)` through its own slot
mapping; a full group is read as above; a sliding-window group of W tokens is read, every
step, at exactly the keys of its rows' windows, [first position - W + 1, last position],
through that group's table, and nothing before (those blocks may be freed and reused).

The identities are those of `invariants/hash_model.py`: KV of position p = hash of the
request's tokens [0..p]; two requests with the same prefix expect the same identities.

An engine that hands per-token slot lists (`ScheduledRequest.slots`, SGLang) gets metadata
of block size 1 (`engines/metadata.py`); at its first step the executor then tracks every
slot as a block of one (`num_blocks * block_size` blocks of size 1), and its engine's KV
snapshot names slots too.

Cost: a step is a fixed number of array operations over its rows, not Python per token.
The slots are arrays indexed by slot (identity, writer request, position, step), the
requests' true tokens and identities one arena indexed by request (`sim/token_store.py`):
a write is a scatter, a read a gather and one vectorized comparison with the identities
gathered from the arena, a sample one scatter. Python runs per request only where a
request's block table changed since its last check, where its verified KV grows by a
block, and where a comparison failed (to word the violation). A step of the common case
(a full KV-cache group and at most one sliding-window group after it, every full-group
read its own chunk or, before it, keys handed as ranges) is one compiled call
(`sim/step_kernel.py`), the drafts then accepted in Python; any other step takes the path
above, phase by phase.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.engines.protocol import KVCacheGroup
from schedcheck.engines.slots import touched_entries
from schedcheck.invariants import hash_model
from schedcheck.invariants.violation import Violation
from schedcheck.sim.common_step import CommonStep, changed_tables, keeps_verified
from schedcheck.sim.draft_acceptance import DraftAcceptance
from schedcheck.sim.overwrites import Overwrites
from schedcheck.sim.token_store import ShadowRequest, TokenStore, sample_and_terms
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE, FIRST_TOKEN_ID

I64 = np.int64
U64 = np.uint64
_INDEX = operator.attrgetter("index")
_COMPUTED = operator.attrgetter("num_computed_tokens")
_SCHEDULED = operator.attrgetter("num_scheduled_tokens")
_NO_IDS = np.zeros(0, dtype=U64)  # an empty identity array, shared (never written)
FEW_BLOCKS = 8  # _add_verifiers: up to here a loop, past it the compiled kernel


class SymbolicExecutor(Overwrites, DraftAcceptance, CommonStep):
    """Shadow KV of `num_blocks * block_size` slots; implements engines/executor.Executor."""

    hash_model_tokens = True  # its tokens are the hash model's: outputs.unchunked applies
    # False: every step phase by phase, never in one call (the differential tests and
    # bench/common_step_ab.py compare the two; the results must be the same)
    use_common_step = True

    def __init__(
        self, num_blocks: int, block_size: int, vocab_size: int = DEFAULT_VOCAB_SIZE
    ) -> None:
        assert num_blocks >= 1 and block_size >= 1
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_slots = num_blocks * block_size
        self.vocab_size = vocab_size
        # the per-step loops, compiled (numba): imported with the first executor, so that a
        # process that never simulates never loads numba and LLVM (0.4 s, 110 MB)
        from schedcheck.sim import sample_kernels, shadow_kernels, step_kernel

        self._kernels = shadow_kernels
        self._sample_kernels = sample_kernels
        self._step_kernel = step_kernel
        self.shadow = np.zeros(self.num_slots, dtype=U64)  # 0 = never written
        self.writer_req = np.full(self.num_slots, -1, dtype=np.int32)
        self.writer_pos = np.full(self.num_slots, -1, dtype=I64)
        self.writer_step = np.full(self.num_slots, -1, dtype=I64)
        self.verifiers = np.zeros(num_blocks, dtype=np.int32)  # live requests verifying a block
        # group 0's slots written this step, all in the cache (the common read's cue)
        self._in_cache: np.ndarray | None = None
        self.req_names: list[str] = []
        self.requests: dict[str, ShadowRequest] = {}
        self.store = TokenStore()  # per request index: tokens, identities, verified counts
        # store indices whose verified keys were cut (preempted, or a table changed under
        # them) and not read since: their next step reads keys before its chunk
        self.cut: set[int] = set()
        self.violations: list[Violation] = []  # of the last step
        self._draft_ids = _NO_IDS  # hash_model.DRAFT repeated: the drafts' identities
        # request id -> its block table in the engine now (set by the loop; rare path only)
        self.current_table: Callable[[str], Sequence[int] | None] | None = None
        # request id -> its prompt, the same tokens as added (set by the loop: then a
        # request keeps no reference to its prompt until its first step reads it)
        self.prompt_source: Callable[[str], np.ndarray] | None = None
        self.num_keys_checked = 0
        # request id -> the drafts the rejection sampler accepted in the last step (those
        # with scheduled drafts only); its sampled token is the bonus after them
        self.accepted_token_ids: dict[str, tuple[int, ...]] = {}
        self.salt_identity: dict[str, int] = {}  # request id -> its salt's identity (salted)

    # -- the Executor protocol ------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt_token_ids: np.ndarray, cache_salt: str | None = None
    ) -> None:
        assert request_id not in self.requests, f"request {request_id} added twice"
        n = int(prompt_token_ids.size)
        salt = hash_model.salt_identity(cache_salt)
        prompt: np.ndarray | Callable[[], np.ndarray] = prompt_token_ids
        if self.prompt_source is not None:  # a waiting request holds no prompt at all
            prompt = functools.partial(self.prompt_source, request_id)
        elif not isinstance(prompt, np.ndarray) or prompt.flags.writeable:
            prompt = np.array(prompt)  # the caller may still change it
        index = self.store.add(n)
        assert index == len(self.req_names)
        self.requests[request_id] = ShadowRequest(self.store, index, prompt, salt)
        if cache_salt is not None:  # kept past finish_request, for discarded writes
            self.salt_identity[request_id] = hash_model.salt_identity(cache_salt)
        self.req_names.append(request_id)

    def finish_request(self, request_id: str) -> None:
        req = self.requests.pop(request_id, None)
        if req is not None:
            self._unverify(req, 0)
            self.cut.discard(req.index)
            self.store.free(req.index)

    def unsample(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Forget the request's last sampled `tokens` (the engine dropped them; they are
        sampled again). None of them has KV yet, so nothing verified is cut."""
        req = self.requests.get(request_id)
        if req is None or not tokens:
            return
        n = req.num_tokens - len(tokens)
        assert req.tokens[n : req.num_tokens].tolist() == list(tokens), request_id
        assert req.verified_len <= n, f"{request_id}: a dropped token's KV was verified"
        req.num_tokens = n

    def execute(self, meta: RunnerMetadata) -> dict[str, int]:
        self.violations = []
        self.accepted_token_ids = {}
        self._in_cache = None
        step = meta.output.step
        for rid in meta.output.preempted_req_ids:  # its blocks are gone: verify again later
            preempted = self.requests.get(rid)
            if preempted is not None:
                self._unverify(preempted, 0)
                preempted.resumed = True
        for src, dst in meta.output.block_copies:  # copy-on-write, before the forward: into
            self._copy_block(step, src, dst)  # blocks this step's preemptions may have freed
        if meta.num_reqs and meta.block_size != self.block_size:
            self._use_slot_granularity(meta.block_size)
        if meta.output.discarded:
            self._write_discarded(step, meta.output.discarded)
        found = list(map(self.requests.get, meta.req_ids))
        if None in found:
            for rid, req in zip(meta.req_ids, found, strict=True):
                if req is None:
                    self._violate(
                        "shadow-kv.unknown-request", step, rid, "scheduled but never added"
                    )
            return {}
        if meta.num_reqs == 0:
            return {}
        reqs = cast(list[ShadowRequest], found)  # no None in it
        idx = np.fromiter(map(_INDEX, reqs), np.int32, len(reqs))  # store indices (writer_req)
        first = self._build_unread(reqs)  # their first step
        num_known = self._extend_with_drafts(meta, reqs)
        written, sampled = None, None
        # a first step after a prefix hit, or after verified keys were cut, hands the common
        # step the keys read before the chunks; it samples the requests without drafts,
        # and the rejection sampler then takes those with drafts. A step that found
        # something already (a copy, a discarded write, a misplaced draft) takes the phases
        reread = self._reads_cut(reqs) or any(meta.num_computed_tokens[i] for i in first)
        if self.use_common_step and not self.violations:
            written, sampled = self._common_step(meta, reqs, idx, reread, num_known)
            if sampled is not None and num_known:  # done: every row wrote its identity
                assert written is not None
                sampled.update(self._accept(meta, reqs, written, set(), num_known))
        if sampled is None:
            sampled = self._step(meta, reqs, idx, num_known, written)
        if meta.lookahead_slot_mapping.size:
            self._write_drafts(meta, idx)
        return sampled

    def _step(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        num_known: dict[int, int],
        written: np.ndarray | None,
    ) -> dict[str, int]:
        """The step's writes, reads and samples, each case in full (`written`: the
        identities the common step wrote already, where its read found a wrong key)."""
        if written is None:
            written, true_ids = self._write(meta, reqs, idx)
        else:  # every token right: each row wrote its true identity, all slots in the cache
            true_ids, self._in_cache = written, meta.slot_mapping
        bad_reqs = self._check_alignment(meta) | self._read(meta, reqs, idx, true_ids)
        for group in range(1, len(meta.kv_groups)):
            bad_reqs |= self._read_group(meta, reqs, idx, group)
        sampled = self._sample(meta, reqs, idx, written, bad_reqs, num_known)
        if num_known:
            sampled.update(self._accept(meta, reqs, written, bad_reqs, num_known))
        return sampled

    def _build_unread(self, reqs: list[ShadowRequest]) -> list[int]:
        """The positions in `reqs` of the requests never read before (the store's set, no
        array op), each built now: its tokens and identities, once if it is named twice."""
        unbuilt = self.store.unbuilt
        if not unbuilt:
            return []
        first = [i for i, req in enumerate(reqs) if req.index in unbuilt]
        for i in first:  # bounded: the batch
            if reqs[i].index in unbuilt:  # (a request named twice: built once)
                reqs[i].build()
        return first

    def _reads_cut(self, reqs: list[ShadowRequest]) -> bool:
        """Is a request of the step one whose verified keys were cut? Each is taken off
        `cut` now: a hint to the common step, which checks the ranges it is handed."""
        cut = self.cut
        if not cut:
            return False
        found = [req.index for req in reqs if req.index in cut]  # bounded: the batch
        cut.difference_update(found)
        return bool(found)

    def _use_slot_granularity(self, block_size: int) -> None:
        """Track each slot as a block of its own (metadata from per-token slot lists)."""
        assert block_size == 1, f"metadata of block size {block_size}, executor {self.block_size}"
        assert not self.verifiers.any(), "block size changed after requests verified KV"
        self.block_size = 1
        self.num_blocks = self.num_slots
        self.verifiers = np.zeros(self.num_slots, dtype=np.int32)

    # -- step phases ------------------------------------------------------------------------

    def _write(
        self, meta: RunnerMetadata, reqs: list[ShadowRequest], idx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Write every row's identity through slot_mapping; returns the identities written
        and the identities the request really has at each row's position."""
        step = meta.output.step
        scheduled = meta.output.scheduled  # the chunks' true positions: the scheduler's
        lo = np.fromiter(map(_COMPUTED, scheduled), I64, len(scheduled))
        counts = np.fromiter(map(_SCHEDULED, scheduled), I64, len(scheduled))
        store = self.store
        true_ids, true_tokens, r = self._kernels.truth_of_rows(
            store.base, store.num_tokens, store.ids, store.tokens, idx, lo, counts, meta.input_ids
        )
        written = true_ids
        row_req = meta.row_req
        if r >= 0:  # the first row of a wrong token
            wrong = true_tokens != meta.input_ids
            written = true_ids ^ (hash_model.POISON * wrong)  # poisoned where the token is
            self._violate(
                "accounting.chunk-tokens",
                step,
                self.req_names[reqs[row_req[r]].index],
                f"the chunk's token is {int(meta.input_ids[r])}, the request's token there is "
                f"{int(true_tokens[r])}",
                position=int(meta.positions[r]),
            )
        self._in_cache = self._store(  # group 0's: this step's read checks none again
            step,
            meta.slot_mapping,
            meta.positions,
            row_req,
            written,
            idx,
            slots_of_positions=meta.slot_mapping_from_block_table,
        )
        for group in range(1, len(meta.kv_groups)):
            tagged = self._kernels.tag_identities(written, hash_model.group_tag(group))
            slots = meta.slots_of_group(group)
            self._store(step, slots, meta.positions, row_req, tagged, idx, False)
        return written, true_ids

    def _write_drafts(self, meta: RunnerMetadata, idx: np.ndarray) -> None:
        """The drafter's KV of each sampling request's lookahead positions (vllm#16370)."""
        positions = meta.lookahead_positions
        if self._draft_ids.size < positions.size:  # DRAFT, kept for every step (only read)
            self._draft_ids = np.full(2 * positions.size, hash_model.DRAFT, dtype=U64)
        drafts = self._draft_ids[: positions.size]
        slots = meta.lookahead_slot_mapping
        self._store(meta.output.step, slots, positions, meta.lookahead_req, drafts, idx)

    def _store(
        self,
        step: int,
        slots: np.ndarray,
        positions: np.ndarray,
        batch: np.ndarray,
        identities: np.ndarray,
        idx: np.ndarray,
        slots_of_positions: bool = True,
    ) -> np.ndarray | None:
        """Write identities[w] into slots[w] for position positions[w] of request batch[w]
        (idx: the store index of each request of the batch); a slot outside the cache (or
        -1: past the block table) is an out-of-bounds write, reported at each request's
        first one. Returns the slots written, all in the cache (`slots` itself unless some
        were outside), or None where there was nothing to write.
        `slots_of_positions`: each slot is its position's slot through the request's block
        table (False under a runner mutant that derives slots otherwise)."""
        if slots.size == 0:
            return None
        # every write over KV already there, equal identities included: a kernel does not
        # rewrite bit-identical floats, so a recompute into a block another live request
        # verified is a write into shared KV too (block-pool.write-into-shared-block)
        state = (self.shadow, self.writer_req, self.writer_pos, self.writer_step)
        verified = (self.verifiers, self.store.verified_blocks)
        ways = (step, self.block_size, slots_of_positions)
        written, old, num_verified_overwrites = self._kernels.store_writes(
            *state, *verified, slots, positions, batch, idx, identities, *ways
        )
        if not written:  # rare: a slot outside the cache, written nowhere
            valid = self._report_out_of_bounds(step, slots, positions, batch, identities, idx)
            slots, positions, batch = slots[valid], positions[valid], batch[valid]
            identities = identities[valid]
            written, old, num_verified_overwrites = self._kernels.store_writes(
                *state, *verified, slots, positions, batch, idx, identities, *ways
            )
            assert written, "the writes left are all in the cache"
        if num_verified_overwrites:
            self._invalidate_overwritten(step, slots, idx[batch], old)
        return slots

    def _outside(self, slots: np.ndarray) -> bool:
        """Does any slot lie outside the cache? (negative ones too, read as unsigned)"""
        unsigned = slots.view(U64) if slots.dtype == I64 else slots.astype(U64)
        return np.count_nonzero(unsigned >= self.num_slots) != 0

    def _report_out_of_bounds(
        self,
        step: int,
        slots: np.ndarray,
        positions: np.ndarray,
        batch: np.ndarray,
        identities: np.ndarray,
        idx: np.ndarray,
    ) -> np.ndarray:
        """Report each request's first write outside the cache; returns the valid writes."""
        valid = (slots >= 0) & (slots < self.num_slots)
        invalid = np.flatnonzero(~valid)
        _, first = np.unique(batch[invalid], return_index=True)
        for w in invalid[first]:
            what = "slot_mapping"
            if identities[w] == hash_model.DRAFT:
                what = f"the drafter's lookahead_slot_mapping (position {int(positions[w])})"
            self._violate(
                "shadow-kv.write-out-of-bounds",
                step,
                self.req_names[int(idx[batch[w]])],
                f"{what} names slot {int(slots[w])}, outside the KV cache "
                f"(0..{self.num_slots - 1}) or outside the block table",
                position=int(positions[w]),
                slot=int(slots[w]),
            )
        return valid

    def _copy_block(self, step: int, src: int, dst: int) -> None:
        bs = self.block_size
        if not (0 <= src < self.num_blocks and 0 <= dst < self.num_blocks):
            self._violate(
                "shadow-kv.copy-out-of-bounds",
                step,
                "",
                f"block copy {src} -> {dst} outside the KV cache",
                block=dst,
            )
            return
        lo, hi, s_lo = dst * bs, (dst + 1) * bs, src * bs
        if self.verifiers[dst] > 0:
            changed = self.shadow[s_lo : s_lo + bs] != self.shadow[lo:hi]
            holders = [n for n, r in self.requests.items() if dst in r.verified_table]
            hurt = [n for n in holders if self._copy_changes(self.requests[n], dst, changed)]
            if hurt:
                self._violate(
                    "block-pool.write-into-shared-block",
                    step,
                    hurt[0],
                    f"copy-on-write {src} -> {dst} overwrites KV that live requests read",
                    block=dst,
                )
            for name in hurt:
                req = self.requests[name]
                self._unverify(req, req.verified_table.index(dst) * bs)
        for arr in (self.shadow, self.writer_req, self.writer_pos, self.writer_step):
            arr[lo:hi] = arr[s_lo : s_lo + bs]

    def _copy_changes(self, req: ShadowRequest, dst: int, changed: np.ndarray) -> bool:
        """Does a copy into block `dst` change a key `req` has verified there? (A copy of
        equal content changes nothing the request reads: v0's copy-on-write into a block
        promoted to the same hash, or a block copied onto itself.)"""
        first_key = req.verified_table.index(dst) * self.block_size
        num_verified = min(self.block_size, req.verified_len - first_key)
        return bool(changed[:num_verified].any())

    def _check_alignment(self, meta: RunnerMetadata) -> set[int]:
        """Row r must attend exactly keys 0..positions[r] (causal, bottom-right aligned)."""
        row_req, qsl = meta.row_req, meta.query_start_loc
        if not self._kernels.count_misaligned(meta.seq_lens, qsl, row_req, meta.positions):
            return set()
        # row r of request i: r - qsl[i] + seq_lens[i] - (qsl[i + 1] - qsl[i])
        last_key = (meta.seq_lens - qsl[1:])[row_req] + np.arange(meta.num_tokens)
        wrong = last_key != meta.positions
        if not np.count_nonzero(wrong):
            return set()
        query_lens = meta.query_lens
        bad: set[int] = set()
        for r in wrong.nonzero()[0]:
            i = int(row_req[r])
            if i in bad:
                continue
            bad.add(i)
            self._violate(
                "shadow-kv.causal-alignment",
                meta.output.step,
                meta.req_ids[i],
                f"the row of position {int(meta.positions[r])} attends keys 0..{int(last_key[r])}"
                f" (seq_len {int(meta.seq_lens[i])}, query_len {int(query_lens[i])}), "
                f"it must attend keys 0..{int(meta.positions[r])}",
                position=int(meta.positions[r]),
                expected=f"key length {int(meta.positions[r]) + 1}",
                found=f"key length {int(last_key[r]) + 1}",
            )
        return bad

    def _read(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        true_ids: np.ndarray,
    ) -> set[int]:
        """Check every key the kernel reads that was not verified before; returns bad reqs.

        Common case: a request's unverified keys are exactly its chunk (it verified
        everything before), and the metadata's slot_mapping was derived from the block
        table; then the chunk's rows already name the slots and the expected identities
        and no second gather is needed. Every other request takes the general path.
        """
        tables = meta.block_tables
        for i in changed_tables(reqs, tables):  # bounded: the batch; only those changed
            self._revalidate(reqs[i], tables[i])
        if meta.as_documented and meta.slot_mapping is self._in_cache:
            store = self.store  # the common step in one kernel call, else nothing done
            common, grown, new_blocks = self._kernels.verify_own_chunks(
                store.verified_len, store.verified_blocks, idx, meta.num_computed_tokens,
                meta.seq_lens, self.shadow, meta.slot_mapping, true_ids, self.block_size,
            )  # fmt: skip
            if common:
                self.num_keys_checked += meta.num_tokens
                self._grow_tables(reqs, tables, grown, new_blocks, None)
                return set()
        lows = self.store.verified_len[idx]
        highs = np.maximum(meta.seq_lens, lows)
        chunk_only = lows == meta.num_computed_tokens
        chunk_only &= highs == meta.seq_lens
        if not meta.as_documented:
            chunk_only[:] = False
        # the requests that read their chunk only: the rows written, through slot_mapping;
        # then each other request's keys, gathered (compared in that order, as one read)
        rows = np.flatnonzero(chunk_only[meta.row_req])
        bad = self._compare(
            meta,
            reqs,
            (meta.row_req[rows], meta.positions[rows], meta.slot_mapping[rows], true_ids[rows]),
        )
        other = np.flatnonzero(~chunk_only & (highs > lows))
        if other.size:
            bad |= self._read_ranges(meta, reqs, idx, 0, other, lows, highs)
        self._verify(reqs, idx, tables, highs > lows, highs, bad)
        return bad

    def _gather_keys(
        self,
        idx: np.ndarray,
        todo: np.ndarray,
        ranges: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(request, key, slot, expected identity) of the keys of `ranges` (`_key_ranges`
        of the requests `todo`; expected 0 past the request's known tokens)."""
        lo, hi, entries = ranges
        store = self.store
        return cast(
            tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
            self._kernels.gather_keys(
                store.base, store.num_tokens, store.ids, todo, idx[todo], lo, hi, entries,
                self.block_size,
            ),
        )  # fmt: skip

    def _key_ranges(
        self,
        tables: Sequence[tuple[int, ...]],
        todo: np.ndarray,
        lows: np.ndarray,
        highs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, entries): keys [lo[k], hi[k]) of request todo[k] (lows[todo],
        highs[todo]), and the block-table entries they touch, each request's in turn (-1
        past its table's end)."""
        lo, hi = lows[todo], highs[todo]
        size = self.block_size
        first = [a // size for a in lo.tolist()]
        num = [(b - 1) // size + 1 - f for b, f in zip(hi.tolist(), first, strict=True)]
        return lo, hi, touched_entries([tables[i] for i in todo.tolist()], first, num)

    def _sample(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        written: np.ndarray,
        bad_reqs: set[int],
        num_known: dict[int, int],
    ) -> dict[str, int]:
        """One token per sampling row: the sample of the identity that row computed.
        Requests with drafts (`num_known`: batch index -> tokens known before the drafts)
        are left to `_accept`."""
        rows = meta.logits_indices
        if num_known and rows.size:
            rows = rows[~meta.batch_mask(num_known)[meta.row_req[rows]]]
        if rows.size == 0:
            return {}
        batch = meta.row_req[rows]
        identity = written[rows]
        if bad_reqs:
            identity[meta.batch_mask(bad_reqs)[batch]] ^= hash_model.READ_POISON
        positions = meta.positions[rows]
        writers = idx[batch]
        store = self.store
        span = self.vocab_size - FIRST_TOKEN_ID
        appended, sampled = self._sample_kernels.sample_append(
            store.ids, store.tokens, store.base, store.num_tokens, store.cap, writers, batch,
            identity, positions, span,
        )  # fmt: skip
        if appended:  # the common case: each request once, after its last token
            names = [meta.req_ids[i] for i in batch.tolist()]
            return dict(zip(names, sampled.tolist(), strict=True))
        tokens, terms = sample_and_terms(identity, positions + 1, self.vocab_size)
        # each request once (rows in batch order), each sampling after its last token
        right = positions == self.store.num_tokens[writers] - 1
        right[1:] &= batch[1:] > batch[:-1]
        if np.count_nonzero(right) == right.size:
            self.store.append_many(writers, tokens, terms)
            names = [meta.req_ids[i] for i in batch.tolist()]
            return dict(zip(names, tokens.tolist(), strict=True))
        out: dict[str, int] = {}  # rare: one at a time, to report the wrong positions
        for i, token, position, term in zip(
            batch.tolist(), tokens.tolist(), positions.tolist(), terms.tolist(), strict=True
        ):
            req = reqs[i]
            if position != req.num_tokens - 1:
                self._violate(
                    "accounting.sample-position",
                    meta.output.step,
                    meta.req_ids[i],
                    f"samples after position {position}, but the request knows "
                    f"{req.num_tokens} tokens (it must sample after position "
                    f"{req.num_tokens - 1})",
                    position=position,
                )
                continue
            req.append(token, term)
            out[meta.req_ids[i]] = token
        return out

    # -- hybrid KV cache: sliding-window groups ----------------------------------------------

    def _read_group(
        self, meta: RunnerMetadata, reqs: list[ShadowRequest], idx: np.ndarray, group: int
    ) -> set[int]:
        """Read, through group `group`'s tables, exactly the keys in its rows' windows
        (`_window_ranges`)."""
        todo, lows, highs = self._window_ranges(meta, group)
        if not todo.size:
            return set()
        return self._read_ranges(meta, reqs, idx, group, todo, lows, highs)

    def _read_ranges(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        group: int,
        todo: np.ndarray,
        lows: np.ndarray,
        highs: np.ndarray,
    ) -> set[int]:
        """Read keys [lows[i], highs[i]) of each request i of `todo` through group `group`'s
        tables: counted in one kernel pass, no array built; only where a key is wrong are
        they gathered again as arrays, to say which (`_compare`)."""
        ranges = self._key_ranges(meta.tables_of_group(group), todo, lows, highs)
        lo, hi, entries = ranges
        store, tag = self.store, hash_model.group_tag(group)
        wrong, num_keys = self._kernels.count_range_wrong(
            store.base, store.num_tokens, store.ids, idx[todo], lo, hi, entries,
            self.block_size, self.shadow, tag,
        )  # fmt: skip
        if not wrong:
            self.num_keys_checked += int(num_keys)
            return set()
        key_req, keys, slots, expected = self._gather_keys(idx, todo, ranges)
        if tag:
            expected = self._kernels.tag_identities(expected, tag)
        kv_group = meta.kv_groups[group] if group else None
        return self._compare(meta, reqs, (key_req, keys, slots, expected), kv_group)

    def _compare(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        reads: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        kv_group: KVCacheGroup | None = None,
    ) -> set[int]:
        """Gather the slots read and compare with the identities expected there; reports
        each bad request's first bad key and returns the bad requests (indices into reqs).
        `reads` is (request index, key, slot, expected identity) per key read."""
        key_req, keys, slots, expected = reads
        self.num_keys_checked += int(keys.size)
        if keys.size == 0:
            return set()
        if slots is not self._in_cache and self._outside(slots):
            in_cache = (slots >= 0) & (slots < self.num_slots)
            found = np.where(in_cache, self.shadow[np.where(in_cache, slots, 0)], U64(0))
            wrong = (found != expected) | ~in_cache | (expected == 0)
        else:  # every key in the cache
            if not self._kernels.count_wrong(self.shadow, slots, expected):
                return set()
            found = self.shadow[slots]
            wrong = (found != expected) | (expected == 0)  # 0: a key past the tokens known
        if not np.count_nonzero(wrong):
            return set()
        bad: set[int] = set()
        for k in wrong.nonzero()[0].tolist():  # bounded: the keys read
            i = int(key_req[k])
            if i not in bad:
                bad.add(i)
                read = (int(keys[k]), int(slots[k]), found[k], expected[k])
                self._report_read(meta, i, reqs[i], read, kv_group)
        return bad

    # -- helpers ----------------------------------------------------------------------------

    def _revalidate(self, req: ShadowRequest, table: tuple[int, ...]) -> None:
        """Keys still verified: those whose block-table entries did not change."""
        if table is req.seen_table:  # the engine handed the same tuple again: unchanged
            return
        req.seen_table = table
        n = len(req.verified_table)
        if not keeps_verified(req, table):
            same = next(
                (k for k in range(n) if k >= len(table) or table[k] != req.verified_table[k]), n
            )
            self._unverify(req, same * self.block_size)

    def _verify(
        self,
        reqs: list[ShadowRequest],
        idx: np.ndarray,
        tables: Sequence[tuple[int, ...]],
        read: np.ndarray,
        highs: np.ndarray,
        bad: set[int],
    ) -> None:
        """Each request i that read keys (read[i]) and found them right has verified keys
        [0, highs[i]): its verified length grows, and so do its verified blocks (counted
        in `verifiers`) where it reaches a new block."""
        if bad:
            read[np.fromiter(bad, I64, len(bad))] = False
        store, todo, who = self.store, None, idx
        if np.count_nonzero(read) != read.size:
            todo = read.nonzero()[0]
            who, highs = idx[todo], highs[todo]
        grown, new_blocks = self._kernels.grow_verified(
            store.verified_len, store.verified_blocks, who, highs, self.block_size
        )
        self._grow_tables(reqs, tables, grown, new_blocks, todo)

    def _add_verifiers(self, blocks: Sequence[int], delta: int) -> None:
        """verifiers[b] += delta for each b in blocks, each occurrence counted (a block
        named twice, an engine's bug, counts twice). A few in a loop (most steps: a block
        or two; the kernel's call and the list's conversion cost more), many compiled."""
        if len(blocks) > FEW_BLOCKS:
            self._kernels.add_verifiers(self.verifiers, np.asarray(blocks, I64), delta)
            return
        verifiers = self.verifiers
        for b in blocks:  # bounded: FEW_BLOCKS
            assert 0 <= b < verifiers.size, "a verified block lies in the pool"
            verifiers[b] += delta

    def _unverify(self, req: ShadowRequest, keep_len: int) -> None:
        keep_blocks = keep_len // self.block_size
        dropped = req.verified_table[keep_blocks:]
        if dropped:
            self._add_verifiers(dropped, -1)
        req.verified_table = req.verified_table[:keep_blocks]
        store = self.store
        store.verified_blocks[req.index] = len(req.verified_table)
        store.verified_len[req.index] = min(req.verified_len, keep_blocks * self.block_size)
        req.seen_table = None
        self.cut.add(req.index)

    # -- views for the invariants -----------------------------------------------------------

    def identity_at(self, request_id: str, position: int, group: int = 0) -> int:
        """The identity group `group` writes for the request's KV at `position` (its true
        tokens), or 0 where the executor does not know it (a request it never saw or
        forgot, a position past its known tokens)."""
        req = self.requests.get(request_id)
        if req is None or not 0 <= position < req.num_tokens:
            return 0
        return int(req.ids[position] ^ hash_model.group_tag(group))

    def identities_at(self, wheres: Sequence[tuple[str, int, int]]) -> list[int]:
        """identity_at(request_id, position, group) of each, in one gather."""
        if not wheres:
            return []
        rids, positions, groups = zip(*wheres, strict=True)
        found = list(map(self.requests.get, rids))
        if None in found:  # rare: unknown requests
            return [self.identity_at(*where) for where in wheres]
        reqs = cast(list[ShadowRequest], found)  # no None in it
        idx = np.fromiter(map(_INDEX, reqs), I64, len(reqs))
        store = self.store
        self._build_unread(reqs)  # rare: a request never read yet
        at = np.array(positions, I64)
        known = (at >= 0) & (at < store.num_tokens[idx])
        identities, _ = store.truth(idx, np.where(known, at, 0))  # a gather: a new array
        if any(groups):  # group 0's tag is 0
            identities ^= np.array(list(map(hash_model.group_tag, groups)), U64)
        identities[~known] = 0
        return identities.tolist()

    def block_contents(self, block_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(identity at each block's last slot, whether all its slots were written)."""
        ids = block_ids.astype(I64, copy=False)
        return cast(
            tuple[np.ndarray, np.ndarray],
            self._kernels.block_contents(self.shadow, ids, self.block_size),
        )
