"""How fast this machine is for the methods' kinds of work, and what a run will take on it.

The reference workload times, on one core, the kinds of work the methods spend their time in: small
and mid-sized GEMMs, 1-D/2-D/3-D convolutions, small-batch MLP training with Adam, and a pure-Python
loop (orchestration, environment steps, data handling). Each method's recorded default cost (CPU
seconds at default scale on the host where it was measured, with that host's reference timings) is
scaled by the ratio of this machine's timings to the recording host's, weighted by the method's mix of
those kinds of work; ``predict`` then schedules the methods longest-first on the workers.
``benchmarks/machine_speed.py`` prints the full table; ``paperline run --all`` prints the prediction
before it starts. A measurement to read timings by, never an assertion.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

KINDS = ("gemm", "conv", "adam", "python")


def _timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: allocation, kernel selection
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return time.perf_counter() - start


def reference(rounds: int = 3) -> dict[str, float]:
    """Seconds each kind of work takes here on one thread (the median of ``rounds``); ~1.5 s per round."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        a64, b64 = torch.randn(64, 256, generator=g), torch.randn(256, 256, generator=g)
        a512, b512 = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
        x1, c1 = torch.randn(32, 64, 128, generator=g), torch.nn.Conv1d(64, 64, 5, padding=2)
        x2, c2 = torch.randn(8, 32, 32, 32, generator=g), torch.nn.Conv2d(32, 32, 3, padding=1)
        x3, c3 = torch.randn(2, 16, 16, 16, 16, generator=g), torch.nn.Conv3d(16, 16, 3, padding=1)
        net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        xb = torch.randn(32, 128, generator=g)

        def gemm() -> None:
            for _ in range(40):
                a64 @ b64
            a512 @ b512

        def conv() -> None:
            with torch.no_grad():
                c1(x1), c2(x2), c3(x3)

        def adam() -> None:
            opt.zero_grad()
            net(xb).square().mean().backward()
            opt.step()

        def python() -> None:
            total = 0
            for i in range(200_000):
                total += i * i % 7

        work = {"gemm": (gemm, 20), "conv": (conv, 10), "adam": (adam, 200), "python": (python, 3)}
        runs = {kind: [_timed(fn, n) for _ in range(rounds)] for kind, (fn, n) in work.items()}
    finally:
        torch.set_num_threads(threads)
    return {kind: statistics.median(times) for kind, times in runs.items()}


@dataclass(frozen=True)
class MethodCost:
    """A method's recorded default cost: CPU seconds on one core, on a host with ``reference`` timings,
    and the shares of that time by kind of work (they sum to 1)."""

    seconds: float
    mix: Mapping[str, float]


def scaled_seconds(cost: MethodCost, recorded: Mapping[str, float], here: Mapping[str, float]) -> float:
    """``cost`` moved from the recording host to this one: each kind's share scaled by its speed ratio."""
    return cost.seconds * sum(share * here[kind] / recorded[kind] for kind, share in cost.mix.items())


@dataclass(frozen=True)
class Prediction:
    wall_seconds: float
    per_method: dict[str, float]  # predicted seconds of each method, as it runs beside the others
    speed_ratio: float  # this machine's reference time over the recording host's (>1: slower)


def predict(
    costs: Mapping[str, MethodCost],
    recorded: Mapping[str, float],
    here: Mapping[str, float],
    methods: Sequence[str],
    workers: int,
    overhead_seconds: float = 8.0,
    startup_seconds: float = 30.0,
    contention: float = 1.3,
) -> Prediction:
    """The wall time of running ``methods`` on ``workers`` single-threaded workers, longest first: each
    method's scaled cost, x ``contention`` when another method shares the machine (measured 1.3x with two
    at a time on two cores), plus its per-method orchestration ``overhead_seconds``."""
    slow = contention if workers > 1 and len(methods) > 1 else 1.0
    per = {
        m: scaled_seconds(costs[m], recorded, here) * slow + overhead_seconds if m in costs else overhead_seconds
        for m in methods
    }
    finish = [0.0] * max(1, min(workers, len(methods)))
    heapq.heapify(finish)
    for m in sorted(methods, key=lambda m: -per[m]):
        heapq.heappush(finish, heapq.heappop(finish) + per[m])
    ratio = statistics.geometric_mean([here[k] / recorded[k] for k in KINDS])
    return Prediction(startup_seconds + max(finish), per, ratio)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


__all__ = ["KINDS", "MethodCost", "Prediction", "minutes", "predict", "reference", "scaled_seconds"]
