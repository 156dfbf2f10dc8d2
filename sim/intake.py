"""What enters the engine between two steps: the inbox (releases and aborts) and faults.

The arrivals process fills an inbox on the SimPy clock; the loop drains it before each
step, as a serving engine takes new requests and aborts before it schedules::

    inbox:  Release r7, Abort r3, Chunk r9, Release r8    (in the order they happened)
    drain:  r7 -> ledger, drafter, executor, engine.add_request
            r3 -> engine.abort_request, retired as aborted (if still live)
            r9 -> engine.stream_chunk (a later turn's input while its parent runs;
                  queued or not, the turn itself is released when the parent finishes)
            r8 -> ...

A released request is told to the ledger first, the engine last: if the engine raises, the
loop already knows the request (its outputs are reported). Faults (sim/faults.py) fire
after the drain, in the safety phase only.
"""

from __future__ import annotations

from collections.abc import Callable

from schedcheck.engines.protocol import Engine
from schedcheck.sim.arrivals import Abort, Arrivals, Chunk, Release
from schedcheck.sim.coverage import Coverage
from schedcheck.sim.executors import ExecutorParts
from schedcheck.sim.faults import FaultInjector
from schedcheck.sim.ledger import Ledger
from schedcheck.sim.result import call_engine
from schedcheck.sim.speculation import Speculation


class Intake:
    def __init__(
        self,
        arrivals: Arrivals,
        ledger: Ledger,
        engine: Engine,
        executor: ExecutorParts,
        spec: Speculation | None,
        coverage: Coverage,
        faults: FaultInjector,
        now_s: Callable[[], float],
    ) -> None:
        self.arrivals, self.ledger, self.engine = arrivals, ledger, engine
        self.executor, self.spec, self.coverage = executor, spec, coverage
        self.faults, self.now_s = faults, now_s
        # the engine queues a later turn's input sent while its parent runs (vLLM's
        # streaming_queue): the arrivals then send it
        arrivals.streams_chunks = bool(getattr(engine, "streams_chunks", False))

    def drain(self) -> None:
        inbox = self.arrivals.inbox
        for _ in range(len(inbox)):  # bounded: what is queued now
            item = inbox.popleft()
            if isinstance(item, Release):
                self.add(item)
            elif isinstance(item, Abort) and item.request_id in self.ledger.live:
                self.abort(item.request_id)
            elif isinstance(item, Chunk):
                self.stream(item)

    def add(self, release: Release) -> None:
        request = self.ledger.admit(release, self.now_s())
        if self.spec is not None:
            self.spec.add_request(request)
        executor, rid, prompt = self.executor.run, request.request_id, request.prompt_token_ids
        if request.cache_salt is None:  # the tensor executor takes no salt
            executor.add_request(rid, prompt)
        else:
            executor.add_request(rid, prompt, cache_salt=request.cache_salt)
        call_engine("add_request", self.engine.add_request, request)

    def stream(self, chunk: Chunk) -> None:
        """A later turn's input, sent while its parent runs: the arrivals learn whether the
        engine queued it (the turn's history then ends before the parent's last output)."""
        request = self.ledger.chunk(chunk, self.now_s())
        stream_chunk = self.engine.stream_chunk  # type: ignore[attr-defined]
        if call_engine("stream_chunk", stream_chunk, request):
            self.arrivals.accept_chunk(request.request_id)

    def abort(self, request_id: str) -> None:
        self.coverage.observe_abort(request_id)
        call_engine("abort_request", self.engine.abort_request, request_id)
        self.ledger.retire((request_id,), "aborted")

    def inject_faults(self, step: int, fired: list[str]) -> None:
        """This step's faults; abort-mid-chunk picks among the live requests between two
        chunks of their prefill."""

        def mid_prefill() -> list[str]:
            return [rid for rid in self.coverage.mid_prefill_ids() if rid in self.ledger.live]

        self.faults.fire(step, mid_prefill, self.abort, fired)
