"""Ray, the distributed engine campaigns and sweeps run on beyond one machine.

The only place schedcheck imports ray, lazily (`pip install 'schedcheck[ray]'`, an optional
extra): without it, `--ray` is bad usage (exit 2) with the install hint. Tasks take and
return plain data and are retried by Ray when their node is lost (`max_retries`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

TASK_RETRIES = 5  # a task lost with its node is run again this many times at most
LOOPBACK = "127.0.0.1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
RAY_CLUSTER_MODE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # read once, when ray is imported
INSTALL_HINT = "Ray is not installed: pip install 'schedcheck[ray]' (or: tox -e ray)"


class RayMissing(RuntimeError):
    """`--ray` without ray installed."""


def import_ray(address: str | None = None) -> Any:
    """ray, imported for `address` (None: a local Ray); RayMissing without it."""
    if address is None or address.split(":")[0] in LOOPBACK_HOSTS:
        # Ray rewrites 127.0.0.1 into the machine's outward address (and listens there)
        # unless its multi-machine mode is off; a Ray of this machine keeps to loopback
        os.environ.setdefault(RAY_CLUSTER_MODE, "0")
    try:
        import ray
    except ImportError:
        raise RayMissing(INSTALL_HINT) from None
    return ray


def connect(address: str | None) -> Any:
    """ray.init: a local Ray for None, else `auto` or HOST:PORT of a running cluster."""
    ray = import_ray(address)
    if ray.is_initialized():
        return ray
    if address is None:  # a Ray of this machine alone: it listens on the loopback address
        ray.init(_node_ip_address=LOOPBACK, log_to_driver=False, include_dashboard=False)
    else:
        ray.init(address=address, log_to_driver=False)
    return ray


def remote(ray: Any, fn: Any) -> Any:
    """`fn` as a Ray task that is run again elsewhere when its node is lost."""
    return ray.remote(max_retries=TASK_RETRIES)(fn)


def sweep_runner(address: str | None, workers: int) -> Any:
    """A sweep's point runner (fuzz/sweep.py) with `workers` points in flight on Ray."""
    from schedcheck.fuzz.sweep import run_point

    def runner(job: Any, work: list[tuple[Any, Any]]) -> Iterator[dict[str, Any]]:
        ray = connect(address)
        task = remote(ray, run_point)
        pending = list(reversed(work))
        in_flight: list[Any] = []
        while pending or in_flight:  # bounded: each point is submitted once
            while pending and len(in_flight) < workers:
                point, requests = pending.pop()
                in_flight.append(task.remote(job, point, ray.put(requests)))
            done, in_flight = ray.wait(in_flight, num_returns=1)
            yield from ray.get(done)

    return runner
