"""Networks: graph operators, polynomial spectral filters, the leapfrog wave solver, and the GNNs.

All filters act channel-wise with scalar coefficients (as GPRConv/BernConv/ChebIIConv do); each has
a closed-form ``response`` on the eigenvalues of the operator it is a polynomial in, which the unit
tests compare against an eigendecomposition.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# ----------------------------------------------------------------------------- graph operators


class GraphOperators(NamedTuple):
    """The sparse (CSR) symmetric operators the filters are polynomials in."""

    laplacian: Tensor  # L = I - D^{-1/2} A D^{-1/2}, no self-loops: spectrum in [0, 2] (BernNet, ChebNetII)
    adjacency: Tensor  # A_hat = D^{-1/2} A D^{-1/2} = I - L: the official laplacian='sym' operator
    gcn_adjacency: Tensor  # A_tilde = (D + I)^{-1/2} (A + I) (D + I)^{-1/2}: GPR-GNN's propagation matrix


def graph_operators(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> GraphOperators:
    """Build the three operators of an undirected graph once (they are reused by every step and epoch)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import get_laplacian, to_torch_csr_tensor

    def csr(index: Tensor, weight: Tensor) -> Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            return to_torch_csr_tensor(index, weight.to(dtype), size=(num_nodes, num_nodes))

    lap_index, lap_weight = get_laplacian(edge_index, normalization="sym", dtype=dtype, num_nodes=num_nodes)
    adj_index, adj_weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=False, dtype=dtype)
    gcn_index, gcn_weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
    return GraphOperators(csr(lap_index, lap_weight), csr(adj_index, adj_weight), csr(gcn_index, gcn_weight))


class _SymmetricMatmul(torch.autograd.Function):
    """S @ x for a constant symmetric sparse S; its gradient is S @ grad (no sparse transpose needed)."""

    @staticmethod
    def forward(ctx, operator: Tensor, x: Tensor) -> Tensor:
        ctx.operator = operator
        return operator @ x

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, ctx.operator @ grad.contiguous()


def propagate(operator: Tensor, x: Tensor) -> Tensor:
    """Apply a symmetric node operator along dim 0 of ``x`` (any trailing shape)."""
    flat = x.reshape(x.shape[0], -1).contiguous()
    return _SymmetricMatmul.apply(operator, flat).reshape(x.shape)


def combine(basis: list[Tensor], weights: Tensor) -> Tensor:
    """sum_k weights[k] * basis[k] as one matrix-vector product (fewer kernels than a loop of axpys)."""
    return (weights @ torch.stack(basis).reshape(len(basis), -1)).reshape(basis[0].shape)


def as_operators(graph: Tensor | GraphOperators, num_nodes: int, dtype: torch.dtype) -> GraphOperators:
    """Accept an ``edge_index`` (PyG convention) or prebuilt operators."""
    return graph if isinstance(graph, GraphOperators) else graph_operators(graph, num_nodes, dtype)


# ----------------------------------------------------------------------------- polynomial filters


class GPRFilter(nn.Module):
    """GPR-GNN: sum_k gamma_k A_tilde^k x, gamma initialised to personalised PageRank alpha (1 - alpha)^k."""

    operator = "gcn_adjacency"

    def __init__(self, order: int, alpha: float = 0.1) -> None:
        super().__init__()
        self.order = order
        gamma = alpha * (1 - alpha) ** torch.arange(order + 1, dtype=torch.float32)
        gamma[-1] = (1 - alpha) ** order
        self.gamma = nn.Parameter(gamma)

    def forward(self, x: Tensor, ops: GraphOperators) -> Tensor:
        hops = [x]
        for _ in range(self.order):
            hops.append(propagate(ops.gcn_adjacency, hops[-1]))
        return combine(hops, self.gamma)

    def response(self, mu: Tensor) -> Tensor:
        """g(mu) = sum_k gamma_k mu^k on the eigenvalues mu of A_tilde."""
        powers = mu[:, None] ** torch.arange(self.order + 1, dtype=mu.dtype)
        return powers @ self.gamma.to(mu.dtype)


class BernFilter(nn.Module):
    """BernNet: sum_k relu(theta_k) C(K, k) / 2^K (2I - L)^{K-k} L^k x, theta initialised to 1 (all-pass)."""

    operator = "laplacian"

    def __init__(self, order: int) -> None:
        super().__init__()
        self.order = order
        self.theta = nn.Parameter(torch.ones(order + 1))
        self.register_buffer("binomial", torch.tensor([math.comb(order, k) / 2**order for k in range(order + 1)]))

    def forward(self, x: Tensor, ops: GraphOperators) -> Tensor:
        two_minus_l = [x]  # (2I - L)^j x for j = 0..K
        for _ in range(self.order):
            two_minus_l.append(2 * two_minus_l[-1] - propagate(ops.laplacian, two_minus_l[-1]))
        basis = []  # (2I - L)^{K-k} L^k x for k = 0..K
        for k in range(self.order + 1):
            term = two_minus_l[self.order - k]
            for _ in range(k):
                term = propagate(ops.laplacian, term)
            basis.append(term)
        return combine(basis, F.relu(self.theta) * self.binomial)

    def response(self, lam: Tensor) -> Tensor:
        k = torch.arange(self.order + 1, dtype=lam.dtype)
        basis = (2 - lam[:, None]) ** (self.order - k) * lam[:, None] ** k
        return basis @ (F.relu(self.theta) * self.binomial).to(lam.dtype)


def chebyshev_nodes(order: int) -> Tensor:
    """The K + 1 Chebyshev nodes cos((j + 1/2) pi / (K + 1)) on [-1, 1]."""
    return torch.cos((torch.arange(order + 1, dtype=torch.float64) + 0.5) * math.pi / (order + 1))


class ChebIIFilter(nn.Module):
    """ChebNetII: the Chebyshev interpolant through values relu(gamma_j) at the Chebyshev nodes.

    w_k = 2 / (K + 1) sum_j relu(gamma_j) T_k(x_j);  g = w_0 / 2 + sum_{k>=1} w_k T_k(L - I).
    """

    operator = "laplacian"

    def __init__(self, order: int) -> None:
        super().__init__()
        self.order = order
        self.gamma = nn.Parameter(torch.ones(order + 1))  # all-pass at initialisation
        nodes = chebyshev_nodes(order)
        # T_k(x_j) = cos(k arccos x_j), shape (K + 1 coefficients, K + 1 nodes)
        basis = torch.cos(torch.arange(order + 1, dtype=torch.float64)[:, None] * torch.arccos(nodes)[None, :])
        self.register_buffer("interpolation", (2.0 / (order + 1) * basis).float())

    def coefficients(self) -> Tensor:
        w = self.interpolation @ F.relu(self.gamma)
        return torch.cat([w[:1] / 2, w[1:]])

    def forward(self, x: Tensor, ops: GraphOperators) -> Tensor:
        shifted = lambda h: propagate(ops.laplacian, h) - h  # (L - I) h, spectrum in [-1, 1]
        basis = [x, shifted(x)]  # T_k(L - I) x by the three-term recurrence
        for _ in range(2, self.order + 1):
            basis.append(2 * shifted(basis[-1]) - basis[-2])
        return combine(basis[: self.order + 1], self.coefficients())

    def response(self, lam: Tensor) -> Tensor:
        w = self.coefficients().to(lam.dtype)
        angle = torch.arccos((lam - 1).clamp(-1, 1))
        return torch.cos(torch.arange(self.order + 1, dtype=lam.dtype)[None, :] * angle[:, None]) @ w


class NormalisedAdjacency(nn.Module):
    """The fixed operator of Graph Wave Networks (official laplacian='sym'): G x = D^{-1/2} A D^{-1/2} x."""

    operator = "adjacency"

    def forward(self, x: Tensor, ops: GraphOperators) -> Tensor:
        return propagate(ops.adjacency, x)

    def response(self, mu: Tensor) -> Tensor:
        return mu


def make_filter(family: str, order: int, alpha: float = 0.1) -> nn.Module:
    if family == "gpr":
        return GPRFilter(order, alpha)
    if family == "bern":
        return BernFilter(order)
    if family == "chebii":
        return ChebIIFilter(order)
    if family == "sym":
        return NormalisedAdjacency()
    raise ValueError(f"unknown filter family {family!r}")


# ----------------------------------------------------------------------------- the wave equation


def node_norm_max(x: Tensor) -> Tensor:
    """Largest per-node feature norm: the blow-up monitor of the brief."""
    return x.detach().reshape(x.shape[0], -1).norm(dim=1).max()


class WaveSolver(nn.Module):
    """Leapfrog integration of d^2X/dt^2 = G(X) over n = ceil(T / dt) steps, one filter per step.

    X_1     = X_0 + dt X'_0 + dt^2 / 2 G_0(X_0)          (Taylor first step)
    X_{m+1} = 2 X_m + dt^2 G_m(X_m) - X_{m-1}            (central difference, m = 1 .. n-1)
    """

    def __init__(self, make_step_filter: Callable[[], nn.Module], time: float, dt: float) -> None:
        super().__init__()
        self.dt = dt
        self.steps = max(1, math.ceil(time / dt - 1e-9))
        self.filters = nn.ModuleList(make_step_filter() for _ in range(self.steps))
        self.step_norms: Tensor | None = None  # per-state max node norm of the last forward

    def trajectory(self, x0: Tensor, v0: Tensor, ops: GraphOperators) -> list[Tensor]:
        dt2 = self.dt**2
        states = [x0, torch.add(torch.add(x0, v0, alpha=self.dt), self.filters[0](x0, ops), alpha=dt2 / 2)]
        for g in self.filters[1:]:  # torch.add(a, b, alpha) fuses the scalar products (fewer passes over X)
            states.append(torch.add(2 * states[-1] - states[-2], g(states[-1], ops), alpha=dt2))
        return states

    def forward(self, x0: Tensor, v0: Tensor, ops: GraphOperators) -> Tensor:
        states = self.trajectory(x0, v0, ops)
        self.step_norms = torch.stack([node_norm_max(s) for s in states])
        return states[-1]

    def mode_response(self, eigenvalues: Tensor) -> tuple[Tensor, Tensor]:
        """Per eigen-mode: X_n = P(lambda) X_0 + Q(lambda) X'_0 (scalar recurrence through each g_m)."""
        dt2, one = self.dt**2, torch.ones_like(eigenvalues)
        g = [f.response(eigenvalues) for f in self.filters]
        p_prev, p = one, one + dt2 / 2 * g[0]
        q_prev, q = torch.zeros_like(one), self.dt * one
        for gm in g[1:]:
            p_prev, p = p, (2 + dt2 * gm) * p - p_prev
            q_prev, q = q, (2 + dt2 * gm) * q - q_prev
        return p, q


# ----------------------------------------------------------------------------- GNNs


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout with a uniform-threshold mask (same law as F.dropout, ~3x cheaper on CPU)."""
    if not training or p == 0.0:
        return x
    return x * (torch.rand_like(x) >= p).to(x.dtype).mul_(1.0 / (1.0 - p))


class MLP(nn.Module):
    """dropout -> Linear -> ReLU -> dropout -> Linear: the floor, and the feature map of the spectral GNNs."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout
        self.lin1, self.lin2 = nn.Linear(in_dim, hidden), nn.Linear(hidden, out_dim)

    def forward(self, x: Tensor, graph=None) -> Tensor:
        x = dropout(x, self.dropout, self.training)
        x = dropout(F.relu(self.lin1(x)), self.dropout, self.training)
        return self.lin2(x)


class SpectralGNN(nn.Module):
    """Base spectral GNN (BernNet / ChebNetII / GPR-GNN layout): MLP, dropout(dprate), polynomial filter."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float, dprate: float, filter: nn.Module):
        super().__init__()
        self.mlp, self.dprate, self.filter = MLP(in_dim, hidden, out_dim, dropout), dprate, filter

    def forward(self, x: Tensor, graph: Tensor | GraphOperators) -> Tensor:
        ops = as_operators(graph, x.shape[0], x.dtype)
        return self.filter(dropout(self.mlp(x), self.dprate, self.training), ops)


class HyperbolicGNN(nn.Module):
    """Hyperbolic-PDE GNN: X(0) = W_0 x, X'(0) = W_1 x, leapfrog to time T, dropout, linear head.

    Linear in x apart from dropout, as in the official model (no activation anywhere).
    """

    def __init__(
        self,
        in_dim: int,
        hidden: int,
        out_dim: int,
        dropout: float,
        make_step_filter: Callable[[], nn.Module],
        time: float,
        dt: float,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.dropout = dropout
        self.lin0, self.lin1 = nn.Linear(in_dim, hidden, bias=bias), nn.Linear(in_dim, hidden, bias=bias)
        self.solver = WaveSolver(make_step_filter, time, dt)
        self.head = nn.Linear(hidden, out_dim, bias=bias)

    def forward(self, x: Tensor, graph: Tensor | GraphOperators) -> Tensor:
        ops = as_operators(graph, x.shape[0], x.dtype)
        x = dropout(x, self.dropout, self.training)
        h = self.solver(self.lin0(x), self.lin1(x), ops)
        return self.head(dropout(h, self.dropout, self.training))

    def spectral_response(self, eigenvalues: Tensor) -> Tensor:
        """(modes, out, in) matrix response W_head (P W_0 + Q W_1) of the bias-free network."""
        p, q = self.solver.mode_response(eigenvalues)
        w0, w1, wh = (m.weight.to(eigenvalues.dtype) for m in (self.lin0, self.lin1, self.head))
        return wh[None] @ (p[:, None, None] * w0[None] + q[:, None, None] * w1[None])
