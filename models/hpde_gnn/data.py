"""Datasets: contextual stochastic block models over homophily levels, and grid-graph filter regression.

Every graph is written as one ``.npz`` (``x`` (n, f), ``edge_index`` (2, E) undirected, ``y`` (n,),
``train_mask``/``val_mask``/``test_mask`` (splits, n)). A user-supplied Planetoid dataset
(``raw/ind.<name>.*``, the format the paper's PyG loaders read) is converted to the same layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models.common.arrays import save_npz  # noqa: F401 (re-exported for tests and pipeline)

# BernNet's five target responses on the normalised-Laplacian spectrum lambda in [0, 2].
TARGET_RESPONSES = {
    "low": lambda lam: np.exp(-10.0 * lam**2),
    "high": lambda lam: 1.0 - np.exp(-10.0 * lam**2),
    "band": lambda lam: np.exp(-10.0 * (lam - 1.0) ** 2),
    "reject": lambda lam: 1.0 - np.exp(-10.0 * (lam - 1.0) ** 2),
    "comb": lambda lam: np.abs(np.sin(np.pi * lam)),
}




def load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {k: archive[k] for k in archive.files}


# ----------------------------------------------------------------------------- CSBM


def csbm(nodes: int, classes: int, features: int, avg_degree: float, homophily: float, signal: float, seed: int):
    """One contextual SBM: Gaussian class-mean features and an SBM whose edge homophily is ~ ``homophily``."""
    import torch
    from torch_geometric.utils import stochastic_blockmodel_graph

    sizes = [nodes // classes + (1 if c < nodes % classes else 0) for c in range(classes)]
    block = nodes / classes
    p_in = min(1.0, homophily * avg_degree / block)  # expected same-class neighbours: h * d
    p_out = min(1.0, (1.0 - homophily) * avg_degree / (nodes - block))  # other-class neighbours: (1 - h) * d
    probs = torch.full((classes, classes), p_out, dtype=torch.float64)
    probs.fill_diagonal_(p_in)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        edge_index = stochastic_blockmodel_graph(sizes, probs, directed=False)
    y = np.repeat(np.arange(classes), sizes)
    rng = np.random.default_rng(seed)
    means = np.zeros((classes, features))
    means[np.arange(classes), np.arange(classes) % features] = signal
    x = means[y] + rng.standard_normal((nodes, features))
    return x.astype(np.float32), edge_index.numpy().astype(np.int64), y.astype(np.int64)


def random_splits(nodes: int, splits: int, train_fraction: float, val_fraction: float, seed: int):
    """Boolean (splits, nodes) masks of independent random train/val/test partitions."""
    masks = {k: np.zeros((splits, nodes), dtype=bool) for k in ("train_mask", "val_mask", "test_mask")}
    n_train, n_val = int(round(train_fraction * nodes)), int(round(val_fraction * nodes))
    for s in range(splits):
        order = np.random.default_rng([seed, s]).permutation(nodes)
        masks["train_mask"][s, order[:n_train]] = True
        masks["val_mask"][s, order[n_train : n_train + n_val]] = True
        masks["test_mask"][s, order[n_train + n_val :]] = True
    return masks


def edge_homophily(edge_index: np.ndarray, y: np.ndarray) -> float:
    """Fraction of edges joining nodes of the same class."""
    if edge_index.shape[1] == 0:
        return float("nan")
    return float(np.mean(y[edge_index[0]] == y[edge_index[1]]))


def level_name(homophily: float) -> str:
    """'h10' for h = 0.10 (no dots: names key modules and metrics)."""
    return f"h{round(100 * homophily):02d}"


# ----------------------------------------------------------------------------- Planetoid (official format)


def load_planetoid(folder: str | Path, name: str):
    """Read Planetoid raw files (``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``) offline.

    Row i of ``tx``/``ty`` belongs to node ``test.index[i]``; nodes listed nowhere (Citeseer's isolated
    ones) get zero features and label 0, as in PyG's loader. Edges are made undirected, loops removed.
    """
    import torch
    from torch_geometric.io.planetoid import edge_index_from_dict, read_file
    from torch_geometric.utils import to_undirected

    folder = Path(folder)
    raw = str(folder / "raw" if (folder / "raw").is_dir() else folder)
    parts = ("allx", "tx", "ally", "ty", "graph", "test.index")
    allx, tx, ally, ty, graph, test_index = (read_file(raw, name, part) for part in parts)
    nodes = max(len(graph), allx.shape[0], int(test_index.max()) + 1)
    x = torch.zeros(nodes, allx.shape[1])
    labels = torch.zeros(nodes, ally.shape[1])
    x[: allx.shape[0]], labels[: ally.shape[0]] = allx, ally
    x[test_index], labels[test_index] = tx, ty
    edge_index = to_undirected(edge_index_from_dict(graph, num_nodes=nodes), num_nodes=nodes)
    return x.numpy().astype(np.float32), edge_index.numpy().astype(np.int64), labels.argmax(1).numpy().astype(np.int64)


# ----------------------------------------------------------------------------- filter regression


def grid_edges(side: int) -> np.ndarray:
    """Undirected 4-neighbour grid graph on side x side pixels (row-major node ids)."""
    ids = np.arange(side * side).reshape(side, side)
    pairs = np.concatenate(
        [np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()]), np.stack([ids[:-1, :].ravel(), ids[1:, :].ravel()])],
        axis=1,
    )
    return np.concatenate([pairs, pairs[::-1]], axis=1).astype(np.int64)


def normalised_laplacian(edge_index: np.ndarray, nodes: int) -> np.ndarray:
    """Dense L = I - D^{-1/2} A D^{-1/2} (float64; isolated nodes keep L_ii = 1)."""
    adjacency = np.zeros((nodes, nodes))
    np.add.at(adjacency, (edge_index[0], edge_index[1]), 1.0)
    degree = adjacency.sum(1)
    inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.maximum(degree, 1e-300)), 0.0)
    return np.eye(nodes) - inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]


def gcn_adjacency(edge_index: np.ndarray, nodes: int) -> np.ndarray:
    """Dense A_tilde = (D + I)^{-1/2} (A + I) (D + I)^{-1/2} (GPR-GNN's operator)."""
    adjacency = np.eye(nodes)
    np.add.at(adjacency, (edge_index[0], edge_index[1]), 1.0)
    inv_sqrt = 1.0 / np.sqrt(adjacency.sum(1))
    return inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]


def eigh(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric eigendecomposition through torch (respects torch's thread setting, unlike numpy's BLAS)."""
    import torch

    values, vectors = torch.linalg.eigh(torch.from_numpy(matrix))
    return values.numpy(), vectors.numpy()


def filter_regression(side: int, images: int, targets: tuple[str, ...], seed: int) -> dict[str, np.ndarray]:
    """Digits upsampled onto a grid graph and their exact filtered versions y = U g(Lambda) U^T x.

    Also the signals and targets in the eigenbases of L and of A_tilde (``<operator>_signals_hat`` ...):
    a spectral filter is diagonal there, so the regression trains on these exactly (Parseval).
    """
    from sklearn.datasets import load_digits

    digits = load_digits().images  # (1797, 8, 8), values 0..16
    chosen = np.random.default_rng(seed).choice(len(digits), size=images, replace=False)
    factor = side // 8
    signals = np.stack([np.kron(digits[i] / 16.0, np.ones((factor, factor))).ravel() for i in chosen], axis=1)
    edge_index = grid_edges(side)
    nodes = side * side
    eigenvalues, eigenvectors = eigh(normalised_laplacian(edge_index, nodes))
    eigenvalues = np.clip(eigenvalues, 0.0, 2.0)
    spectrum = eigenvectors.T @ signals
    filtered = np.stack([eigenvectors @ (TARGET_RESPONSES[t](eigenvalues)[:, None] * spectrum) for t in targets])
    out = {
        "edge_index": edge_index,
        "signals": signals.astype(np.float32),  # (nodes, images)
        "targets": filtered.astype(np.float32),  # (n_targets, nodes, images)
    }
    for operator, matrix in (("laplacian", None), ("gcn_adjacency", gcn_adjacency(edge_index, nodes))):
        values, vectors = (eigenvalues, eigenvectors) if matrix is None else eigh(matrix)
        out[f"{operator}_eigenvalues"] = values.astype(np.float32)
        out[f"{operator}_signals_hat"] = (vectors.T @ signals).astype(np.float32)
        out[f"{operator}_targets_hat"] = np.stack([vectors.T @ f for f in filtered]).astype(np.float32)
    return out
