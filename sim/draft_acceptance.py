"""Speculative decoding with acceptance in the shadow KV (a mixin of the symbolic executor,
sim/symbolic.py): a request's scheduled drafts extend its tokens for the step, and the
rejection sampler keeps the longest prefix of drafts equal to the samples before them,
plus the bonus (the module docstring of sim/symbolic.py draws it).
"""

from __future__ import annotations

import numpy as np

from schedcheck.engines.arrays import first_true
from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.invariants import hash_model
from schedcheck.sim.bad_reads import BadReads
from schedcheck.sim.token_store import ShadowRequest

I64 = np.int64


class DraftAcceptance(BadReads):
    """Appends scheduled drafts and accepts them; reads the executor's own state."""

    vocab_size: int
    accepted_token_ids: dict[str, tuple[int, ...]]

    def _unverify(self, req: ShadowRequest, keep_len: int) -> None:
        raise NotImplementedError  # the executor's: keys from keep_len on are not verified

    def _extend_with_drafts(
        self, meta: RunnerMetadata, reqs: list[ShadowRequest]
    ) -> dict[int, int]:
        """Append each request's scheduled drafts to its tokens for this step; returns batch
        index -> num_tokens before its drafts (empty: no drafts in the step)."""
        if meta.num_draft_tokens.size == 0:
            return {}
        num_known: dict[int, int] = {}
        for i in np.flatnonzero(meta.num_draft_tokens).tolist():
            req, sched = reqs[i], meta.output.scheduled[i]
            num_known[i] = n = req.num_tokens
            drafts = np.asarray(sched.spec_token_ids, dtype=I64)
            if sched.num_end_tokens - drafts.size != n:  # drafts not after the known tokens
                self._violate(
                    "accounting.draft-position",
                    meta.output.step,
                    meta.req_ids[i],
                    f"{drafts.size} drafts end its chunk at {sched.num_end_tokens}, but the "
                    f"request knows {n} tokens: drafts must follow them",
                    position=n,
                )
            terms = hash_model.terms(np.arange(n, n + drafts.size, dtype=I64), drafts)
            for token, term in zip(drafts.tolist(), terms.tolist(), strict=True):
                req.append(token, term)
        return num_known

    def _accept(
        self,
        meta: RunnerMetadata,
        reqs: list[ShadowRequest],
        written: np.ndarray,
        bad_reqs: set[int],
        num_known: dict[int, int],
    ) -> dict[str, int]:
        """The rejection sampler: per request with drafts, sample every row from its last
        known token on, accept the longest prefix of drafts equal to the samples before them
        and add the bonus; the request keeps verified KV only before its first rejected
        draft."""
        rows = meta.spec_rows
        identity = written[rows].copy()
        batch = meta.row_req[rows]
        if bad_reqs:
            identity[meta.batch_mask(bad_reqs)[batch]] ^= hash_model.READ_POISON
        samples = hash_model.sample_tokens(identity, self.vocab_size)
        out: dict[str, int] = {}
        for i, n in num_known.items():
            req, rid = reqs[i], meta.req_ids[i]
            mine = samples[batch == i]
            drafts = req.tokens[n : req.num_tokens].copy()
            req.num_tokens = n  # drop the drafts; append what was generated instead
            if meta.positions[rows[batch == i][0]] != n - 1:
                continue  # reported by _extend_with_drafts
            num_accepted = first_true(drafts != mine[: drafts.size], int(drafts.size))
            generated = mine[: num_accepted + 1]
            terms = hash_model.terms(np.arange(n, n + generated.size, dtype=I64), generated)
            for token, term in zip(generated.tolist(), terms.tolist(), strict=True):
                req.append(token, term)
            self._unverify(req, n + num_accepted)  # KV of n + num_accepted on: rejected
            self.accepted_token_ids[rid] = tuple(generated[:-1].tolist())
            out[rid] = int(generated[-1])
        return out
