"""Tests of ARS's core pieces: Eq. (6) with the 0.01 floor, scales applied at sampling time on raw buffers,
full resets (parameters, temperature, Adam state), per-task buffer isolation, the toy's per-task reward scales,
the claim's arm wiring (claim on arm (b), check (iv) on arm (c)), and the contract test mirrored at smoke."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.ars import SPEC  # noqa: E402
from models.ars.algorithm import MemberAdam, MultiTaskSAC, ReplayBuffers, compute_scales  # noqa: E402
from models.ars.envs import PointMassTasks  # noqa: E402
from models.ars.pipeline import toy_variant  # noqa: E402


def test_eq6_on_known_reward_histories():
    # mean rewards 4.0, 0.5, 0.002 (floored to 0.01), 0.04
    histories = [np.array([2.0, 6.0]), np.array([0.25, 0.75]), np.array([0.001, 0.003]), np.array([0.04, 0.04])]
    stats = np.array([h.mean() for h in histories])
    raw, clipped = compute_scales(stats, "mean", floor=0.01)
    np.testing.assert_allclose(raw, [1.0, 8.0, 400.0, 100.0])
    np.testing.assert_allclose(clipped, raw)  # no clip unless asked (paper's code)
    np.testing.assert_allclose(compute_scales(stats, "mean", 0.01, c_min=1.0, c_max=200.0)[1], [1, 8, 200, 100])
    # the best task keeps c = 1 and every unfloored task's scaled mean equals the best mean
    assert raw[0] == 1.0 and np.allclose((raw * stats)[[0, 1, 3]], 4.0)
    # batched over members (leading axis) and the std ablation rule
    np.testing.assert_allclose(compute_scales(np.array([[1.0, 0.1], [0.2, 0.4]]))[0], [[1.0, 10.0], [2.0, 1.0]])
    np.testing.assert_allclose(compute_scales(np.array([0.5, 0.001]), "std", floor=0.01)[0], [2.0, 100.0])


def test_nested_config_defaults_survive_dotted_overrides():
    # a dotted override (toy.sac.hidden, data.sac.hidden) must not reset the section's other defaults
    for scale in ("smoke", "default", "paper"):
        cfg = SPEC.make_config(scale)
        assert cfg.toy.sac.tau == 0.01 and cfg.toy.sac.shared_alpha and cfg.toy.sac.alpha_init == 0.1
        assert cfg.toy.scaling.floor == 1e-9 and cfg.data.scaling.floor == 0.01
        assert (cfg.data.sac.lr, cfg.data.sac.gamma, cfg.data.sac.alpha_init) == (3e-4, 0.99, 1.0)
        assert not cfg.data.sac.shared_alpha  # per-task temperatures on Meta-World (the paper's code)
    assert SPEC.make_config("default", {"toy.sac.shared_alpha": False}).toy.sac.tau == 0.01
    assert SPEC.make_config("paper").data.sac.hidden == (400, 400, 400, 400)


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
    rng_state = buf.rng.bit_generator.state
    scaled = buf.sample(16, c)["rew"].numpy().reshape(2, 3, 16)
    buf.rng.bit_generator.state = rng_state
    raw = buf.sample(16, np.ones((2, 3)))["rew"].numpy().reshape(2, 3, 16)
    np.testing.assert_allclose(scaled, raw * c[:, :, None], rtol=1e-6)
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


def test_member_adam_matches_torch_adam_and_masks():
    torch.manual_seed(0)
    w = torch.randn(2, 3, requires_grad=True)
    ref = w.detach()[1].clone().requires_grad_(True)
    mine, theirs = MemberAdam([w], 2, lr=0.1), torch.optim.Adam([ref], lr=0.1)
    frozen = w.detach()[0].clone()
    for _ in range(4):
        for p, opt in ((w, mine), (ref, theirs)):
            opt.zero_grad()
            (p**3).sum().backward()
        mine.step(torch.tensor([False, True]))
        theirs.step()
    torch.testing.assert_close(w.detach()[1], ref.detach())  # same as a separate torch Adam
    torch.testing.assert_close(w.detach()[0], frozen)  # masked member unchanged


def test_pointmass_reward_scales_and_success():
    # member 0 gets kappa (1, 0.1), member 1 the control (1, 1); reward = kappa_i (1 - tanh(4 d))
    kappa = np.array([[1.0, 0.1], [1.0, 1.0]])
    env = PointMassTasks(kappa, episode_len=3, radius=0.1, seed=0, copies=2)
    obs = env.reset()
    assert obs.shape == (2, 4, 4) and (np.abs(env.state) <= 0.5).all()
    np.testing.assert_array_equal(obs[0, :, 2:], [[1, 0], [1, 0], [0, 1], [0, 1]])  # one-hot task per copy
    env.state[1] = env.state[0]  # both members in the same states: only kappa differs
    action = np.zeros((2, 4, 2))
    action[:, :2] = 1.0  # task 0 (goal (1, 1)) moves up-right by 0.1 per step
    obs, reward, term, success, over = env.step(action)
    d = env.distance()  # [E, N, K]
    np.testing.assert_allclose(reward, (kappa[:, :, None] * (1 - np.tanh(4 * d))).reshape(2, 4))
    np.testing.assert_allclose(reward[0, 2:] / reward[1, 2:], 0.1)  # same state, kappa 0.1 vs 1
    assert not over and not term.any() and not success.any()
    env.state[:] = env.goals[None, :, None, :] + 0.05  # inside the success radius (clipped at the wall)
    env.state = np.clip(env.state, -1, 1)
    *_, success, over = env.step(np.zeros((2, 4, 2)))
    assert success.all() and not over
    assert env.step(np.zeros((2, 4, 2)))[-1]  # the 3rd step ends the episode


def _claim_values(cfg, method, baseline, ars_reset_c, control=(1.0, 1.0), more_seeds=()):
    """A Metrics value dict with what claim() reads: arm (b) = method, (a) = baseline, (c) = ars_reset; ``method`` and
    ``baseline`` are seed 0's per-task success, ``more_seeds`` (method, baseline) pairs for seeds 1, 2, ..."""
    n = len(cfg.toy.kappa)
    v = {
        "ars_reset/mean_success": 0.0,
        "ars_reset/min_task_success": 0.0,
        "control_method/mean_success": control[0],
        "control_baseline/mean_success": control[1],
    }
    for k, (method_k, baseline_k) in enumerate([(method, baseline), *more_seeds]):
        for arm, tasks in (("scale_only", method_k), ("mtsac", baseline_k)):
            prefix = toy_variant(arm, "main", k)
            v[f"{prefix}/mean_success"], v[f"{prefix}/min_task_success"] = float(np.mean(tasks)), float(np.min(tasks))
    kappa = np.array(cfg.toy.kappa)
    for i in range(n):
        v[f"method/c_init_task{i}"] = kappa.max() / kappa[i]
        v[f"ars_reset/c_init_task{i}"] = kappa.max() / kappa[i]
        v[f"ars_reset/c_reset1_task{i}"] = ars_reset_c[i]
    for arm in cfg.data.arms:
        for k in ("logs_valid", "checks_ok", "reset_ok"):
            v[f"metaworld_{arm}/{k}"] = 1.0
        v[f"metaworld_{arm}/random_return_reach-v3"] = 600.0
        v[f"metaworld_{arm}/random_return_pick-place-v3"] = 6.0
    stats = np.array([600.0, 16.0, 6.0])[: len(cfg.data.tasks)] / 500
    for t, st in zip(cfg.data.tasks, stats):
        v[f"metaworld_ars/stat_init_{t}"] = float(st)
        v[f"metaworld_ars/c_init_{t}"] = float(stats.max() / st)
    return v


def test_claim_is_measured_on_arm_b_and_check_iv_on_arm_c():
    from models.ars import pipeline
    from models.base import Metrics

    cfg = SPEC.make_config("default")
    good_c = [1.0, 15.0, 117.0, 1086.0]  # the brief's prototype: within 2x of 1, 10, 100, 1000
    result = pipeline.claim(cfg, Metrics(_claim_values(cfg, [1, 1, 0.9, 0.7], [1, 0.5, 0, 0], good_c)))
    assert result.sane, result.sanity
    assert result.figures["mean_success_gap"] == pytest.approx(0.9 - 0.375)
    assert result.figures["min_task_success"] == pytest.approx(0.7)
    assert result.figures["scale_ratio_worst"] == pytest.approx(1.5)
    gap, worst = result.criterion("mean_success_gap"), result.criterion("worst_task_success")
    assert (gap.estimate, gap.threshold, gap.direction) == (pytest.approx(0.525), 0.25, ">=")
    assert (worst.estimate, worst.threshold) == (pytest.approx(0.7), 0.6)
    # one toy seed at default: both criteria past their thresholds, but with no interval, so inconclusive
    assert cfg.toy.n_seeds == 1 and all(c.n_units == 1 and c.state == "inconclusive" for c in result.criteria)
    assert result.verdict == "inconclusive" and "one unit" in gap.why
    # arm (b)'s worst task below 0.6 on the one seed: not a pass, but one seed cannot fail it either
    weak = pipeline.claim(cfg, Metrics(_claim_values(cfg, [1, 1, 1, 0.5], [1, 0.5, 0, 0], good_c)))
    assert weak.criterion("worst_task_success").state == "inconclusive" and not weak.holds and weak.sane
    # arm (c)'s reset scales 36x off (the failure that motivated this test): check (iv) fails the run
    off = pipeline.claim(cfg, Metrics(_claim_values(cfg, [1, 1, 1, 1], [1, 0.5, 0, 0], [2.2, 1.0, 3640.0, 13339.0])))
    assert off.sanity["iv_reset_scales_within_2x"] is False and not off.sane
    assert off.figures["scale_ratio_worst"] == pytest.approx(36.4)  # task 2: 3640 against 100
    learned = _claim_values(cfg, [1, 1, 1, 1], [1, 0.5, 0, 0], good_c)
    learned.update({f"ars_reset/success_before_reset1_task{i}": s for i, s in enumerate([1.0, 0.5, 0.4, 0.0])})
    assert pipeline.claim(cfg, Metrics(learned)).figures["ars_reset_tasks_learned_before_reset"] == 2.0
    # (iii): the control compares arms (b) and (a) with equal kappa
    ctrl = pipeline.claim(cfg, Metrics(_claim_values(cfg, [1, 1, 1, 1], [1, 0.5, 0, 0], good_c, control=(1.0, 0.8))))
    assert ctrl.figures["control_gap"] == pytest.approx(0.2) and ctrl.sanity["iii_control_gap_le_0.15"] is False


def test_claim_intervals_over_paired_toy_seeds():
    from models.ars import pipeline
    from models.base import Metrics

    cfg = SPEC.make_config("default", {"toy.n_seeds": 3})
    good_c = [1.0, 15.0, 117.0, 1086.0]

    def claim(*seeds):
        return pipeline.claim(cfg, Metrics(_claim_values(cfg, *seeds[0], good_c, more_seeds=seeds[1:])))

    # three seeds, each well past both thresholds: the claim holds
    clear = claim(
        ([1, 1, 0.9, 0.7], [1, 0.5, 0, 0]), ([1, 1, 1, 0.8], [1, 0.4, 0.1, 0]), ([1, 0.9, 1, 0.8], [1, 0.5, 0, 0.1])
    )
    assert [c.state for c in clear.criteria] == ["holds", "holds"] and clear.verdict == "holds"
    assert clear.criterion("mean_success_gap").n_units == 3 and clear.criterion("mean_success_gap").interval == "t"
    # gaps 0.55 / 0.05 / 0.50 (mean 0.37): the interval straddles 0.25
    spread = claim(([1, 1, 1, 1], [1, 0.6, 0.2, 0]), ([1, 1, 1, 0.8], [1, 1, 1, 0.6]), ([1, 1, 1, 1], [1, 0.5, 0.5, 0]))
    gap = spread.criterion("mean_success_gap")
    diffs = np.array([0.55, 0.05, 0.5])
    half = 4.302653 * diffs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert (gap.estimate, gap.low, gap.high) == pytest.approx((diffs.mean(), diffs.mean() - half, diffs.mean() + half))
    assert gap.low < 0.25 < gap.high and gap.state == "inconclusive" and spread.verdict == "inconclusive"
    # the worst task at 0.4-0.5 on every seed: criterion (ii) fails, and with it the claim
    weak = claim(([1, 1, 1, 0.5], [1, 0.5, 0, 0]), ([1, 1, 1, 0.4], [1, 0.5, 0, 0]), ([1, 1, 0.45, 1], [1, 0.5, 0, 0]))
    assert weak.criterion("worst_task_success").state == "fails" and weak.verdict == "fails" and weak.sane


def test_smoke_pipeline_and_contract(tmp_path):
    """The smoke run plus every check of tests/methods/test_contract.py on this SPEC."""
    from models.ars.pipeline import read_metaworld_run, run_dir_name
    from models.base import ClaimResult, Metrics, TrainedArtifacts, read_dataset
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    layout = steps.Layout(tmp_path, SPEC)
    data = steps.prepare(SPEC, cfg, tmp_path)
    assert data.path == layout.data_dir and data.files
    assert read_dataset(layout.data_dir).sha256 == data.sha256
    assert not list((tmp_path / "data").glob("*.partial"))
    assert steps.prepare(SPEC, cfg, tmp_path).sha256 == data.sha256  # byte-identical from the seed

    logs = read_metaworld_run(data.path / run_dir_name(cfg, "ars"))
    assert logs["meta"]["versions"]["metaworld"] and logs["meta"]["max_episode_steps"] == 100
    assert len(logs["episodes"]) == 2 * len(cfg.data.tasks) and len(logs["resets"]) == 1
    assert {r["event"] for r in logs["scales"]} == {"init", "reset"}
    stale = tmp_path / "stale_run"  # an older schema version must be rejected, not misread
    shutil.copytree(data.path / run_dir_name(cfg, "ars"), stale)
    (stale / "meta.json").write_text(json.dumps({**logs["meta"], "schema_version": 0}))
    with pytest.raises(ValueError, match="schema_version"):
        read_metaworld_run(stale)

    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert isinstance(artifacts, TrainedArtifacts) and artifacts.model_dir == layout.model_dir
    assert TrainedArtifacts.load(layout.model_dir).history == json.loads(json.dumps(artifacts.history))
    assert {"method", "baseline", "ars_reset", "ablation_reset_only", "control_method", "control_baseline"} == set(
        artifacts.history
    )
    for variant, records in artifacts.history.items():
        assert records and all(math.isfinite(float(x)) for r in records for x in r.values()), variant

    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    assert isinstance(metrics, Metrics) and isinstance(result, ClaimResult)
    assert SPEC.primary_metric in metrics.values and not metrics.non_finite()
    assert not any(k.startswith(("eval/", "train/")) for k in metrics.values)
    assert any(k.startswith("method/") for k in metrics.values)
    assert any(k.startswith("baseline/") for k in metrics.values)
    assert metrics.figures and all(f.suffix == ".png" and f.stat().st_size > 1000 for f in metrics.figures)
    assert all(f.parent == layout.plots_dir for f in metrics.figures)
    assert result.statement and result.figures and isinstance(result.holds, bool)
    assert [c.name for c in result.criteria] == ["mean_success_gap", "worst_task_success"]
    assert result.criterion("mean_success_gap").estimate == pytest.approx(
        metrics["method/mean_success"] - metrics["baseline/mean_success"]
    )
    assert all(isinstance(x, bool) for x in result.sanity.values()) and "finite_metrics" in result.sanity
    assert result.sane, result.sanity
    on_disk = json.loads(layout.claim_file.read_text())
    assert on_disk["verdict"] == result.verdict and on_disk["figures"].keys() == result.figures.keys()
    assert {"mean_success_gap", "min_task_success", "scale_ratio_worst"} <= set(result.figures)
    assert 0.0 <= metrics["method/mean_success"] <= 1.0
    # arm (b) and (c) both start from Eq. (6) on their own random phase; (c) recomputes at its reset
    for arm in ("method", "ars_reset"):
        assert metrics[f"{arm}/c_init_task0"] == 1.0 and metrics[f"{arm}/c_init_task1"] > 1.0
        rbar = np.array([metrics[f"{arm}/rbar_init_task{i}"] for i in range(2)])
        np.testing.assert_allclose(metrics[f"{arm}/c_init_task1"], rbar.max() / rbar[1], rtol=1e-9)
    assert "ars_reset/c_reset1_task1" in metrics.values and "method/c_reset1_task1" not in metrics.values
    # (iv)'s context: arm (c)'s success per task at its last evaluation before the reset, counted in the claim
    last = [r for r in artifacts.history["ars_reset"] if r["step"] < cfg.toy.reset_every][-1]
    before = [metrics[f"ars_reset/success_before_reset1_task{i}"] for i in range(2)]
    assert before == [last["success_task0"], last["success_task1"]]
    assert result.figures["ars_reset_tasks_learned_before_reset"] == sum(s >= 0.5 for s in before)
    model = SPEC.module().load_model(cfg, layout.model_dir)
    assert isinstance(model, torch.nn.Module)
    out = model(torch.zeros(5, 2 + len(cfg.toy.kappa)))
    assert out.shape == (5, 2) and out.abs().max() <= 1.0
    assert (layout.plots_dir / "metaworld_success_per_task.png").is_file()
