"""How fast this machine is right now, on one core (a measurement to read timings by, never an assertion).

    python benchmarks/machine_speed.py [--repeats 5]

This project's machines are shared hosts whose speed drifts: the same `make run` took 11-19 min on
different days with identical results. Two fixed single-threaded workloads, the kind the methods
spend their time in, make timings from different days comparable: a small Conv1d/MLP network
trained with Adam (torch fwd/bwd) and a pure-Python loop (orchestration, data handling). The best of
``--repeats`` is the machine's speed; the spread says how noisy it is at the moment.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

TORCH_WORKLOAD = """
import time, torch
torch.set_num_threads(1); torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv1d(64, 64, 5, padding=2), torch.nn.Mish(), torch.nn.Conv1d(64, 64, 5, padding=2),
                          torch.nn.Flatten(), torch.nn.Linear(64 * 32, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
x, y = torch.randn(64, 64, 32), torch.randn(64, 1)
opt = torch.optim.Adam(net.parameters())
start = time.perf_counter()
for _ in range(150):
    opt.zero_grad(); torch.nn.functional.mse_loss(net(x), y).backward(); opt.step()
print(time.perf_counter() - start)
"""

PYTHON_WORKLOAD = """
import time
start = time.perf_counter(); total = 0
for i in range(10_000_000):
    total += i * i % 7
print(time.perf_counter() - start)
"""


def timed(code: str) -> float:
    """Seconds one fresh interpreter reports for ``code`` (imports excluded)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| workload (one core) | best s | median s | worst s |\n|---|---|---|---|")
    for name, code in (
        ("torch Conv1d/MLP + Adam, 150 steps", TORCH_WORKLOAD),
        ("pure-Python loop, 10M", PYTHON_WORKLOAD),
    ):
        runs = [timed(code) for _ in range(args.repeats)]
        print(f"| {name} | {min(runs):.2f} | {statistics.median(runs):.2f} | {max(runs):.2f} |")


if __name__ == "__main__":
    main()
