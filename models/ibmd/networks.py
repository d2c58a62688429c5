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


# ----------------------------------------------------------------------------- several units side by side


class GroupedLinear(nn.Module):
    """``G`` independent linear layers applied at once: ``y[g] = x[g] @ W[g] + b[g]`` (one batched matmul)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)  # (G, in, out)
        self.bias = nn.Parameter(bias)  # (G, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (G, B, in) -> (G, B, out)
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class GroupedBridgeNet(nn.Module):
    """``G`` BridgeNets of one architecture (one per paired unit: a seed, a grid point) evaluated together.

    Every input carries a leading unit axis: ``x_t`` (G, B, dim), ``step`` (G, B), ``x1``/``z`` alike; unit g
    sees only its own weights, so the units stay independent (a per-unit loss summed over units gives each
    unit the gradient of its own loss). ``member(g)`` is unit g as a plain ``BridgeNet``."""

    def __init__(self, nets: list[BridgeNet]) -> None:
        super().__init__()
        ref = nets[0]
        self.dim, self.cond, self.noise_dim, self.time_dim = ref.dim, ref.cond, ref.noise_dim, ref.time_dim
        self.register_buffer("times", ref.times.clone())
        self.register_buffer("time_features", ref.time_features.clone(), persistent=False)
        self.register_buffer("std_fwd", ref.std_fwd.clone())
        per_net = [[m for m in net.mlp if isinstance(m, nn.Linear)] for net in nets]
        self.layers = nn.ModuleList(
            GroupedLinear(
                torch.stack([linears[i].weight.detach().T for linears in per_net]).contiguous(),
                torch.stack([linears[i].bias.detach() for linears in per_net]).clone(),
            )
            for i in range(len(per_net[0]))
        )

    @property
    def groups(self) -> int:
        return self.layers[0].weight.shape[0]

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
            if z is None:
                raise ValueError("a grouped network with noise inputs needs z (each unit draws its own)")
            parts.append(z)
        h = torch.cat(parts, dim=-1)
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = nn.functional.silu(h)
        return h

    def pred_x0(
        self, x_t: torch.Tensor, step: torch.Tensor, x1: torch.Tensor | None = None, z: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x0_hat = x_t - sigma_fwd(step) eps_hat, per unit."""
        return x_t - self.std_fwd[step].unsqueeze(-1) * self(x_t, step, x1, z)

    def generate(self, x1: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The one-step generator of every unit: x0_hat(x_t = x1, last step, x1, z) (``OneStepGenerator``)."""
        step = torch.full(x1.shape[:2], self.last_step, dtype=torch.long, device=x1.device)
        return self.pred_x0(x1, step, x1 if self.cond else None, z)

    @torch.no_grad()
    def member(self, g: int, net: TeacherConfig, bridge: BridgeConfig) -> BridgeNet:
        """Unit ``g`` as a plain ``BridgeNet`` (the same function, weights copied)."""
        out = BridgeNet(self.dim, net, bridge, self.cond, self.noise_dim)
        linears = [m for m in out.mlp if isinstance(m, nn.Linear)]
        for linear, grouped in zip(linears, self.layers):
            linear.weight.copy_(grouped.weight[g].T)
            linear.bias.copy_(grouped.bias[g])
        return out

    @torch.no_grad()
    def load_members(self, state: dict[str, torch.Tensor], keep: torch.Tensor) -> None:
        """Copy the units where ``keep`` (G,) is True from ``state`` (a ``state_dict`` of this network)."""
        for name, value in self.named_parameters():
            mask = keep.view(-1, *([1] * (value.dim() - 1)))
            value.copy_(torch.where(mask, state[name], value))
