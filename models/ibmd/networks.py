"""The bridge network (teacher, fake bridge, student) and the one-step generator built from it.

One MLP architecture serves all three roles, as in the paper, where student and fake bridge are
copies of the teacher: it predicts the I2SB noise eps_hat(x_t, t [, x1] [, z]) and
x0_hat = x_t - sigma_fwd(t) eps_hat. The student adds ``noise_dim`` Gaussian inputs z whose
first-layer weights start at zero, so at initialisation G(z, x1) is exactly the teacher's one-step
prediction x0_hat(x_t = x1, t = last step), whatever z.
"""

from __future__ import annotations

import torch
from torch import nn

from models.common.diffusion import BridgeSchedule, sinusoidal_embedding

from .config import BridgeConfig, TeacherConfig


def network_times(bridge: BridgeConfig) -> torch.Tensor:
    """I2SB's ``noise_levels``: linspace(t0, T, steps) * steps, the time value the network sees per step."""
    return torch.linspace(bridge.t0, bridge.T, bridge.steps) * bridge.steps


class BridgeNet(nn.Module):
    """eps_hat(x_t, step [, x1] [, z]): an MLP over [x_t, x1, sinusoidal(time(step)), z] with SiLU."""

    def __init__(self, dim: int, net: TeacherConfig, bridge: BridgeConfig, cond: bool, noise_dim: int = 0) -> None:
        super().__init__()
        self.dim, self.cond, self.noise_dim, self.time_dim = dim, cond, noise_dim, net.time_dim
        self.register_buffer("times", network_times(bridge))
        # The time features of every step, computed once (row k = sinusoidal(times[k]), the same
        # elementwise values a per-call embedding gives); not saved: it follows from ``times``.
        self.register_buffer("time_features", sinusoidal_embedding(self.times, net.time_dim), persistent=False)
        self.register_buffer(
            "std_fwd", BridgeSchedule.i2sb(bridge.steps, bridge.beta_max, bridge.beta_min).std_fwd.float()
        )
        width = dim * (2 if cond else 1) + net.time_dim + noise_dim
        layers: list[nn.Module] = []
        for _ in range(net.layers):
            layers += [nn.Linear(width, net.hidden), nn.SiLU()]
            width = net.hidden
        self.mlp = nn.Sequential(*layers, nn.Linear(width, dim))

    @property
    def last_step(self) -> int:
        return len(self.times) - 1

    def forward(
        self, x_t: torch.Tensor, step: torch.Tensor, x1: torch.Tensor | None = None, z: torch.Tensor | None = None
    ) -> torch.Tensor:
        parts = [x_t]
        if self.cond:
            if x1 is None:
                raise ValueError("a conditional bridge network needs x1")
            parts.append(x1)
        parts.append(self.time_features[step])
        if self.noise_dim:
            parts.append(torch.randn(len(x_t), self.noise_dim, device=x_t.device) if z is None else z)
        return self.mlp(torch.cat(parts, dim=-1))

    def pred_x0(
        self, x_t: torch.Tensor, step: torch.Tensor, x1: torch.Tensor | None = None, z: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x0_hat = x_t - sigma_fwd(step) eps_hat (I2SB ``compute_pred_x0``)."""
        return x_t - self.std_fwd[step][:, None] * self(x_t, step, x1, z)


def with_noise_inputs(teacher: BridgeNet, net: TeacherConfig, bridge: BridgeConfig, noise_dim: int) -> BridgeNet:
    """A copy of ``teacher`` with ``noise_dim`` extra inputs whose first-layer weights are zero
    (the official ``add_noise_channels``): same function as the teacher at initialisation."""
    student = BridgeNet(teacher.dim, net, bridge, teacher.cond, noise_dim)
    state = {k: v.clone() for k, v in teacher.state_dict().items()}
    first = state["mlp.0.weight"]
    state["mlp.0.weight"] = torch.cat([first, torch.zeros(first.shape[0], noise_dim)], dim=1)
    student.load_state_dict(state)
    return student


class OneStepGenerator(nn.Module):
    """The distilled student G(z, x1) = x0_hat_student(x_t = x1, t = last step, x1, z): one network call.

    ``forward(x1)`` draws z ~ N(0, I) itself; pass ``z`` (shape (n, noise_dim)) for reproducible samples.
    """

    def __init__(self, net: BridgeNet) -> None:
        super().__init__()
        if not net.noise_dim:
            raise ValueError("the one-step generator needs noise inputs (noise_dim > 0)")
        self.net = net

    @property
    def noise_dim(self) -> int:
        return self.net.noise_dim

    def forward(self, x1: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        step = torch.full((len(x1),), self.net.last_step, dtype=torch.long, device=x1.device)
        return self.net.pred_x0(x1, step, x1 if self.net.cond else None, z)
