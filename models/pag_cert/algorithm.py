"""The certification itself: eps-net size, kappa -> rho mapping, held-out check, robustness oracles.

Quality space: every input x maps to q(x) = (rob(x), conf(x)). A counterexample region
R(rho, kappa) = {rob < rho, conf >= kappa} is an intersection of two axis-aligned half-planes; that
range space has VC dimension 2 whatever the input dimension, class count or model. An eps-net sample
of s(e, delta') points therefore hits every region of mass >= e, with probability >= 1 - delta'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

# ----------------------------------------------------------------------------- sample sizes


def _enough(s: int, e: float, delta: float, vc_dim: int) -> bool:
    """The eps-net condition s >= (2 / (e ln 2)) (ln 1/delta + d ln 2s - ln(1 - exp(-s e / 8)))."""
    tail = -math.expm1(-s * e / 8.0)  # 1 - exp(-s e / 8), accurate for small s e
    rhs = 2.0 / (e * math.log(2.0)) * (math.log(1.0 / delta) + vc_dim * math.log(2.0 * s) - math.log(tail))
    return s >= rhs


def epsnet_size(e: float, delta: float, vc_dim: int = 2, upper: int = 10**8) -> int:
    """Smallest s in [1, upper] meeting the eps-net condition (binary search; the condition is monotone there)."""
    if not (0 < e < 1 and 0 < delta < 1):
        raise ValueError(f"need 0 < e < 1 and 0 < delta < 1, got e={e}, delta={delta}")
    lo, hi = 1, upper
    if not _enough(hi, e, delta, vc_dim):
        raise ValueError(f"no eps-net size <= {upper} for e={e}, delta={delta}")
    while lo < hi:
        mid = (lo + hi) // 2
        if _enough(mid, e, delta, vc_dim):
            hi = mid
        else:
            lo = mid + 1
    return lo


def certification_size(epsilon: float, p_min: float, delta: float, vc_dim: int = 2) -> int:
    """Theorem 4.3: the net's e is eps * p_min and its failure budget delta / 2 (Chernoff takes the other half)."""
    return epsnet_size(epsilon * p_min, delta / 2.0, vc_dim)


def chernoff_index(s: int, p_min: float, delta: float) -> int:
    """0-based index k into ascending sample confidences with Pr(conf >= conf_(k)) >= p_min w.p. >= 1 - delta/2.

    N = #{samples below the true (1 - p_min)-quantile} ~ Bin(s, q), q = 1 - p_min. conf_(k) lies below
    that quantile whenever N >= k + 1, and the Chernoff lower tail gives
    Pr(N <= s q - t) <= exp(-t^2 / (2 s q)) = delta / 2 for t = sqrt(2 s q ln(2 / delta)).
    Returns -1 when s is too small to certify any kappa.
    """
    q = 1.0 - p_min
    if q <= 0:
        return 0
    return int(math.floor(s * q - math.sqrt(2.0 * s * q * math.log(2.0 / delta))))


def smallest_certifying_size(p_min: float, delta: float, upper: int = 10**8) -> int:
    """The least sample size whose Chernoff index is >= 0: the smallest net for which Algorithm 1 certifies any
    kappa at all. Its mapping at kappa_max is the minimum robustness of all s points, which a fresh point
    undercuts with probability 1 / (s + 1): the under-sized net of the negative control."""
    if chernoff_index(upper, p_min, delta) < 0:
        raise ValueError(f"no sample size <= {upper} certifies a kappa at p_min={p_min}, delta={delta}")
    lo, hi = 1, upper
    while lo < hi:  # the index grows with s (s q - sqrt(2 s q ln(2/delta)) is increasing once it is >= 0)
        mid = (lo + hi) // 2
        if chernoff_index(mid, p_min, delta) >= 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


def runs_to_decide(threshold: float, confidence: float = 0.95) -> int:
    """Fewest runs n whose all-pass two-sided Clopper-Pearson lower end, ((1 - confidence) / 2) ** (1 / n),
    reaches ``threshold``: with fewer, "pass rate >= threshold" cannot hold whatever the runs show."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold {threshold}: need 0 < threshold < 1")
    return math.ceil(math.log((1 - confidence) / 2) / math.log(threshold))


# ----------------------------------------------------------------------------- kappa -> rho mapping


@dataclass(frozen=True)
class Certificate:
    """Algorithm 1: M(kappa) = min rob over samples with conf >= kappa, usable for kappa <= kappa_max."""

    conf_desc: np.ndarray  # sample confidences, descending
    rob_runmin: np.ndarray  # running minimum of rob in that order: M at each sample's confidence
    rob_asc: np.ndarray  # sample robustness, ascending
    conf_prefmax: np.ndarray  # running maximum of confidence in that order
    kappa_max: float  # -inf when no kappa is certified

    @classmethod
    def fit(cls, conf: np.ndarray, rob: np.ndarray, p_min: float, delta: float) -> Certificate:
        conf, rob = np.asarray(conf, dtype=np.float64), np.asarray(rob, dtype=np.float64)
        by_conf = np.argsort(-conf, kind="stable")
        by_rob = np.argsort(rob, kind="stable")
        k = chernoff_index(len(conf), p_min, delta)
        kappa_max = float(np.sort(conf)[k]) if k >= 0 else -math.inf
        return cls(
            conf[by_conf],
            np.minimum.accumulate(rob[by_conf]),
            rob[by_rob],
            np.maximum.accumulate(conf[by_rob]),
            kappa_max,
        )

    def bound(self, kappa: np.ndarray) -> np.ndarray:
        """M(kappa); +inf where no sample has conf >= kappa. Non-decreasing in kappa."""
        n_above = np.searchsorted(-self.conf_desc, -np.asarray(kappa, dtype=np.float64), side="right")
        padded = np.concatenate(([np.inf], self.rob_runmin))
        return padded[n_above]

    def tau(self, rob: np.ndarray) -> np.ndarray:
        """tau(r) = max conf over samples with rob <= r (-inf if none).

        r < M(kappa) holds exactly when kappa > tau(r): a point with robustness r counts as a
        counterexample for every kappa in (tau(r), conf]. This turns the held-out check into sorted counts.
        """
        n_below = np.searchsorted(self.rob_asc, np.asarray(rob, dtype=np.float64), side="right")
        padded = np.concatenate(([-np.inf], self.conf_prefmax))
        return padded[n_below]


@dataclass(frozen=True)
class HeldOut:
    """Held-out quality-space points, sorted once so that checking each certificate costs sorted counts only."""

    conf: np.ndarray  # ascending
    rob: np.ndarray  # in the same order
    rob_order: np.ndarray  # argsort of rob (sorted queries make searchsorted fast)
    n_at_or_above: np.ndarray  # #{conf >= conf[i]} for every i (ties included)

    @classmethod
    def of(cls, conf: np.ndarray, rob: np.ndarray) -> HeldOut:
        order = np.argsort(np.asarray(conf, dtype=np.float64), kind="stable")
        conf, rob = np.asarray(conf, dtype=np.float64)[order], np.asarray(rob, dtype=np.float64)[order]
        n_at_or_above = len(conf) - np.searchsorted(conf, conf, side="left")
        return cls(conf, rob, np.argsort(rob, kind="stable"), n_at_or_above)

    def tau(self, cert: Certificate) -> np.ndarray:
        out = np.empty_like(self.rob)
        out[self.rob_order] = cert.tau(self.rob[self.rob_order])
        return out


def relative_error(cert: Certificate, held_out: HeldOut) -> float:
    """sup over kappa <= kappa_max of #{conf >= kappa, rob < M(kappa)} / #{conf >= kappa} on held-out points.

    Between consecutive held-out confidences the denominator is fixed and M only grows with kappa, so
    the supremum is attained at a held-out confidence or at kappa_max itself. A point counts at kappa
    iff tau(rob) < kappa <= conf, so the numerator is #{conf >= kappa} - #{min(conf, tau) >= kappa}.
    """
    if not np.isfinite(cert.kappa_max):
        return 0.0
    conf, n = held_out.conf, len(held_out.conf)
    used = np.searchsorted(conf, cert.kappa_max, side="right")  # the mapping is never used above kappa_max
    kappas = np.append(conf[:used], cert.kappa_max)
    n_above = np.append(held_out.n_at_or_above[:used], n - used)
    low = np.sort(np.minimum(conf, held_out.tau(cert)))
    n_excluded = n - np.searchsorted(low, kappas, side="left")
    ok = n_above > 0
    if not ok.any():
        return 0.0
    return float(np.max((n_above[ok] - n_excluded[ok]) / n_above[ok]))


def relative_error_reference(cert: Certificate, conf: np.ndarray, rob: np.ndarray) -> float:
    """The same supremum by direct counting at every held-out confidence <= kappa_max (O(n^2); tests only)."""
    conf, rob = np.asarray(conf, dtype=np.float64), np.asarray(rob, dtype=np.float64)
    worst = 0.0
    for kappa in [*conf[conf <= cert.kappa_max], cert.kappa_max]:
        above = conf >= kappa
        if above.any():
            worst = max(worst, float(np.mean(rob[above] < cert.bound(np.array([kappa]))[0])))
    return worst if np.isfinite(cert.kappa_max) else 0.0


def counterexamples(cert: Certificate, held_out: HeldOut) -> int:
    """Held-out points below their own certified bound: conf <= kappa_max and rob < M(conf)."""
    return int(np.sum((held_out.conf <= cert.kappa_max) & (held_out.tau(cert) < held_out.conf)))


# ----------------------------------------------------------------------------- robustness oracles


def affine_layers(net: nn.Module) -> list[nn.Linear]:
    """The Linear layers of a Linear-ReLU-...-Linear stack (what the exact and interval oracles accept)."""
    layers = [m for m in net.modules() if isinstance(m, nn.Linear)]
    others = [
        m for m in net.modules() if not isinstance(m, (nn.Linear, nn.ReLU, nn.Sequential, nn.Flatten)) and m is not net
    ]
    if others:
        raise TypeError(f"oracle supports Linear/ReLU stacks only, found {type(others[0]).__name__}")
    return layers


def confidence(logits: torch.Tensor) -> np.ndarray:
    """conf_f(x) = max softmax, in float64 so confident points do not all tie at 1.0."""
    return torch.softmax(logits.double(), dim=1).amax(dim=1).numpy()


@torch.no_grad()
def linear_radius(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exact l_inf robustness radius of argmax(W x + b) in R^d (no box constraint).

    rob(x) = min_{j != c} ((w_c - w_j) . x + b_c - b_j) / ||w_c - w_j||_1: the l_inf distance to the
    hyperplane where class j overtakes the predicted class c.
    """
    return radius_from_logits(weight, x @ weight.T + bias)


@torch.no_grad()
def radius_from_logits(weight: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """:func:`linear_radius` from logits already computed (the certification loop needs them for conf anyway)."""
    label = logits.argmax(dim=1)
    l1 = (weight[:, None, :] - weight[None, :, :]).abs().sum(dim=2)  # (classes, classes)
    margins = logits.gather(1, label[:, None]) - logits
    ratio = margins / l1[label].to(logits.dtype)
    ratio.scatter_(1, label[:, None], math.inf)
    return ratio.amin(dim=1)


@torch.no_grad()
def radius_violations(
    weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, rob: torch.Tensor, rtol: float = 1e-6
) -> int:
    """How many points contradict ``rob`` being the exact l_inf radius of a linear classifier.

    Against class j the worst point of the ball is the vertex -r sign(w_c - w_j); so rob is exact iff no
    such vertex flips the label at (1 - rtol) rob and one of them does at (1 + rtol) rob.
    """
    logits = x @ weight.T + bias
    label = logits.argmax(dim=1)
    inside_flips = torch.zeros(len(x), dtype=torch.bool)
    outside_flips = torch.zeros(len(x), dtype=torch.bool)
    for j in range(weight.shape[0]):
        direction = -torch.sign(weight[label] - weight[j])
        inside_flips |= ((x + (rob * (1 - rtol))[:, None] * direction) @ weight.T + bias).argmax(dim=1) != label
        outside_flips |= ((x + (rob * (1 + rtol))[:, None] * direction) @ weight.T + bias).argmax(dim=1) != label
    return int((inside_flips | ~outside_flips)[torch.isfinite(rob)].sum())


def pgd_radius(
    net: nn.Module,
    x: torch.Tensor,
    eps: float,
    alpha: float,
    steps: int,
    random_start: float = 0.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Untargeted l_inf PGD on the CE of the predicted label (QuantitativePGD; no random start by default).

    rob = ||x_adv - x||_inf at the first step whose prediction differs, +inf if none does within
    ``steps`` steps inside the eps-ball. An adversarial example exists at that distance, so this
    upper-bounds the true radius (optimistic oracle). Points drop out of the batch once they flip;
    the perturbation is kept as its own tensor and updated in place (the attack is memory-bound).
    ``random_start`` > 0 starts from a uniform draw in [-random_start, random_start]^d (``generator``).
    """
    with torch.no_grad():
        label = net(x).argmax(dim=1)
    rob = torch.full((len(x),), math.inf, dtype=x.dtype)
    index, origin, delta = torch.arange(len(x)), x, torch.zeros_like(x)
    start = min(random_start, eps)
    if start > 0:
        delta = (torch.rand(x.shape, generator=generator, dtype=x.dtype) * 2 - 1).mul_(start)
    for step in range(steps + 1):
        xa = (origin + delta).requires_grad_(True)
        logits = net(xa)
        flipped = logits.argmax(dim=1) != label
        any_flipped = bool(flipped.any())
        if any_flipped:
            rob[index[flipped]] = delta[flipped].abs().amax(dim=1)
        if step == steps or bool(flipped.all()):
            break
        keep = ~flipped
        loss_logits, loss_label = (logits[keep], label[keep]) if any_flipped else (logits, label)
        (grad,) = torch.autograd.grad(nn.functional.cross_entropy(loss_logits, loss_label, reduction="sum"), xa)
        if any_flipped:  # compact the batch to the points still unbroken
            index, origin, label, delta, grad = index[keep], origin[keep], label[keep], delta[keep], grad[keep]
        delta.add_(grad.sign_(), alpha=alpha)
        if start + alpha * (step + 1) > eps:  # the projection onto the eps-ball can only bind from here on
            delta.clamp_(-eps, eps)
    return rob


def strong_pgd_radius(
    net: nn.Module,
    x: torch.Tensor,
    eps: float,
    alpha: float,
    steps: int,
    restarts: int,
    seed: int,
    weak: tuple[float, int] | None = None,
) -> torch.Tensor:
    """The held-out oracle of an attack-built certificate: the smallest radius over an ensemble of PGD attacks,
    1 + ``restarts`` with step ``alpha`` and ``steps`` steps (the first from x, the others from independent
    uniform starts in [-alpha, alpha]^d) and, with ``weak = (alpha_w, steps_w)``, the certificate's own attack
    configuration as a member. Every member reports a real adversarial example, so this still upper-bounds the
    true radius; with the weak configuration inside it is never weaker on any point, and the finer step and the
    restarts find flips at smaller radii, so an over-optimistic certificate shows against it."""
    generator = torch.Generator().manual_seed(seed)
    rob = pgd_radius(net, x, eps, alpha, steps)
    if weak is not None:
        rob = torch.minimum(rob, pgd_radius(net, x, eps, *weak))
    for _ in range(restarts):
        rob = torch.minimum(rob, pgd_radius(net, x, eps, alpha, steps, random_start=alpha, generator=generator))
    return rob


@torch.no_grad()
def interval_margin(
    layers: list[nn.Linear], x: torch.Tensor, radius: torch.Tensor, label: torch.Tensor
) -> torch.Tensor:
    """IBP lower bound of min_{j != c} logit_c - logit_j over the l_inf ball of ``radius`` around x.

    Hidden layers propagate centre/radius boxes; the last layer is folded into the logit differences
    (w_c - w_j), which is exact for a linear classifier.
    """
    centre, spread = x, radius[:, None].expand_as(x)
    for layer in layers[:-1]:
        centre, spread = centre @ layer.weight.T + layer.bias, spread @ layer.weight.abs().T
        lo, hi = (centre - spread).clamp_min(0), (centre + spread).clamp_min(0)
        centre, spread = (lo + hi) / 2, (hi - lo) / 2
    last = layers[-1]
    logits = centre @ last.weight.T + last.bias
    classes = last.weight.shape[0]
    diff_l1 = (last.weight[:, None, :] - last.weight[None, :, :]).abs().reshape(classes * classes, -1)
    slack = (spread @ diff_l1.T).view(-1, classes, classes)[torch.arange(len(x)), label]  # (n, classes)
    lower = logits.gather(1, label[:, None]) - logits - slack
    lower.scatter_(1, label[:, None], math.inf)
    return lower.amin(dim=1)


@torch.no_grad()
def ibp_radius(net: nn.Module, x: torch.Tensor, max_radius: float, steps: int) -> torch.Tensor:
    """Bisection on the radius with an interval-bound check: a certified lower bound (conservative oracle)."""
    layers = affine_layers(net)
    label = net(x).argmax(dim=1)
    lo, hi = torch.zeros(len(x), dtype=x.dtype), torch.full((len(x),), float(max_radius), dtype=x.dtype)
    for _ in range(steps):
        mid = (lo + hi) / 2
        certified = interval_margin(layers, x, mid, label) > 0
        lo, hi = torch.where(certified, mid, lo), torch.where(certified, hi, mid)
    return lo


# ----------------------------------------------------------------------------- sampling D


class NoisyResampler:
    """Approximate i.i.d. draws from D: resample a split with replacement, add N(0, std^2), clip to [0, 1]."""

    def __init__(self, pool: torch.Tensor, noise_std: float, seed: int, chunk: int) -> None:
        self.pool, self.noise_std, self.chunk = pool, noise_std, chunk
        self.generator = torch.Generator().manual_seed(seed)
        # reused buffers: allocating 100 MB per chunk costs more than drawing the noise
        self._noise, self._buffer = torch.empty(chunk, pool.shape[1]), torch.empty(chunk, pool.shape[1])

    def batches(self, count: int):
        """Yield ``count`` draws in chunks held in one reused buffer: use each chunk before asking for the next."""
        for start in range(0, count, self.chunk):
            m = min(self.chunk, count - start)
            idx = torch.randint(len(self.pool), (m,), generator=self.generator)
            x = torch.index_select(self.pool, 0, idx, out=self._buffer[:m])
            x.add_(self._noise[:m].normal_(0.0, self.noise_std, generator=self.generator)).clamp_(0.0, 1.0)
            yield x
