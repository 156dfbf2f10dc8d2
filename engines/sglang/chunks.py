"""One SGLang batch read as its requests' chunks, in batch order: where each chunk starts,
how many tokens it runs, which tokens, and the KV slots its kernel writes.

    extend:  num_computed = prefix_lens[i], num_scheduled = extend_lens[i], the batch's own
             prefill_input_ids_cpu
    decode:  num_computed = seq_lens[i] - 1, num_scheduled = 1, the last output token, which
             SGLang's forward relays through its future map; PLACEHOLDER_TOKEN_ID while
             the step that samples it is still in flight (overlap scheduling)
    mixed:   (--enable-mixed-chunk: ScheduleBatch.mix_with_running) the extend rows, then the
             running batch's decode rows (`decoding_reqs`), each read as a decode: SGLang
             appends prefix seq_len - 1 and extend length 1 to prefix_lens / extend_lens,
             but their tokens are not in prefill_input_ids_cpu (mix_with_running sets
             input_ids None; the forward reads them from the future map)
    written: the batch's out_cache_loc, cut per request (mixed: the extend rows' slots,
             then the decode rows' one slot each, as mix_with_running concatenates them)

        mixed batch  reqs          p0 p1 | d0 d1        (p: extend rows, d: decoding_reqs)
                     prefix_lens   0  4  | 6  9         d: seq_len - 1
                     extend_lens   3  4  | 1  1
                     input ids     prefill_input_ids_cpu (7) | token_at(d0, 6), token_at(d1, 9)
                     out_cache_loc p0's 3, p1's 4 | d0's 1, d1's 1
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from schedcheck.engines.protocol import PLACEHOLDER_TOKEN_ID


class Chunk(NamedTuple):
    req: Any  # SGLang's Req
    num_computed_tokens: int
    num_scheduled_tokens: int
    token_ids: np.ndarray  # read-only
    written: np.ndarray  # the slots the kernel writes the chunk's KV to

    @property
    def num_tokens(self) -> int:
        """Prompt + outputs; under overlap a decode's token in flight counts (its end)."""
        req = self.req
        num_end_tokens = self.num_computed_tokens + self.num_scheduled_tokens
        return max(len(req.origin_input_ids) + len(req.output_ids), num_end_tokens)


def batch_chunks(batch: Any) -> list[Chunk]:
    reqs = batch.reqs
    if batch.forward_mode.is_extend():
        starts, counts = list(batch.prefix_lens), list(batch.extend_lens)
        input_ids = batch.prefill_input_ids_cpu.numpy().astype(np.int64)
        if batch.forward_mode.is_mixed():
            input_ids = np.concatenate([input_ids, _decode_ids(batch, starts, counts)])
    else:
        starts = [int(n) - 1 for n in batch.seq_lens.tolist()]
        counts = [1] * len(reqs)
        input_ids = decode_input_ids(reqs, starts)
    input_ids.flags.writeable = False
    written = batch.out_cache_loc.numpy().astype(np.int64)
    assert input_ids.size == written.size == sum(counts), "batch sizes disagree"
    bounds = np.cumsum([0, *counts]).tolist()  # chunk i: [bounds[i], bounds[i + 1])
    return [
        Chunk(req, start, count, input_ids[a : a + count], written[a : a + count])
        for req, start, count, a in zip(reqs, starts, counts, bounds[:-1], strict=True)
    ]


def decode_input_ids(reqs: list[Any], starts: list[int]) -> np.ndarray:
    """Each decoding request's last token (at its start), as the future map relays it."""
    positions = zip(reqs, starts, strict=True)
    return np.fromiter((token_at(r, p) for r, p in positions), np.int64, len(reqs))


def _decode_ids(batch: Any, starts: list[int], counts: list[int]) -> np.ndarray:
    """A mixed batch's decode rows (its tail, `decoding_reqs`): 1 token each, at
    seq_len - 1, read as a decode batch's."""
    num_decoding = len(batch.decoding_reqs)
    first = len(batch.reqs) - num_decoding
    assert batch.reqs[first:] == batch.decoding_reqs, "the decode rows are the batch's tail"
    assert counts[first:] == [1] * num_decoding, "a mixed decode row runs one token"
    seq_lens = batch.seq_lens.tolist()[first:]
    assert starts[first:] == [n - 1 for n in seq_lens], "a decode row starts at seq_len - 1"
    return decode_input_ids(batch.decoding_reqs, starts[first:])


def token_at(req: Any, position: int) -> int:
    """The output token at `position`, or PLACEHOLDER_TOKEN_ID while in flight."""
    index = position - len(req.origin_input_ids)
    return int(req.output_ids[index]) if index < len(req.output_ids) else PLACEHOLDER_TOKEN_ID


def check_written(request_id: str, chunk: Chunk, slots: tuple[int, ...]) -> None:
    """The chunk's slots in the request's row (where attention reads) must be where the
    kernel writes (the batch's out_cache_loc)."""
    start = chunk.num_computed_tokens
    end = start + chunk.num_scheduled_tokens
    if list(slots[start:end]) != chunk.written.tolist():
        raise AssertionError(
            f"{request_id}: out_cache_loc {chunk.written.tolist()[:8]}... (where the kernel "
            f"writes) differs from req_to_token[{chunk.req.kv.req_pool_idx}, {start}:{end}] "
            f"{list(slots[start:end])[:8]}... (where attention reads)"
        )
