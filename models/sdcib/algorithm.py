"""SDCIB's loss terms, the multi-view fusion rule, and the clustering metrics.

Loss (per view v, layers k in the variant's layer set):

    L = sum_v { alpha * sum_k [ KL(softmax(eps_k) || softmax(h_k^v)) + beta * s * I_JSD(h_k^v ; c^v) ]
              + (1 - alpha) * sum_{u != v} [ sum_k l_inst(h_k^v, h_k^u) + l_clu(c^v, c^u) ] }

with s = -1 ("ib": maximise the MI bound, the fix) or s = +1 ("official": the bound is minimised).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

# ----------------------------------------------------------------------------- loss terms


def compression_kl(h: torch.Tensor) -> torch.Tensor:
    """The official "I(X;H)" surrogate: KL(softmax(eps) || softmax(h)), eps ~ N(0, I) fresh, batch mean.

    ``h`` is (batch, w) or (views, batch, w); the per-view batch means are summed over views.
    """
    eps = torch.randn_like(h)
    return F.kl_div(F.log_softmax(h, dim=-1), F.softmax(eps, dim=-1), reduction="sum") / h.shape[-2]


def jsd_mi(critic: torch.nn.Module, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """JSD lower bound on I(H; C): E_joint log sigma(T) + E_marginals log(1 - sigma(T)).

    Negatives pair h_i with c_{i-1} (c rolled by one in the batch). The value is <= 0. With
    (views, batch, .) inputs and a ``GroupedCritic`` it is the sum of the views' bounds.
    """
    positive = critic(h, c)
    negative = critic(h, torch.roll(c, shifts=1, dims=-2))
    return (F.logsigmoid(positive).mean(-1) + F.logsigmoid(-negative).mean(-1)).sum()


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCLR NT-Xent over 2n rows (cosine similarity / tau), minus the constant log n (official).

    Row i of ``z1`` and row i of ``z2`` are positives; the other 2n - 2 rows are negatives. The
    value is symmetric in (z1, z2).
    """
    n = len(z1)
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = z @ z.T / tau
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets) - math.log(n)


def pairwise_nt_xent(zs: torch.Tensor, tau: float) -> torch.Tensor:
    """``sum_{v != u} nt_xent(zs[v], zs[u], tau)`` over ordered view pairs of (views, n, d), from one Gram matrix.

    Equal to the pair-by-pair sum (each unordered pair counted twice, as the paper's u != v sum
    does), but the V x V blocks of similarities are computed once: row i of view v has the
    denominator sum over {z_v,j : j != i} and {z_u,j : all j}, so the per-block sums are shared
    by every pair that uses the block. The logsumexp is shifted by the largest possible similarity,
    1 / tau (cosines are <= 1), so the (Vn)^2 exponentials are at most 1 and need no per-row max;
    ``tau >= 0.03`` (config bounds) keeps exp(-2 / tau) a normal float32, so no denominator underflows.
    """
    n_views, n = zs.shape[0], zs.shape[1]
    flat = F.normalize(zs.reshape(n_views * n, -1), dim=1)
    shifted = torch.addmm(flat.new_tensor(-1 / tau), flat, flat.T, alpha=1 / tau)  # sim - 1 / tau, sim = cos / tau
    positives = torch.diagonal(shifted.view(n_views, n, n_views, n), dim1=1, dim2=3)  # (V, V, n): pair (v,i)-(u,i)
    weights = torch.exp(shifted)
    self_pairs = torch.eye(n_views * n, dtype=torch.bool, device=zs.device)
    weights = weights.masked_fill(self_pairs, 0.0)  # a row is not its own negative
    block_sums = weights.view(n_views, n, n_views, n).sum(dim=3)  # (V, n, V): row (v, i) against view u
    own = torch.diagonal(block_sums, dim1=0, dim2=2).T  # (V, n): the own view's other rows
    rows = torch.log(own[:, None, :] + block_sums.permute(0, 2, 1)) - positives  # (V, V, n)
    off_diagonal = 1.0 - torch.eye(n_views, device=zs.device)
    return (rows.mean(dim=2) * off_diagonal).sum() - n_views * (n_views - 1) * math.log(n)


def gaussian_sample(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    return mu + sigma * torch.randn_like(mu)


def sdcib_loss(
    outputs,
    critics: dict[str, torch.nn.Module],
    layers: tuple[int, ...],
    *,
    alpha: float,
    beta: float,
    tau_instance: float,
    tau_cluster: float,
    mi_sign: float,
    sample: bool,
) -> dict[str, torch.Tensor]:
    """The total loss and its parts (each part summed over views/layers/view pairs, unweighted).

    ``outputs`` is the batched ``networks.ViewsOutput`` (tensors stacked over views); ``critics``
    maps ``"k{k}"`` to layer k's ``GroupedCritic`` (one critic per view). Pairs u != v are counted
    in both orders, as in the paper's sum; NT-Xent is symmetric, so each unordered pair counts twice.
    """
    zero = outputs.probs.new_zeros(())
    compression, mi, instance, cluster = zero, zero, zero, zero
    for k in layers if alpha > 0 else ():  # alpha = 0: no IB terms (and no critics) at all
        compression = compression + compression_kl(outputs.codes[k])
        # Official: the I(H;C) term draws its own sample of h from the layer's Gaussian.
        h = gaussian_sample(outputs.mus[k], outputs.sigmas[k]) if sample else outputs.mus[k]
        mi = mi + jsd_mi(critics[f"k{k}"], h, outputs.probs)
    if len(outputs.probs) > 1:
        for k in layers:  # instance level: the same sample's codes in two views are positives
            instance = instance + pairwise_nt_xent(outputs.codes[k], tau_instance)
        # Cluster level (CC-style, no entropy term): the K columns of the (batch, K) assignments.
        cluster = pairwise_nt_xent(outputs.probs.transpose(1, 2), tau_cluster)
    total = alpha * (compression + beta * mi_sign * mi) + (1 - alpha) * (instance + cluster)
    return {"loss": total, "compression": compression, "mi": mi, "instance": instance, "cluster": cluster}


# ----------------------------------------------------------------------------- fusion and metrics


def contingency(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """counts[i, j] = #{n : a_n = i and b_n = j}."""
    counts = np.zeros((k, k), dtype=np.int64)
    np.add.at(counts, (a, b), 1)
    return counts


def fuse_views(probs: list[np.ndarray]) -> np.ndarray:
    """Fused labels: align every view's clusters to view 0 (Hungarian on co-occurrence), sum, argmax.

    The official code chains view i to the *unaligned* view i-1; aligning all to view 0 is the
    consistent version (identical for two views).
    """
    k = probs[0].shape[1]
    reference = probs[0].argmax(1)
    total = probs[0].astype(np.float64).copy()
    for p in probs[1:]:
        rows, cols = linear_sum_assignment(-contingency(p.argmax(1), reference, k))
        aligned = np.zeros_like(total)
        aligned[:, cols] = p[:, rows]  # this view's cluster rows[i] becomes reference cluster cols[i]
        total += aligned
    return total.argmax(1)


def cluster_acc(labels: np.ndarray, pred: np.ndarray) -> float:
    """Clustering accuracy under the best one-to-one label matching (Hungarian)."""
    k = int(max(labels.max(), pred.max())) + 1
    counts = contingency(pred, labels, k)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(labels))


def cluster_entropy(pred: np.ndarray, k: int) -> float:
    """Entropy of the predicted cluster sizes divided by log K (1 = balanced, 0 = one cluster)."""
    p = np.bincount(pred, minlength=k) / len(pred)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum() / math.log(k))


def clustering_scores(labels: np.ndarray, pred: np.ndarray, k: int) -> dict[str, float]:
    return {
        "acc": cluster_acc(labels, pred),
        "nmi": float(normalized_mutual_info_score(labels, pred)),
        "ari": float(adjusted_rand_score(labels, pred)),
        "cluster_entropy": cluster_entropy(pred, k),
    }
