"""Diagnostic for check (iv): per independent replicate of the toy's ARS arms, the mean raw reward r̄_i of
each task's buffer (divided by kappa_i) and the Eq. (6) scales c_i at T_init and at the first reset, with
the success per task just before the reset and at the end.

Replicates are members of one batched run (each has its own random phase, networks and buffers):

    python -m models.ars.diagnose --arms ars,ars,ars,scale_only,mtsac [--scale default] [--seed 0] \
        [--set toy.sac.shared_alpha=false]

On the toy, r̄_i / kappa_i is a measure of how much of task i the policy has learned, so c_i / (kappa_1 /
kappa_i) = max_j(r̄_j) / (r̄_i kappa_1 / kappa_i) is within 2x only if all tasks were learned about equally.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from . import SPEC


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="ars,ars,ars,scale_only,scale_only,mtsac")
    parser.add_argument("--scale", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="config override")
    args = parser.parse_args(argv)
    from . import pipeline as P

    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    cfg = SPEC.make_config(args.scale, {**overrides, "seed": args.seed, "toy.eval_every": 10**9})
    t, arms = cfg.toy, args.arms.split(",")
    P.set_threads()
    kappa = np.array([t.kappa] * len(arms))
    env = P.PointMassTasks(kappa, t.episode_len, t.success_radius, cfg.seed)
    pre: dict[int, np.ndarray] = {}
    success = lambda sac, seed: P.toy_success(sac.actor, kappa, cfg, seed)
    start = time.time()
    sac, _, log = P.run_ars(
        env,
        arms,
        t.sac,
        t.scaling,
        t.t_init,
        t.rounds,
        t.reset_every,
        2 + len(t.kappa),
        2,
        cfg.seed,
        before_reset=lambda s, step: pre.setdefault(step, success(s, cfg.seed + 10_000)),
    )
    final = success(sac, cfg.seed + 20_000)
    print(
        f"{time.time() - start:.0f} s; rounds {t.rounds}, T_init {t.t_init}, reset every {t.reset_every}, "
        f"hidden {t.sac.hidden}, shared alpha {t.sac.shared_alpha}, kappa {t.kappa}"
    )
    k = np.array(t.kappa)
    expected = k.max() / k
    fmt = lambda x, p=2: "[" + ", ".join(f"{v:.{p}g}" for v in x) + "]"
    for e, arm in enumerate(arms):
        print(f"member {e} ({arm})")
        for event in ("init", "reset"):
            rows = [r for r in log.scales if r["member"] == e and r["event"] == event][: len(k)]
            if rows and P.ARM_FLAGS[arm][0]:
                rbar, c = np.array([r["stat"] for r in rows]), np.array([r["c_i"] for r in rows])
                worst = np.max(np.maximum(c / expected, expected / c))
                print(
                    f"  {event:5s} at round {rows[0]['env_step']}: rbar/kappa {fmt(rbar / k)}  c {fmt(c, 4)}  "
                    f"c/(k1/ki) {fmt(c / expected)}  worst {worst:.1f}x"
                )
        if pre:
            print(f"  success before the reset {fmt(pre[min(pre)][e])}")
        print(f"  final success {fmt(final[e])}  mean {final[e].mean():.2f}  worst task {final[e].min():.2f}")


if __name__ == "__main__":
    main()
