"""Sleeping Reinforcement Learning (Drago, Mussi, Metelli; ICML 2025, OpenReview U7c1DqiPTl).

Episodic tabular RL where only a subset B_h of the actions is available at each stage, revealed
at that stage and drawn from a distribution that depends on the state only. SleepingUCBVI
learns that distribution and plans with V_h(s) = E_B[max_{a in B} Q_h(s, a)] + bonus, reaching
the availability-aware optimum V*; availability-agnostic UCBVI can only reach the best policy
that ignores B (V*_agnostic). Re-implemented from the official code marcomussi/SleepingRL
(``env.py``, ``agents.py``, ``sleepingagents.py``, ``parallel_runner.py``, ``configs/*.json``,
HEAD ee30048) on its StochasticFrozenLake benchmark.

Deliberate deviations (and why):
  * Exploration bonuses of both algorithms are multiplied by ``bonus_scale`` (beta = 0.1 at the
    default scale, 1 = theory constants at paper scale): with beta = 1 learning needs ~80k
    episodes, far beyond the 5,000 of the CPU budget.
  * The variance inside the bonuses is the true empirical variance (P^.V^2 - (P^.V)^2 and its
    analogue over C^) by default; the official ``np.std(P^ * V)**2`` quirk is kept behind
    ``variance_quirk=True``.
  * References are exact dynamic-programming values (V* and the best availability-agnostic
    value) instead of the repository's Monte-Carlo run of a hand-written policy; regret is
    measured against the exact V*. The exact value of each final greedy policy is reported too.
  * Availability is drawn from its exact per-state distribution C(B | s) instead of regenerating
    the whole lake; the two are equal in distribution (tested against a literal lake sampler).
  * All (setting, seed) runs of one algorithm are batched in one vectorised loop (states
    zero-padded); each run has its own random stream seeded by (seed, setting name), shared by
    both algorithms (common random numbers).
  * Reward curves are smoothed over 100 episodes at default scale (1,000 at paper scale, as in
    the repository) because K = 5,000.
  * Per-episode disclosure and Markovian availability (not in the official code) are not run.
  * The registered model is SleepingUCBVI's greedy policy on the main setting, seed ``cfg.seed``.

Claim check (docs/methods/sleeping_rl.md): on each main/second setting, criteria (i) |last-10% reward - V*| <= 0.3 (the mean's
t-interval mapped through |.|), (ii) UCBVI's last-10% reward - V*_agnostic <= 0.3 and (iii) the per-seed
gap (SleepingUCBVI - UCBVI) / (V* - V*_agnostic) >= 0.5, each with a 95 % t-interval over the
paired seeds (units ``seed<k>`` of ``last10_reward_<setting>``); the claim holds when all six hold. Negative
control: UCBVI's runs scored as SleepingUCBVI by criterion (i) on the main setting (it must fail). The verdict
is decided at beta = ``bonus_scale``; the same criteria at every beta of ``beta_sweep`` are reported beside it and
the statement names the betas where all of them hold (regret curves per beta in the plots).
"""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path

import numpy as np

from models.base import (
    ClaimResult,
    Control,
    Criterion,
    DatasetRef,
    Metrics,
    Scale,
    Separation,
    TrainedArtifacts,
    dataset_meta,
    user_data_path,
    write_manifest,
)
from models.common import verdicts as V
from models.common.evidence import record_fit
from models.common.runtime import show_progress
from models.common.units import UnitValues

from .algorithm import AGENTS, VARIANTS, GreedyPolicy, RunBatch, train_agent
from .config import Config, Setting
from .data import (
    SleepingMDP,
    agnostic_policy_value,
    agnostic_values,
    frozen_lake,
    optimal_values,
    read_official_config,
    sleeping_policy_value,
)
from .plots import plot_beta_sweep, plot_regret, plot_regret_by_beta, plot_rewards

LAST_FRACTION = 0.1  # the claim's "last 10 % of episodes"
TOLERANCE = 0.3  # the 0.3 of criteria (i), (ii) and (iv) (docs/methods/sleeping_rl.md)
# The fit record of a fixed K-episode run (for the "still improving" diagnostic): its learning curve read as
# FIT_BLOCKS block means, the best block the last one that beat the best before it by more than FIT_Z standard
# errors of the difference (docs/methods/sleeping_rl.md; a fixed 0.1-reward step counted plateau noise as learning).
FIT_BLOCKS, FIT_Z = 10, 2.0
# The random draws a unit varies: each seed is one run's own stream of availability and transition draws, shared
# by both algorithms (common random numbers).
COVERS = ("run seed (availability and transition draws)",)
# Exact DP values (H = 10) from the table in docs/methods/sleeping_rl.md: (V*, V*_agnostic) per (grid, safe probability).
BRIEF_TABLE = {
    (2, 0.25): (7.72, 6.23), (2, 0.5): (8.67, 8.00), (2, 1.0): (9.00, 9.00),
    (3, 0.25): (3.07, 1.30), (3, 0.5): (5.78, 4.13), (3, 1.0): (7.00, 7.00),
    (4, 0.25): (0.62, 0.10), (4, 1.0): (5.00, 5.00),
}  # fmt: skip

# ----------------------------------------------------------------------------- data


def _role(grid: int, safe_prob: float) -> str:
    return {(2, 0.25): "main", (3, 0.5): "second"}.get((grid, safe_prob), "control" if safe_prob == 1.0 else "extra")


def resolve_settings(cfg: Config) -> tuple[list[Setting], int, dict]:
    """The settings to run and their horizon: from the config, or from official ``configs/*.json``."""
    if not cfg.data.official_config_dir:
        return list(cfg.data.settings), cfg.data.horizon, {}
    files = sorted(user_data_path(cfg.data.official_config_dir).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no official configs (*.json) in {cfg.data.official_config_dir}")
    official = {f.name: read_official_config(f) for f in files}
    horizons = {c.horizon for c in official.values()}
    if len(horizons) != 1:
        raise ValueError(f"official configs mix horizons {sorted(horizons)}; one run needs a single H")
    settings, seen = [], set()
    for c in official.values():
        name = f"g{c.grid}_p{f'{c.no_hole_prob:g}'.replace('.', '')}"
        if name not in seen:  # e.g. the K=100k and K=200k files of one setting
            seen.add(name)
            settings.append(
                Setting(name=name, grid=c.grid, safe_prob=c.no_hole_prob, role=_role(c.grid, c.no_hole_prob))
            )
    noted = {
        name: {"K": c.episodes, "n_trials": c.n_trials, "algorithms": list(c.algorithms)}
        for name, c in official.items()
    }
    return settings, horizons.pop(), noted


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    """Write each environment (P, R, C) and its exact V*, V*_agnostic; the lake is generated, not data."""
    data_dir = Path(data_dir)
    settings, horizon, official = resolve_settings(cfg)
    records = []
    (data_dir / "envs").mkdir()
    for s in settings:
        mdp = frozen_lake(s.grid, s.safe_prob, horizon)
        v_star, q_star = optimal_values(mdp)
        v_agn, q_agn = agnostic_values(mdp)
        arrays = mdp.arrays() | {"v_star": v_star, "q_star": q_star, "v_agnostic": v_agn, "q_agnostic": q_agn}
        # JSON, not npz: a zip member carries a timestamp, and the data must be byte-identical per seed.
        (data_dir / "envs" / f"{s.name}.json").write_text(
            json.dumps({k: np.asarray(a).tolist() for k, a in arrays.items()})
        )
        records.append(
            s.model_dump()
            | {"horizon": horizon, "v_star": float(v_star[0, mdp.start]), "v_agnostic": float(v_agn[0, mdp.start])}
        )
    (data_dir / "settings.json").write_text(json.dumps(records, indent=2))
    names = ", ".join(r["name"] for r in records)
    if official:  # the settings are the official repository's own config files
        origin = dataset_meta(
            "real",
            f"official SleepingRL configs/*.json from data/{cfg.data.official_config_dir} "
            f"({names}, H={horizon}); StochasticFrozenLake built and solved exactly from them",
        )
    else:
        origin = dataset_meta(
            "synthetic",
            f"StochasticFrozenLake re-implemented from the official env.py, settings "
            f"{names} (H={horizon}) from the config; exact DP values",
        )
    meta = {
        **origin,
        "generator": "StochasticFrozenLake (official env.py) as a tabular MDP + exact dynamic programming",
        "synthetic": True,
        "settings": [r["name"] for r in records],
        "horizon": horizon,
        "official_configs": official,
    }
    return write_manifest(data_dir, meta=meta)


def load_settings(data: DatasetRef) -> list[dict]:
    return json.loads(data.file("settings.json").read_text())


def load_mdp(data: DatasetRef, name: str) -> SleepingMDP:
    arrays = json.loads(data.file(f"envs/{name}.json").read_text())
    return SleepingMDP.from_arrays({k: np.asarray(v, dtype=float) for k, v in arrays.items()})


# ----------------------------------------------------------------------------- training


def run_seeds(cfg: Config) -> list[int]:
    return [cfg.seed + j for j in range(cfg.n_seeds)]


def arm_name(cfg: Config, variant: str, beta: float) -> str:
    """``method``/``baseline`` at the deciding beta (``bonus_scale``), ``method_beta0.3`` elsewhere in the sweep."""
    return variant if beta == cfg.bonus_scale else f"{variant}_beta{beta:g}"


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    """Run SleepingUCBVI and UCBVI for K episodes on every (beta, setting, seed); save rewards and Q-tables.

    Every beta of the sweep runs in the same vectorised loop; a (setting, seed) run plays the same random stream
    at every beta and for both algorithms (common random numbers)."""
    out_dir = Path(out_dir)
    settings = load_settings(data)
    runs = [(s, seed, beta) for beta in cfg.beta_sweep for s in settings for seed in run_seeds(cfg)]
    batch = RunBatch.stack([load_mdp(data, s["name"]) for s, _, _ in runs])
    streams = [np.random.SeedSequence([seed, zlib.crc32(s["name"].encode())]) for s, seed, _ in runs]
    betas = np.array([beta for _, _, beta in runs])

    progress = None
    if show_progress():
        from tqdm.auto import tqdm

        progress = tqdm(total=len(VARIANTS) * cfg.episodes, desc=f"sleeping_rl ({len(runs)} runs)", unit="episode")
    saved, summary = {}, {"bonus_scale": cfg.bonus_scale, "episodes": cfg.episodes, "runs": len(runs)}
    for variant in VARIANTS:
        started = time.perf_counter()
        agent = AGENTS[variant](batch, cfg.episodes, betas, cfg.variance_quirk)
        saved[f"rewards_{variant}"] = train_agent(agent, batch, streams, cfg.episodes, progress)
        saved[f"q_{variant}"] = agent.Q
        summary[f"seconds_{variant}"] = time.perf_counter() - started
    if progress is not None:
        progress.close()
    np.savez(
        out_dir / "runs.npz",
        **saved,
        run_setting=np.array([s["name"] for s, _, _ in runs]),
        run_seed=np.array([seed for _, seed, _ in runs]),
        run_beta=betas,
        n_states=batch.n_states,
        main_setting=np.array(_main_setting(settings)),
    )
    history = {}
    for v in VARIANTS:
        for i, (s, seed, beta) in enumerate(runs):
            record_curve(arm_name(cfg, v, beta), unit_label(s["name"], seed), saved[f"rewards_{v}"][i])
        for beta in cfg.beta_sweep:
            rows = [i for i, run in enumerate(runs) if run[2] == beta]
            history[arm_name(cfg, v, beta)] = _learning_curve(
                saved[f"rewards_{v}"][rows], [runs[i][:2] for i in rows], cfg.episodes
            )
        for st in settings:
            rows = [i for i, (r, _, beta) in enumerate(runs) if r["name"] == st["name"] and beta == cfg.bonus_scale]
            summary[f"{v}_mean_reward_{st['name']}"] = float(np.mean([saved[f"rewards_{v}"][i].mean() for i in rows]))
    return TrainedArtifacts(out_dir, history=history, summary=summary)


def unit_label(setting: str, seed: int) -> str:
    """A run's unit (``g2_p025_seed3``): both algorithms play it on the same random stream."""
    return f"{setting}_seed{seed}"


def block_means(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The learning curve as ``FIT_BLOCKS`` block means and their standard errors (per-episode spread)."""
    blocks = np.array_split(np.asarray(rewards, dtype=float), min(FIT_BLOCKS, len(rewards)))
    means = np.array([b.mean() for b in blocks])
    errors = np.array([b.std(ddof=1) / np.sqrt(len(b)) if len(b) > 1 else np.inf for b in blocks])
    return means, errors


def best_block(rewards: np.ndarray) -> tuple[int, int]:
    """(best block, blocks): the last block whose mean beat the best so far by more than ``FIT_Z`` standard errors
    of the difference, so block-to-block noise on a plateau does not count as improving."""
    means, errors = block_means(rewards)
    best = 0
    for b in range(1, len(means)):
        if means[b] - means[best] > FIT_Z * np.hypot(errors[b], errors[best]):
            best = b
    return best, len(means)


def record_curve(arm: str, unit: str, rewards: np.ndarray) -> None:
    """Record a fixed-schedule run for the diagnostics (``best_block``): a best block in the final tenth of K means
    it was still learning when K ran out."""
    best, blocks = best_block(rewards)
    record_fit(arm, unit, best, blocks, False, None)


def _learning_curve(rewards: np.ndarray, runs: list, episodes: int, points: int = 100) -> list[dict[str, float]]:
    """~100 records: reward averaged over the last block and cumulative regret vs V*, seed-averaged; ``runs`` are
    the (setting, seed) of the rows of ``rewards``."""
    block = max(1, episodes // points)
    records = []
    for end in range(block, episodes + 1, block):
        record: dict[str, float] = {"step": end}
        for name in dict.fromkeys(s["name"] for s, _ in runs):
            rows = [i for i, (s, _) in enumerate(runs) if s["name"] == name]
            v_star = runs[rows[0]][0]["v_star"]
            record[f"reward_{name}"] = float(rewards[rows, end - block : end].mean())
            record[f"regret_{name}"] = float((end * v_star - rewards[rows, :end].sum(axis=1)).mean())
        records.append(record)
    return records


def _load_runs(model_dir: Path) -> dict[str, np.ndarray]:
    with np.load(Path(model_dir) / "runs.npz", allow_pickle=False) as arrays:
        return {k: arrays[k] for k in arrays.files}


def _main_setting(settings: list[dict]) -> str:
    """The setting whose numbers are the headline (role "main", else the first)."""
    return next((s["name"] for s in settings if s["role"] == "main"), settings[0]["name"])


def load_model(cfg: Config, model_dir: Path) -> GreedyPolicy:
    """SleepingUCBVI's greedy policy on the main setting (seed ``cfg.seed``): rows (stage, state, mask) -> action."""
    runs = _load_runs(model_dir)
    main = str(runs["main_setting"])
    candidates = [
        i
        for i, (n, beta) in enumerate(zip(runs["run_setting"], runs["run_beta"]))
        if str(n) == main and float(beta) == cfg.bonus_scale
    ]
    index = next((i for i in candidates if int(runs["run_seed"][i]) == cfg.seed), candidates[0])
    n_states = int(runs["n_states"][index])
    return GreedyPolicy(runs["q_method"][index][:, :n_states, :], uses_availability=True, name=f"SleepingUCBVI/{main}")


# ----------------------------------------------------------------------------- evaluation


def beta_suffix(cfg: Config, beta: float) -> str:
    """Metric-name suffix of a beta: "" at the deciding one (the claim's names), ``_beta0.3`` elsewhere."""
    return "" if beta == cfg.bonus_scale else f"_beta{beta:g}"


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    """Last-10 % reward, regret vs exact V*, exact value of the final greedy policies, per setting and beta."""
    settings = load_settings(data)
    runs = _load_runs(artifacts.model_dir)
    names = [str(n) for n in runs["run_setting"]]
    run_betas = [float(b) for b in runs["run_beta"]]
    K = runs["rewards_method"].shape[1]
    last = max(1, int(round(LAST_FRACTION * K)))
    metrics = Metrics({}, [])
    values = metrics.values
    for beta in cfg.beta_sweep:
        tail = beta_suffix(cfg, beta)
        for s in settings:
            name = s["name"]
            rows = [i for i, (n, b) in enumerate(zip(names, run_betas)) if n == name and b == beta]
            mdp = load_mdp(data, name)
            values[f"reference/v_star_{name}"] = s["v_star"]
            values[f"reference/v_agnostic_{name}"] = s["v_agnostic"]
            for variant in VARIANTS:
                rewards = runs[f"rewards_{variant}"][rows]
                final = rewards[:, -last:].mean(axis=1)
                labels = [f"seed{int(runs['run_seed'][i])}" for i in rows]
                metrics.add_units(f"last10_reward_{name}{tail}", variant, final, labels)
                values[f"{variant}/last10_reward_{name}{tail}"] = float(final.mean())
                values[f"{variant}/regret_{name}{tail}"] = float((K * s["v_star"] - rewards.sum(axis=1)).mean())
                values[f"{variant}/policy_value_{name}{tail}"] = float(
                    np.mean([_policy_value(mdp, runs[f"q_{variant}"][i], variant) for i in rows])
                )
                # Runs still learning in the last tenth of K (what the "still improving" diagnostic will read).
                values[f"{variant}/still_improving_runs_{name}{tail}"] = float(
                    sum(best_block(r)[0] == best_block(r)[1] - 1 for r in rewards)
                )
            values[f"method/gap_{name}{tail}"] = (
                values[f"method/last10_reward_{name}{tail}"] - values[f"baseline/last10_reward_{name}{tail}"]
            )
    main = _main_setting(settings)
    for variant in VARIANTS:
        values[f"{variant}/last10_reward_main"] = values[f"{variant}/last10_reward_{main}"]
    folder = out_dir / "plots"
    deciding = [i for i, b in enumerate(run_betas) if b == cfg.bonus_scale]
    at_beta = {k: (v[deciding] if k.startswith(("rewards_", "run_")) else v) for k, v in runs.items()}
    metrics.figures = [
        plot_rewards(cfg, settings, at_beta, folder),
        plot_regret(settings, at_beta, folder),
        plot_regret_by_beta(cfg, settings, runs, folder),
        plot_beta_sweep(cfg, settings, values, folder),
    ]
    return metrics


def _policy_value(mdp: SleepingMDP, q_padded: np.ndarray, variant: str) -> float:
    """Exact value from the start state of the greedy policy of a final Q-table."""
    q = q_padded[:, : mdp.n_states, :]
    if AGENTS[variant].uses_availability:
        return float(sleeping_policy_value(mdp, q)[0, mdp.start])
    return float(agnostic_policy_value(mdp, q.argmax(axis=-1))[0, mdp.start])


# ----------------------------------------------------------------------------- claim


def _abs_mean_criterion(name: str, statement: str, deviations: UnitValues, threshold: float) -> Criterion:
    """|mean deviation| <= threshold, with the t-interval of the mean mapped through |.|: the interval
    of |mu| is [0, max] when the mean's interval contains 0, else [min, max] of its ends' magnitudes."""
    mean, low, high = V.t_interval(deviations)
    abs_low = 0.0 if low <= 0.0 <= high else min(abs(low), abs(high))
    reason = "one unit: no interval, so at best inconclusive" if len(deviations) == 1 else ""
    return Criterion(
        name,
        statement,
        abs(mean),
        abs_low,
        max(abs(low), abs(high)),
        threshold,
        "<=",
        f"{len(deviations)} seeds",
        len(deviations),
        "t",
        reason=reason,
        labels=deviations.labels,
        unit_values=tuple(deviations.values),
        covers=COVERS,
    )


def setting_criteria(metrics: Metrics, n: str, tail: str = "") -> list[Criterion]:
    """Criteria (i)-(iii) on setting ``n`` at one beta (metric suffix ``tail``), over the paired seeds."""
    v = metrics.values
    v_star, v_agn = v[f"reference/v_star_{n}"], v[f"reference/v_agnostic_{n}"]
    per_seed = metrics.paired(f"last10_reward_{n}{tail}", *VARIANTS)
    return [
        _abs_mean_criterion(
            f"sleeping_error_{n}",
            f"{n}: |SleepingUCBVI last-10% reward - V*| (V* = {v_star:.3f})",
            per_seed["method"] - v_star,
            TOLERANCE,
        ),
        V.mean_criterion(
            f"ucbvi_excess_{n}",
            f"{n}: UCBVI last-10% reward - V*_agnostic (= {v_agn:.3f})",
            per_seed["baseline"] - v_agn,
            TOLERANCE,
            "<=",
            units="seeds",
            covers=COVERS,
        ),
        V.difference_criterion(
            f"gap_ratio_{n}",
            f"{n}: (SleepingUCBVI - UCBVI last-10% reward) / (V* - V*_agnostic)",
            per_seed["method"],
            per_seed["baseline"],
            0.5,
            ">=",
            units="paired seeds",
            scale=1.0 / (v_star - v_agn),
            covers=COVERS,
        ),
    ]


def _baseline_headroom(metrics: Metrics, judged: list, criteria: list[Criterion]) -> str:
    """The account of UCBVI runs still rising at K at the deciding beta, given only where it is decided by a bound:
    UCBVI's policies ignore the revealed set, so its expected reward cannot exceed V*_agnostic. Rising further can
    raise a run's last-10% reward by at most V*_agnostic minus its lowest seed (the headroom, taken as 0 where a
    seed already sits above); criterion (ii)'s upper end then moves by at most that and (iii)'s lower end down by
    at most headroom / (V* - V*_agnostic). Returned only where both still hold after that worst case (else '')."""
    v, parts = metrics.values, []
    by_name = {c.name: c for c in criteria}
    for s in judged:
        n = s.name
        if not v.get(f"baseline/still_improving_runs_{n}", 0.0):
            continue
        v_star, v_agn = v[f"reference/v_star_{n}"], v[f"reference/v_agnostic_{n}"]
        headroom = max(0.0, v_agn - float(np.min(metrics.unit(f"last10_reward_{n}", "baseline").values)))
        excess, gap = by_name[f"ucbvi_excess_{n}"], by_name[f"gap_ratio_{n}"]
        worst_excess, worst_gap = excess.high + headroom, gap.low - headroom / (v_star - v_agn)
        if excess.state != "holds" or gap.state != "holds" or worst_excess > TOLERANCE or worst_gap < 0.5:
            return ""
        parts.append(
            f"{n}: {int(v[f'baseline/still_improving_runs_{n}'])} UCBVI run(s) still rise at K, at most {headroom:.3f} "
            f"below V*_agnostic = {v_agn:.3f} (UCBVI's ceiling: its policies ignore the revealed set); rising by "
            f"that much leaves (ii) <= {worst_excess:.3f} (bar {TOLERANCE}) and (iii) >= {worst_gap:.3f} (bar 0.5)"
        )
    return "decided by a bound, not the budget: " + "; ".join(parts) if parts else ""


def beta_range(holding: dict[float, bool]) -> str:
    """The betas of the sweep where every criterion holds, in words."""
    where = [b for b, ok in holding.items() if ok]
    if not where:
        return "at no beta of the sweep"
    return (
        f"at beta in {{{', '.join(f'{b:g}' for b in where)}}} of the sweep {{{', '.join(f'{b:g}' for b in holding)}}}"
    )


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    """Criteria (i)-(iii) on the main and second settings over the paired seeds (both algorithms run on
    each seed's random stream) at the deciding beta; the same criteria at every beta of the sweep, reported
    beside them (the beta range where the claim holds); DP-table and control checks as sanity."""
    settings, horizon, _ = resolve_settings(cfg)
    v = metrics.values
    figures: dict[str, float] = {}
    criteria: list[Criterion] = []
    controls: list[Control] = []
    separations: list[Separation] = []
    judged = [s for s in settings if s.role in ("main", "second")]
    for s in judged:
        n = s.name
        v_star, v_agn = v[f"reference/v_star_{n}"], v[f"reference/v_agnostic_{n}"]
        sleeping, ucbvi = v[f"method/last10_reward_{n}"], v[f"baseline/last10_reward_{n}"]
        figures |= {
            f"sleeping_last10_{n}": sleeping,
            f"ucbvi_last10_{n}": ucbvi,
            f"v_star_{n}": v_star,
            f"v_agnostic_{n}": v_agn,
        }
        figures[f"sleeping_error_{n}"] = abs(sleeping - v_star)  # (i) <= 0.3
        figures[f"ucbvi_excess_{n}"] = ucbvi - v_agn  # (ii) <= 0.3
        figures[f"gap_ratio_{n}"] = (sleeping - ucbvi) / (v_star - v_agn)  # (iii) >= 0.5
        criteria += setting_criteria(metrics, n)
        if s.role == "main":  # negative control: availability-agnostic UCBVI's runs scored as SleepingUCBVI
            per_seed = metrics.paired(f"last10_reward_{n}", *VARIANTS)
            controls.append(
                Control(
                    f"sleeping_error_{n}",
                    "the availability model removed: UCBVI's runs scored as SleepingUCBVI",
                    _abs_mean_criterion(
                        f"sleeping_error_{n}",
                        f"{n}: |UCBVI last-10% reward - V*| (V* = {v_star:.3f})",
                        per_seed["baseline"] - v_star,
                        TOLERANCE,
                    ),
                )
            )
        separations.append(
            Separation(
                f"last-10% reward on {n}",
                {x: v[f"{x}/last10_reward_{n}"] for x in VARIANTS},
                floor=0.0,
                ceiling=v_star,
                margin=TOLERANCE,
            )
        )

    # The beta sweep: the same criteria at every beta (not part of the verdict; the statement names where they hold).
    holding: dict[float, bool] = {}
    sweep_notes, explained = [], {}
    for beta in cfg.beta_sweep:
        tail = beta_suffix(cfg, beta)
        at_beta = [c for s in judged for c in setting_criteria(metrics, s.name, tail)]
        holding[beta] = bool(at_beta) and all(c.state == "holds" for c in at_beta)
        figures[f"beta{beta:g}_criteria_holding"] = float(sum(c.state == "holds" for c in at_beta))
        figures[f"beta{beta:g}_holds"] = float(holding[beta])
        for c in at_beta:
            figures[f"{c.name}_beta{beta:g}"] = c.estimate
        for s in settings:
            for variant in VARIANTS:
                figures[f"{variant}_regret_{s.name}_beta{beta:g}"] = v[f"{variant}/regret_{s.name}{tail}"]
        failing = [c.describe() for c in at_beta if c.state != "holds"]
        sweep_notes.append(
            f"beta={beta:g}: {len(at_beta) - len(failing)}/{len(at_beta)} hold"
            + (f" ({'; '.join(failing)})" if failing else "")
        )
        if beta != cfg.bonus_scale:
            for variant in VARIANTS:
                improving = sum(v[f"{variant}/still_improving_runs_{s.name}{tail}"] for s in settings)
                if improving:
                    explained[f"still_improving:{arm_name(cfg, variant, beta)}"] = (
                        f"reported, not judged: at beta={beta:g} {int(improving)} run(s) still learn at K="
                        f"{cfg.episodes} (the theory constants, beta=1, need ~80k episodes; paper scale runs K=200k); "
                        f"the verdict is decided at beta={cfg.bonus_scale:g}"
                    )
    baseline_headroom = _baseline_headroom(metrics, judged, criteria)
    if baseline_headroom:
        explained["still_improving:baseline"] = baseline_headroom

    sanity: dict[str, bool] = {}
    for s in settings:
        n, v_star, v_agn = s.name, v[f"reference/v_star_{s.name}"], v[f"reference/v_agnostic_{s.name}"]
        table = BRIEF_TABLE.get((s.grid, s.safe_prob)) if horizon == 10 else None
        if table is not None:  # docs/methods/sleeping_rl.md: "to 0.01" (its values are printed with 2 decimals)
            sanity[f"dp_matches_table_{n}"] = abs(v_star - table[0]) <= 0.01 and abs(v_agn - table[1]) <= 0.01
        # no policy beats the optimum; UCBVI's availability-blind policy cannot beat V*_agnostic
        sanity[f"policy_values_bounded_{n}"] = (
            v[f"method/policy_value_{n}"] <= v_star + 1e-9
            and v[f"baseline/policy_value_{n}"] <= v_agn + 1e-9
            and v_agn <= v_star + 1e-9
        )
        if s.role == "control":
            closed_form = horizon - 2 * (s.grid - 1) + 1  # env.py's value for p = 1
            sanity[f"control_dp_{n}"] = abs(v_star - closed_form) < 1e-9 and abs(v_agn - closed_form) < 1e-9
            figures[f"control_sleeping_last10_{n}"] = v[f"method/last10_reward_{n}"]
            figures[f"control_ucbvi_last10_{n}"] = v[f"baseline/last10_reward_{n}"]
            if cfg.scale == Scale.default:  # (iv): learning has converged only at the default budget
                sanity[f"control_within_tol_{n}"] = all(
                    abs(v[f"{x}/last10_reward_{n}"] - v_star) <= TOLERANCE for x in VARIANTS
                )
    statement = (
        "SleepingUCBVI reaches the availability-aware optimum V* (|last-10% reward - V*| <= 0.3) while UCBVI "
        "plateaus at the best availability-agnostic value (<= V*_agnostic + 0.3), and the gap is at least "
        f"half of V* - V*_agnostic, on FrozenLake g=2,p=0.25 and g=3,p=0.5 (decided at beta={cfg.bonus_scale:g}, "
        f"K={cfg.episodes}; all criteria hold {beta_range(holding)})"
    )
    notes = (
        f"beta={cfg.bonus_scale:g} (theory constants: beta=1), K={cfg.episodes}, seeds={run_seeds(cfg)}, "
        f"variance={'official quirk' if cfg.variance_quirk else 'empirical'}, scale={cfg.scale.value}. "
        f"Beta sweep (same seeds and random streams): {'; '.join(sweep_notes)}."
    )
    if not criteria:
        notes += "; no main/second setting configured, so the paper's claim was not measured"
    return ClaimResult(statement, criteria, sanity, figures, notes, controls, separations, explained)
