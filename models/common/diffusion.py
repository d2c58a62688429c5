"""Diffusion toolkit shared by the methods: schedules, DDPM/DDIM, and the diffusion bridge.

Pure torch (no Lightning), small and generic. Conventions:

* Steps are integer indices ``0 .. n_steps-1`` in a ``LongTensor`` of shape ``(batch,)`` (or a
  Python int, broadcast to the batch). Schedules are computed in float64 and cast to the data's
  dtype when applied.
* A *model* is any callable ``model(x_t, t) -> output`` with ``t`` a ``LongTensor`` of step
  indices; bind conditioning with a closure (``lambda x, t: net(x, t, cond)``). ``prediction``
  says what it outputs: ``"eps"`` (the noise) or ``"x0"`` (the clean sample).

Contents:

``linear_betas``, ``cosine_betas``, ``sqrt_linear_betas``, ``mirrored_betas``, ``i2sb_betas``
    beta schedules (DDPM linear; Nichol & Dhariwal cosine; linear in sqrt(beta); I2SB's symmetric one).
``DDPMSchedule``
    alpha_bar_t = prod_{s<=t} (1 - beta_s); the forward process q(x_t | x_0) = N(sqrt(ab_t) x_0,
    (1 - ab_t) I); the posterior q(x_{t-1} | x_t, x_0); eps <-> x0 conversions; the epsilon loss.
``ddpm_sample`` / ``ddim_sample``
    ancestral DDPM sampling (Ho et al. 2020) and DDIM (Song et al. 2021; eta=0 deterministic,
    eta=1 with all steps = DDPM with the posterior variance).
``BridgeSchedule``
    the I2SB diffusion bridge between x_0 (step 0) and x_1 (the last step): sigma_fwd^2(t) =
    sum_{s<=t} beta_s, sigma_bwd^2(t) = sum_{s>=t} beta_s, marginal q(x_t | x_0, x_1) =
    N(mu0 x_0 + mu1 x_1, sigma^2) with mu0 = sigma_bwd^2/(sigma_fwd^2+sigma_bwd^2), mu1 = 1 - mu0,
    sigma^2 = sigma_fwd^2 sigma_bwd^2/(sigma_fwd^2+sigma_bwd^2) (a Brownian bridge on the clock
    sigma_fwd^2), its step posterior p(x_{n'} | x_n, x_0) and the I2SB sampler.
``sinusoidal_embedding``
    the transformer-style time embedding diffusion networks take.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import torch

Model = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Prediction = Literal["eps", "x0"]


# ----------------------------------------------------------------------------- beta schedules


def linear_betas(n_steps: int, beta_start: float = 1e-4, beta_end: float = 2e-2) -> torch.Tensor:
    """DDPM's schedule: beta linear from ``beta_start`` to ``beta_end`` (float64)."""
    return torch.linspace(beta_start, beta_end, n_steps, dtype=torch.float64)


def sqrt_linear_betas(n_steps: int, beta_start: float = 1e-4, beta_end: float = 2e-2) -> torch.Tensor:
    """sqrt(beta) linear from sqrt(start) to sqrt(end) (LDM "scaled linear"; I2SB's base schedule)."""
    return torch.linspace(beta_start**0.5, beta_end**0.5, n_steps, dtype=torch.float64) ** 2


def cosine_betas(n_steps: int, s: float = 0.008, max_beta: float = 0.999) -> torch.Tensor:
    """Nichol & Dhariwal (2021): alpha_bar(t) = cos^2(pi/2 (t/T + s)/(1 + s)), betas clipped at ``max_beta``."""
    t = torch.arange(n_steps + 1, dtype=torch.float64) / n_steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    alpha_bar = f / f[0]
    return (1 - alpha_bar[1:] / alpha_bar[:-1]).clamp(max=max_beta)


def mirrored_betas(betas: torch.Tensor) -> torch.Tensor:
    """The first half followed by its mirror image: a schedule symmetric in time (I2SB)."""
    half = betas[: len(betas) // 2]
    return torch.cat([half, half.flip(0)])


def i2sb_betas(n_steps: int = 1000, beta_max: float = 0.3, beta_min: float = 1e-4) -> torch.Tensor:
    """I2SB's bridge schedule: sqrt-linear from ``beta_min`` to ``beta_max / n_steps``, then mirrored."""
    if n_steps % 2:
        raise ValueError("the mirrored I2SB schedule needs an even number of steps")
    return mirrored_betas(sqrt_linear_betas(n_steps, beta_min, beta_max / n_steps))


def make_betas(kind: Literal["linear", "cosine", "sqrt_linear"], n_steps: int, **kwargs: float) -> torch.Tensor:
    """A schedule by name (handy for configs)."""
    return {"linear": linear_betas, "cosine": cosine_betas, "sqrt_linear": sqrt_linear_betas}[kind](n_steps, **kwargs)


# ----------------------------------------------------------------------------- helpers


def _gather(values: torch.Tensor, t: torch.Tensor | int, like: torch.Tensor) -> torch.Tensor:
    """values[t] shaped (batch, 1, 1, ...) to broadcast against ``like``, in its dtype and device."""
    if not torch.is_tensor(t):
        t = torch.full((like.shape[0],), int(t), dtype=torch.long)
    out = values.to(like.device)[t.to(like.device).long()].to(like.dtype)
    return out.reshape(out.shape + (1,) * (like.dim() - out.dim()))


def _noise(like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)


def _steps(t: int, like: torch.Tensor) -> torch.Tensor:
    return torch.full((like.shape[0],), t, dtype=torch.long, device=like.device)


def sinusoidal_embedding(t: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """(batch,) times -> (batch, dim) features [cos(t w_k), sin(t w_k)], w_k = max_period^(-k/half)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1) if dim % 2 else emb


# ----------------------------------------------------------------------------- DDPM


@dataclass(frozen=True)
class DDPMSchedule:
    """The variance-preserving forward process of DDPM for a beta schedule (float64 tables)."""

    betas: torch.Tensor

    def __post_init__(self) -> None:
        if self.betas.dim() != 1 or not ((self.betas > 0) & (self.betas < 1)).all():
            raise ValueError("betas must be a 1-D tensor with values in (0, 1)")

    @classmethod
    def create(
        cls, kind: Literal["linear", "cosine", "sqrt_linear"] = "linear", n_steps: int = 1000, **kwargs: float
    ) -> DDPMSchedule:
        return cls(make_betas(kind, n_steps, **kwargs))

    @property
    def n_steps(self) -> int:
        return len(self.betas)

    @cached_property
    def alphas(self) -> torch.Tensor:
        return 1 - self.betas.double()

    @cached_property
    def alpha_bars(self) -> torch.Tensor:
        """alpha_bar_t = prod_{s<=t} (1 - beta_s)."""
        return torch.cumprod(self.alphas, 0)

    @cached_property
    def alpha_bars_prev(self) -> torch.Tensor:
        """alpha_bar_{t-1}, with alpha_bar_{-1} = 1."""
        return torch.cat([torch.ones(1, dtype=torch.float64), self.alpha_bars[:-1]])

    def alpha_bar(self, t: torch.Tensor | int, like: torch.Tensor) -> torch.Tensor:
        return _gather(self.alpha_bars, t, like)

    def q_sample(
        self,
        x0: torch.Tensor,
        t: torch.Tensor | int,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """x_t ~ q(x_t | x_0) = N(sqrt(ab_t) x_0, (1 - ab_t) I)."""
        noise = _noise(x0, generator) if noise is None else noise
        ab = self.alpha_bar(t, x0)
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def predict_x0(self, x_t: torch.Tensor, t: torch.Tensor | int, eps: torch.Tensor) -> torch.Tensor:
        ab = self.alpha_bar(t, x_t)
        return (x_t - (1 - ab).sqrt() * eps) / ab.sqrt()

    def predict_eps(self, x_t: torch.Tensor, t: torch.Tensor | int, x0: torch.Tensor) -> torch.Tensor:
        ab = self.alpha_bar(t, x_t)
        return (x_t - ab.sqrt() * x0) / (1 - ab).sqrt()

    def posterior(
        self, x0: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor | int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of q(x_{t-1} | x_t, x_0) (variance 0 at t = 0, where x_{-1} := x_0)."""
        beta = _gather(self.betas.double(), t, x_t)
        ab, ab_prev = self.alpha_bar(t, x_t), _gather(self.alpha_bars_prev, t, x_t)
        mean = (ab_prev.sqrt() * beta * x0 + (1 - beta).sqrt() * (1 - ab_prev) * x_t) / (1 - ab)
        return mean, beta * (1 - ab_prev) / (1 - ab)

    def outputs(
        self, out: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor | int, prediction: Prediction
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(x0_hat, eps_hat) from a model output of either parametrisation."""
        if prediction == "eps":
            return self.predict_x0(x_t, t, out), out
        if prediction == "x0":
            return out, self.predict_eps(x_t, t, out)
        raise ValueError(f"unknown prediction {prediction!r}")

    def sample_steps(self, batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        return torch.randint(0, self.n_steps, (batch,), generator=generator, device=device)

    def loss(
        self, model: Model, x0: torch.Tensor, prediction: Prediction = "eps", generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The simple DDPM loss: E_t,eps ||target - model(x_t, t)||^2 (target = eps or x0), t uniform."""
        t = self.sample_steps(x0.shape[0], generator, x0.device)
        noise = _noise(x0, generator)
        out = model(self.q_sample(x0, t, noise), t)
        return torch.mean((out - (noise if prediction == "eps" else x0)) ** 2)

    def to(self, device) -> DDPMSchedule:
        return DDPMSchedule(self.betas.to(device))


@torch.no_grad()
def ddpm_sample(
    model: Model,
    schedule: DDPMSchedule,
    x_T: torch.Tensor,
    prediction: Prediction = "eps",
    generator: torch.Generator | None = None,
    clip_x0: float | None = None,
) -> torch.Tensor:
    """Ancestral sampling x_T -> x_0 with p(x_{t-1} | x_t) = q(x_{t-1} | x_t, x0_hat) (posterior variance).

    ``x_T`` is the starting noise (e.g. ``torch.randn(shape)``); ``clip_x0`` clamps x0_hat.
    """
    x = x_T
    for t in range(schedule.n_steps - 1, -1, -1):
        steps = _steps(t, x)
        x0_hat, _ = schedule.outputs(model(x, steps), x, steps, prediction)
        if clip_x0 is not None:
            x0_hat = x0_hat.clamp(-clip_x0, clip_x0)
        mean, var = schedule.posterior(x0_hat, x, steps)
        x = mean + var.sqrt() * _noise(x, generator) if t > 0 else mean
    return x


def ddim_timesteps(
    n_steps: int, n_sample_steps: int, spacing: Literal["trailing", "leading"] = "trailing"
) -> list[int]:
    """``n_sample_steps`` increasing step indices for DDIM.

    "trailing": evenly spaced, ending at ``n_steps - 1`` (the first model call sees the step x_T was
    drawn for; one step = a single call at n_steps - 1). "leading": diffusers' default,
    ``k * (n_steps // n_sample_steps)`` for k < n_sample_steps, which never starts at the last step
    (under a cosine schedule alpha_bar(T-1) ~ 2e-7 makes the x0 estimate diverge without clipping).
    """
    if not 1 <= n_sample_steps <= n_steps:
        raise ValueError(f"n_sample_steps must be in [1, {n_steps}]")
    if spacing == "leading":
        ratio = n_steps // n_sample_steps
        return [k * ratio for k in range(n_sample_steps)]
    if spacing != "trailing":
        raise ValueError(f"spacing {spacing!r}: expected 'trailing' or 'leading'")
    return sorted({round(n_steps * (i + 1) / n_sample_steps) - 1 for i in range(n_sample_steps)})


@torch.no_grad()
def ddim_sample(
    model: Model,
    schedule: DDPMSchedule,
    x_T: torch.Tensor,
    n_sample_steps: int | None = None,
    eta: float = 0.0,
    prediction: Prediction = "eps",
    generator: torch.Generator | None = None,
    clip_x0: float | None = None,
    timesteps: list[int] | None = None,
) -> torch.Tensor:
    """DDIM from x_T down the sub-sequence ``timesteps`` (default: ``n_sample_steps`` evenly spaced).

    x_s = sqrt(ab_s) x0_hat + sqrt(1 - ab_s - sigma^2) eps_hat + sigma z, with
    sigma = eta sqrt((1 - ab_s)/(1 - ab_t)) sqrt(1 - ab_t/ab_s) and ab_{-1} = 1 after the last step.
    eta = 0 is deterministic (the probability-flow discretisation); eta = 1 over every step is DDPM.
    """
    steps = timesteps if timesteps is not None else ddim_timesteps(schedule.n_steps, n_sample_steps or schedule.n_steps)
    x = x_T
    ab_table = schedule.alpha_bars
    for i in range(len(steps) - 1, -1, -1):
        t, s = steps[i], (steps[i - 1] if i > 0 else -1)
        t_vec = _steps(t, x)
        x0_hat, eps_hat = schedule.outputs(model(x, t_vec), x, t_vec, prediction)
        if clip_x0 is not None:
            x0_hat = x0_hat.clamp(-clip_x0, clip_x0)
            eps_hat = schedule.predict_eps(x, t_vec, x0_hat)
        ab_t = ab_table[t].item()
        ab_s = ab_table[s].item() if s >= 0 else 1.0
        sigma = eta * math.sqrt((1 - ab_s) / (1 - ab_t)) * math.sqrt(max(1 - ab_t / ab_s, 0.0))
        x = math.sqrt(ab_s) * x0_hat + math.sqrt(max(1 - ab_s - sigma**2, 0.0)) * eps_hat
        if sigma > 0:
            x = x + sigma * _noise(x, generator)
    return x


# ----------------------------------------------------------------------------- diffusion bridge (I2SB)


def gaussian_product_coef(
    sigma1: torch.Tensor, sigma2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """N(a, s1^2) * N(b, s2^2) is proportional to N(c1 a + c2 b, v) with
    c1 = s2^2 / (s1^2 + s2^2), c2 = s1^2 / (s1^2 + s2^2), v = s1^2 s2^2 / (s1^2 + s2^2)."""
    denom = sigma1**2 + sigma2**2
    return sigma2**2 / denom, sigma1**2 / denom, sigma1**2 * sigma2**2 / denom


@dataclass(frozen=True)
class BridgeSchedule:
    """The I2SB diffusion bridge between x_0 (step 0, clean) and x_1 (step n-1, corrupted)."""

    betas: torch.Tensor

    def __post_init__(self) -> None:
        if self.betas.dim() != 1 or not (self.betas > 0).all():
            raise ValueError("betas must be a positive 1-D tensor")

    @classmethod
    def i2sb(cls, n_steps: int = 1000, beta_max: float = 0.3, beta_min: float = 1e-4) -> BridgeSchedule:
        return cls(i2sb_betas(n_steps, beta_max, beta_min))

    @property
    def n_steps(self) -> int:
        return len(self.betas)

    @cached_property
    def std_fwd(self) -> torch.Tensor:
        """sigma_fwd(t) = sqrt(sum_{s<=t} beta_s)."""
        return torch.cumsum(self.betas.double(), 0).sqrt()

    @cached_property
    def std_bwd(self) -> torch.Tensor:
        """sigma_bwd(t) = sqrt(sum_{s>=t} beta_s)."""
        return torch.cumsum(self.betas.double().flip(0), 0).flip(0).sqrt()

    @cached_property
    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mu0, mu1, sigma) tables of the marginal q(x_t | x_0, x_1) = N(mu0 x_0 + mu1 x_1, sigma^2)."""
        mu0, mu1, var = gaussian_product_coef(self.std_fwd, self.std_bwd)
        return mu0, mu1, var.sqrt()

    def q_sample(
        self,
        step: torch.Tensor | int,
        x0: torch.Tensor,
        x1: torch.Tensor,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        ot_ode: bool = False,
    ) -> torch.Tensor:
        """x_t ~ q(x_t | x_0, x_1); ``ot_ode`` drops the noise (the deterministic OT-ODE bridge)."""
        mu0, mu1, std = (_gather(v, step, x0) for v in self.coefficients)
        x_t = mu0 * x0 + mu1 * x1
        if not ot_ode:
            x_t = x_t + std * (_noise(x0, generator) if noise is None else noise)
        return x_t

    def pred_x0(self, x_t: torch.Tensor, step: torch.Tensor | int, eps_hat: torch.Tensor) -> torch.Tensor:
        """I2SB's parametrisation: x0_hat = x_t - sigma_fwd(t) eps_hat."""
        return x_t - _gather(self.std_fwd, step, x_t) * eps_hat

    def eps_target(self, x_t: torch.Tensor, step: torch.Tensor | int, x0: torch.Tensor) -> torch.Tensor:
        """The epsilon label (x_t - x_0) / sigma_fwd(t) (I2SB's ``compute_label``)."""
        return (x_t - x0) / _gather(self.std_fwd, step, x_t)

    def posterior(
        self,
        prev_step: int,
        step: int,
        x_n: torch.Tensor,
        x0: torch.Tensor,
        generator: torch.Generator | None = None,
        ot_ode: bool = False,
    ) -> torch.Tensor:
        """x_{prev} ~ p(x_prev | x_n, x_0) of the forward diffusion from x_0 (I2SB ``p_posterior``).

        Between the two steps the forward process adds N(0, sigma_fwd(n)^2 - sigma_fwd(prev)^2);
        the product with N(x_0, sigma_fwd(prev)^2) gives the Gaussian below. No noise at prev = 0.
        """
        std = self.std_fwd
        std_prev, std_delta = std[prev_step], (std[step] ** 2 - std[prev_step] ** 2).sqrt()
        mu_x0, mu_xn, var = gaussian_product_coef(std_prev, std_delta)
        x = mu_x0.item() * x0 + mu_xn.item() * x_n
        if not ot_ode and prev_step > 0:
            x = x + math.sqrt(var.item()) * _noise(x, generator)
        return x

    def sampling_steps(self, nfe: int) -> list[int]:
        """``nfe + 1`` increasing steps from 0 to n-1 (I2SB ``space_indices``): nfe model calls."""
        if not 1 <= nfe <= self.n_steps - 1:
            raise ValueError(f"nfe must be in [1, {self.n_steps - 1}]")
        return sorted({round(float(v)) for v in torch.linspace(0, self.n_steps - 1, nfe + 1)})

    @torch.no_grad()
    def sample(
        self,
        pred_x0_fn: Model,
        x1: torch.Tensor,
        nfe: int,
        generator: torch.Generator | None = None,
        ot_ode: bool = False,
        return_x0_hat: bool = False,
    ) -> torch.Tensor:
        """I2SB sampling from x_1 back to step 0 with ``nfe`` calls of ``pred_x0_fn(x_t, step) -> x0_hat``.

        Returns the final state (at step 0), or the last x0 prediction with ``return_x0_hat``.
        """
        steps = self.sampling_steps(nfe)
        x, x0_hat = x1, x1
        for prev_step, step in zip(steps[-2::-1], steps[:0:-1]):
            x0_hat = pred_x0_fn(x, _steps(step, x))
            x = self.posterior(prev_step, step, x, x0_hat, generator, ot_ode)
        return x0_hat if return_x0_hat else x

    def to(self, device) -> BridgeSchedule:
        return BridgeSchedule(self.betas.to(device))


__all__ = [
    "BridgeSchedule",
    "DDPMSchedule",
    "cosine_betas",
    "ddim_sample",
    "ddim_timesteps",
    "ddpm_sample",
    "gaussian_product_coef",
    "i2sb_betas",
    "linear_betas",
    "make_betas",
    "mirrored_betas",
    "sinusoidal_embedding",
    "sqrt_linear_betas",
]
