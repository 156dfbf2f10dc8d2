"""A model-free drafter for speculative decoding with acceptance (vLLM's n-gram proposer's
place in the model runner): after each step it proposes K draft tokens for every request
that sampled and is still running.

Draft j is the hash model's true next token after the drafted sequence so far with
probability `acceptance`, else another token (drawn from the run's generator)::

    known tokens  t0 ... t(n-1)        identity I(n-1) of the last known position
    draft 1       sample_token(I(n-1))              with probability P, else another
    draft 2       sample_token(I(n-1) + term(n, d1)) with probability P, else another
    ...

A wrong draft makes every later draft of the step wrong too (their prefix differs from the
true sequence), so the rejection sampler accepts each draft with probability about P up to
the first rejection, as with a real drafter of acceptance rate P.
"""

from __future__ import annotations

import numpy as np

from schedcheck.invariants import hash_model
from schedcheck.traces.tokens import FIRST_TOKEN_ID

# up to this many drafts a request, offsets drawn one by one: `integers(size=k)` spends
# about 3 us checking its size (np.prod), more than k = 1 or 2 scalar draws cost
SCALAR_DRAWS_MAX = 2


class Drafter:
    def __init__(
        self,
        num_speculative_tokens: int,
        acceptance: float,
        rng: np.random.Generator,
        vocab_size: int,
    ) -> None:
        assert num_speculative_tokens >= 1 and 0.0 <= acceptance <= 1.0
        assert vocab_size - FIRST_TOKEN_ID >= 2, "a wrong draft needs a second token"
        self.num_speculative_tokens = num_speculative_tokens
        self.acceptance = acceptance
        self.rng = rng
        self.vocab_size = vocab_size
        self._last: dict[str, tuple[int, int]] = {}  # id -> (identity of last token, count)

    def add_request(self, request_id: str, prompt_token_ids: np.ndarray, salt: int) -> None:
        last = hash_model.identities(prompt_token_ids.astype(np.int64), salt)[-1]
        self._last[request_id] = (int(last), int(prompt_token_ids.size))

    def append(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        """Tokens the request gained this step (accepted drafts + the sampled one)."""
        identity, n = self._last[request_id]
        tokens = np.asarray(token_ids, dtype=np.int64)
        ids = hash_model.identities(tokens, identity, n)
        self._last[request_id] = (int(ids[-1]), n + tokens.size)

    def forget(self, request_id: str) -> None:
        self._last.pop(request_id, None)

    def propose(self, request_ids: list[str]) -> dict[str, tuple[int, ...]]:
        """K drafts per request, in the order given (the generator's draws follow it)."""
        return {rid: self._drafts(*self._last[rid]) for rid in request_ids}

    def _drafts(self, identity: int, n: int) -> tuple[int, ...]:
        k = self.num_speculative_tokens
        right = self.rng.random(k) < self.acceptance
        high = self.vocab_size - FIRST_TOKEN_ID
        if k <= SCALAR_DRAWS_MAX:  # the same draws: PCG64 hands 32-bit halves out in turn
            offsets = np.array([self.rng.integers(1, high) for _ in range(k)], np.int64)
        else:
            offsets = self.rng.integers(1, high, size=k)
        return tuple(hash_model.sample_chain(identity, n, right, offsets, self.vocab_size).tolist())
