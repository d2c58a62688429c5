"""The black-box "chip" and its ideal software twin: one class, defects held as buffers.

Every network keeps all trainable parameters in one flat vector ``theta`` (what a ZO optimiser
perturbs) split into ``blocks`` (the blocks of the block-diagonal Fisher), and evaluates many
parameter settings at once: ``batched_logits(thetas[P, N], x[B, d]) -> logits[P, B, C]``. That
is how the chip answers the Q + 1 queries of one ZO step in a single call. The defect buffers
are identities on the twin and drawn once per seed on the chip; they travel in the state_dict,
so a saved chip reloads with its fabrication errors.

Several chips of one architecture (one per paired seed and learning rate) are also evaluated at once:
``run_logits(stack_defects(chips), thetas[R, P, N], x[R, B, d] or x[B, d]) -> logits[R, P, B, C]``
with chip r's defects applied to its own settings; ``batched_logits`` is that with R = 1, so one chip
and a stack of chips compute the same thing (``tests/methods/test_zo_natural.py`` checks it).
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

    DEFECTS: tuple[str, ...] = ()  # the defect buffers, drawn per chip

    def defects(self) -> dict[str, torch.Tensor]:
        return {name: self.get_buffer(name) for name in self.DEFECTS}

    @abc.abstractmethod
    def run_logits(self, defects: dict[str, torch.Tensor], thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """logits[R, P, B, C] of R chips (``defects``: each buffer stacked on a leading run axis) at P settings
        each; x is (R, B, d) (every run its own minibatch) or (B, d) (one set for all)."""

    def batched_logits(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """logits[P, B, C] for P parameter vectors at once."""
        return self.run_logits({k: v[None] for k, v in self.defects().items()}, thetas[None], x)[0]

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
        self._pairs = [(col % 2, len(t)) for col, t in enumerate(tops)]  # (first channel, MZIs) of every column
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

    DEFECTS = ("angle_gain", "angle_offset", "transmission", "act_gain", "crosstalk")

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
        return self._columns(self._phases(thetas), self.transmission[None])

    def _columns(self, phases: torch.Tensor, transmission: torch.Tensor) -> torch.Tensor:
        """Column transfers from (P, n_meshes, per_mesh) phases and (P or 1, n_meshes, L, K) transmissions."""
        P, K, L = phases.shape[0], self.width, self.columns
        c, s = torch.cos(phases), torch.sin(phases)
        values = torch.cat([c, -s, s, c], dim=-1)  # (P, M, 4 * per_mesh)
        eye = torch.eye(K, dtype=phases.dtype, device=phases.device).expand(P, self.n_meshes, L, K, K)
        # Overwrite the identity at each MZI's four entries; out-of-place so torch.func can trace it.
        pi = torch.arange(P, device=phases.device)[:, None, None]
        mi = torch.arange(self.n_meshes, device=phases.device)[None, :, None]
        cols = eye.index_put((pi, mi, self._col, self._row, self._cin), values)
        return cols * transmission[..., None]  # loss on each output channel of a column

    def mesh_matrices(self, thetas: torch.Tensor) -> torch.Tensor:
        """(P, n_meshes, K, K) transfer matrices U = D_L R_L ... D_1 R_1 of every mesh."""
        return self._products(self.column_matrices(thetas))

    def _products(self, cols: torch.Tensor) -> torch.Tensor:
        """(P, n_meshes, K, K) ordered products of (P, n_meshes, L, K, K) column transfers."""
        P, K = cols.shape[0], self.width
        # Ordered product of the L column matrices by pairwise reduction (log L batched matmuls).
        while cols.shape[2] > 1:
            if cols.shape[2] % 2:
                pad = torch.eye(K, dtype=cols.dtype, device=cols.device).expand(P, self.n_meshes, 1, K, K)
                cols = torch.cat([cols, pad], 2)
            cols = cols[:, :, 1::2] @ cols[:, :, 0::2]
        return cols[:, :, 0]

    def _activation(self, z: torch.Tensor, mesh: int, gain: torch.Tensor | None = None) -> torch.Tensor:
        """Real modReLU after mesh ``mesh - 1``, with the chip's per-channel gain (or ``gain``, broadcastable)."""
        gain = self.act_gain[mesh - 1] if gain is None else gain
        return torch.sign(z) * torch.relu(gain * z.abs() - self.threshold)

    def _readout(self, z: torch.Tensor, crosstalk: torch.Tensor | None = None) -> torch.Tensor:
        """Intensities of the C central channels, mixed by the read-out crosstalk."""
        first = (self.width - self.n_classes) // 2
        intensity = z[..., first : first + self.n_classes] ** 2
        if crosstalk is None:
            return intensity @ self.crosstalk.T
        return torch.einsum("rpbc,rdc->rpbd", intensity, crosstalk)

    def unitaries(self, phases: torch.Tensor, transmission: torch.Tensor) -> torch.Tensor:
        """(S, n_meshes, K, K) mesh transfers D_L R_L ... D_1 R_1 from (S, n_meshes, per_mesh) phases and (S or 1,
        n_meshes, L, K) transmissions, by applying each column's Givens rotations (and losses) to the rows of the
        running product: O(L K^2) per mesh and no K x K column matrices, what ``mesh_matrices`` computes. Without
        autograd the rows are updated in place (the queries and the tracked losses); with it, out of place."""
        S, M, K = phases.shape[0], self.n_meshes, self.width
        if torch.is_grad_enabled() and (phases.requires_grad or transmission.requires_grad):
            return self._unitaries_traced(phases, transmission)
        u = torch.zeros(S, M, K, K, dtype=phases.dtype, device=phases.device)
        u.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        start = 0
        for col, (first, count) in enumerate(self._pairs):
            c, s = torch.cos(phases[..., start : start + count]), torch.sin(phases[..., start : start + count])
            start += count
            t = transmission[:, :, col]  # (S or 1, M, K): loss on each output channel of the column
            t_top, t_bottom = t[..., first : first + 2 * count : 2], t[..., first + 1 : first + 2 * count : 2]
            block = u[:, :, first : first + 2 * count].view(S, M, count, 2, K)
            top, bottom = block[..., 0, :], block[..., 1, :]
            new_top = (c * t_top)[..., None] * top - (s * t_top)[..., None] * bottom
            new_bottom = (s * t_bottom)[..., None] * top + (c * t_bottom)[..., None] * bottom
            block[..., 0, :], block[..., 1, :] = new_top, new_bottom
            if first:
                u[:, :, :first] *= t[..., :first, None]
            if first + 2 * count < K:
                u[:, :, first + 2 * count :] *= t[..., first + 2 * count :, None]
        return u

    def _unitaries_traced(self, phases: torch.Tensor, transmission: torch.Tensor) -> torch.Tensor:
        """``unitaries`` out of place, for autograd (the twin's backprop pre-training)."""
        S, K = phases.shape[0], self.width
        u = torch.eye(K, dtype=phases.dtype, device=phases.device).expand(S, self.n_meshes, K, K)
        start = 0
        for col, (first, count) in enumerate(self._pairs):
            c = torch.cos(phases[..., start : start + count])[..., None]  # (S, M, pairs, 1)
            s = torch.sin(phases[..., start : start + count])[..., None]
            start += count
            block = u[:, :, first : first + 2 * count].reshape(S, self.n_meshes, count, 2, K)
            top, bottom = block[:, :, :, 0], block[:, :, :, 1]
            rotated = torch.stack([c * top - s * bottom, s * top + c * bottom], dim=3).reshape(S, self.n_meshes, -1, K)
            u = torch.cat([u[:, :, :first], rotated, u[:, :, first + 2 * count :]], dim=2)
            u = u * transmission[:, :, col, :, None]
        return u

    def run_logits(self, defects: dict[str, torch.Tensor], thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        R, P, N = thetas.shape
        phases = thetas * (1 + defects["angle_gain"][:, None]) + defects["angle_offset"][:, None]
        transmission = defects["transmission"][:, None].expand(R, P, *defects["transmission"].shape[1:])
        unitaries = self.unitaries(
            phases.reshape(R * P, self.n_meshes, self.per_mesh), transmission.reshape(R * P, *transmission.shape[2:])
        ).view(R, P, self.n_meshes, self.width, self.width)
        pattern = "rpkj,bj->rpbk" if x.dim() == 2 else "rpkj,rbj->rpbk"
        z = torch.einsum(pattern, unitaries[:, :, 0], x)
        if x.dim() == 2:  # many samples per setting: elementwise work on a contiguous z is ~2x faster
            z = z.contiguous()
        for m in range(1, self.n_meshes):
            gain = defects["act_gain"][:, m - 1][:, None, None, :]  # (R, 1, 1, K)
            z = torch.einsum("rpkj,rpbj->rpbk", unitaries[:, :, m], self._activation(z, m, gain))
            if x.dim() == 2:
                z = z.contiguous()
        return self._readout(z, defects["crosstalk"])

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

    def run_logit_jacobian(self, thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(R, B, C, N) logit Jacobians of this network at R parameter vectors, each on its own inputs x (R, B, d):
        ``logit_jacobian`` for several runs at once, with the per-sample sensitivities dlogit/dz_m back-propagated
        in closed form (z_{m+1} = U_{m+1} act(z_m), logits = crosstalk (z_M central)^2) instead of by autograd."""
        thetas = thetas.detach()
        R, K, L, M = thetas.shape[0], self.width, self.columns, self.n_meshes
        phases = (thetas * (1 + self.angle_gain) + self.angle_offset).view(R, M, self.per_mesh)
        cols = self._columns(phases, self.transmission[None])  # (R, M, L, K, K)
        eye = torch.eye(K, dtype=thetas.dtype, device=thetas.device).expand(R, M, K, K)
        prefix, suffix = [eye], [eye]
        for col in range(L - 1):
            prefix.append(cols[:, :, col] @ prefix[-1])
            suffix.insert(0, suffix[0] @ cols[:, :, L - 1 - col])
        prefix, suffix = torch.stack(prefix, 2), torch.stack(suffix, 2)  # (R, M, L, K, K)
        unitaries = cols[:, :, L - 1] @ prefix[:, :, L - 1]  # (R, M, K, K)
        col_k, top_k = self._col[: self.per_mesh], self._row[: self.per_mesh]
        pair = torch.stack([top_k, top_k + 1], 1)
        n = len(col_k)
        left = (suffix @ torch.diag_embed(self.transmission))[:, :, col_k]  # (R, M, n, K, K)
        a = torch.gather(left, 4, pair[None, None, :, None, :].expand(R, M, n, K, 2))  # (R, M, n, K, 2)
        b = torch.gather(prefix[:, :, col_k], 3, pair[None, None, :, :, None].expand(R, M, n, 2, K))  # (R, M, n, 2, K)
        c, s = torch.cos(phases), torch.sin(phases)
        gain = (1 + self.angle_gain).view(M, -1)[None, :, :, None, None]
        rotation_grad = torch.stack([torch.stack([-s, -c], -1), torch.stack([c, -s], -1)], -2) * gain  # (R, M, n, 2, 2)
        # Forward pass, keeping each mesh's input and output.
        inputs, outputs = [x], [torch.einsum("rkj,rbj->rbk", unitaries[:, 0], x)]
        for m in range(1, M):
            inputs.append(self._activation(outputs[-1], m))
            outputs.append(torch.einsum("rkj,rbj->rbk", unitaries[:, m], inputs[-1]))
        first = (K - self.n_classes) // 2
        sens = torch.zeros(R, self.n_classes, x.shape[1], K, dtype=x.dtype, device=x.device)
        central = outputs[-1][..., first : first + self.n_classes]  # (R, B, C)
        sens[..., first : first + self.n_classes] = 2 * self.crosstalk[None, :, None, :] * central[:, None]
        per_mesh = [sens]
        for m in range(M - 1, 0, -1):  # dlogit/dz_{m-1} = dlogit/dz_m U_m diag(act'(z_{m-1}))
            z = outputs[m - 1]
            slope = self.act_gain[m - 1] * (self.act_gain[m - 1] * z.abs() > self.threshold)  # (R, B, K)
            per_mesh.insert(0, torch.einsum("rcbi,rij->rcbj", per_mesh[0], unitaries[:, m]) * slope[:, None])
        blocks = []
        for m in range(M):
            ga = torch.einsum("rcbi,rniq->rcbnq", per_mesh[m], a[:, m])
            hb = torch.einsum("rnqj,rbj->rbnq", b[:, m], inputs[m])
            blocks.append(torch.einsum("rcbnq,rnqp,rbnp->rbcn", ga, rotation_grad[:, m], hb))
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

    DEFECTS = ("param_error", "act_gain", "crosstalk")

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

    def run_logits(self, defects: dict[str, torch.Tensor], thetas: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        d, h, c = self.n_inputs, self.hidden, self.n_classes
        R, P, _ = thetas.shape
        p = thetas * (1 + defects["param_error"][:, None])
        w1, b1 = p[..., : h * d].view(R, P, h, d), p[..., h * d : h * d + h]
        w2, b2 = p[..., h * d + h : h * d + h + c * h].view(R, P, c, h), p[..., h * d + h + c * h :]
        pre = torch.einsum("rphd,bd->rpbh" if x.dim() == 2 else "rphd,rbd->rpbh", w1, x) + b1[:, :, None]
        hidden = torch.tanh(defects["act_gain"][:, None, None, :] * pre)
        out = torch.einsum("rpch,rpbh->rpbc", w2, hidden) + b2[:, :, None]
        return torch.einsum("rpbc,rdc->rpbd", out, defects["crosstalk"])


def stack_defects(chips) -> dict[str, torch.Tensor]:
    """The defect buffers of chips of one architecture, each stacked on a leading run axis."""
    return {name: torch.stack([chip.get_buffer(name) for chip in chips]) for name in chips[0].DEFECTS}


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
