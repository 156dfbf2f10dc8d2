"""The catalog of invariants: every name a violation can carry, what it asserts, where.

The names are the ones `Violation.invariant` holds, `--ignore NAME` takes and
`violations.json` records. `docs/gen_reference.py` renders this catalog as the reference
page docs/reference/invariants.md, and tests/docs/test_invariant_catalog.py fails when the
code reports a name that is missing here, or this catalog lists one the code never reports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Invariant:
    name: str
    group: str  # one of GROUPS' names
    checked_in: str  # the module that reports it
    property: str  # what must hold
    reference: str = ""  # a real bug of this class, where one is known


GROUPS: tuple[tuple[str, str], ...] = (
    (
        "protocol",
        "The engine protocol at the boundary (`invariants/protocol.py`): what an engine "
        "returns is well formed before the accounting, the runner metadata and the shadow KV "
        "read it.",
    ),
    (
        "shadow-kv",
        "The shadow KV oracle (`sim/symbolic.py`): every slot holds the identity of the KV "
        "written there; every key an attention kernel would read is compared with the "
        "identity the request expects at that position.",
    ),
    (
        "accounting",
        "Token accounting (`invariants/accounting.py`, and the chunk's tokens in "
        "`sim/symbolic.py`): each step runs each request's next tokens, once, in budget.",
    ),
    (
        "block-pool",
        "The block pool (`invariants/block_pool.py`, writes into shared blocks in "
        "`sim/symbolic.py`): every block accounted for once, cached blocks hold their hash.",
    ),
    (
        "outputs",
        "Outputs (`invariants/outputs.py`), checked when a request finishes.",
    ),
    (
        "run",
        "Findings about the run as a whole rather than one property of one step.",
    ),
)

_SYM = "sim/symbolic.py"
_ACC = "invariants/accounting.py"
_POOL = "invariants/block_pool.py"
_OUT = "invariants/outputs.py"
_PROTO = "invariants/protocol.py"

INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "protocol.unknown-request",
        "protocol",
        _PROTO,
        "every id an output names (scheduled, preempted, finished, rejected) was added",
    ),
    Invariant(
        "protocol.not-live",
        "protocol",
        _PROTO,
        "a scheduled request is live: added, not finished, aborted or rejected",
    ),
    Invariant(
        "protocol.duplicate",
        "protocol",
        _PROTO,
        "no request is scheduled twice in one step, nor reported finished twice",
    ),
    Invariant(
        "protocol.scheduled-and-finished",
        "protocol",
        _PROTO,
        "no scheduled request is also listed finished or rejected",
    ),
    Invariant(
        "protocol.counts",
        "protocol",
        _PROTO,
        "num_computed_tokens >= 0, num_scheduled_tokens >= 1, num_cached_tokens >= 0, "
        "1 <= num_prompt_tokens <= num_tokens",
    ),
    Invariant(
        "protocol.chunk-length",
        "protocol",
        _PROTO,
        "token_ids is a 1-D integer array of exactly num_scheduled_tokens ids",
    ),
    Invariant(
        "protocol.block-id",
        "protocol",
        _PROTO,
        "every block id of a block table or a block copy is in [0, num_gpu_blocks)",
    ),
    Invariant(
        "protocol.rejected-reasons",
        "protocol",
        _PROTO,
        "one reason per rejected id",
    ),
    Invariant(
        "protocol.dropped",
        "protocol",
        _PROTO,
        "every request whose samples in flight are dropped is preempted in the same output "
        "and has a sample in a step in flight",
    ),
    Invariant(
        "protocol.lost-request",
        "protocol",
        _PROTO,
        "when the engine says it has no unfinished request, none it was given is left unreported",
    ),
    Invariant(
        "shadow-kv.read",
        "shadow-kv",
        _SYM,
        "every key a kernel reads holds the KV of that request's position: no stale, foreign, "
        "draft or unwritten entry (the message names who wrote what was found)",
        "vllm#7822 (vLLM 0.6.0 stale KV read)",
    ),
    Invariant(
        "shadow-kv.causal-alignment",
        "shadow-kv",
        _SYM,
        "row r attends exactly keys 0..positions[r]: seq_len = num_computed_tokens + "
        "num_scheduled_tokens, bottom-right aligned",
    ),
    Invariant(
        "shadow-kv.block-table-out-of-bounds",
        "shadow-kv",
        _SYM,
        "no key position is read past the request's block table",
    ),
    Invariant(
        "shadow-kv.read-past-tokens",
        "shadow-kv",
        _SYM,
        "no key position is read past the tokens the request knows",
    ),
    Invariant(
        "shadow-kv.runner-metadata-disagrees",
        "shadow-kv",
        "engines/runner_metadata.py",
        "the runner metadata an engine hands (its own model runner's: vllm-engine) equals "
        "what engines/metadata.py derives from the same SchedulerOutput",
    ),
    Invariant(
        "shadow-kv.write-out-of-bounds",
        "shadow-kv",
        _SYM,
        "every row's slot (and every draft token's lookahead slot) lies in the KV cache and "
        "inside the request's block table",
        "vllm#16370",
    ),
    Invariant(
        "shadow-kv.copy-out-of-bounds",
        "shadow-kv",
        _SYM,
        "a copy-on-write block copy names blocks inside the KV cache",
    ),
    Invariant(
        "shadow-kv.unknown-request",
        "shadow-kv",
        _SYM,
        "only requests that were added are scheduled",
    ),
    Invariant(
        "accounting.budget",
        "accounting",
        _ACC,
        "a step schedules at most max_num_batched_tokens tokens",
    ),
    Invariant(
        "accounting.max-num-seqs",
        "accounting",
        _ACC,
        "a step runs at most max_num_seqs requests",
    ),
    Invariant(
        "accounting.duplicate",
        "accounting",
        _ACC,
        "no request is scheduled twice in one step",
    ),
    Invariant(
        "accounting.range",
        "accounting",
        _ACC,
        "0 <= num_computed_tokens, num_scheduled_tokens >= 1, and num_computed_tokens + "
        "num_scheduled_tokens <= num_tokens",
    ),
    Invariant(
        "accounting.full-hit-cap",
        "accounting",
        _ACC,
        "a fully cached prompt still computes one token (its logits are needed)",
        "vllm#7753",
    ),
    Invariant(
        "accounting.chunk",
        "accounting",
        _ACC,
        "the chunk holds exactly num_scheduled_tokens token ids",
    ),
    Invariant(
        "accounting.chunk-tokens",
        "accounting",
        _SYM,
        "the chunk's token ids are the request's true tokens at those positions",
    ),
    Invariant(
        "accounting.draft-position",
        "accounting",
        _SYM,
        "a request's scheduled draft tokens come right after the tokens it knows "
        "(num_computed + num_scheduled - drafts = num_tokens)",
        "vllm#16370",
    ),
    Invariant(
        "accounting.num-tokens",
        "accounting",
        _ACC,
        "num_tokens equals the tokens the request really has (prompt + outputs)",
    ),
    Invariant(
        "accounting.block-table-short",
        "accounting",
        _ACC,
        "the block table holds at least cdiv(num_computed_tokens + num_scheduled_tokens, "
        "block_size) blocks",
        "vllm#7380 / vllm#7371",
    ),
    Invariant(
        "accounting.max-model-len",
        "accounting",
        _ACC,
        "no position runs at or past max_model_len, and a block table holds at most "
        "cdiv(max_model_len, block_size) blocks (the model runner's block table width)",
    ),
    Invariant(
        "accounting.admission",
        "accounting",
        _ACC,
        "a (re)admitted request starts at its prefix-cache hit length (num_cached_tokens)",
    ),
    Invariant(
        "accounting.contiguity",
        "accounting",
        _ACC,
        "a request's chunks follow each other with no gap or overlap (a forward jump only "
        "when declared a cache hit)",
    ),
    Invariant(
        "accounting.manager-agreement",
        "accounting",
        _ACC,
        "after the update, the KV manager's num_computed_tokens equals the scheduler's",
        "vllm#11186",
    ),
    Invariant(
        "accounting.sample-position",
        "accounting",
        _SYM,
        "a request samples after its last known position, never inside its prompt",
    ),
    Invariant(
        "block-pool.ref-cnt",
        "block-pool",
        _POOL,
        "a block's ref_cnt equals the number of live block tables holding it",
    ),
    Invariant(
        "block-pool.free-queue",
        "block-pool",
        _POOL,
        "the free queue holds each block at most once and only unreferenced ones; no block is lost",
    ),
    Invariant(
        "block-pool.owner",
        "block-pool",
        _POOL,
        "only live requests hold block tables",
    ),
    Invariant(
        "block-pool.cached-unwritten",
        "block-pool",
        _POOL,
        "a block in the prefix cache was fully written, and where the engine says what its "
        "hash names (vLLM v1), written with those tokens' KV",
        "vllm#7822, vllm#7753",
    ),
    Invariant(
        "block-pool.hash-content",
        "block-pool",
        _POOL,
        "equal block hashes name equal content (the block's tokens, every token before it, "
        "the cache salt)",
        "vllm#12621",
    ),
    Invariant(
        "block-pool.write-into-shared-block",
        "block-pool",
        _SYM,
        "no write (a row's, a draft's, a block copy's) lands in KV another live request reads",
    ),
    Invariant(
        "block-pool.leak",
        "block-pool",
        _POOL,
        "once every request has finished, no block is referenced",
    ),
    Invariant(
        "block-pool.idle-leak",
        "block-pool",
        _POOL,
        "once the engine runs nothing, its own idle statement holds (SGLang: available + "
        "evictable == total, nothing protected in the radix tree)",
    ),
    Invariant(
        "outputs.returned",
        "outputs",
        _OUT,
        "a finished request returns exactly the tokens sampled for it",
    ),
    Invariant(
        "outputs.length",
        "outputs",
        _OUT,
        "a request finished for 'length' has min(max_tokens, max_model_len - prompt) outputs",
        "vllm#16445",
    ),
    Invariant(
        "outputs.stop",
        "outputs",
        _OUT,
        "with the model's EOS, a request finished for 'stop' ends with it, one finished for "
        "'length' does not, and none returns a token past its first EOS",
    ),
    Invariant(
        "outputs.unchunked",
        "outputs",
        _OUT,
        "the outputs equal the request's run alone, its whole prompt in one forward, no cache",
    ),
    Invariant(
        "engine-crash",
        "run",
        "sim/loop.py",
        "the engine under test raises no exception (the traceback is the finding)",
        "vllm#7371",
    ),
    Invariant(
        "liveness",
        "run",
        "sim/loop.py",
        "no stall while requests wait, and every request finishes within a bound after the "
        "last arrival; else exit 3 naming each stuck request and the engine's reason",
    ),
    Invariant(
        "harness-crash",
        "run",
        "sim/loop.py",
        "the simulator itself raises no exception (a finding against the harness, with its "
        "traceback, replayable from its bundle)",
    ),
    Invariant(
        "diff.outputs",
        "run",
        "sim/diff.py",
        "`schedcheck diff`: two engines give every request the same outputs",
    ),
)

INVARIANTS_BY_NAME: dict[str, Invariant] = {i.name: i for i in INVARIANTS}
assert len(INVARIANTS_BY_NAME) == len(INVARIANTS), "invariant names are unique"
assert {i.group for i in INVARIANTS} <= {g for g, _ in GROUPS}, "every group is described"
