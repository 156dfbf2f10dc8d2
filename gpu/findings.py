"""A divergence found while replaying a schedule on tensors, and its class.

Two classes, as the issue asks:

- `misalignment`: the step read or wrote KV that is not the KV of the request's true
  sequence at that position, or its logits are far off. It names step, request, position,
  and where known slot, block and layer;
- `near-tie`: the greedy token differs from the baseline's, but the top-2 logit margin is
  under the dtype's tolerance and every KV entry and logprob is within tolerance: floating
  point reduction order, not a bug (vllm#5543).

Kinds (what was seen) are listed in `KINDS`; the class follows from the kind except for
`token`, which the comparison classifies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MISALIGNMENT = "misalignment"
NEAR_TIE = "near-tie"
CLASSES = (MISALIGNMENT, NEAR_TIE)

KINDS: dict[str, str] = {
    "slot-invalid": "a row's slot is -1 or past the cache: its K/V write was skipped",
    "block-invalid": "a key position's block is missing from the table or out of range",
    "unknown-request": "a request is scheduled that the executor does not know",
    "position-beyond-tokens": "a row or key position lies past the request's known tokens",
    "causal-alignment": "seq_len - query_len + r is not row r's position: its causal window is off",
    "input-token": "the chunk's token id differs from the request's true token",
    "kv-read": "a key the attention read holds another K/V than the true one",
    "kv-write": "a row wrote K/V that differs from the baseline's at its position",
    "logprob": "the chosen token's logprob is far from the baseline's",
    "token": "the greedy token differs from the baseline's",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One divergence; `position` is an index into the request's true token sequence."""

    kind: str
    cls: str
    step: int
    request_id: str
    position: int
    message: str
    slot: int | None = None
    block: int | None = None
    layer: int | None = None
    error: float | None = None  # measured |difference|, where a number was compared
    tolerance: float | None = None

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"unknown finding kind {self.kind!r}"
        assert self.cls in CLASSES, f"unknown finding class {self.cls!r}"
        assert self.step >= 0 and self.position >= 0

    def sort_key(self) -> tuple[int, int, int, int]:
        """Earliest step first; then the level: metadata and layer-0 K/V findings (the
        cache's own content) before higher layers' (inherited through attention) before
        logits; then the lowest position; then the kind, in `KINDS` order."""
        if self.layer is not None:
            level = self.layer
        else:
            level = _LOGITS_LEVEL if self.kind in ("logprob", "token") else 0
        return (self.step, level, self.position, _KIND_ORDER[self.kind])

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}
_LOGITS_LEVEL = 1 << 20  # after every layer


def misalignment(
    kind: str, step: int, request_id: str, position: int, message: str, **where: Any
) -> Finding:
    return Finding(kind, MISALIGNMENT, step, request_id, position, message, **where)


def first_per_request(findings: list[Finding]) -> dict[str, Finding]:
    """request id -> its first divergence (by `Finding.sort_key`), ordered by request id."""
    first: dict[str, Finding] = {}
    for finding in sorted(findings, key=Finding.sort_key):
        first.setdefault(finding.request_id, finding)
    return dict(sorted(first.items()))
