"""invariants/outputs.py: what a finished request returns."""

import numpy as np

from schedcheck.engines.protocol import FinishedRequest
from schedcheck.invariants import hash_model
from schedcheck.invariants.outputs import check_finished

VOCAB = 1000


def _finish(prompt: np.ndarray, n: int, reason: str = "length"):
    sampled = hash_model.unchunked_outputs(prompt, n, VOCAB, 0)
    return FinishedRequest("r0", tuple(int(t) for t in sampled), reason), sampled


def test_length_means_max_tokens_outputs():
    prompt = np.arange(10, dtype=np.int64)
    finished, sampled = _finish(prompt, 3)
    assert check_finished(5, finished, prompt, sampled, 3, VOCAB) == []
    [v] = check_finished(5, finished, prompt, sampled, 4, VOCAB)
    assert (v.invariant, v.request_id, v.expected, v.found) == ("outputs.length", "r0", "4", "3")


def test_max_model_len_may_stop_a_request_first():
    prompt = np.arange(10, dtype=np.int64)
    finished, sampled = _finish(prompt, 2)  # 10 + 2 = max_model_len 12
    assert check_finished(5, finished, prompt, sampled, 8, VOCAB, max_model_len=12) == []
    [v] = check_finished(5, finished, prompt, sampled, 8, VOCAB, max_model_len=13)
    assert (v.expected, v.found) == ("3", "2")


def test_a_prompt_past_max_model_len_has_no_room_for_outputs():
    prompt = np.arange(10, dtype=np.int64)
    finished, sampled = _finish(prompt, 1)
    [v] = check_finished(5, finished, prompt, sampled, 8, VOCAB, max_model_len=8)
    assert (v.invariant, v.expected, v.found) == ("outputs.length", "-2", "1")


def test_returned_tokens_must_be_the_sampled_ones():
    prompt = np.arange(10, dtype=np.int64)
    finished, sampled = _finish(prompt, 3)
    other = sampled.copy()
    other[1] = (other[1] + 1) % VOCAB
    out = check_finished(5, finished, prompt, other, 3, VOCAB)
    assert [v.invariant for v in out] == ["outputs.returned", "outputs.unchunked"]
    assert out[0].position == 11 and out[1].position == 11


def test_returned_tokens_compared_as_ints_whatever_their_type_and_length():
    prompt = np.arange(10, dtype=np.int64)
    finished, sampled = _finish(prompt, 3)
    as_numpy = FinishedRequest("r0", tuple(np.int32(t) for t in sampled), "length")
    assert check_finished(5, as_numpy, prompt, sampled, 3, VOCAB) == []
    short = FinishedRequest("r0", finished.output_token_ids[:2], "abort")
    [v] = check_finished(5, short, prompt, sampled, 3, VOCAB)
    assert (v.invariant, v.position, v.expected, v.found) == (
        "outputs.returned",
        12,
        str(int(sampled[2])),
        "end",
    )
