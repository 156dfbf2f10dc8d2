"""vLLM's API-server admission check (`AsyncLLM.check_admission`, 0.33), which refuses a
request before it reaches the engine core when a queue limit of `SchedulerConfig` is hit:

    max_num_queued_reqs    unfinished requests + 1 > limit            -> QueueOverflowError
    max_num_queued_tokens  prompt tokens of requests with no output
                           yet >= limit                               -> MaxQueuedTokensError

Both answer HTTP 503; for the simulator the request is rejected for good (an expected
outcome, counted as the `queue-full-rejection` rare path, never a finding).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from schedcheck.engines.vllm.v1 import eras


def queue_rejection(scheduler_config: Any, unfinished: Collection[Any]) -> str | None:
    """The 503 reason for a new request, or None; `unfinished`: the unfinished vLLM
    Requests. Only a configured limit is checked: the request count costs O(1), the
    prompt tokens waiting for output O(unfinished) (read only where that limit is set)."""
    max_reqs, max_tokens = eras.queue_limits(scheduler_config)  # none before 0.3x
    num_requests = len(unfinished)
    if max_reqs is not None and num_requests + 1 > max_reqs:
        return f"queue full: {num_requests} unfinished requests, max_num_queued_reqs {max_reqs}"
    if max_tokens is None:
        return None
    num_prompt_tokens = sum(r.num_prompt_tokens for r in unfinished if not r.output_token_ids)
    if num_prompt_tokens >= max_tokens:
        return (
            f"queue full: {num_prompt_tokens} prompt tokens waiting for output, "
            f"max_num_queued_tokens {max_tokens}"
        )
    return None
