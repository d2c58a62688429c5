"""Tests of ARS's core pieces: Eq. (6) with the 0.01 floor, scales applied at sampling time on raw buffers,
full resets (parameters, temperature, Adam state), per-task buffer isolation, and a smoke pipeline run."""

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
            assert torch.equal(after0[k], after0["critic." + k[len("target."):]])
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
            (p ** 3).sum().backward()
        mine.step(torch.tensor([False, True]))
        theirs.step()
    torch.testing.assert_close(w.detach()[1], ref.detach())  # same as a separate torch Adam
    torch.testing.assert_close(w.detach()[0], frozen)  # masked member unchanged


def test_smoke_pipeline(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    data = steps.prepare(SPEC, cfg, tmp_path)
    from models.ars.pipeline import read_metaworld_run, run_dir_name

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
    assert set(artifacts.history) >= {"method", "baseline"}
    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    assert not metrics.non_finite() and result.sane, result.sanity
    assert {"mean_success_gap", "min_task_success"} <= set(result.figures)
    assert 0.0 <= metrics["method/mean_success"] <= 1.0
    assert metrics["method/c_init_task0"] == 1.0 and metrics["method/c_init_task1"] > 1.0
    model = SPEC.module().load_model(cfg, tmp_path / "outputs" / "ars" / "model")
    out = model(torch.zeros(5, 2 + len(cfg.toy.kappa)))
    assert out.shape == (5, 2) and out.abs().max() <= 1.0
    assert (tmp_path / "outputs" / "ars" / "plots" / "metaworld_success_per_task.png").is_file()
