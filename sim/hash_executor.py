"""The bare executor: the hash model's tokens with no shadow KV and no checks.

It samples exactly what the symbolic executor samples on a correct schedule (the token
after position p is `sample_tokens(identity(p))` of the request's true tokens), so a run
with it has the same schedule and fingerprint as a checked run of a correct engine. It is
the baseline the benchmarks measure the invariants against; it finds nothing.
"""

from __future__ import annotations

import numpy as np

from schedcheck.engines.metadata import RunnerMetadata
from schedcheck.invariants import hash_model
from schedcheck.invariants.violation import Violation
from schedcheck.traces.tokens import DEFAULT_VOCAB_SIZE

_MASK64 = (1 << 64) - 1


class HashModelExecutor:
    hash_model_tokens = True

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self.vocab_size = vocab_size
        self.last_identity: dict[str, tuple[int, int]] = {}  # id -> (num_tokens, identity)
        self.violations: list[Violation] = []  # never any: it reads no shadow KV

    def add_request(
        self, request_id: str, prompt_token_ids: np.ndarray, cache_salt: str | None = None
    ) -> None:
        ids = hash_model.identities(prompt_token_ids, hash_model.salt_identity(cache_salt))
        self.last_identity[request_id] = (int(prompt_token_ids.size), int(ids[-1]))

    def finish_request(self, request_id: str) -> None:
        self.last_identity.pop(request_id, None)

    def execute(self, meta: RunnerMetadata) -> dict[str, int]:
        rids = meta.sampling_req_ids
        if not rids:
            return {}
        state = [self.last_identity[rid] for rid in rids]
        identity = np.fromiter((ident for _, ident in state), np.uint64, len(state))
        tokens = hash_model.sample_tokens(identity, self.vocab_size)
        positions = np.fromiter((n for n, _ in state), np.int64, len(state))
        terms = hash_model.terms(positions, tokens)
        out: dict[str, int] = {}
        for rid, (n, ident), token, term in zip(
            rids, state, tokens.tolist(), terms.tolist(), strict=True
        ):
            self.last_identity[rid] = (n + 1, (ident + term) & _MASK64)
            out[rid] = token
        return out

    def unsample(self, request_id: str, tokens: tuple[int, ...]) -> None:
        """Forget the request's last sampled `tokens` (the engine dropped them)."""
        state = self.last_identity.get(request_id)
        if state is None or not tokens:
            return
        n, ident = state
        k = len(tokens)
        positions = np.arange(n - k, n, dtype=np.int64)
        terms = hash_model.terms(positions, np.asarray(tokens, dtype=np.int64))
        self.last_identity[request_id] = (n - k, (ident - int(terms.sum())) & _MASK64)
