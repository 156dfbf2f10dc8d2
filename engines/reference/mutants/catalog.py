"""The mutant catalog: named, documented re-creations of real bug classes (docs/bug-classes.md).

What `schedcheck mutants list [--json]` prints, in this order. Each entry's code lives beside
this file, one module per component (`scheduler.py`, `hashed.py`, `radix.py`, `runner.py`);
see `__init__.py` for how a mutant is applied.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPONENTS = ("scheduler", "hashed", "radix", "runner")


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    component: str  # scheduler | hashed | radix | runner
    bug_class: str  # `#N: property`: its class in docs/bug-classes.md, what breaks
    reference: str  # where the real bug was reported
    description: str  # what the mutant changes

    def to_json(self) -> dict[str, str]:
        return {
            "name": self.name,
            "component": self.component,
            "bug_class": self.bug_class,
            "reference": self.reference,
            "description": self.description,
        }


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "cache-partial-block",
        "hashed",
        "#1: the cached length a chunk relies on never exceeds what was really written",
        "vllm#7753",
        "After a non-final chunk that ends inside a block, that partly written block is "
        "cached under the hash of its full prompt content, so a request with the same "
        "prefix reuses slots no one wrote.",
    ),
    Mutant(
        "no-cache-hit-cap",
        "hashed",
        "#2: a cache hit is capped at num_tokens - 1 (one prompt token is always computed)",
        "vllm#7753",
        "The prefix-cache hit is not capped: a fully cached prompt whose length is a "
        "multiple of block_size gets num_computed_tokens == num_tokens, has nothing to "
        "compute, never produces logits and never finishes.",
    ),
    Mutant(
        "whole-prompt-computed",
        "hashed",
        "#3: a block is marked computed only up to num_computed_tokens + chunk",
        "vLLM v0 block manager v1 (compute_full_blocks_in_seq)",
        "Blocks for the whole prompt are allocated at admission and, after the first "
        "chunk ran, every full prompt block is cached, including the ones no chunk wrote.",
    ),
    Mutant(
        "same-step-cached",
        "hashed",
        "#4: a block allocated in this step is not offered as computed before it is written",
        "vllm#7822 / vllm#7619",
        "Blocks for the whole prompt are allocated at admission and cached at allocation "
        "time, so a later request of the same step skips blocks its writer's chunk does "
        "not cover.",
    ),
    Mutant(
        "block-table-short",
        "hashed",
        "#5: the block table holds cdiv(num_tokens, block_size) blocks at every append",
        "vllm#7380 / vllm#7371",
        "When the chunk ends exactly on a block boundary (tokens % block_size == 0) the "
        "manager allocates one block too few: the last block of the chunk is missing.",
    ),
    Mutant(
        "no-lookahead-slots",
        "scheduler",
        "#10: allocated slots cover computed + new + lookahead tokens",
        "vllm#16370",
        "With speculative decoding (num_lookahead_tokens > 0) the scheduler allocates "
        "slots for computed + new tokens only: when the last block has fewer free slots "
        "than draft tokens, the drafter writes its KV past the end of the block table.",
    ),
    Mutant(
        "stale-cache-hit",
        "scheduler",
        "#7: a cached-token count from a failed scheduling attempt is recomputed before reuse",
        "vllm#18957",
        "When a waiting request fails to get blocks, the scheduler keeps its prefix hit "
        "and reuses it at the next attempt without a new lookup, even if those blocks "
        "were evicted and handed to another request meanwhile.",
    ),
    Mutant(
        "manager-computed-disagree",
        "hashed",
        "#8: scheduler and KV manager agree on num_computed_tokens at every step",
        "vllm#11186",
        "The KV manager records the uncapped prefix hit while the scheduler uses the "
        "capped one: on a fully cached prompt at a multiple of block_size the two "
        "counts differ by a block from then on.",
    ),
    Mutant(
        "hash-no-parent",
        "hashed",
        "#9: equal block hash implies equal tokens and an equal parent chain",
        "vllm#12621",
        "Block hashes omit the parent hash: two blocks with the same tokens after "
        "different prefixes share a hash and KV built from other content is reused.",
    ),
    Mutant(
        "hash-ignores-salt",
        "hashed",
        "#9: equal block hash implies equal extra keys (LoRA, cache salt)",
        "GHSA-rm76-4mrf-v9r8",
        "Block hashes omit the extra keys: requests with different cache_salt share "
        "prefix-cache blocks.",
    ),
    Mutant(
        "resume-drops-last-token",
        "scheduler",
        "#11: after recompute-preemption the re-prefill is prompt + every emitted token",
        "vllm#28787",
        "After a preemption the re-prefill covers the prompt and every output token but "
        "the last one, and samples as if the last one did not exist.",
    ),
    Mutant(
        "slot-mapping-from-zero",
        "runner",
        "#12: the slot mapping of a chunk starts at num_computed_tokens",
        "vllm#36580",
        "The runner's slot mapping of a chunk starts at position 0 instead of "
        "num_computed_tokens (engines/metadata.py).",
    ),
    Mutant(
        "block-table-hits-only",
        "runner",
        "#6: if any request of a batch reads paged KV, every request's block table is filled",
        "vllm#7018",
        "Once a request of the step has KV from before the step (a prefix hit or an earlier "
        "chunk), the runner fills the block tables of those requests only; a request "
        "starting at position 0 reads through a table of zeros, the padding "
        "(engines/metadata.py).",
    ),
    Mutant(
        "radix-leak-chunk-kv",
        "radix",
        "#13: each chunk's KV indices are owned by the prefix tree or freed exactly once",
        "sglang#1858",
        "When a chunk's pages duplicate pages already in the tree, the request switches "
        "to the tree's pages but its own duplicates are never freed: the pool leaks.",
    ),
    Mutant(
        "radix-abort-frees-tree-pages",
        "radix",
        "#14: pages referenced by tree nodes never go back to the free pool",
        "sglang#38355 / sglang#38319",
        "Aborting a request returns every page of its block table to the free pool, "
        "including the pages the tree owns, which are then handed out and overwritten.",
    ),
    Mutant(
        "radix-prefix-not-advanced",
        "radix",
        "#15: a request's prefix indices advance after every chunk, even when the insert "
        "is skipped",
        "sglang#33996 / sglang#36855",
        "When a chunk completes no new page (the tree insert is skipped) the request's "
        "prefix is not advanced: its next chunk restarts at the tree prefix, forever if "
        "chunks are shorter than a page.",
    ),
    Mutant(
        "seq-len-full-prompt",
        "runner",
        "#16: the attention key length of a chunk is num_computed + num_scheduled tokens",
        "nano-vllm 25794a1",
        "The runner's seq_lens of a prefill chunk is the full prompt length, so attention "
        "reads KV slots not written yet (engines/metadata.py).",
    ),
    Mutant(
        "chunk-before-prefix-hit",
        "scheduler",
        "#17: the chunk size is computed after prefix-cache hits are applied",
        "nano-vllm 77dd709",
        "A waiting request's chunk size is computed from num_tokens before the prefix hit "
        "is applied: with a hit the chunk runs past num_tokens and past the block table.",
    ),
    Mutant(
        "never-reject",
        "scheduler",
        "#18: every admitted request finishes while resources allow (liveness)",
        "vllm#39734 / vllm#45387",
        "A request that fits max_model_len but needs more KV blocks than the cache has "
        "is queued instead of rejected: it blocks the head of the waiting queue forever.",
    ),
    Mutant(
        "spec-rollback-off-by-one",
        "scheduler",
        "#1/#10: num_computed_tokens never counts KV that was not really written: with "
        "speculative decoding it rolls back to just after the last accepted draft",
        "vLLM v1 Scheduler.update_from_output: num_computed_tokens -= num_rejected",
        "The rollback after a step with rejected drafts is one token short: "
        "num_computed_tokens counts the first rejected draft's position as computed, so "
        "the bonus token's KV is never written and later steps read the rejected draft's "
        "KV in its slot.",
    ),
    Mutant(
        "cache-rejected-draft-block",
        "scheduler",
        "#3/#10: a block is cached only once its KV is the true KV of its tokens (a "
        "rejected draft's KV never enters the prefix cache)",
        "vLLM v1 allocate_slots caches at most request.num_tokens (drafts excluded)",
        "The blocks a step with drafts filled are cached before the rollback, up to the "
        "tokens the request knows after it: the block holding the bonus token's position "
        "is cached under the hash of the true tokens while its slot holds the rejected "
        "draft's KV; a later request with that prefix reuses it.",
    ),
)

MUTANTS_BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}


def known_names() -> list[str]:
    return sorted(MUTANTS_BY_NAME)


def get_mutant(name: str) -> Mutant:
    mutant = MUTANTS_BY_NAME.get(name)
    if mutant is None:
        raise ValueError(f"unknown mutant {name!r}; known: {', '.join(known_names())}")
    return mutant


# mutants that only act on scheduled drafts: the fuzzer draws speculative decoding for them
SPEC_DECODE_MUTANTS = frozenset({"spec-rollback-off-by-one", "cache-rejected-draft-block"})
