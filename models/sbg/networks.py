"""TarFlow (a Transformer autoregressive affine flow) and the two spaces it models molecules in.

Re-implemented from the paper's description (after apple/ml-tarflow as adapted by SBG): the
molecule is a sequence of ``n_tokens`` tokens (one per x/y/z coordinate, ``channels = 1``). Each
block permutes the sequence (identity, reversal, alternating), runs a causal Transformer, shifts
its output right by one token and applies ``z_i = (x_i - b_i) exp(-a_i)``, so token ``i`` is
transformed by parameters computed from tokens ``< i`` only: the Jacobian is triangular with
log-det ``-sum(a)``. The output projection starts at zero, so a fresh flow is the identity.

Data -> latent (``forward``) is one parallel pass; latent -> data (``reverse``) runs token by
token with a key/value cache (exact inversion, ``n_tokens`` sequential steps per block).

Two generators wrap it: ``BoltzmannGenerator`` (the paper's Cartesian coordinates, with the
centre-of-mass and rotation extensions of the target) and ``InternalBoltzmannGenerator`` (a
Z-matrix of bond lengths, angles and dihedrals built from the topology's bond graph, one token
per placed atom). Both expose the same sampling interface: ``sample`` -> (y, E_source),
``source_energy_whitened(y)``, ``y_to_nm(y)`` (differentiable) and ``target_correction(y)``
(what E_target(y) adds to U(x(y))/kT: minus the log-Jacobian of x(y), +inf off the support).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, head_dim: int) -> None:
        super().__init__()
        if width % head_dim:
            raise ValueError(f"width {width} is not a multiple of head_dim {head_dim}")
        self.heads, self.head_dim = width // head_dim, head_dim
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def _split(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, length, _ = h.shape
        q, k, v = self.qkv(h).view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return q, k, v  # each (batch, heads, length, head_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(h)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).flatten(2))

    def step(self, h: torch.Tensor, cache: dict) -> torch.Tensor:
        """One new token ``h`` (batch, 1, width) attending to itself and the cached tokens."""
        q, k, v = self._split(h)
        cache["k"] = k if "k" not in cache else torch.cat([cache["k"], k], dim=2)
        cache["v"] = v if "v" not in cache else torch.cat([cache["v"], v], dim=2)
        y = F.scaled_dot_product_attention(q, cache["k"], cache["v"])  # all cached tokens are past
        return self.out(y.transpose(1, 2).flatten(2))


class Layer(nn.Module):
    """Pre-LayerNorm Transformer layer: causal attention then a GELU MLP, both residual."""

    def __init__(self, width: int, head_dim: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, head_dim)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.norm1(h))
        return h + self.mlp(self.norm2(h))

    def step(self, h: torch.Tensor, cache: dict) -> torch.Tensor:
        h = h + self.attn.step(self.norm1(h), cache)
        return h + self.mlp(self.norm2(h))


class MetaBlock(nn.Module):
    """One autoregressive affine transform in a fixed token order (``reverse_order`` flips it)."""

    def __init__(
        self, n_tokens: int, channels: int, width: int, layers: int, head_dim: int, mlp_ratio: int, reverse_order: bool
    ) -> None:
        super().__init__()
        self.reverse_order = reverse_order
        self.proj_in = nn.Linear(channels, width)
        self.pos = nn.Parameter(torch.randn(n_tokens, width) * 0.01)
        self.layers = nn.ModuleList(Layer(width, head_dim, mlp_ratio) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.proj_out = nn.Linear(width, 2 * channels)
        nn.init.zeros_(self.proj_out.weight)  # the flow starts as the identity map
        nn.init.zeros_(self.proj_out.bias)

    def _order(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(1) if self.reverse_order else x

    def _params(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.proj_out(self.norm(h)).chunk(2, dim=-1)
        return a, b

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (batch, tokens, channels) -> z, log|det dz/dx| per sample."""
        x = self._order(x)
        h = self.proj_in(x) + self.pos
        for layer in self.layers:
            h = layer(h)
        a, b = self._params(h)
        # Shift right: token i is transformed by what tokens < i produced; token 0 passes unchanged.
        a = torch.cat([torch.zeros_like(a[:, :1]), a[:, :-1]], dim=1)
        b = torch.cat([torch.zeros_like(b[:, :1]), b[:, :-1]], dim=1)
        z = (x - b) * torch.exp(-a)
        return self._order(z), -a.flatten(1).sum(1)

    @torch.no_grad()
    def reverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z -> x token by token with a key/value cache; also returns log|det dz/dx| at x."""
        z = self._order(z)
        caches: list[dict] = [{} for _ in self.layers]
        xs = [z[:, :1]]  # token 0 is the identity
        logdet = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for i in range(1, z.shape[1]):
            h = self.proj_in(xs[-1]) + self.pos[i - 1]
            for layer, cache in zip(self.layers, caches):
                h = layer.step(h, cache)
            a, b = self._params(h)
            xs.append(z[:, i : i + 1] * torch.exp(a) + b)
            logdet -= a.flatten(1).sum(1)
        return self._order(torch.cat(xs, dim=1)), logdet


class TarFlow(nn.Module):
    """Flow over (batch, atoms, 3) coordinates flattened into ``3 * atoms / channels`` tokens."""

    def __init__(
        self,
        n_atoms: int,
        width: int = 64,
        blocks: int = 2,
        layers_per_block: int = 2,
        head_dim: int = 32,
        mlp_ratio: int = 4,
        channels: int = 1,
    ) -> None:
        super().__init__()
        if (3 * n_atoms) % channels:
            raise ValueError(f"3 * n_atoms = {3 * n_atoms} is not divisible into tokens of {channels} channels")
        self.channels, self.n_tokens = channels, 3 * n_atoms // channels
        self.blocks = nn.ModuleList(
            MetaBlock(self.n_tokens, channels, width, layers_per_block, head_dim, mlp_ratio, reverse_order=bool(k % 2))
            for k in range(blocks)
        )

    @property
    def dim(self) -> int:
        return self.n_tokens * self.channels

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], self.n_tokens, self.channels)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (batch, n_atoms, 3) standardised -> z (batch, dim), log|det dz/dx|."""
        h, logdet = self._tokens(x), torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for block in self.blocks:
            h, ld = block(h)
            logdet = logdet + ld
        return h.flatten(1), logdet

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        z, logdet = self(x)
        return standard_normal_log_prob(z) + logdet

    @torch.no_grad()
    def reverse(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z (batch, dim) -> x (batch, n_atoms, 3), and log|det dz/dx| evaluated at x."""
        h, logdet = self._tokens(z), torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for block in reversed(self.blocks):
            h, ld = block.reverse(h)
            logdet = logdet + ld
        return h.reshape(z.shape[0], -1, 3), logdet

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """n samples and their log q(x)."""
        z = torch.randn(n, self.dim, generator=generator, dtype=self.blocks[0].pos.dtype)
        x, logdet = self.reverse(z)
        return x, standard_normal_log_prob(z) + logdet


def standard_normal_log_prob(z: torch.Tensor) -> torch.Tensor:
    return -0.5 * (z**2).sum(1) - 0.5 * z.shape[1] * math.log(2 * math.pi)


class BoltzmannGenerator(nn.Module):
    """The registered model: a TarFlow plus the preprocessing that defines its density.

    Frames (nm) are centred, optionally Kabsch-aligned to ``reference`` and divided by ``scale``;
    training data are then rotated (uniformly, or by a small Gaussian axis-angle rotation) and
    shifted by a Gaussian centre of mass with sigma = 1/sqrt(atoms). ``source_energy`` is the
    proposal energy on that extended space (the paper's Prop. 1, plus the rotation density when
    aligned).
    """

    def __init__(
        self,
        n_atoms: int,
        *,
        rotation: str = "aligned",
        rotation_sigma: float = 0.1,
        com_density: str = "chi3",
        **flow_kwargs,
    ) -> None:
        super().__init__()
        if rotation not in ("random", "aligned"):
            raise ValueError(f"rotation must be 'random' or 'aligned', not {rotation!r}")
        self.rotation, self.rotation_sigma, self.com_density = rotation, rotation_sigma, com_density
        self.com_sigma = 1.0 / math.sqrt(n_atoms)
        self.flow = TarFlow(n_atoms, **flow_kwargs)
        self.register_buffer("scale", torch.ones(()))  # nm per standardised unit
        self.register_buffer("reference", torch.zeros(n_atoms, 3))  # aligned mean structure, standardised
        # Fixed affine whitening x = mean + chol y (identity = the paper's scalar standardisation).
        dim = 3 * n_atoms
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("chol", torch.eye(dim))
        self.register_buffer("chol_logdet", torch.zeros(()))

    @torch.no_grad()
    def fit_preprocessing(self, frames_nm: torch.Tensor, iterations: int = 3) -> None:
        """Set ``scale`` (std of the centred training coordinates) and the alignment reference."""
        centred = frames_nm - frames_nm.mean(1, keepdim=True)
        self.scale.copy_(centred.std())
        x = centred / self.scale
        reference = x[0]
        for _ in range(iterations):  # Procrustes mean: align, average, repeat
            aligned = self._align(x, reference)
            reference = aligned.mean(0) - aligned.mean((0, 1))
        self.reference.copy_(reference)

    @torch.no_grad()
    def fit_whitening(self, x: torch.Tensor, copies: int, generator: torch.Generator | None = None) -> None:
        """Mean and Cholesky factor of the augmented training distribution (``copies`` draws per frame)."""
        augmented = torch.cat([self.augment(x, generator) for _ in range(copies)]).flatten(1).double()
        chol = torch.linalg.cholesky(torch.cov(augmented.T))
        self.mean.copy_(augmented.mean(0))
        self.chol.copy_(chol)
        self.chol_logdet.copy_(chol.diagonal().log().sum())

    def whiten(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, atoms, 3) -> y (batch, atoms, 3) with x = mean + chol y."""
        flat = (x.flatten(1) - self.mean.to(x.dtype)).unsqueeze(-1)
        y = torch.linalg.solve_triangular(self.chol.to(x.dtype), flat, upper=False)
        return y.view_as(x)

    def unwhiten(self, y: torch.Tensor) -> torch.Tensor:
        return (y.flatten(1) @ self.chol.to(y.dtype).T + self.mean.to(y.dtype)).view_as(y)

    def _align(self, x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        from models.sbg.algorithm import kabsch_rotation

        rot = kabsch_rotation(x, reference.to(x.dtype))  # x ~ R ref  =>  R^T x ~ ref
        return (x - x.mean(1, keepdim=True)) @ rot

    @torch.no_grad()
    def standardise(self, frames_nm: torch.Tensor) -> torch.Tensor:
        """Centred, (aligned,) standardised frames, before augmentation."""
        x = frames_nm / self.scale
        x = x - x.mean(1, keepdim=True)
        return self._align(x, self.reference) if self.rotation == "aligned" else x

    def augment(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Random rotation and CoM shift of standardised frames (the training distribution)."""
        from models.sbg.algorithm import rotation_exp

        batch, kw = x.shape[0], {"generator": generator, "dtype": x.dtype}
        if self.rotation == "random":
            q = torch.randn(batch, 4, **kw)
            rot = quaternion_matrix(q / q.norm(dim=-1, keepdim=True))
        else:
            rot = rotation_exp(self.rotation_sigma * torch.randn(batch, 3, **kw))
        shift = self.com_sigma * torch.randn(batch, 1, 3, **kw)
        return (x @ rot.transpose(1, 2).to(x.device)) + shift.to(x.device)

    def extension_log_density(self, x: torch.Tensor) -> torch.Tensor:
        """log rho(c) [+ log rho(R)]: what the target is multiplied by on the flow's space."""
        from models.sbg.algorithm import com_log_density, kabsch_rotation, so3_log_density

        log_rho = com_log_density(x, self.com_sigma, self.com_density)
        if self.rotation == "aligned":
            log_rho = log_rho + so3_log_density(kabsch_rotation(x, self.reference.to(x.dtype)), self.rotation_sigma)
        return log_rho

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """log q(x) of standardised coordinates (flow on whitened y, plus the whitening's log-det)."""
        return self.flow.log_prob(self.whiten(x)) - self.chol_logdet

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_prob(x)

    def y_to_nm(self, y: torch.Tensor) -> torch.Tensor:
        """Conformations (batch, atoms, 3) in nm of whitened coordinates y (linear, differentiable)."""
        return self.unwhiten(y) * self.scale.to(y.dtype)

    def target_correction(self, y: torch.Tensor) -> torch.Tensor:
        """The map y -> x is affine: its log-Jacobian is a constant, which cancels in every weight."""
        return torch.zeros(y.shape[0], dtype=y.dtype, device=y.device)

    def source_energy_whitened(self, y: torch.Tensor) -> torch.Tensor:
        """E_source at x = mean + chol y: -log q(x) + log rho(c) [+ log rho(R)] (log w = E_source - E_target)."""
        return -self.flow.log_prob(y) + self.chol_logdet + self.extension_log_density(self.unwhiten(y))

    def source_energy(self, x: torch.Tensor) -> torch.Tensor:
        return -self.log_prob(x) + self.extension_log_density(x)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """n proposals in whitened coordinates y, and their E_source."""
        y, log_q = self.flow.sample(n, generator)
        return y, -log_q + self.chol_logdet + self.extension_log_density(self.unwhiten(y))

    @torch.no_grad()
    def sample_nm(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n conformations (batch, atoms, 3) in nanometres."""
        return self.unwhiten(self.sample(n, generator)[0]) * self.scale


def quaternion_matrix(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternions (w, x, y, z) -> rotation matrices; uniform q gives Haar-uniform rotations."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    ).view(*q.shape[:-1], 3, 3)


# ----------------------------------------------------------------------------- internal coordinates


def _angle(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    u, v = a - b, c - b
    return torch.atan2(torch.linalg.cross(u, v).norm(dim=-1), (u * v).sum(-1))


def _dihedral(p0: torch.Tensor, p1: torch.Tensor, p2: torch.Tensor, p3: torch.Tensor) -> torch.Tensor:
    b1, b2, b3 = p1 - p0, p2 - p1, p3 - p2
    c1, c2 = torch.linalg.cross(b2, b3), torch.linalg.cross(b1, b2)
    return torch.atan2((b1 * c1).sum(-1) * b2.norm(dim=-1), (c1 * c2).sum(-1))


def _place(pd, pg, pp, r, theta, phi):
    """NeRF: the atom at distance r from pp, angle theta to pg, dihedral phi (pd-pg-pp-atom)."""
    bc = pp - pg
    bc = bc / bc.norm(dim=-1, keepdim=True)
    normal = torch.linalg.cross(pg - pd, bc)
    normal = normal / normal.norm(dim=-1, keepdim=True)
    frame = torch.stack([bc, torch.linalg.cross(normal, bc), normal], -1)
    local = torch.stack(
        [-r * torch.cos(theta), r * torch.sin(theta) * torch.cos(phi), r * torch.sin(theta) * torch.sin(phi)], -1
    )
    return pp + (frame @ local.unsqueeze(-1)).squeeze(-1)


def build_zmatrix(n_atoms: int, bonds: list[tuple[int, int]], heavy: list[bool], seed: tuple[int, int, int]):
    """Rows (atom, bond partner, angle partner, dihedral partner) placing every atom after ``seed``.

    Heavy atoms first (breadth first from the seed), then hydrogens. An atom whose parent already
    has a placed child uses that sibling as dihedral partner, so only one torsion per rotor (a
    methyl, phi, psi) is free and the others are near-constant offsets from it.
    """
    neighbours: dict[int, set[int]] = {i: set() for i in range(n_atoms)}
    for a, b in bonds:
        neighbours[a].add(b)
        neighbours[b].add(a)
    if not (seed[1] in neighbours[seed[0]] and seed[2] in neighbours[seed[1]]):
        raise ValueError(f"Z-matrix seed {seed} is not a bonded chain of three atoms")
    placed, parent, rows = list(seed), {seed[1]: seed[0], seed[2]: seed[1]}, []
    for want_heavy in (True, False):
        grew = True
        while grew:
            grew = False
            for p in list(placed):
                for a in sorted(neighbours[p]):
                    if a in placed or heavy[a] != want_heavy:
                        continue
                    g = parent.get(p, min(q for q in neighbours[p] if q in placed))
                    siblings = [s for s in sorted(neighbours[p]) if s in placed and s != g]
                    if siblings:
                        d = siblings[0]
                    else:
                        further = sorted(
                            (q for q in neighbours[g] if q in placed and q != p), key=lambda q: (not heavy[q], q)
                        )
                        d = further[0] if further else next(q for q in placed if q not in (p, g))
                    rows.append((a, p, g, d))
                    placed.append(a)
                    parent[a] = p
                    grew = True
    if len(placed) != n_atoms:
        missing = sorted(set(range(n_atoms)) - set(placed))
        raise ValueError(f"atoms {missing} are not bonded to the rest of the molecule: no Z-matrix")
    return rows


def zmatrix_of_topology(topology) -> tuple[tuple[int, int, int], list[tuple[int, int, int, int]]]:
    """Seed (C of the first residue, N and CA of the second: the first phi's atoms) and Z-matrix rows."""
    atoms = list(topology.atoms())
    index = {(a.residue.index, a.name): a.index for a in atoms}
    bonds = [(a.index, b.index) for a, b in topology.bonds()]
    heavy = [a.element is None or a.element.symbol != "H" for a in atoms]
    if all(k in index for k in ((0, "C"), (1, "N"), (1, "CA"))):
        seed = (index[0, "C"], index[1, "N"], index[1, "CA"])
    else:  # any bonded chain of three heavy atoms
        neighbours = {
            i: sorted({b for a, b in bonds if a == i} | {a for a, b in bonds if b == i}) for i in range(len(atoms))
        }
        first = next(i for i in range(len(atoms)) if heavy[i] and any(len(neighbours[j]) > 1 for j in neighbours[i]))
        second = next(j for j in neighbours[first] if len(neighbours[j]) > 1)
        seed = (first, second, next(k for k in neighbours[second] if k != first))
    return seed, build_zmatrix(len(atoms), bonds, heavy, seed)


class InternalCoordinates(nn.Module):
    """x (batch, atoms, 3) <-> q (batch, atoms - 2, 3): token 0 = (r1, r2, theta2) of the seed, then
    (r, theta, phi) of every placed atom. x is rebuilt in a canonical frame (seed atom 0 at the
    origin, atom 1 on the x axis, atom 2 in the xy plane): the 6 rigid-body coordinates are dropped,
    which the target does not depend on. Volume element: dx = |J| dq dR dc with
    log|J| = 2 log r1 + 2 log r2 + log sin theta2 + sum_i (2 log r_i + log sin theta_i)."""

    def __init__(self, n_atoms: int, seed: tuple[int, int, int], rows: list[tuple[int, int, int, int]]) -> None:
        super().__init__()
        self.n_atoms, self.seed = n_atoms, tuple(int(i) for i in seed)
        # Both travel in the state dict, so a saved model rebuilds its own Z-matrix.
        self.register_buffer("seed_atoms", torch.tensor(self.seed, dtype=torch.long))
        self.register_buffer("rows", torch.tensor(rows, dtype=torch.long).view(-1, 4))

    @property
    def n_tokens(self) -> int:
        return 1 + len(self.rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s0, s1, s2 = self.seed
        a, p, g, d = self.rows.unbind(1)
        seed = torch.stack(
            [
                (x[:, s1] - x[:, s0]).norm(dim=-1),
                (x[:, s2] - x[:, s1]).norm(dim=-1),
                _angle(x[:, s0], x[:, s1], x[:, s2]),
            ],
            1,
        )
        placed = torch.stack(
            [
                (x[:, a] - x[:, p]).norm(dim=-1),
                _angle(x[:, a], x[:, p], x[:, g]),
                _dihedral(x[:, d], x[:, g], x[:, p], x[:, a]),
            ],
            -1,
        )
        return torch.cat([seed.unsqueeze(1), placed], 1)

    def inverse(self, q: torch.Tensor) -> torch.Tensor:
        zero = torch.zeros(q.shape[0], dtype=q.dtype, device=q.device)
        r1, r2, theta2 = q[:, 0].unbind(-1)
        positions: list[torch.Tensor | None] = [None] * self.n_atoms
        positions[self.seed[0]] = torch.stack([zero, zero, zero], 1)
        positions[self.seed[1]] = torch.stack([r1, zero, zero], 1)
        positions[self.seed[2]] = torch.stack([r1 - r2 * torch.cos(theta2), r2 * torch.sin(theta2), zero], 1)
        for k, (a, p, g, d) in enumerate(self.rows.tolist()):
            positions[a] = _place(positions[d], positions[g], positions[p], *q[:, k + 1].unbind(-1))
        return torch.stack(positions, 1)

    def log_jacobian(self, q: torch.Tensor) -> torch.Tensor:
        """log|dx/dq| (rigid-body part aside); -inf where a length or sin(angle) is not positive."""
        lengths = torch.cat([q[:, :1, :2].flatten(1), q[:, 1:, 0]], 1)
        angles = torch.cat([q[:, :1, 2], q[:, 1:, 1]], 1)
        ok = (lengths > 0).all(1) & (angles > 0).all(1) & (angles < math.pi).all(1)
        value = 2 * lengths.clamp_min(1e-30).log().sum(1) + angles.sin().clamp_min(1e-30).log().sum(1)
        return torch.where(ok, value, torch.full_like(value, -math.inf))


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


class InternalBoltzmannGenerator(nn.Module):
    """TarFlow on whitened internal coordinates: one token (r, theta, phi) per placed atom.

    Each dihedral is measured from a centre chosen so that the cut at +-pi lies where the training
    frames are sparsest; the flow's support is then the box |phi - centre| <= pi, and a proposal
    outside it gets zero weight (the proposal restricted to the box is renormalised by the self-
    normalised weights, so the estimate stays exact). The target on the whitened space is
    E_target(y) = U(x(y))/kT - log|J(q(y))| (whitening's constant log-det aside).
    """

    def __init__(self, n_atoms: int, seed: tuple[int, int, int], rows: list, **flow_kwargs) -> None:
        super().__init__()
        flow_kwargs = {**flow_kwargs, "channels": 3}  # one (r, theta, phi) token per atom
        self.coordinates = InternalCoordinates(n_atoms, seed, rows)
        self.flow = TarFlow(self.coordinates.n_tokens, **flow_kwargs)
        dim = 3 * self.coordinates.n_tokens
        self.register_buffer("centres", torch.zeros(self.coordinates.n_tokens - 1))  # dihedral centres
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("chol", torch.eye(dim))
        self.register_buffer("chol_logdet", torch.zeros(()))

    @torch.no_grad()
    def fit_preprocessing(self, frames_nm: torch.Tensor, bins: int = 36) -> None:
        """Dihedral centres: opposite the least populated of ``bins`` histogram bins of the frames."""
        phi = self.coordinates(frames_nm.double())[:, 1:, 2]
        edges = torch.linspace(-math.pi, math.pi, bins + 1, dtype=torch.float64)
        centres = []
        for column in phi.T:
            counts = torch.histc(column, bins=bins, min=-math.pi, max=math.pi)
            k = int(torch.argmin(counts))  # ties: the first bin
            centres.append(float(edges[k] + edges[k + 1]) / 2 + math.pi)
        self.centres.copy_(wrap_angle(torch.tensor(centres, dtype=torch.float64)))

    @torch.no_grad()
    def standardise(self, frames_nm: torch.Tensor) -> torch.Tensor:
        """Internal coordinates (batch, tokens, 3) with dihedrals measured from their centres."""
        q = self.coordinates(frames_nm.to(self.centres.dtype))
        q[:, 1:, 2] = wrap_angle(q[:, 1:, 2] - self.centres)
        return q

    def augment(self, q: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return q  # internal coordinates are already rotation and translation invariant

    @torch.no_grad()
    def fit_whitening(self, q: torch.Tensor, copies: int = 1, generator: torch.Generator | None = None) -> None:
        flat = q.flatten(1).double()
        chol = torch.linalg.cholesky(torch.cov(flat.T))
        self.mean.copy_(flat.mean(0))
        self.chol.copy_(chol)
        self.chol_logdet.copy_(chol.diagonal().log().sum())

    def whiten(self, q: torch.Tensor) -> torch.Tensor:
        flat = (q.flatten(1) - self.mean.to(q.dtype)).unsqueeze(-1)
        return torch.linalg.solve_triangular(self.chol.to(q.dtype), flat, upper=False).view_as(q)

    def unwhiten(self, y: torch.Tensor) -> torch.Tensor:
        return (y.flatten(1) @ self.chol.to(y.dtype).T + self.mean.to(y.dtype)).view_as(y)

    def log_prob(self, q: torch.Tensor) -> torch.Tensor:
        return self.flow.log_prob(self.whiten(q)) - self.chol_logdet

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return self.log_prob(q)

    def _absolute(self, y: torch.Tensor) -> torch.Tensor:
        q = self.unwhiten(y)
        return torch.cat(
            [q[:, :1], torch.cat([q[:, 1:, :2], (q[:, 1:, 2] + self.centres.to(q.dtype)).unsqueeze(-1)], -1)], 1
        )

    def y_to_nm(self, y: torch.Tensor) -> torch.Tensor:
        return self.coordinates.inverse(self._absolute(y))

    def target_correction(self, y: torch.Tensor) -> torch.Tensor:
        """-log|dx/dq| at q(y); +inf outside the box of measured dihedrals or the valid geometry."""
        q = self.unwhiten(y)
        inside = (q[:, 1:, 2].abs() <= math.pi).all(1)
        value = -self.coordinates.log_jacobian(self._absolute(y))
        return torch.where(inside, value, torch.full_like(value, math.inf))

    def source_energy_whitened(self, y: torch.Tensor) -> torch.Tensor:
        return -self.flow.log_prob(y) + self.chol_logdet

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        y, log_q = self.flow.sample(n, generator)
        return y, -log_q + self.chol_logdet

    @torch.no_grad()
    def sample_nm(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.y_to_nm(self.sample(n, generator)[0])
