"""The bundled corpus is exactly what its README's command makes from the real trace."""

from __future__ import annotations

import io
from pathlib import Path

from schedcheck.traces import iter_trace, read_trace, write_trace

CORPUS = Path(__file__).resolve().parents[2] / "traces/corpus/mooncake_conversation_first200.jsonl"


def test_corpus_is_the_first_200_mooncake_requests(real_traces: Path) -> None:
    fresh = io.StringIO()
    source = real_traces / "mooncake/conversation_trace.jsonl.xz"
    assert write_trace(fresh, iter_trace(source, "mooncake", max_requests=200)) == 200
    assert CORPUS.read_text(encoding="utf-8") == fresh.getvalue()


def test_corpus_is_small_and_valid() -> None:
    assert CORPUS.stat().st_size < 300_000
    requests = list(read_trace(CORPUS))
    assert len(requests) == 200
    assert requests[-1].arrival_time_s == 72.0
    readme = (CORPUS.parent / "README.md").read_text().splitlines()
    (row,) = [line for line in readme if line.startswith(f"| `{CORPUS.name}` |")]
    assert "kvcache-ai/Mooncake @ 3b5a5941" in row  # the slice names its source
