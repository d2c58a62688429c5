"""ARS's exact speed-ups give the same numbers as the code they replace: metaworld's observation quaternion and
finger-contact test (bit for bit: same float operations), the twin critics as two heads of one ensemble, and the
fused (``_foreach``) Adam (both to float32 rounding: other kernels, other summation orders)."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.ars.algorithm import MemberAdam  # noqa: E402
from models.ars.data import QUAT_FRAMES, MetaWorldTasks, quat_from_matrix, speed_up_env  # noqa: E402
from models.ars.networks import EnsembleMLP, TwinCritic  # noqa: E402


def test_quat_from_matrix_is_scipys_bit_for_bit():
    rng = np.random.default_rng(0)
    matrices = np.concatenate(
        [
            Rotation.random(3000, random_state=1).as_matrix(),  # every branch of Markley's method
            Rotation.from_rotvec(rng.normal(0, 1e-3, (500, 3))).as_matrix(),  # a block at rest: trace branch
            Rotation.from_rotvec(np.pi * np.eye(3)).as_matrix(),  # half turns: the diagonal branches
            np.eye(3)[None],
        ]
    )
    for m in matrices:
        assert np.array_equal(quat_from_matrix(m), Rotation.from_matrix(m).as_quat())
    skewed = matrices[0] * 1.001  # scipy re-orthogonalises this one first: the fallback hands it over
    assert np.array_equal(quat_from_matrix(skewed), Rotation.from_matrix(skewed).as_quat())
    with pytest.raises(ValueError, match="determinant"):
        quat_from_matrix(-np.eye(3))  # a reflection: scipy's own error


def test_fast_metaworld_envs_are_bit_identical_to_metaworld():
    """Observations, rewards and success of the patched envs equal metaworld's own, step for step, under
    random actions and the scripted grasping policies (so the finger-contact test does fire)."""
    from metaworld.policies import SawyerPickPlaceV3Policy, SawyerPushV3Policy

    tasks = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "peg-insert-side-v3")
    assert set(QUAT_FRAMES) == set(tasks)
    envs = MetaWorldTasks(tasks, 2, 0, 100, fast=False)  # two identical members: 0 as shipped, 1 patched
    for i, name in enumerate(tasks):
        speed_up_env(envs.envs[1][i], name)
    policies = {"push-v3": SawyerPushV3Policy(), "pick-place-v3": SawyerPickPlaceV3Policy()}
    rng = np.random.default_rng(0)
    touching = 0
    for episode in range(2):
        obs = envs.reset()
        assert np.array_equal(obs[0], obs[1])
        for _ in range(100):
            action = rng.uniform(-1, 1, (1, len(tasks), 4))
            if episode:  # scripted policies: grasps, i.e. contacts of both finger pads with the object
                for i, name in enumerate(tasks):
                    if name in policies:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            action[0, i] = policies[name].get_action(obs[0, i, :39])
            result = envs.step(np.repeat(action, 2, axis=0))
            for array in result[:4]:
                assert np.array_equal(array[0], array[1])
            obs = result[0]
            for i in (1, 2):  # the tasks whose info reads the contact test
                shipped, fast = envs.envs[0][i].unwrapped, envs.envs[1][i].unwrapped
                assert shipped.touching_main_object == fast.touching_main_object
                touching += fast.touching_main_object
    assert touching > 0  # the contact test was exercised on both outcomes


@pytest.mark.numerics
def test_twin_critic_heads_equal_two_separate_mlps():
    """Same initial weights (same draw order), same outputs and gradients as Q1 and Q2 as separate MLPs."""
    E, obs_dim, act_dim, hidden = 3, 5, 2, (8, 8)
    torch.manual_seed(0)
    fused = TwinCritic(E, obs_dim, act_dim, hidden)
    torch.manual_seed(0)
    q1, q2 = (EnsembleMLP(E, obs_dim + act_dim, hidden, 1) for _ in range(2))
    for h, separate in enumerate((q1, q2)):
        for layer, ref in zip(fused.q.stack, separate.stack):
            assert torch.equal(layer.weight[:, h], ref.weight) and torch.equal(layer.bias[:, h], ref.bias)  # a copy
    obs, act = torch.randn(E, 16, obs_dim), torch.randn(E, 16, act_dim, requires_grad=True)
    out1, out2 = fused(obs, act)
    act_ref = act.detach().clone().requires_grad_(True)
    x = torch.cat([obs, act_ref], -1)
    ref1, ref2 = q1(x).squeeze(-1), q2(x).squeeze(-1)
    close = {"rtol": 1e-5, "atol": 1e-6}  # one batched matmul against two: another kernel, another summation order
    torch.testing.assert_close(out1, ref1, **close), torch.testing.assert_close(out2, ref2, **close)
    (out1.square().sum() + out2.sum()).backward()
    (ref1.square().sum() + ref2.sum()).backward()
    torch.testing.assert_close(act.grad, act_ref.grad, **close)
    for h, separate in enumerate((q1, q2)):
        for layer, ref in zip(fused.q.stack, separate.stack):
            torch.testing.assert_close(layer.weight.grad[:, h], ref.weight.grad, **close)
    # detach: the input gradient only, no weight gradients
    fused.zero_grad()
    act.grad = None
    fused(obs, act, detach=True)[0].sum().backward()
    assert act.grad is not None and all(p.grad is None for p in fused.parameters())
    torch.manual_seed(5)
    fused.reset_member(1)
    torch.manual_seed(5)
    q1.reset_member(1)
    q2.reset_member(1)
    assert torch.equal(fused.q.stack[0].weight[1, 1], q2.stack[0].weight[1])  # re-drawn in the same order


def _adam_loop(params, m_state, v_state, t, lr, mask, betas=(0.9, 0.999), eps=1e-8):
    """The per-parameter Adam loop that ``MemberAdam.step`` fuses (the code it replaced)."""
    b1, b2 = betas
    live_all = bool(mask.all())
    t += mask.float()
    tt = t.clamp(min=1)
    step_size, root_bc2 = lr / (1 - b1**tt), (1 - b2**tt).sqrt()
    for p, m, v in zip(params, m_state, v_state):
        shape = (-1,) + (1,) * (p.dim() - 1)
        g = p.grad if live_all else p.grad * mask.view(shape)
        keep = None if live_all else (m.clone(), v.clone())
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        if keep is not None:
            m.copy_(torch.where(mask.view(shape), m, keep[0]))
            v.copy_(torch.where(mask.view(shape), v, keep[1]))
        update = m * step_size.view(shape) / (v.sqrt() / root_bc2.view(shape) + eps)
        p.data.sub_(update if live_all else update * mask.view(shape))


@pytest.mark.numerics
def test_fused_member_adam_is_the_loop_to_float_rounding():
    torch.manual_seed(0)
    shapes = [(3, 4, 5), (3, 1, 5), (3, 2)]
    mine = [torch.randn(s, requires_grad=True) for s in shapes]
    ref = [p.detach().clone().requires_grad_(True) for p in mine]
    lr = torch.tensor([0.5, 0.1, 0.01])
    opt = MemberAdam(mine, 3, lr.tolist())
    m_state, v_state, t = [torch.zeros(s) for s in shapes], [torch.zeros(s) for s in shapes], torch.zeros(3)
    for step in range(6):
        mask = torch.tensor([True, step % 2 == 0, step != 3])
        for params in (mine, ref):
            for p in params:
                p.grad = None
            sum((p**3).sum() for p in params).backward()
        opt.step(mask)
        _adam_loop(ref, m_state, v_state, t, lr, mask)
        for a, b in zip(mine + opt.m + opt.v, ref + m_state + v_state):  # _foreach kernels: float rounding only
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
