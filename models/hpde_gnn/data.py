"""Datasets: the benchmark graphs, contextual stochastic block models, and grid-graph filter regression.

Benchmark graphs are the committed raw files ``data/raw/graphs/<name>.npz`` (checked by sha256 through
``models.common.raw_data``): Cora and Citeseer in the shchur/gnn-benchmark layout (CSR arrays ``adj_*``,
``attr_*``, ``labels``), the heterophilous graphs in the yandex-research/heterophilous-graphs layout
(``node_features``, ``node_labels``, ``edges``, ``train_masks``/``val_masks``/``test_masks`` (10, n): the
Geom-GCN 48/32/20 splits). Every graph is made undirected without self-loops or repeated edges.

``prepare`` writes every graph as one ``.npz``: features as CSR arrays (``x_indptr``, ``x_indices``,
``x_data``, ``x_shape``), ``edge_index`` (2, E), ``y`` (n,), ``train_mask``/``val_mask``/``test_mask``
(splits, n). A user-supplied Planetoid dataset (``raw/ind.<name>.*``, the format PyG's loader reads) is
converted to the same layout.
"""

from __future__ import annotations

import builtins
from pathlib import Path

import numpy as np

from models.common import safe_pickle
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


# ----------------------------------------------------------------------------- benchmark graphs


class GraphFormatError(ValueError):
    """A benchmark graph file lacks an array its layout needs, or holds inconsistent ones."""


GNN_BENCHMARK_KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "attr_data", "attr_indices",
                      "attr_indptr", "attr_shape", "labels")  # fmt: skip
HETEROPHILOUS_KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def undirected(edge_index: np.ndarray) -> np.ndarray:
    """Both directions of every edge, no self-loops, no repeats, sorted: (2, E) int64."""
    pairs = np.asarray(edge_index, dtype=np.int64).reshape(2, -1).T
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return np.unique(np.concatenate([pairs, pairs[:, ::-1]]), axis=0).T.copy()


def read_graph_file(path: Path) -> dict:
    """One benchmark ``.npz`` (either layout) as ``features`` (scipy CSR float32), ``edge_index``, ``y`` and
    ``splits`` (the file's train/val/test masks, or None when it carries none)."""
    import scipy.sparse

    with np.load(path, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    if all(k in arrays for k in GNN_BENCHMARK_KEYS):
        shape = tuple(int(v) for v in arrays["attr_shape"])
        features = scipy.sparse.csr_matrix(
            (arrays["attr_data"], arrays["attr_indices"], arrays["attr_indptr"]), shape=shape
        )
        adjacency = scipy.sparse.csr_matrix(
            (arrays["adj_data"], arrays["adj_indices"], arrays["adj_indptr"]),
            shape=tuple(int(v) for v in arrays["adj_shape"]),
        ).tocoo()
        edges, y, splits = np.stack([adjacency.row, adjacency.col]), arrays["labels"], None
    elif all(k in arrays for k in HETEROPHILOUS_KEYS):
        features = scipy.sparse.csr_matrix(arrays["node_features"])
        edges, y = arrays["edges"].T, arrays["node_labels"]
        splits = {f"{k}_mask": arrays[f"{k}_masks"].astype(bool) for k in ("train", "val", "test")}
    else:
        raise GraphFormatError(
            f"{path}: expected the gnn-benchmark arrays {GNN_BENCHMARK_KEYS} or the heterophilous-graphs arrays "
            f"{HETEROPHILOUS_KEYS}; found {sorted(arrays)}"
        )
    n = features.shape[0]
    if len(y) != n or edges.size and (edges.min() < 0 or edges.max() >= n):
        raise GraphFormatError(f"{path}: {n} feature rows, {len(y)} labels, edge ids must lie in [0, {n})")
    if splits is not None and any(m.ndim != 2 or m.shape[1] != n for m in splits.values()):
        raise GraphFormatError(f"{path}: split masks must be (splits, {n})")
    return {"features": features.astype(np.float32), "edge_index": undirected(edges), "y": y.astype(np.int64),
            "splits": splits}  # fmt: skip


def load_benchmark_graph(name: str) -> dict:
    """``data/raw/graphs/<name>.npz``, checked against its pinned sha256 (``RawDataError`` otherwise)."""
    from models.common import raw_data

    return read_graph_file(raw_data.raw_file(f"graphs/{name}.npz"))


def graph_provenance(name: str) -> str:
    from models.common import raw_data

    return raw_data.provenance(f"graphs/{name}.npz")


def csr_arrays(features) -> dict[str, np.ndarray]:
    """A scipy CSR matrix as the ``x_*`` arrays of a prepared graph file."""
    import scipy.sparse

    matrix = scipy.sparse.csr_matrix(features, dtype=np.float32)
    matrix.sum_duplicates()
    matrix.sort_indices()
    return {"x_indptr": matrix.indptr.astype(np.int64), "x_indices": matrix.indices.astype(np.int64),
            "x_data": matrix.data.astype(np.float32), "x_shape": np.array(matrix.shape, dtype=np.int64)}  # fmt: skip


def majority_rate(y: np.ndarray, mask: np.ndarray) -> float:
    """Accuracy of always predicting the most frequent class among ``mask``'s nodes."""
    counts = np.bincount(y[mask])
    return float(counts.max() / counts.sum()) if counts.size else float("nan")


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


class PlanetoidFormatError(ValueError):
    """A Planetoid raw file is missing, malformed, or references a class the restricted unpickler refuses."""


PLANETOID_PARTS = ("allx", "tx", "ally", "ty", "graph")
_BUILTINS = ("list", "dict", "tuple", "set", "frozenset", "int", "float", "complex", "bool", "str", "bytes", "object")


def _planetoid_globals() -> dict[tuple[str, str], object]:
    """Every (module, name) a Planetoid ``ind.*`` pickle needs, Python 2 and 3 spellings alike: numpy
    arrays and dtypes, scipy csr/csc matrices, the graph's dict of lists. Nothing that runs code."""
    import collections
    import copyreg

    import scipy.sparse

    allowed = safe_pickle.numpy_array_globals()
    for kind in ("csr", "csc"):
        for module in (f"scipy.sparse.{kind}", f"scipy.sparse._{kind}", "scipy.sparse"):
            allowed[module, f"{kind}_matrix"] = getattr(scipy.sparse, f"{kind}_matrix")
    allowed["collections", "defaultdict"] = collections.defaultdict
    allowed["collections", "OrderedDict"] = collections.OrderedDict
    allowed["copyreg", "_reconstructor"] = allowed["copy_reg", "_reconstructor"] = copyreg._reconstructor
    for name in _BUILTINS:
        allowed["builtins", name] = allowed["__builtin__", name] = getattr(builtins, name)
    return allowed


def read_planetoid_pickle(path: Path):
    """One ``ind.<name>.<part>`` file through the allow-list unpickler."""

    def refuse(module: str, name: str) -> Exception:
        return PlanetoidFormatError(
            f"{path}: refusing to unpickle {module}.{name}; a Planetoid file may hold only numpy arrays, "
            "scipy csr/csc matrices and dicts/lists of ints"
        )

    try:
        with open(path, "rb") as fh:
            return safe_pickle.load(fh, _planetoid_globals(), refuse)
    except FileNotFoundError:
        expected = ",".join((*PLANETOID_PARTS, "test.index"))
        raise PlanetoidFormatError(f"{path}: missing (a Planetoid folder holds ind.<name>.{{{expected}}})") from None
    except PlanetoidFormatError:
        raise
    except Exception as exc:  # truncated or not a pickle at all
        raise PlanetoidFormatError(f"{path}: not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


def _dense(path: Path, value) -> np.ndarray:
    """A feature or label matrix as float32 (n, k): the files hold scipy sparse matrices or arrays."""
    import scipy.sparse

    array = value.toarray() if scipy.sparse.issparse(value) else value
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.dtype.kind not in "biuf":
        raise PlanetoidFormatError(f"{path}: expected a 2-D numeric matrix, got {type(value).__name__}")
    return array.astype(np.float32)


def load_planetoid(folder: str | Path, name: str):
    """Read Planetoid raw files (``ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}``) offline.

    The pickles go through an allow-list unpickler (never the full one: a pickle can run any code), and
    the graph is built here rather than by torch_geometric's reader (which unpickles with ``pickle.load``).
    Row i of ``tx``/``ty`` belongs to node ``test.index[i]``; nodes listed nowhere (Citeseer's isolated
    ones) get zero features and label 0, as in PyG's loader. Edges are made undirected, loops removed.
    """
    folder = Path(folder)
    raw = folder / "raw" if (folder / "raw").is_dir() else folder
    file = lambda part: raw / f"ind.{name.lower()}.{part}"  # noqa: E731 (PyG lower-cases the name)
    allx, tx, ally, ty, graph = (read_planetoid_pickle(file(part)) for part in PLANETOID_PARTS)
    allx, tx, ally, ty = (_dense(file(part), v) for part, v in zip(PLANETOID_PARTS, (allx, tx, ally, ty)))
    try:
        test_index = np.loadtxt(file("test.index"), dtype=np.int64, ndmin=1)
    except (OSError, ValueError) as exc:
        raise PlanetoidFormatError(f"{file('test.index')}: expected one node id per line ({exc})") from None
    if test_index.size and test_index.min() < 0:
        raise PlanetoidFormatError(f"{file('test.index')}: node ids must be >= 0")
    if not isinstance(graph, dict) or not all(
        isinstance(i, int) and isinstance(js, (list, tuple)) and all(isinstance(j, int) for j in js)
        for i, js in graph.items()
    ):
        raise PlanetoidFormatError(f"{file('graph')}: expected a dict of node id -> list of neighbour ids")
    if len(tx) != len(test_index) or len(ty) != len(test_index) or len(allx) != len(ally):
        raise PlanetoidFormatError(f"{raw}: ind.{name}.tx/ty need one row per test.index line, allx/ally one per node")
    if tx.shape[1] != allx.shape[1] or ty.shape[1] != ally.shape[1]:
        raise PlanetoidFormatError(f"{raw}: ind.{name}.tx/ty need as many columns as allx/ally")
    nodes = max(len(graph), allx.shape[0], int(test_index.max(initial=-1)) + 1)
    x = np.zeros((nodes, allx.shape[1]), dtype=np.float32)
    labels = np.zeros((nodes, ally.shape[1]), dtype=np.float32)
    x[: len(allx)], labels[: len(ally)] = allx, ally
    x[test_index], labels[test_index] = tx, ty
    pairs = np.array([(i, j) for i, neighbours in graph.items() for j in neighbours], dtype=np.int64).reshape(-1, 2)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= nodes):
        raise PlanetoidFormatError(f"{file('graph')}: neighbour ids must lie in [0, {nodes})")
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]  # no self-loops
    pairs = np.unique(np.concatenate([pairs, pairs[:, ::-1]]), axis=0)  # undirected, sorted, no duplicates
    return x, pairs.T.copy(), labels.argmax(1).astype(np.int64)


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
