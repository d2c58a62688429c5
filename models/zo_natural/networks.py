"""The black-box "chip" and its ideal software twin: one class, defects held as buffers.

Every network keeps all trainable parameters in one flat vector ``theta`` (what a ZO optimiser
perturbs) split into ``blocks`` (the blocks of the block-diagonal Fisher), and evaluates many
parameter settings at once: ``batched_logits(thetas[P, N], x[B, d]) -> logits[P, B, C]``. That
is how the chip answers the Q + 1 queries of one ZO step in a single call. The defect buffers
are identities on the twin and drawn once per seed on the chip; they travel in the state_dict,
so a saved chip reloads with its fabrication errors.
"""

from __future__ import annotations

import abc
import copy

import numpy as np
import torch
from torch import nn

DTYPE = torch.float64  # forward differences with mu = 1e-3 need double precision


def _crosstalk(n: int, strength: float, generator: torch.Generator) -> torch.Tensor:
    """(1 - c) I + c R with R random row-stochastic: every output leaks into the others."""
    mix = torch.rand(n, n, generator=generator, dtype=DTYPE)
    mix = mix / mix.sum(1, keepdim=True)
    return (1 - strength) * torch.eye(n, dtype=DTYPE) + strength * mix


class ChipNetwork(nn.Module, abc.ABC):
    """Base: flat parameters, block structure, batched evaluation, defect drawing."""

    theta: nn.Parameter
    blocks: list[tuple[int, int]]  # (start, stop) of each Fisher block in theta

    @property
    def n_params(self) -> int:
        return self.theta.numel()

    @abc.abstractmethod
    def batched_logits(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """logits[P, B, C] for P parameter vectors at once."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.batched_logits(self.theta[None], x.to(self.theta.dtype))[0]

    def logit_jacobian(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(B, C, N) Jacobian of the logits at one parameter vector (used on the twin only)."""
        return torch.func.jacfwd(lambda t: self.batched_logits(t[None], x)[0])(theta.detach())

    @abc.abstractmethod
    def draw_defects(self, chip_cfg, generator: torch.Generator) -> ChipNetwork:
        """This network's chip: the same parameters with fabrication defects drawn from ``generator``."""

    def nominal(self) -> ChipNetwork:
        """The ideal software twin: same parameters, every defect buffer reset to identity."""
        twin = copy.deepcopy(self)
        fresh = type(self)(**self.init_args)
        for name, buf in fresh.named_buffers():
            twin.get_buffer(name).copy_(buf)
        return twin


class MeshONN(ChipNetwork):
    """Real-valued toy optical network: Clements meshes of Givens rotations with a real modReLU.

    A mesh on K channels has L columns; column l rotates the channel pairs (i, i+1) with
    i = l mod 2, l mod 2 + 2, ... by one angle each (one MZI). Between meshes the real modReLU
    sign(z) relu(g |z| - b) acts; the logits are the output intensities z^2 of the central C
    channels, mixed by the read-out crosstalk. Chip defects: phase gain and offset per MZI,
    amplitude loss per channel and column, activation gain per channel, read-out crosstalk.
    """

    def __init__(self, width: int, columns: int, n_meshes: int, n_classes: int, threshold: float) -> None:
        super().__init__()
        if n_classes > width:
            raise ValueError(f"a mesh of width {width} cannot read out {n_classes} classes")
        self.init_args = dict(width=width, columns=columns, n_meshes=n_meshes, n_classes=n_classes, threshold=threshold)
        self.width, self.columns, self.n_meshes = width, columns, n_meshes
        self.n_classes, self.threshold = n_classes, threshold
        tops = [np.arange(col % 2, width - 1, 2) for col in range(columns)]
        column_of = np.concatenate([np.full(len(t), col) for col, t in enumerate(tops)])
        top = np.concatenate(tops)
        self.per_mesh = len(top)
        # Index lists of the four entries (c, -s, s, c) every MZI writes into its column matrix.
        self.register_buffer("_col", torch.as_tensor(np.tile(column_of, 4)), persistent=False)
        self.register_buffer("_row", torch.as_tensor(np.concatenate([top, top, top + 1, top + 1])), persistent=False)
        self.register_buffer("_cin", torch.as_tensor(np.concatenate([top, top + 1, top, top + 1])), persistent=False)
        n = n_meshes * self.per_mesh
        self.theta = nn.Parameter(torch.zeros(n, dtype=DTYPE))
        self.blocks = [(m * self.per_mesh, (m + 1) * self.per_mesh) for m in range(n_meshes)]
        self.register_buffer("angle_gain", torch.zeros(n, dtype=DTYPE))
        self.register_buffer("angle_offset", torch.zeros(n, dtype=DTYPE))
        self.register_buffer("transmission", torch.ones(n_meshes, columns, width, dtype=DTYPE))
        self.register_buffer("act_gain", torch.ones(max(n_meshes - 1, 1), width, dtype=DTYPE))
        self.register_buffer("crosstalk", torch.eye(n_classes, dtype=DTYPE))

    def init_theta(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.theta.copy_((torch.rand(self.n_params, generator=generator, dtype=DTYPE) * 2 - 1) * np.pi)

    def draw_defects(self, chip_cfg, generator: torch.Generator) -> MeshONN:
        n, g = self.n_params, generator
        with torch.no_grad():
            self.angle_gain.copy_(chip_cfg.angle_gain_std * torch.randn(n, generator=g, dtype=DTYPE))
            self.angle_offset.copy_(chip_cfg.angle_offset_std * torch.randn(n, generator=g, dtype=DTYPE))
            loss = torch.rand(self.transmission.shape, generator=g, dtype=DTYPE)
            self.transmission.copy_(1 - chip_cfg.loss_max * loss)
            gain = torch.randn(self.act_gain.shape, generator=g, dtype=DTYPE)
            self.act_gain.copy_(1 + chip_cfg.activation_gain_std * gain)
            self.crosstalk.copy_(_crosstalk(self.n_classes, chip_cfg.crosstalk, g))
        return self

    def _phases(self, thetas: torch.Tensor) -> torch.Tensor:
        """(P, n_meshes, per_mesh) phases the chip realises for the programmed angles."""
        return (thetas * (1 + self.angle_gain) + self.angle_offset).view(len(thetas), self.n_meshes, self.per_mesh)

    def column_matrices(self, thetas: torch.Tensor) -> torch.Tensor:
        """(P, n_meshes, L, K, K) lossy column transfers D_l R_l (R_l: that column's Givens rotations)."""
        P, K, L = thetas.shape[0], self.width, self.columns
        phases = self._phases(thetas)
        c, s = torch.cos(phases), torch.sin(phases)
        values = torch.cat([c, -s, s, c], dim=-1)  # (P, M, 4 * per_mesh)
        eye = torch.eye(K, dtype=thetas.dtype, device=thetas.device).expand(P, self.n_meshes, L, K, K)
        # Overwrite the identity at each MZI's four entries; out-of-place so torch.func can trace it.
        pi = torch.arange(P, device=thetas.device)[:, None, None]
        mi = torch.arange(self.n_meshes, device=thetas.device)[None, :, None]
        cols = eye.index_put((pi, mi, self._col, self._row, self._cin), values)
        return cols * self.transmission[None, :, :, :, None]  # loss on each output channel of a column

    def mesh_matrices(self, thetas: torch.Tensor) -> torch.Tensor:
        """(P, n_meshes, K, K) transfer matrices U = D_L R_L ... D_1 R_1 of every mesh."""
        cols = self.column_matrices(thetas)
        P, K = thetas.shape[0], self.width
        # Ordered product of the L column matrices by pairwise reduction (log L batched matmuls).
        while cols.shape[2] > 1:
            if cols.shape[2] % 2:
                pad = torch.eye(K, dtype=cols.dtype, device=cols.device).expand(P, self.n_meshes, 1, K, K)
                cols = torch.cat([cols, pad], 2)
            cols = cols[:, :, 1::2] @ cols[:, :, 0::2]
        return cols[:, :, 0]

    def _activation(self, z: torch.Tensor, mesh: int) -> torch.Tensor:
        """Real modReLU after mesh ``mesh - 1``, with the chip's per-channel gain."""
        return torch.sign(z) * torch.relu(self.act_gain[mesh - 1] * z.abs() - self.threshold)

    def _readout(self, z: torch.Tensor) -> torch.Tensor:
        """Intensities of the C central channels, mixed by the read-out crosstalk."""
        first = (self.width - self.n_classes) // 2
        return (z[..., first : first + self.n_classes] ** 2) @ self.crosstalk.T

    def batched_logits(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        unitaries = self.mesh_matrices(thetas)
        z = torch.einsum("pkj,bj->pbk", unitaries[:, 0], x)
        for m in range(1, self.n_meshes):
            z = torch.einsum("pkj,pbj->pbk", unitaries[:, m], self._activation(z, m))
        return self._readout(z)

    def logit_jacobian(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(B, C, N) logit Jacobian in closed form (forward-mode AD through the mesh is ~20x slower).

        For MZI k in column l on channels (i, i+1): dU/dtheta_k = (S_l D_l)[:, i:i+2] E_k P_l[i:i+2, :],
        with P_l / S_l the products of the columns before / after l and E_k the derivative of the
        2x2 rotation times the phase gain 1 + g_k. Per sample, dlogit/dU_m = (dlogit/dz_m) h_m^T.
        """
        theta = theta.detach()
        K, L, M = self.width, self.columns, self.n_meshes
        cols = self.column_matrices(theta[None])[0]  # (M, L, K, K)
        eye = torch.eye(K, dtype=theta.dtype, device=theta.device).expand(M, K, K)
        prefix, suffix = [eye], [eye]
        for col in range(L - 1):
            prefix.append(cols[:, col] @ prefix[-1])  # P_l = C_{l-1} ... C_0
            suffix.insert(0, suffix[0] @ cols[:, L - 1 - col])  # S_l = C_{L-1} ... C_{l+1}
        prefix, suffix = torch.stack(prefix, 1), torch.stack(suffix, 1)  # (M, L, K, K)
        unitaries = cols[:, L - 1] @ prefix[:, L - 1]
        col_k, top_k = self._col[: self.per_mesh], self._row[: self.per_mesh]
        pair = torch.stack([top_k, top_k + 1], 1)  # (n, 2) channels of each MZI
        left = (suffix @ torch.diag_embed(self.transmission))[:, col_k]  # S_l D_l per MZI: (M, n, K, K)
        a = torch.gather(left, 3, pair[None, :, None, :].expand(M, -1, K, 2))  # (M, n, K, 2)
        b = torch.gather(prefix[:, col_k], 2, pair[None, :, :, None].expand(M, -1, 2, K))  # (M, n, 2, K)
        phases = self._phases(theta[None])[0]
        c, s = torch.cos(phases), torch.sin(phases)
        gain = (1 + self.angle_gain).view(M, -1)[..., None, None]
        rotation_grad = torch.stack([torch.stack([-s, -c], -1), torch.stack([c, -s], -1)], -2) * gain  # (M, n, 2, 2)
        with torch.enable_grad():  # per-sample sensitivities dlogit/dz_m (samples are independent)
            z = (x @ unitaries[0].T).requires_grad_(True)
            inputs, outputs = [x], [z]
            for m in range(1, M):
                h = self._activation(z, m)
                z = h @ unitaries[m].T
                inputs.append(h)
                outputs.append(z)
            logits = self._readout(z)  # (B, C)
            grads = [torch.autograd.grad(logits[:, j].sum(), outputs, retain_graph=True) for j in range(self.n_classes)]
        blocks = []
        for m in range(M):
            sens = torch.stack([g[m] for g in grads])  # (C, B, K)
            ga = torch.einsum("cbi,niq->cbnq", sens, a[m])
            hb = torch.einsum("nqj,bj->bnq", b[m], inputs[m].detach())
            blocks.append(torch.einsum("cbnq,nqr,bnr->bcn", ga, rotation_grad[m], hb))
        return torch.cat(blocks, dim=-1)


class MLPNet(ChipNetwork):
    """d -> H -> C tanh MLP; chip defects: multiplicative parameter errors, activation gain, crosstalk."""

    def __init__(self, n_inputs: int, hidden: int, n_classes: int) -> None:
        super().__init__()
        self.init_args = dict(n_inputs=n_inputs, hidden=hidden, n_classes=n_classes)
        self.n_inputs, self.hidden, self.n_classes = n_inputs, hidden, n_classes
        first = hidden * n_inputs + hidden
        n = first + n_classes * hidden + n_classes
        self.theta = nn.Parameter(torch.zeros(n, dtype=DTYPE))
        self.blocks = [(0, first), (first, n)]  # one block per layer (weights and bias)
        self.register_buffer("param_error", torch.zeros(n, dtype=DTYPE))
        self.register_buffer("act_gain", torch.ones(hidden, dtype=DTYPE))
        self.register_buffer("crosstalk", torch.eye(n_classes, dtype=DTYPE))

    def init_theta(self, generator: torch.Generator) -> None:
        d, h = self.n_inputs, self.hidden
        fan_in = torch.cat([torch.full((h * d + h,), float(d)), torch.full((self.n_params - h * d - h,), float(h))])
        with torch.no_grad():
            uniform = torch.rand(self.n_params, generator=generator, dtype=DTYPE) * 2 - 1
            self.theta.copy_(uniform / fan_in.double().sqrt())

    def draw_defects(self, chip_cfg, generator: torch.Generator) -> MLPNet:
        g = generator
        with torch.no_grad():
            self.param_error.copy_(chip_cfg.weight_error_std * torch.randn(self.n_params, generator=g, dtype=DTYPE))
            self.act_gain.copy_(1 + chip_cfg.activation_gain_std * torch.randn(self.hidden, generator=g, dtype=DTYPE))
            self.crosstalk.copy_(_crosstalk(self.n_classes, chip_cfg.crosstalk, g))
        return self

    def batched_logits(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        d, h, c = self.n_inputs, self.hidden, self.n_classes
        p = thetas * (1 + self.param_error)
        w1, b1 = p[:, : h * d].view(-1, h, d), p[:, h * d : h * d + h]
        w2, b2 = p[:, h * d + h : h * d + h + c * h].view(-1, c, h), p[:, h * d + h + c * h :]
        hidden = torch.tanh(self.act_gain * (torch.einsum("phd,bd->pbh", w1, x) + b1[:, None]))
        out = torch.einsum("pch,pbh->pbc", w2, hidden) + b2[:, None]
        return out @ self.crosstalk.T


def make_network(net_cfg, n_features: int) -> ChipNetwork:
    if net_cfg.arch == "mesh":
        return MeshONN(n_features, net_cfg.columns, net_cfg.n_meshes, net_cfg.n_classes, net_cfg.threshold)
    return MLPNet(n_features, net_cfg.hidden, net_cfg.n_classes)


def build_chip(cfg, n_features: int, seed: int) -> ChipNetwork:
    """The chip of one seed: random initial parameters and its fabrication defects."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    chip = make_network(cfg.net, n_features)
    chip.init_theta(generator)
    return chip.draw_defects(cfg.chip, generator)
