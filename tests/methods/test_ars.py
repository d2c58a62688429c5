"""Tests of ARS's core pieces: Eq. (6) and its identity, scales applied at sampling time on raw buffers, the
detectors of the restated check (iv)(a), the common-random-numbers invariance (iv)(b), full resets, per-member
Adam learning rates, validation early stopping with final-period best weights, the toy's reward scales, the
claim's criteria on arms (b) and (c), and the smoke pipeline (read from the session-wide smoke run)."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.ars import (
    SPEC,  # noqa: E402
    pipeline,  # noqa: E402
)
from models.ars.algorithm import (  # noqa: E402
    MemberAdam,
    MultiTaskSAC,
    ReplayBuffers,
    Schedule,
    Validation,
    compute_scales,
    eq6_identity_error,
    run_ars,
)
from models.ars.data import PointMassTasks, read_metaworld_run, run_dir_name  # noqa: E402
from models.ars.pipeline import toy_arm, toy_variant  # noqa: E402
from models.base import Metrics  # noqa: E402
from models.common.units import unit_labels  # noqa: E402


def test_eq6_on_known_reward_histories():
    # mean rewards 4.0, 0.5, 0.002 (floored to 0.01), 0.04
    histories = [np.array([2.0, 6.0]), np.array([0.25, 0.75]), np.array([0.001, 0.003]), np.array([0.04, 0.04])]
    stats = np.array([h.mean() for h in histories])
    raw, clipped = compute_scales(stats, "mean", floor=0.01)
    np.testing.assert_allclose(raw, [1.0, 8.0, 400.0, 100.0])
    np.testing.assert_allclose(clipped, raw)  # no clip unless asked (paper's code)
    np.testing.assert_allclose(compute_scales(stats, "mean", 0.01, c_min=1.0, c_max=200.0)[1], [1, 8, 200, 100])
    # the identity c_i * max(r̄_i, floor) = max_j r̄_j holds for every task, the floored one included
    assert eq6_identity_error(stats, raw, "mean", 0.01) < 1e-12
    assert eq6_identity_error(stats, raw * np.array([1, 1, 1.01, 1]), "mean", 0.01) == pytest.approx(0.01)
    # batched over members (leading axis) and the std ablation rule
    np.testing.assert_allclose(compute_scales(np.array([[1.0, 0.1], [0.2, 0.4]]))[0], [[1.0, 10.0], [2.0, 1.0]])
    np.testing.assert_allclose(compute_scales(np.array([0.5, 0.001]), "std", floor=0.01)[0], [2.0, 100.0])
    assert eq6_identity_error(np.array([0.5, 0.001]), np.array([2.0, 100.0]), "std", 0.01) < 1e-12
    with pytest.raises(ValueError, match="unknown scale rule 'median'"):
        compute_scales(stats, "median")


def test_config_scales_and_validation():
    for scale in ("smoke", "default", "paper"):
        cfg = SPEC.make_config(scale)
        assert cfg.toy.sac.tau == 0.01 and cfg.toy.sac.shared_alpha and cfg.toy.sac.alpha_init == 0.1
        assert cfg.toy.scaling.floor == 1e-9 and cfg.data.scaling.floor == 0.01
        assert (cfg.data.sac.lr, cfg.data.sac.gamma, cfg.data.sac.alpha_init) == (3e-4, 0.99, 1.0)
        assert not cfg.data.sac.shared_alpha  # per-task temperatures on Meta-World (the paper's code)
        assert not hasattr(cfg.toy.sac, "lr") and len(cfg.toy.lr_grid) >= 2  # the toy's lr is chosen per arm
    default, paper = SPEC.make_config("default"), SPEC.make_config("paper")
    assert default.toy.n_seeds >= 3 and {"mtsac", "scale_only", "ars"} <= set(default.toy.arms)
    assert len(paper.data.tasks) == 10 and set(paper.data.arms) == {"mtsac", "scale_only", "ars", "reset_only"}
    assert paper.data.sac.hidden == (400, 400, 400, 400) and paper.data.reset_every == 400_000
    assert SPEC.make_config("default", {"toy.sac.shared_alpha": False}).toy.sac.tau == 0.01  # nested defaults kept
    for bad, words in (
        ({"toy.lr_grid": [1e-3, 1e-3]}, "toy.lr_grid"),
        ({"toy.arms": ["mtsac", "ars"]}, "scale_only"),
        ({"data.sac_steps": 750}, "multiples of data.max_episode_steps"),
        ({"toy.t_init": 6000}, "toy.t_init 6000"),
    ):
        with pytest.raises(ValueError, match=words):
            SPEC.make_config("default", bad)


def _filled_buffer(E=2, N=3, n=40, seed=0):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffers(E, N, capacity=n, obs_dim=4, act_dim=2, seed=seed)
    kappa = np.array([1.0, 0.1, 0.01])[:N]
    for t in range(n):
        obs = np.full((E, N, 4), t, np.float32) + np.arange(N)[None, :, None] * 1000  # task id encoded in obs
        buf.add(obs, rng.uniform(-1, 1, (E, N, 2)), kappa * rng.uniform(0.5, 1.5, (E, N)), obs + 1, np.zeros((E, N)))
    return buf, kappa


def test_scales_applied_at_sampling_time_on_raw_rewards():
    buf, _ = _filled_buffer()
    stored = buf.rew.copy()
    c = np.array([[1.0, 10.0, 100.0], [2.0, 3.0, 4.0]])
    batch = buf.sample(16, c)
    np.testing.assert_array_equal(buf.rew, stored)  # sampling never writes the scale into the buffer
    idx = batch["index"]  # the rows drawn: the batch rewards are exactly raw[idx] * c
    raw = buf.rew[np.arange(2)[:, None, None], np.arange(3)[None, :, None], idx]
    np.testing.assert_allclose(batch["rew"].numpy().reshape(2, 3, 16), raw * c[:, :, None], rtol=1e-6)
    assert batch["rew"].shape == (2, 48)
    # statistics come from raw rewards, so recomputing the scales never compounds them
    first = compute_scales(buf.reward_stats("mean"))[1]
    buf.sample(16, first)
    np.testing.assert_array_equal(compute_scales(buf.reward_stats("mean"))[1], first)


def test_per_task_buffer_isolation():
    buf, kappa = _filled_buffer()
    batch = buf.sample(32, np.ones((2, 3)))
    obs, task = batch["obs"].numpy(), batch["task"].numpy()
    # every sampled row of task i comes from task i's buffer (its observations carry i * 1000)
    np.testing.assert_array_equal(obs[:, :, 0] // 1000, np.broadcast_to(task, obs.shape[:2]))
    assert np.bincount(task).tolist() == [32, 32, 32]  # an equal batch from every task
    rew = batch["rew"].numpy().reshape(2, 3, 32)
    for i, k in enumerate(kappa):  # rewards of task i lie in kappa_i * [0.5, 1.5]
        assert (rew[:, i] >= 0.5 * k - 1e-7).all() and (rew[:, i] <= 1.5 * k + 1e-7).all()


def test_reset_reinitialises_parameters_temperature_and_adam_of_one_member_only():
    sac = MultiTaskSAC(2, 3, 4, 2, (16, 16), 1e-2, 0.9, 0.1, 0.5, False, seed=0)
    buf, _ = _filled_buffer()
    for _ in range(5):
        sac.update(buf.sample(8, np.ones((2, 3))))
    before0, before1 = sac.snapshot(0), sac.snapshot(1)
    alpha1 = sac.log_alpha[1].detach().clone()
    assert not torch.allclose(sac.log_alpha[0], torch.tensor(math.log(0.5)))
    sac.reset_member(0)
    after0, after1 = sac.snapshot(0), sac.snapshot(1)
    assert all(not torch.equal(before0[k], after0[k]) for k in before0)  # every tensor re-drawn
    assert all(torch.equal(before1[k], after1[k]) for k in before1)  # the other member untouched
    for k in after0:  # targets equal the fresh critics
        if k.startswith("target."):
            assert torch.equal(after0[k], after0["critic." + k[len("target.") :]])
    assert torch.allclose(sac.log_alpha[0], torch.tensor(math.log(0.5))) and torch.equal(sac.log_alpha[1], alpha1)
    for opt in (sac.actor_opt, sac.critic_opt, sac.alpha_opt):
        assert opt.t[0] == 0 and opt.t[1] == 5
        assert all(float(m[0].abs().sum()) == 0 and float(v[0].abs().sum()) == 0 for m, v in zip(opt.m, opt.v))
        assert any(float(m[1].abs().sum()) > 0 for m in opt.m)


def test_member_adam_matches_torch_adam_per_member_lr_and_masks():
    torch.manual_seed(0)
    w = torch.randn(3, 4, requires_grad=True)
    refs = [w.detach()[e].clone().requires_grad_(True) for e in (1, 2)]
    mine = MemberAdam([w], 3, lr=[0.5, 0.1, 0.01])
    theirs = [torch.optim.Adam([refs[0]], lr=0.1), torch.optim.Adam([refs[1]], lr=0.01)]
    frozen = w.detach()[0].clone()
    for _ in range(4):
        mine.zero_grad()
        (w**3).sum().backward()
        mine.step(torch.tensor([False, True, True]))
        for p, opt in zip(refs, theirs):
            opt.zero_grad()
            (p**3).sum().backward()
            opt.step()
    torch.testing.assert_close(w.detach()[1], refs[0].detach())  # each member = a separate Adam at its own lr
    torch.testing.assert_close(w.detach()[2], refs[1].detach())
    torch.testing.assert_close(w.detach()[0], frozen)  # masked member unchanged


def test_groups_share_initial_networks_only_within_a_group():
    sac = MultiTaskSAC(3, 2, 4, 2, (8,), 1e-3, 0.9, 0.1, 0.5, False, seed=3, groups=np.array([0, 1, 0]))
    weights = sac.snapshot(0), sac.snapshot(1), sac.snapshot(2)
    assert all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    assert not torch.equal(weights[0]["actor.net.layers.0.weight"], weights[1]["actor.net.layers.0.weight"])


def test_pointmass_reward_scales_success_and_common_starts():
    # member 0 gets kappa (1, 0.1), member 1 the control (1, 1); same group: the same start states
    kappa = np.array([[1.0, 0.1], [1.0, 1.0]])
    env = PointMassTasks(kappa, episode_len=3, radius=0.1, seed=0, copies=2, groups=np.array([0, 0]))
    obs = env.reset()
    assert obs.shape == (2, 4, 4) and (np.abs(env.state) <= 0.5).all()
    np.testing.assert_array_equal(env.state[0], env.state[1])
    np.testing.assert_array_equal(obs[0, :, 2:], [[1, 0], [1, 0], [0, 1], [0, 1]])  # one-hot task per copy
    action = np.zeros((2, 4, 2))
    action[:, :2] = 1.0  # task 0 (goal (1, 1)) moves up-right by 0.1 per step
    obs, reward, term, success, over = env.step(action)
    d = env.distance()  # [E, N, K]
    np.testing.assert_allclose(reward, (kappa[:, :, None] * (1 - np.tanh(4 * d))).reshape(2, 4))
    np.testing.assert_allclose(reward[0, 2:] / reward[1, 2:], 0.1)  # same state, kappa 0.1 vs 1
    assert not over and not term.any() and not success.any()
    env.state[:] = np.clip(env.goals[None, :, None, :] + 0.05, -1, 1)  # inside the success radius
    *_, success, over = env.step(np.zeros((2, 4, 2)))
    assert success.all() and not over
    assert env.step(np.zeros((2, 4, 2)))[-1]  # the 3rd step ends the episode
    apart = PointMassTasks(kappa, episode_len=3, radius=0.1, seed=0)  # default: every member its own starts
    apart.reset()
    assert not np.array_equal(apart.state[0], apart.state[1])
    with pytest.raises(ValueError, match="at most 4 tasks"):
        PointMassTasks(np.ones((1, 5)), 3, 0.1, 0)


def test_crn_invariance_holds_for_eq6_and_breaks_when_the_floor_binds():
    cfg = SPEC.make_config("smoke", {"toy.kappa": [1.0, 0.1, 0.001], "toy.control_kappa": [1.0, 1.0, 1.0]})
    crn = pipeline.crn_invariance(cfg)
    assert crn["scaled_spread"] <= 1e-5 and crn["raw_spread"] > 0.5  # equal up to one constant; raw streams differ
    c_main, c_equal, c_reversed = (np.array(c) for c in crn["c"])
    assert all(c.min() == 1.0 for c in (c_main, c_equal, c_reversed))  # the best-rewarded task keeps c = 1
    # same random phase, so c_i * kappa_i is the same vector up to one factor in all three runs
    for c, kappa in ((c_equal, np.ones(3)), (c_reversed, np.array([0.001, 0.1, 1.0]))):
        ratio = (c * kappa) / (c_main * np.array([1.0, 0.1, 0.001]))
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)
    # a floor above every task's mean reward removes the scaling's adaptivity: invariance must fail
    floored = SPEC.make_config("smoke", {"toy.scaling.floor": 10.0})
    assert pipeline.crn_invariance(floored)["scaled_spread"] > 0.5


def _tiny_run(validation=None, arms=("mtsac", "ars"), total=60):
    cfg = SPEC.make_config("smoke")
    t = cfg.toy
    kappa = np.array([t.kappa] * len(arms))
    env = PointMassTasks(kappa, t.episode_len, t.success_radius, 0)
    return run_ars(
        env,
        list(arms),
        t.sac,
        1e-3,
        t.scaling,
        Schedule(5, total, total // 2),
        2 + len(t.kappa),
        2,
        0,
        validation=validation,
    )


def test_run_checks_detect_scales_applied_wrongly(monkeypatch):
    _, _, log = _tiny_run()
    assert log.eq6_max_error < 1e-12 and log.buffer_raw_max_error < 1e-6 and log.batch_scale_max_error < 1e-6
    assert log.scale_recompute_identical and log.losses_finite
    assert [r["event"] for r in log.scales if r["member"] == 1] == ["init"] * 2 + ["reset"] * 2
    original = ReplayBuffers.sample

    def doubled(self, batch_per_task, scales):  # a sampler that applies the wrong scales
        return original(self, batch_per_task, 2 * np.asarray(scales))

    monkeypatch.setattr(ReplayBuffers, "sample", doubled)
    assert _tiny_run()[2].batch_scale_max_error == pytest.approx(1.0)
    # the identity recomputed from logged rows catches a corrupted c_raw
    rows = [r for r in log.scales if r["member"] == 1]
    assert pipeline._logged_eq6_error(rows, "mean", 1e-9) < 1e-12
    rows[1] = {**rows[1], "c_raw": rows[1]["c_raw"] * 1.5}
    assert pipeline._logged_eq6_error(rows, "mean", 1e-9) == pytest.approx(0.5)


def test_early_stopping_keeps_the_best_final_period_actor():
    # validation mean success at rounds 10, 20, ..., 100 (both members); one reset at round 50; patience 2
    scores = iter([0.1, 0.9, 0.2, 0.9, 0.3, 0.5, 0.6, 0.2, 0.1, 0.1])
    snapshots = []

    def evaluate(sac):
        snapshots.append({k: v.clone() for k, v in sac.actor.state_dict().items()})
        return np.full((2, 2), next(scores))

    sac, _, log = _tiny_run(validation=Validation(evaluate, 10, patience=2), total=100)
    # mtsac (member 0): best 0.9 at round 20 (the tie at 40 keeps the earlier), stopped after 2 evaluations
    assert log.best_round[0] == 20 and log.best_score[0] == 0.9 and log.stopped_round[0] == 40
    # ars (member 1): only rounds >= 50 (its last reset) count: best 0.6 at 70, stops at 90; the run ends there
    assert log.best_round[1] == 70 and log.stopped_round[1] == 90 and log.rounds_run == 90
    for k, v in sac.actor.state_dict().items():
        torch.testing.assert_close(v[0], snapshots[1][k][0])  # restored to round 20's weights
        torch.testing.assert_close(v[1], snapshots[6][k][1])  # restored to round 70's weights
    assert not torch.equal(snapshots[1]["net.layers.0.weight"][0], snapshots[3]["net.layers.0.weight"][0])


def _claim_metrics(cfg, seeds, control=(1.0, 1.0), **overrides):
    """Metrics with what claim() reads. ``seeds``: per seed, per-task test success of arms (a) mtsac,
    (b) scale_only and (c) ars; ``control``: the equal-kappa control's mean success of (b) and (a), every seed."""
    v = {}
    metrics = Metrics(v)
    labels = unit_labels("seed", len(seeds))
    for arm in seeds[0]:
        name = toy_arm(arm, "main")
        per_seed = [np.array(per_arm[arm], float) for per_arm in seeds]
        metrics.add_units("mean_success", name, [s.mean() for s in per_seed], labels)
        metrics.add_units("min_task_success", name, [s.min() for s in per_seed], labels)
        metrics.add_units("chosen_lr", name, [1e-3] * len(seeds), labels)
        v[f"{name}/mean_success"] = float(np.mean([s.mean() for s in per_seed]))
        v[f"{name}/min_task_success"] = float(np.mean([s.min() for s in per_seed]))
        for k in range(len(seeds)):
            v[f"select/{toy_variant(arm, 'main', k)}/best_round"] = 3000.0
    for arm, value in zip(("scale_only", "mtsac"), control):
        name = toy_arm(arm, "control")
        metrics.add_units("mean_success", name, [value] * len(seeds), labels)
        v[f"{name}/mean_success"] = value
    for key in ("eq6_max_error", "eq6_max_error_logged", "buffer_raw_max_error", "batch_scale_max_error"):
        v[f"toy/{key}"] = 0.0
    v["toy/scale_recompute_identical"] = 1.0
    v.update({"crn/scaled_spread": 1e-7, "crn/raw_spread": 20.0, "crn/eq6_max_error": 0.0})
    for arm in cfg.data.arms:
        key = f"metaworld_{arm}"
        for name in ("logs_valid", "checks_ok", "reset_ok"):
            v[f"{key}/{name}"] = 1.0
        for name in ("eq6_max_error", "eq6_max_error_logged", "buffer_raw_max_error", "batch_scale_max_error"):
            v[f"{key}/{name}"] = 0.0
        v[f"{key}/mean_success_any_last"] = 0.0
        v[f"{key}/random_return_reach-v3"], v[f"{key}/random_return_pick-place-v3"] = 600.0, 6.0
    for t in cfg.data.tasks:
        v[f"metaworld_ars/c_init_{t}"] = 1.0
    v.update(overrides)
    return metrics


GOOD = {"mtsac": [1, 0.5, 0, 0], "scale_only": [1, 1, 0.9, 0.8], "ars": [1, 1, 1, 0.9]}


def test_claim_holds_fails_and_is_inconclusive_on_arms_b_and_c():
    cfg = SPEC.make_config("default")
    assert cfg.toy.n_seeds == 3

    def claim(seeds, **kw):
        return pipeline.claim(cfg, _claim_metrics(cfg, seeds, **kw))

    jitter = [{a: np.clip(np.array(s) + d, 0, 1).tolist() for a, s in GOOD.items()} for d in (0.0, -0.05, 0.05)]
    clear = claim(jitter)
    names = ["mean_success_gap", "worst_task_success", "full_method_mean_success_gap", "full_method_worst_task_success"]
    assert [c.name for c in clear.criteria] == names
    assert all(c.state == "holds" for c in clear.criteria) and clear.verdict == "holds" and clear.sane, clear.sanity
    gap = clear.criterion("full_method_mean_success_gap")
    diffs = np.array([np.mean(s["ars"]) - np.mean(s["mtsac"]) for s in jitter])
    half = 4.302653 * diffs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert (gap.estimate, gap.low, gap.high) == pytest.approx((diffs.mean(), diffs.mean() - half, diffs.mean() + half))
    # the full method (c) drops its hardest task on every seed: (b) still holds, the claim fails
    weak_c = [{**s, "ars": [1, 1, 1, low]} for s, low in zip(jitter, (0.1, 0.2, 0.0))]
    result = claim(weak_c)
    assert result.criterion("worst_task_success").state == "holds"
    assert result.criterion("full_method_worst_task_success").state == "fails" and result.verdict == "fails"
    # (c)'s worst task 0.1 / 0.9 / 1.0: the interval straddles 0.6
    spread = [{**s, "ars": [1, 1, 1, low]} for s, low in zip(jitter, (0.1, 0.9, 1.0))]
    assert claim(spread).criterion("full_method_worst_task_success").state == "inconclusive"
    assert claim(spread).verdict == "inconclusive"


def test_claim_sanity_checks():
    cfg = SPEC.make_config("default")
    seeds = [GOOD] * 3

    def sanity(**kw):
        return pipeline.claim(cfg, _claim_metrics(cfg, seeds, **kw)).sanity

    assert all(sanity().values())
    assert not sanity(**{"metaworld_ars/eq6_max_error_logged": 1e-3})["iv_a_eq6_identity_every_computation"]
    assert not sanity(**{"toy/batch_scale_max_error": 1.0})["iv_a_batches_are_raw_times_c"]
    assert not sanity(**{"metaworld_mtsac/buffer_raw_max_error": 1e-2})["iv_a_buffers_hold_raw_rewards"]
    key = "iv_b_crn_scaled_streams_equal_up_to_constant"
    assert not sanity(**{"crn/scaled_spread": 1e-3})[key]
    assert not sanity(**{"crn/raw_spread": 0.0})[key]  # identical raw streams would make the test vacuous
    assert not sanity(control=(1.0, 0.8))["iii_control_gap_le_0.15"]
    low = sanity(control=(0.3, 0.3))
    assert low["iii_control_gap_le_0.15"] and not low["mtsac_control_learns_task_>=0.5"]
    assert not sanity(**{"metaworld_ars/random_return_pick-place-v3": 100.0})["metaworld_imbalance_ge_10"]


def test_smoke_pipeline(smoke_run, tmp_path):
    """ARS-specific checks on the session's smoke run (the contract test covers the rest)."""
    run = smoke_run("ars")
    cfg, metrics, result, artifacts = run.cfg, run.metrics, run.claim, run.artifacts
    d = cfg.data
    folder = run.dataset.path / run_dir_name(len(d.tasks), "ars", cfg.seed)
    logs = read_metaworld_run(folder)
    assert logs["meta"]["versions"]["metaworld"] and logs["meta"]["max_episode_steps"] == 100
    episodes_per_task = (d.t_init + d.sac_steps) // d.max_episode_steps
    assert len(logs["episodes"]) == episodes_per_task * len(d.tasks) and len(logs["resets"]) == 1
    assert {r["event"] for r in logs["scales"]} == {"init", "reset"}
    checks = logs["meta"]["checks"]
    assert checks["eq6_max_error"] < 1e-9 and checks["batch_scale_max_error"] < 1e-5
    stale = tmp_path / "stale_run"  # an older schema version must be rejected, not misread
    shutil.copytree(folder, stale)
    (stale / "meta.json").write_text(json.dumps({**logs["meta"], "schema_version": 1}))
    with pytest.raises(ValueError, match="schema_version 1"):
        read_metaworld_run(stale)

    expected = {"method", "baseline", "ars_reset", "control_method", "control_baseline"}
    assert set(artifacts.history) == expected
    for variant in expected:
        assert artifacts.summary[f"select/{variant}/lr"] in cfg.toy.lr_grid
    assert [c.name for c in result.criteria][:2] == ["mean_success_gap", "worst_task_success"]
    assert result.criterion("mean_success_gap").estimate == pytest.approx(
        metrics["method/mean_success"] - metrics["baseline/mean_success"]
    )
    assert result.criterion("full_method_mean_success_gap").estimate == pytest.approx(
        metrics["ars_reset/mean_success"] - metrics["baseline/mean_success"]
    )
    assert result.sane, result.sanity  # the (iv) checks are deterministic: they must pass at smoke too

    # arms (b) and (c) both start from Eq. (6) on the same random phase (paired seed): identical T_init scales
    def first(metric, arm):  # seed 0's value
        return metrics.unit(metric, arm)[0]

    for arm in ("method", "ars_reset"):
        assert first("c_init_task0", arm) == 1.0 and first("c_init_task1", arm) > 1.0
        rbar = np.array([first(f"rbar_init_task{i}", arm) for i in range(2)])
        np.testing.assert_allclose(first("c_init_task1", arm), rbar.max() / rbar[1], rtol=1e-9)
    assert first("c_init_task1", "method") == first("c_init_task1", "ars_reset")
    assert "ars_reset" in metrics.units["c_reset1_task1"] and "method" not in metrics.units["c_reset1_task1"]
    assert [c.of for c in result.controls] == ["mean_success_gap"] and result.separations
    assert result.criterion("mean_success_gap").labels == ("seed0",)
    model = SPEC.module().load_model(cfg, run.layout.model_dir)
    out = model(torch.zeros(5, 2 + len(cfg.toy.kappa)))
    assert out.shape == (5, 2) and out.abs().max() <= 1.0
    names = {f.name for f in metrics.figures}
    assert {"pointmass_success.png", "crn_invariance.png", "metaworld_success_per_task.png"} == names
