"""Delta debugging: exact minimal results on synthetic predicates, bounded tests, valid
subtraces, and a bundle of a real failure shrunk to the requests that matter."""

from schedcheck.engines.protocol import EngineConfig
from schedcheck.fuzz.ddmin import ddmin, subtrace
from schedcheck.fuzz.shrink import shrink_bundle
from schedcheck.sim.bundles import save_bundle
from schedcheck.sim.cost_model import profile
from schedcheck.sim.loop import SimOptions, run
from schedcheck.traces.schema import TraceRequest


def test_ddmin_finds_exactly_the_two_items_that_matter():
    calls = []

    def fails(items):
        calls.append(items)
        return 3 in items and 17 in items

    assert ddmin(list(range(20)), fails) == (3, 17)
    assert len(calls) == len(set(calls)), "no subsequence is tested twice"


def test_ddmin_keeps_order_and_returns_a_single_culprit():
    assert ddmin("abcdefgh", lambda s: "f" in s) == ("f",)
    assert ddmin([5, 1, 4, 2], lambda s: 1 in s and 2 in s) == (1, 2)


def test_ddmin_result_is_one_minimal_for_a_non_monotone_predicate():
    def fails(items):  # an even count of odd numbers, at least two
        odd = [i for i in items if i % 2]
        return len(odd) >= 2 and len(odd) % 2 == 0

    result = ddmin(list(range(12)), fails)
    assert fails(result) and len(result) == 2
    assert all(not fails(result[:i] + result[i + 1 :]) for i in range(len(result)))


def test_ddmin_stops_after_tests_max():
    calls = []
    ddmin(list(range(64)), lambda s: calls.append(s) or len(s) > 40, tests_max=5)
    assert len(calls) <= 5


def _req(rid, parent=None, arrival=0.0, tokens=(5, 6, 7)):
    return TraceRequest(
        rid,
        arrival,
        3,
        prompt_token_ids=tokens,
        parent_request_id=parent,
        think_time_s=0.5 if parent else 0.0,
    )


def test_subtrace_drops_parents_that_were_removed():
    trace = subtrace([_req("a"), _req("c", parent="b"), _req("d", parent="a")])
    assert [(r.request_id, r.parent_request_id, r.think_time_s) for r in trace] == [
        ("a", None, 0.0),
        ("c", None, 0.0),
        ("d", "a", 0.5),
    ]


def test_a_failing_bundle_shrinks_to_the_request_that_fails(tmp_path):
    # The stale-token toy engine feeds a wrong token once a request decodes: any one request
    # fails, so 6 requests shrink to 1 (every request after the violation is cut first).
    trace = [_req(f"r{i}", arrival=0.01 * i, tokens=tuple(range(3, 12 + i))) for i in range(6)]
    cfg = EngineConfig(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=8)
    result = run(trace, "toy_engine:make_stale_token_engine", cfg, SimOptions(), profile("unit"))
    assert result.violations
    bundle = save_bundle(tmp_path / "big", result)
    small, before, after = shrink_bundle(bundle, tmp_path / "small")
    assert before >= 2 and after == 1  # the bundle holds the requests read before it stopped
    assert (small / "trace.jsonl").read_text().count("\n") == 1


def test_shrinking_never_tightens_the_pool_below_one_request_in_every_group():
    # 7 prompt + 2 output tokens: the reference engine holds KV for 8 of them, 10 with two
    # draft slots: 3 blocks of 4 in each of two KV-cache groups = 6 blocks, no spare. Any
    # fewer is a request larger than the pool, which the swarm never draws; the shrinker
    # once counted neither the drafts nor the second group, and tightened this to 2.
    from schedcheck.fuzz.scenario import Scenario
    from schedcheck.fuzz.shrink import shrink_scenario

    request = TraceRequest("r0", 0.0, 2, prompt_token_ids=tuple(range(1000, 1007)))
    config = EngineConfig(
        block_size=4,
        num_gpu_blocks=40,
        max_num_batched_tokens=16,
        max_num_seqs=4,
        num_speculative_tokens=2,
        kv_groups="full,sliding:4",
    )
    scenario = Scenario("reference", (request,), config)
    tried = []

    def fails(candidate):
        tried.append(candidate.config.num_gpu_blocks)
        return True

    shrunk = shrink_scenario(scenario, fails)
    assert shrunk.config.num_gpu_blocks == 6
    assert min(tried) == 6
