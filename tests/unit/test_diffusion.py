"""models.common.diffusion against closed forms: schedules, q(x_t|x_0), posteriors, DDPM/DDIM, the bridge."""

from __future__ import annotations

import math

import pytest
import torch

from models.common.diffusion import (
    BridgeSchedule,
    DDPMSchedule,
    cosine_betas,
    ddim_sample,
    ddim_timesteps,
    ddpm_sample,
    gaussian_product_coef,
    i2sb_betas,
    linear_betas,
    sinusoidal_embedding,
    sqrt_linear_betas,
)
from models.common.runtime import set_threads

set_threads()  # tiny tensors: OpenMP threads beyond the free cores only add contention

pytestmark = pytest.mark.numerics  # closed forms against float kernels: rerun under a restricted ISA


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- schedules


def test_linear_schedule_alpha_bar_is_the_product_of_one_minus_beta():
    sched = DDPMSchedule.create("linear", 1000)
    betas = [1e-4 + (2e-2 - 1e-4) * i / 999 for i in range(1000)]
    for t in (0, 1, 10, 500, 999):
        assert sched.alpha_bars[t].item() == pytest.approx(math.prod(1 - b for b in betas[: t + 1]), rel=1e-10)
    assert sched.alpha_bars_prev[0] == 1 and torch.equal(sched.alpha_bars_prev[1:], sched.alpha_bars[:-1])


def test_cosine_schedule_reproduces_its_alpha_bar_curve():
    n, s = 200, 0.008
    sched = DDPMSchedule(cosine_betas(n, s))

    def f(t):
        return math.cos((t / n + s) / (1 + s) * math.pi / 2) ** 2

    for t in (0, 50, 100, 150, 190):  # before the 0.999 clip bites at the very end
        assert sched.alpha_bars[t].item() == pytest.approx(f(t + 1) / f(0), rel=1e-9)
    assert cosine_betas(n, s).max() <= 0.999


def test_i2sb_schedule_is_symmetric_sqrt_linear_and_validated():
    betas = i2sb_betas(1000, beta_max=0.3)
    assert torch.equal(betas, betas.flip(0))
    base = sqrt_linear_betas(1000, 1e-4, 0.3 / 1000)
    assert torch.equal(betas[:500], base[:500])
    assert betas[0].item() == pytest.approx(1e-4)
    assert torch.allclose(base.sqrt().diff(), base.sqrt().diff()[0].expand(999))  # linear in sqrt(beta)
    with pytest.raises(ValueError):
        DDPMSchedule(torch.tensor([0.1, 1.2]))
    with pytest.raises(ValueError):
        i2sb_betas(999)


# ----------------------------------------------------------------------------- DDPM forward process


def test_q_sample_moments_match_the_closed_form():
    sched = DDPMSchedule(linear_betas(1000))
    x0 = torch.full((200_000,), 1.5)
    for t in (0, 250, 999):
        x_t = sched.q_sample(x0, t, generator=gen(t))
        ab = sched.alpha_bars[t].item()
        assert x_t.mean().item() == pytest.approx(math.sqrt(ab) * 1.5, abs=4 * math.sqrt((1 - ab) / 2e5))
        assert x_t.var().item() == pytest.approx(1 - ab, rel=0.02)


def test_eps_and_x0_conversions_invert_each_other():
    sched = DDPMSchedule.create("cosine", 100)
    x0, eps = torch.randn(8, 3, generator=gen(1)), torch.randn(8, 3, generator=gen(2))
    t = torch.arange(8) * 12
    x_t = sched.q_sample(x0, t, eps)
    assert torch.allclose(sched.predict_x0(x_t, t, eps), x0, atol=1e-4)
    assert torch.allclose(sched.predict_eps(x_t, t, x0), eps, atol=1e-4)


def test_posterior_matches_gaussian_conditioning_of_the_joint():
    """q(x_{t-1} | x_t, x_0) from the joint N([x_{t-1}, x_t]) by the conditioning formula."""
    sched = DDPMSchedule(linear_betas(50, 1e-3, 0.2))
    x0 = torch.tensor([0.7], dtype=torch.float64)
    x_t = torch.tensor([-0.4], dtype=torch.float64)
    for t in (1, 10, 49):
        ab_prev, beta = sched.alpha_bars[t - 1].item(), sched.betas[t].item()
        alpha = 1 - beta
        m_prev, v_prev = math.sqrt(ab_prev) * 0.7, 1 - ab_prev
        m_t, v_t, cov = math.sqrt(alpha) * m_prev, alpha * v_prev + beta, math.sqrt(alpha) * v_prev
        mean_ref = m_prev + cov / v_t * (-0.4 - m_t)
        var_ref = v_prev - cov**2 / v_t
        mean, var = sched.posterior(x0, x_t, t)
        assert mean.item() == pytest.approx(mean_ref, rel=1e-10)
        assert var.item() == pytest.approx(var_ref, rel=1e-10)
    mean, var = sched.posterior(x0, x_t, 0)  # x_{-1} := x_0
    assert mean.item() == pytest.approx(0.7) and var.item() == 0


def test_ddpm_loss_is_zero_for_the_oracle_and_positive_otherwise():
    sched = DDPMSchedule(linear_betas(100, 1e-3, 0.1))
    x0 = torch.randn(64, 2, generator=gen(3))
    oracle = lambda x_t, t: x0
    assert sched.loss(oracle, x0, prediction="x0", generator=gen(4)).item() == 0
    assert sched.loss(lambda x_t, t: torch.zeros_like(x_t), x0, "eps", gen(4)).item() > 0.5


# ----------------------------------------------------------------------------- samplers


def true_noise_model(sched: DDPMSchedule, x0: torch.Tensor):
    """Returns the exact noise of x_t given the (known) x_0: eps = (x_t - sqrt(ab) x_0)/sqrt(1 - ab)."""
    return lambda x_t, t: sched.predict_eps(x_t, t, x0)


def test_ddim_eta0_is_deterministic_and_recovers_x0_from_the_true_noise():
    sched = DDPMSchedule(linear_betas(1000))
    x0 = torch.randn(16, 4, generator=gen(5), dtype=torch.float64)
    x_T = sched.q_sample(x0, 999, generator=gen(6))
    for n in (1, 10, 1000):
        a = ddim_sample(true_noise_model(sched, x0), sched, x_T, n, eta=0.0, generator=gen(7))
        b = ddim_sample(true_noise_model(sched, x0), sched, x_T, n, eta=0.0, generator=gen(8))
        assert torch.equal(a, b)  # no randomness at eta = 0
        assert torch.allclose(a, x0, atol=1e-9)


def test_leading_ddim_timesteps_are_diffusers_default():
    assert ddim_timesteps(100, 16, "leading") == [6 * k for k in range(16)]  # 0, 6, ..., 90
    assert ddim_timesteps(1000, 1, "leading") == [0]
    with pytest.raises(ValueError, match="spacing"):
        ddim_timesteps(10, 2, "middle")


def test_ddim_timesteps_are_evenly_spaced_and_end_at_the_last_step():
    assert ddim_timesteps(1000, 1) == [999]
    assert ddim_timesteps(1000, 10) == list(range(99, 1000, 100))
    assert ddim_timesteps(7, 7) == list(range(7)) and len(ddim_timesteps(1000, 333)) == 333
    with pytest.raises(ValueError):
        ddim_timesteps(10, 11)


def test_ddim_with_eta1_over_all_steps_is_ddpm():
    sched = DDPMSchedule(linear_betas(100, 1e-3, 0.15))
    model = lambda x_t, t: 0.3 * x_t + 0.01 * t.double()[:, None]  # any eps-model
    x_T = torch.randn(32, 2, generator=gen(9), dtype=torch.float64)
    a = ddim_sample(model, sched, x_T, 100, eta=1.0, generator=gen(10))
    b = ddpm_sample(model, sched, x_T, generator=gen(10))
    assert torch.allclose(a, b, atol=1e-10)


def gaussian_denoiser(sched: DDPMSchedule, m: float, s: float):
    """E[x_0 | x_t] for data N(m, s^2): the exact x0-prediction."""

    def x0_hat(x_t, t):
        ab = sched.alpha_bar(t, x_t)
        return m + ab.sqrt() * s**2 / (ab * s**2 + 1 - ab) * (x_t - ab.sqrt() * m)

    return x0_hat


def test_samplers_with_the_exact_denoiser_produce_the_data_distribution():
    sched = DDPMSchedule(linear_betas(1000))
    m, s = 1.0, 0.5
    x_T = torch.randn(10_000, 1, generator=gen(11), dtype=torch.float64)
    model = gaussian_denoiser(sched, m, s)
    x = ddpm_sample(model, sched, x_T, prediction="x0", generator=gen(12))
    assert x.mean().item() == pytest.approx(m, abs=0.02)
    assert x.std().item() == pytest.approx(s, rel=0.02)
    # DDIM (eta = 0) discretises the probability-flow ODE: its error shrinks with the step count.
    errors = []
    for n in (10, 100, 1000):
        x = ddim_sample(model, sched, x_T, n, eta=0.0, prediction="x0")
        assert x.mean().item() == pytest.approx(m, abs=0.02)
        errors.append(abs(x.std().item() - s))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.02 * s


# ----------------------------------------------------------------------------- bridge


def test_gaussian_product_coefficients():
    c1, c2, v = gaussian_product_coef(torch.tensor(0.3), torch.tensor(0.4))
    assert c1.item() == pytest.approx(0.16 / 0.25) and c2.item() == pytest.approx(0.09 / 0.25)
    assert v.item() == pytest.approx(0.09 * 0.16 / 0.25)


def test_bridge_coefficients_closed_forms():
    bridge = BridgeSchedule.i2sb(1000, 0.3)
    mu0, mu1, std = bridge.coefficients
    f2, b2 = bridge.std_fwd**2, bridge.std_bwd**2
    assert torch.allclose(mu0 + mu1, torch.ones_like(mu0))
    assert torch.allclose(std**2, f2 * b2 / (f2 + b2))
    assert torch.allclose(f2 + b2, bridge.betas.sum() + bridge.betas)  # beta_t is in both sums
    assert torch.allclose(bridge.std_fwd, bridge.std_bwd.flip(0))  # symmetric schedule
    total = bridge.betas.sum().item()
    # Endpoints: step 0 sits at x_0, the last step at x_1, each with variance ~beta_endpoint.
    assert mu0[0].item() == pytest.approx(1, abs=2e-3) and mu1[-1].item() == pytest.approx(1, abs=2e-3)
    assert std[0].item() ** 2 == pytest.approx(1e-4, rel=2e-3) and std[-1].item() ** 2 == pytest.approx(1e-4, rel=2e-3)
    # Middle: mu0 = mu1 = 1/2 and variance = total/4 (a Brownian bridge's peak).
    assert mu0[499].item() == pytest.approx(0.5, abs=1e-3)
    assert std[499].item() ** 2 == pytest.approx(total / 4, rel=2e-3)


def test_bridge_q_sample_moments_by_monte_carlo():
    bridge = BridgeSchedule.i2sb(1000, 1.0)
    mu0, mu1, std = bridge.coefficients
    x0, x1 = torch.full((200_000,), -1.0), torch.full((200_000,), 2.0)
    for step in (0, 300, 700, 999):
        x_t = bridge.q_sample(step, x0, x1, generator=gen(step))
        assert x_t.mean().item() == pytest.approx(
            -mu0[step].item() + 2 * mu1[step].item(), abs=4 * std[step].item() / 400
        )
        assert x_t.std().item() == pytest.approx(std[step].item(), rel=0.01)
        assert torch.allclose(
            bridge.q_sample(step, x0[:4], x1[:4], ot_ode=True), (-mu0[step] + 2 * mu1[step]).float().expand(4)
        )


def test_bridge_eps_parametrisation_round_trips():
    bridge = BridgeSchedule.i2sb(100, 0.3)
    x0, x1 = torch.randn(10, 2, generator=gen(1)), torch.randn(10, 2, generator=gen(2))
    step = torch.arange(10) * 10
    x_t = bridge.q_sample(step, x0, x1, generator=gen(3))
    assert torch.allclose(bridge.pred_x0(x_t, step, bridge.eps_target(x_t, step, x0)), x0, atol=1e-5)


def test_bridge_posterior_keeps_the_bridge_marginals():
    """x_n ~ q(x_n | x0, x1) then x_prev ~ p(x_prev | x_n, x0) is again distributed as q(x_prev | x0, x1)
    (Markov property of the bridge), up to the beta_t both sigma sums count (relative ~beta/total)."""
    bridge = BridgeSchedule.i2sb(1000, 1.0)
    mu0, mu1, std = bridge.coefficients
    x0, x1 = torch.full((200_000,), 1.0, dtype=torch.float64), torch.full((200_000,), -1.0, dtype=torch.float64)
    for prev, n in ((100, 400), (500, 999), (0, 600)):
        x_n = bridge.q_sample(n, x0, x1, generator=gen(n))
        x_prev = bridge.posterior(prev, n, x_n, x0, generator=gen(prev + 1))
        assert x_prev.mean().item() == pytest.approx((mu0[prev] - mu1[prev]).item(), abs=3e-3)
        if prev > 0:
            assert x_prev.std().item() == pytest.approx(std[prev].item(), rel=0.01)


def test_bridge_sampler_with_the_true_x0():
    bridge = BridgeSchedule.i2sb(1000, 0.3)
    x0 = torch.randn(20_000, 2, generator=gen(1), dtype=torch.float64)
    x1 = x0 + 1.0
    oracle = lambda x_t, t: x0
    mu0, mu1, std = bridge.coefficients
    # OT-ODE: the deterministic path stays on the bridge mean mu0 x0 + mu1 x1 and ends at step 0.
    for nfe in (1, 5, 50):
        x = bridge.sample(oracle, x1, nfe, ot_ode=True)
        assert torch.allclose(x, mu0[0] * x0 + mu1[0] * x1, atol=1e-3)
        assert torch.equal(bridge.sample(oracle, x1, nfe, ot_ode=True, return_x0_hat=True), x0)
    # One NFE is the posterior from the last step to step 0.
    assert torch.allclose(bridge.sample(oracle, x1, 1), bridge.posterior(0, 999, x1, x0))
    # Stochastic sampling with the true x0 ends at N(x0 + ~0, ~beta_0): within 0.02 of x0.
    x = bridge.sample(oracle, x1, 20, generator=gen(3))
    assert (x - x0).abs().max().item() < 0.02
    assert bridge.sampling_steps(4) == [0, 250, 500, 749, 999]
    with pytest.raises(ValueError):
        bridge.sampling_steps(1000)


def test_sinusoidal_embedding():
    t = torch.tensor([0, 5, 999])
    emb = sinusoidal_embedding(t, 16)
    assert emb.shape == (3, 16)
    assert torch.allclose(emb[0, :8], torch.ones(8)) and torch.allclose(emb[0, 8:], torch.zeros(8))
    assert emb[1, 0].item() == pytest.approx(math.cos(5.0)) and emb[1, 8].item() == pytest.approx(math.sin(5.0))
    assert sinusoidal_embedding(t, 7).shape == (3, 7)
