"""Waiting queues: FCFS (a deque) and priority (a heap), vLLM v1's two policies.

FCFS: new requests join the tail; a preempted request goes back to the head, so it is the
first to be re-admitted. Priority: ordered by (priority, arrival_time_s, arrival order);
lower priority value = more important (vLLM's convention); a preempted request is simply
pushed back. Ties never fall through to comparing Request objects.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from schedcheck.engines.reference.request import Request


class RequestQueue(Protocol):
    def add(self, request: Request) -> None: ...

    def prepend(self, request: Request) -> None:
        """Re-queue a preempted request."""
        ...

    def peek(self) -> Request: ...

    def pop(self) -> Request: ...

    def remove(self, request: Request) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Request]:
        """Requests in the order they would be admitted."""
        ...


class FCFSQueue:
    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._queue.append(request)

    def prepend(self, request: Request) -> None:
        self._queue.appendleft(request)

    def peek(self) -> Request:
        return self._queue[0]

    def pop(self) -> Request:
        return self._queue.popleft()

    def remove(self, request: Request) -> None:
        self._queue.remove(request)  # identity: Request defines no __eq__

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class PriorityQueue:
    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []

    def add(self, request: Request) -> None:
        entry = (request.priority, request.arrival_time_s, request.arrival_seq, request)
        heapq.heappush(self._heap, entry)

    def prepend(self, request: Request) -> None:
        self.add(request)

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        self._heap = [e for e in self._heap if e[3] is not request]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (entry[3] for entry in sorted(self._heap, key=lambda e: e[:3]))


POLICIES = ("fcfs", "priority")  # EngineConfig.extra["policy"]; the first is the default


def make_queue(policy: str) -> RequestQueue:
    if policy == "fcfs":
        return FCFSQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}: use 'fcfs' or 'priority'")
