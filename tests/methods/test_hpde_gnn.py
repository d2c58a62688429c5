"""Hyperbolic-PDE GNN: filters vs their spectral closed forms, the leapfrog vs its eigen-mode recurrence,
stacked members vs single networks, early stopping, the benchmark-graph and Planetoid loaders, the claim on
hand-built metrics, and the pipeline at smoke scale."""

import json
import math
import os
import pickle

import numpy as np
import pytest

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from models.base import Metrics  # noqa: E402
from models.hpde_gnn import SPEC  # noqa: E402
from models.hpde_gnn.data import (  # noqa: E402
    GraphFormatError,
    PlanetoidFormatError,
    csbm,
    edge_homophily,
    filter_regression,
    load_npz,
    load_planetoid,
    normalised_laplacian,
    random_splits,
    read_graph_file,
    save_npz,
)
from models.hpde_gnn.networks import (  # noqa: E402
    MLP,
    BernFilter,
    ChebIIFilter,
    GPRFilter,
    HyperbolicGNN,
    NormalisedAdjacency,
    SparseFeatures,
    SpectralGNN,
    WaveSolver,
    chebyshev_nodes,
    graph_operators,
    make_filter,
    member_state,
    propagate,
)


def small_graph(n: int = 20, seed: int = 0) -> torch.Tensor:
    """A connected random undirected graph (a ring plus random chords), as edge_index."""
    rng = np.random.default_rng(seed)
    ring = [(i, (i + 1) % n) for i in range(n)]
    chords = [tuple(rng.choice(n, 2, replace=False)) for _ in range(n)]
    pairs = np.array(sorted({tuple(sorted(p)) for p in ring + chords}))
    return torch.from_numpy(np.concatenate([pairs.T, pairs.T[::-1]], axis=1).copy())


def dense(edge_index: torch.Tensor, n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    return a


def eig(matrix: np.ndarray):
    values, vectors = np.linalg.eigh(matrix)
    return torch.from_numpy(values), torch.from_numpy(vectors)


@pytest.fixture(scope="module")
def graph():
    n = 20
    edge_index = small_graph(n)
    return n, edge_index, graph_operators(edge_index, n, dtype=torch.float64)


# ----------------------------------------------------------------------------- operators and filters


def test_operators_match_their_dense_definitions(graph):
    n, edge_index, ops = graph
    a = dense(edge_index, n)
    d = a.sum(1)
    lap = np.eye(n) - a / np.sqrt(np.outer(d, d))
    a_loops = a + np.eye(n)
    gcn = a_loops / np.sqrt(np.outer(d + 1, d + 1))
    np.testing.assert_allclose(ops.laplacian.to_dense().numpy(), lap, atol=1e-12)
    np.testing.assert_allclose(ops.adjacency.to_dense().numpy(), np.eye(n) - lap, atol=1e-12)
    np.testing.assert_allclose(ops.gcn_adjacency.to_dense().numpy(), gcn, atol=1e-12)
    np.testing.assert_allclose(normalised_laplacian(edge_index.numpy(), n), lap, atol=1e-12)
    assert np.linalg.eigvalsh(lap).min() > -1e-10 and np.linalg.eigvalsh(lap).max() < 2 + 1e-10


@pytest.mark.parametrize("family", ["gpr", "bern", "chebii"])
def test_polynomial_filter_equals_its_spectral_closed_form(graph, family):
    """filter(x) by repeated sparse propagation == U g_s(Lambda) U^T x for each of 2 members (own coefficients)."""
    n, _, ops = graph
    torch.manual_seed(1)
    filt = make_filter(family, order=6, members=2).double()
    with torch.no_grad():  # random coefficients, some negative (relu'd for BernNet/ChebNetII)
        next(filt.parameters()).copy_(torch.randn(2, 7, dtype=torch.float64))
    values, vectors = eig(getattr(ops, filt.operator).to_dense().numpy())
    x = torch.randn(n, 2, 3, dtype=torch.float64)
    response = filt.response(values)  # (members, modes)
    for s in range(2):
        expected = vectors @ (response[s][:, None] * (vectors.T @ x[:, s]))
        torch.testing.assert_close(filt(x, ops)[:, s], expected, atol=1e-9, rtol=1e-9)


def test_bernnet_in_chebyshev_basis_equals_bernnets_own_recursion(graph):
    """The Chebyshev-basis evaluation == sum_k relu(theta_k) C(K,k)/2^K (2I - L)^{K-k} L^k x with dense matrices."""
    n, _, ops = graph
    order = 10
    filt = BernFilter(order).double()
    with torch.no_grad():
        filt.theta.copy_(torch.linspace(-0.5, 2.0, order + 1, dtype=torch.float64)[None])
    lap = ops.laplacian.to_dense()
    x = torch.randn(n, 1, 4, dtype=torch.float64)
    expected = sum(
        max(float(filt.theta[0, k].detach()), 0.0) * math.comb(order, k) / 2**order
        * torch.linalg.matrix_power(2 * torch.eye(n, dtype=torch.float64) - lap, order - k)
        @ torch.linalg.matrix_power(lap, k) @ x[:, 0]
        for k in range(order + 1)
    )  # fmt: skip
    torch.testing.assert_close(filt(x, ops)[:, 0], expected, atol=1e-9, rtol=1e-9)


def test_filter_responses_against_independent_formulas():
    lam = torch.linspace(0, 2, 41, dtype=torch.float64)
    bern = BernFilter(5).double()
    torch.testing.assert_close(bern.response(lam)[0], torch.ones_like(lam))  # theta = 1: the Bernstein basis sums to 1
    with torch.no_grad():
        bern.theta.copy_(torch.tensor([[0, 0, 0, 0, 0, 1.0]]))
    torch.testing.assert_close(bern.response(lam)[0], (lam / 2) ** 5)  # last basis polynomial: (lam / 2)^K
    gpr = GPRFilter(4, alpha=0.1).double()
    gamma = [0.1 * 0.9**k for k in range(4)] + [0.9**4]  # PPR initialisation
    torch.testing.assert_close(gpr.gamma.detach()[0], torch.tensor(gamma, dtype=torch.float64))
    one = torch.ones(1, dtype=torch.float64)
    torch.testing.assert_close(gpr.response(one)[0], one)


def test_chebii_interpolates_its_values_at_chebyshev_nodes():
    """ChebNetII's coefficients make g(1 + x_j) = relu(gamma_j) exactly at the K + 1 Chebyshev nodes."""
    torch.manual_seed(0)
    filt = ChebIIFilter(7).double()
    with torch.no_grad():
        filt.gamma.copy_(torch.rand(1, 8, dtype=torch.float64) * 2 - 0.5)
    at_nodes = filt.response(1 + chebyshev_nodes(7))[0]
    torch.testing.assert_close(at_nodes, torch.relu(filt.gamma.detach()[0]), atol=1e-6, rtol=1e-6)
    # and the interpolant is a polynomial of degree <= K: degree K+1 finite differences vanish on a grid
    grid = torch.linspace(0, 2, 30, dtype=torch.float64)
    assert torch.diff(filt.response(grid)[0], n=8).abs().max() < 1e-6


def test_symmetric_propagation_gradient_matches_dense(graph):
    n, _, ops = graph
    x = torch.randn(n, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: propagate(ops.laplacian, v), (x,))
    weight = torch.randn(n, 2, dtype=torch.float64)
    (propagate(ops.gcn_adjacency, x) * weight).sum().backward()
    torch.testing.assert_close(x.grad, ops.gcn_adjacency.to_dense().T @ weight)


def test_sparse_features_give_each_member_its_own_dropout_and_the_dense_gradient():
    rng = np.random.default_rng(0)
    x = (rng.random((30, 12)) < 0.3) * rng.random((30, 12))
    features = SparseFeatures.from_dense(x)
    torch.testing.assert_close(features.dense(), torch.from_numpy(x).float())
    weight = torch.randn(3, 12, 5, requires_grad=True)
    out = features.matmul(weight, p=0.5, training=False)  # (nodes, members, out)
    expected = torch.einsum("nf,sfo->nso", torch.from_numpy(x).float(), weight)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(out)
    (out * grad).sum().backward()
    torch.testing.assert_close(weight.grad, torch.einsum("nf,nso->sfo", torch.from_numpy(x).float(), grad),
                               atol=1e-4, rtol=1e-4)  # fmt: skip
    torch.manual_seed(0)
    same = torch.ones(3, 12, 5).expand(3, 12, 5).contiguous()  # identical weights: members differ only by dropout
    dropped = features.matmul(same, p=0.5, training=True)
    assert not torch.allclose(dropped[:, 0], dropped[:, 1])
    kept = dropped[:, 0] / expected.new_tensor(x.sum(1, keepdims=True)).clamp_min(1e-9)  # ~ 1 on average
    assert 0.6 < float(kept[torch.from_numpy(x.sum(1) > 1)].mean()) < 1.4


@pytest.mark.parametrize("kind", ["mlp", "base", "pde"])
def test_a_stacked_network_is_its_members_side_by_side(graph, kind):
    """Member s of a 3-member network == a 1-member network holding member s's weights (eval mode)."""
    n, edge_index, ops = graph
    torch.manual_seed(5)
    make = {
        "mlp": lambda m: MLP(6, 8, 3, 0.5, members=m),
        "base": lambda m: SpectralGNN(6, 8, 3, 0.5, 0.5, BernFilter(4, members=m), members=m),
        "pde": lambda m: HyperbolicGNN(6, 8, 3, 0.5, lambda: GPRFilter(2, members=m), 3.0, 1.0, members=m),
    }[kind]
    ops = graph_operators(edge_index, n)  # float32, as the networks run
    stacked = make(3).eval()
    with torch.no_grad():
        for p in stacked.parameters():
            p.add_(0.1 * torch.randn_like(p))  # members with distinct filter coefficients too
    x = torch.randn(n, 6)
    out = stacked(x, ops)
    assert out.shape == (n, 3, 3)
    for s in range(3):
        single = make(1).eval()
        single.load_state_dict(member_state(stacked, stacked.state_dict(), s))
        torch.testing.assert_close(single(x, ops)[:, 0], out[:, s], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- the wave equation


def test_leapfrog_with_adjacency_equals_eigenmode_recurrence(graph):
    """G = A_hat: each eigen-mode obeys x_{m+1} = (2 + dt^2 mu) x_m - x_{m-1}, x_1 = (1 + dt^2 mu / 2) x_0 + dt v_0."""
    n, _, ops = graph
    dt, steps = 0.7, 6
    solver = WaveSolver(NormalisedAdjacency, time=dt * steps, dt=dt).double()
    assert solver.steps == steps
    torch.manual_seed(2)
    x0, v0 = torch.randn(n, 4, dtype=torch.float64), torch.randn(n, 4, dtype=torch.float64)
    states = solver.trajectory(x0, v0, ops)
    mu, u = eig(ops.adjacency.to_dense().numpy())
    a0, b0 = u.T @ x0, u.T @ v0  # modal coordinates
    modes = [a0, (1 + dt**2 * mu[:, None] / 2) * a0 + dt * b0]
    for _ in range(steps - 1):
        modes.append((2 + dt**2 * mu[:, None]) * modes[-1] - modes[-2])
    assert len(states) == len(modes) == steps + 1
    for state, mode in zip(states, modes):
        torch.testing.assert_close(state, u @ mode, atol=1e-10, rtol=1e-10)
    # the top mode (mu = 1) grows by (3 + sqrt 5) / 2 per step at dt = 1: the brief's instability analysis
    top = torch.tensor([1.0], dtype=torch.float64)
    p, _ = WaveSolver(NormalisedAdjacency, time=30, dt=1.0).mode_response(top)
    p_prev, _ = WaveSolver(NormalisedAdjacency, time=29, dt=1.0).mode_response(top)
    assert float(p / p_prev) == pytest.approx((3 + math.sqrt(5)) / 2, rel=1e-9)


@pytest.mark.parametrize("family", ["gpr", "bern", "chebii"])
def test_polynomial_wave_network_equals_its_spectral_response(graph, family):
    """Per-step polynomial filters: net(x) == sum_i u_i u_i^T x R(lambda_i)^T with R = W_h (P W_0 + Q W_1)."""
    n, edge_index, ops = graph
    torch.manual_seed(3)
    net = HyperbolicGNN(5, 4, 3, 0.0, lambda: make_filter(family, 2), time=3.0, dt=0.5, bias=False).double().eval()
    with torch.no_grad():  # distinct random per-step coefficients
        for f in net.solver.filters:
            next(f.parameters()).copy_(torch.rand(1, 3, dtype=torch.float64))
    x = torch.randn(n, 5, dtype=torch.float64)
    values, vectors = eig(getattr(ops, net.solver.filters[0].operator).to_dense().numpy())
    response = net.spectral_response(values)[0]  # (modes, out, in)
    expected = vectors @ torch.einsum("ioc,ic->io", response, vectors.T @ x)
    net.float()  # the networks run in float32 (sparse features and operators)
    ops32 = graph_operators(edge_index, n)
    torch.testing.assert_close(net(x.float(), ops32)[:, 0], expected.float(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(net(x.float(), edge_index)[:, 0], expected.float(), atol=1e-4, rtol=1e-4)  # PyG-style


@pytest.mark.parametrize("kind", ["base", "pde"])
def test_networks_are_permutation_equivariant(graph, kind):
    n, edge_index, _ = graph
    torch.manual_seed(4)
    if kind == "base":
        net = SpectralGNN(6, 8, 3, 0.5, 0.5, BernFilter(4))
    else:
        net = HyperbolicGNN(6, 8, 3, 0.5, lambda: ChebIIFilter(2), time=4.0, dt=1.0)
    net.eval()
    x = torch.randn(n, 6)
    perm = torch.randperm(n)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    out = net(x, edge_index)
    out_perm = net(x[perm], inverse[edge_index])
    assert out.shape == (n, 1, 3)
    torch.testing.assert_close(out_perm, out[perm], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- data


def test_csbm_has_requested_homophily_degree_and_features():
    n, classes, features, degree = 900, 3, 16, 10.0
    for h in (0.1, 0.5, 0.9):
        x, edge_index, y = csbm(n, classes, features, degree, h, signal=2.0, seed=7)
        assert edge_homophily(edge_index, y) == pytest.approx(h, abs=0.03)
        assert edge_index.shape[1] / n == pytest.approx(degree, rel=0.05)
        pairs = set(map(tuple, edge_index.T))
        assert all((j, i) in pairs for i, j in pairs) and not any(i == j for i, j in pairs)  # undirected, no loops
        class_means = np.stack([x[y == c].mean(0) for c in range(classes)])
        np.testing.assert_allclose(class_means[:, :classes], 2.0 * np.eye(classes), atol=0.25)
    again = csbm(n, classes, features, degree, 0.5, signal=2.0, seed=7)
    first = csbm(n, classes, features, degree, 0.5, signal=2.0, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


def test_splits_partition_nodes_and_npz_bytes_are_reproducible(tmp_path):
    masks = random_splits(50, 3, 0.6, 0.2, seed=0)
    total = masks["train_mask"].astype(int) + masks["val_mask"] + masks["test_mask"]
    assert (total == 1).all() and masks["train_mask"].sum(1).tolist() == [30, 30, 30]
    assert not np.array_equal(masks["train_mask"][0], masks["train_mask"][1])
    save_npz(tmp_path / "a.npz", **masks)
    os.utime(tmp_path / "a.npz", (0, 0))
    save_npz(tmp_path / "b.npz", **masks)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert np.array_equal(load_npz(tmp_path / "b.npz")["val_mask"], masks["val_mask"])


def test_filter_regression_targets_are_exact_spectral_filters():
    task = filter_regression(8, 3, ("low", "comb"), seed=0)
    lap = normalised_laplacian(task["edge_index"], 64)
    values, vectors = np.linalg.eigh(lap)
    x = task["signals"].astype(np.float64)
    low = vectors @ np.diag(np.exp(-10 * values**2)) @ vectors.T @ x
    np.testing.assert_allclose(task["targets"][0], low, atol=1e-5)
    # a low-pass output is smoother: smaller Dirichlet energy x^T L x than its input
    assert np.trace(low.T @ lap @ low) < np.trace(x.T @ lap @ x)
    # the eigenbasis copies the regression trains on: diagonal filters there, norms kept (Parseval)
    np.testing.assert_allclose(task["laplacian_eigenvalues"], np.clip(values, 0, 2), atol=1e-5)
    comb = np.abs(np.sin(np.pi * task["laplacian_eigenvalues"]))[:, None] * task["laplacian_signals_hat"]
    np.testing.assert_allclose(task["laplacian_targets_hat"][1], comb, atol=1e-5)
    for op in ("laplacian", "gcn_adjacency"):
        np.testing.assert_allclose(
            np.linalg.norm(task[f"{op}_signals_hat"], axis=0), np.linalg.norm(x, axis=0), rtol=1e-5
        )
        np.testing.assert_allclose(
            np.linalg.norm(task[f"{op}_targets_hat"], axis=1), np.linalg.norm(task["targets"], axis=1), rtol=1e-4
        )


def _write_planetoid(folder, name="tiny", protocol=pickle.DEFAULT_PROTOCOL, graph=None):
    """A 6-node Planetoid in PyG's raw format under ``folder/raw``; returns the features and labels."""
    import collections

    sp = pytest.importorskip("scipy.sparse")
    raw = folder / "raw"
    raw.mkdir(parents=True)
    feats = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    labels = np.eye(2)[[0, 1, 0, 1, 1, 0]]
    if graph is None:  # the official files hold a defaultdict(list)
        graph = collections.defaultdict(list, {0: [1, 2], 1: [0], 2: [0, 3, 2], 3: [2], 4: [5], 5: [4, 4]})
    parts = {
        "x": sp.csr_matrix(feats[:2]), "allx": sp.csr_matrix(feats[:4]), "tx": sp.csr_matrix(feats[[5, 4]]),
        "y": labels[:2], "ally": labels[:4], "ty": labels[[5, 4]], "graph": graph,
    }  # fmt: skip
    for part, obj in parts.items():
        with open(raw / f"ind.{name}.{part}", "wb") as fh:
            pickle.dump(obj, fh, protocol=protocol)
    (raw / f"ind.{name}.test.index").write_text("5\n4\n")  # row i of tx/ty is node test.index[i]
    return feats, labels.argmax(1)


# Protocol 0 and 2 pickles name builtins the Python 2 way (__builtin__, copy_reg), as the official files do.
@pytest.mark.parametrize("protocol", [0, 2, pickle.DEFAULT_PROTOCOL])
def test_planetoid_loader_reads_official_raw_files(tmp_path, protocol):
    """Self-loops (2-2) and repeated edges (5-4 twice) are dropped; every edge appears in both directions."""
    feats, labels = _write_planetoid(tmp_path, protocol=protocol)
    x, edge_index, y = load_planetoid(tmp_path, "tiny")
    np.testing.assert_array_equal(x, feats)
    np.testing.assert_array_equal(y, labels)
    assert edge_index.dtype == np.int64 and edge_index.shape[0] == 2
    assert sorted(map(tuple, edge_index.T.tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0), (2, 3), (3, 2), (4, 5), (5, 4)]


class _Payload:
    """What a crafted ``ind.*`` file carries: unpickling it with the full unpickler runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("where", ["graph", "nested"])
def test_planetoid_loader_refuses_a_payload_without_running_it(tmp_path, where):
    marker = tmp_path / "payload_ran"
    payload = _Payload(marker)
    graph = payload if where == "graph" else {0: [1], 1: [0, payload]}
    _write_planetoid(tmp_path / "crafted", graph=graph)
    with pytest.raises(PlanetoidFormatError, match=r"ind\.tiny\.graph: refusing to unpickle (posix|os)\.system"):
        load_planetoid(tmp_path / "crafted", "tiny")
    assert not marker.exists()


def test_planetoid_loader_names_a_missing_or_malformed_file(tmp_path):
    _write_planetoid(tmp_path)
    (tmp_path / "raw" / "ind.tiny.ty").unlink()
    with pytest.raises(PlanetoidFormatError, match=r"ind\.tiny\.ty: missing"):
        load_planetoid(tmp_path, "tiny")
    (tmp_path / "raw" / "ind.tiny.ty").write_bytes(b"\x80\x04not a pickle")
    with pytest.raises(PlanetoidFormatError, match=r"ind\.tiny\.ty: not a readable Planetoid pickle"):
        load_planetoid(tmp_path, "tiny")


def test_prepare_reads_planetoid_from_the_project_data_folder(tmp_path, monkeypatch):
    """``data.planetoid_dir`` is relative to ``<PAPERLINE_ROOT>/data``; the graph replaces the benchmark graphs."""
    from models.hpde_gnn import pipeline

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    feats, labels = _write_planetoid(tmp_path / "data" / "planetoid" / "tiny")
    overrides = {"data.planetoid_dir": "planetoid/tiny", "data.planetoid_name": "tiny", "data.csbm_sweep": False}
    cfg = SPEC.make_config("smoke", overrides)
    (tmp_path / "out").mkdir()
    ref = pipeline.prepare(cfg, tmp_path / "out")
    graphs = json.loads((ref.path / "graphs.json").read_text())
    assert [(g["name"], g["nodes"], g["edges"], g["kind"]) for g in graphs] == [("tiny", 6, 4, "benchmark")]
    graph = pipeline.load_graphs(ref)[0]
    np.testing.assert_array_equal(graph.features.dense().numpy(), feats)
    np.testing.assert_array_equal(graph.y.numpy(), labels)
    assert ref.source == "real" and "data/planetoid/tiny" in ref.provenance


def _write_gnn_benchmark(path):
    """A 4-node graph in shchur/gnn-benchmark's CSR layout, one edge given in one direction only, one twice."""
    sp = pytest.importorskip("scipy.sparse")
    adjacency = sp.csr_matrix(([1.0, 1.0, 1.0, 1.0], ([0, 1, 2, 2], [1, 0, 3, 2])), shape=(4, 4))
    features = sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0], [0, 0, 0], [3, 0, 1]], dtype=np.float32))
    np.savez(path, adj_data=adjacency.data, adj_indices=adjacency.indices, adj_indptr=adjacency.indptr,
             adj_shape=np.array(adjacency.shape), attr_data=features.data, attr_indices=features.indices,
             attr_indptr=features.indptr, attr_shape=np.array(features.shape), labels=np.array([0, 1, 1, 0], np.int8),
             node_names=np.array(["a", "b", "c", "d"]))  # fmt: skip
    return features.toarray()


def test_benchmark_reader_handles_both_official_layouts(tmp_path):
    features = _write_gnn_benchmark(tmp_path / "cora.npz")
    graph = read_graph_file(tmp_path / "cora.npz")
    np.testing.assert_array_equal(graph["features"].toarray(), features)
    assert graph["y"].tolist() == [0, 1, 1, 0] and graph["splits"] is None
    assert sorted(map(tuple, graph["edge_index"].T.tolist())) == [(0, 1), (1, 0), (2, 3), (3, 2)]  # no loop 2-2

    masks = np.zeros((10, 4), dtype=bool)
    masks[:, 0] = True
    np.savez(tmp_path / "texas.npz", node_features=features, node_labels=np.array([0, 1, 2, 0]),
             edges=np.array([[0, 1], [3, 2], [1, 1]]), train_masks=masks, val_masks=np.roll(masks, 1, 1),
             test_masks=~(masks | np.roll(masks, 1, 1)))  # fmt: skip
    graph = read_graph_file(tmp_path / "texas.npz")
    assert sorted(map(tuple, graph["edge_index"].T.tolist())) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert graph["splits"]["train_mask"].shape == (10, 4) and graph["splits"]["val_mask"][0].tolist() == [0, 1, 0, 0]

    np.savez(tmp_path / "odd.npz", node_features=features)
    with pytest.raises(GraphFormatError, match="odd.npz: expected the gnn-benchmark arrays"):
        read_graph_file(tmp_path / "odd.npz")


def test_an_altered_raw_graph_file_is_refused_with_its_expected_sha256(tmp_path, monkeypatch):
    from models.common.raw_data import COMMITTED, RawDataError
    from models.hpde_gnn.data import load_benchmark_graph

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    (tmp_path / "data" / "raw" / "graphs").mkdir(parents=True)  # a project with its own (here empty) raw folder
    with pytest.raises(RawDataError, match="texas.npz is missing"):
        load_benchmark_graph("texas")
    _write_gnn_benchmark(tmp_path / "data" / "raw" / "graphs" / "texas.npz")
    with pytest.raises(RawDataError, match=COMMITTED["graphs/texas.npz"].sha256):
        load_benchmark_graph("texas")


def test_committed_graphs_load_undirected_with_their_splits():
    """The real files (pinned): node counts of the standard benchmarks, symmetric edges, the 10 file splits."""
    from models.hpde_gnn.data import load_benchmark_graph

    for name, nodes, classes in (("cora", 2708, 7), ("texas", 183, 5)):
        graph = load_benchmark_graph(name)
        assert graph["features"].shape[0] == len(graph["y"]) == nodes and graph["y"].max() + 1 == classes
        pairs = set(map(tuple, graph["edge_index"].T.tolist()))
        assert all((j, i) in pairs for i, j in pairs) and not any(i == j for i, j in pairs)
    assert graph["splits"]["train_mask"].shape == (10, 183)  # Texas carries the Geom-GCN splits: 48/32/20
    assert graph["splits"]["train_mask"][0].sum() == 87 and graph["splits"]["test_mask"][0].sum() == 37


# ----------------------------------------------------------------------------- training


def test_early_stopping_keeps_each_members_lowest_validation_loss_weights(tmp_path):
    from models.common.lightning import fit
    from models.hpde_gnn.training import Graph, NodeClassification, Run, full_batch_loader, member_losses

    n, edge_index = 40, small_graph(40, seed=3)
    rng = np.random.default_rng(0)
    y = torch.from_numpy(rng.integers(0, 2, n))
    x = torch.randn(n, 5) + y[:, None].float()
    masks = torch.from_numpy(random_splits(n, 2, 0.5, 0.25, seed=1)["train_mask"])
    splits = random_splits(n, 2, 0.5, 0.25, seed=1)
    graph = Graph("toy", SparseFeatures.from_dense(x.numpy()), y, *(torch.from_numpy(splits[k]) for k in
                  ("train_mask", "val_mask", "test_mask")), graph_operators(edge_index, n))  # fmt: skip
    assert masks.shape == (2, n)
    cfg = SPEC.make_config("smoke", {"patience": 3, "weight_decay": 0.0})
    torch.manual_seed(0)
    nets = {"run": MLP(5, 8, 2, 0.0, members=2)}
    module = NodeClassification(nets, {"run": Run("baseline_mlp", 0, ({"lr": 0.3, "dropout": 0.0},))}, [graph], cfg)
    fit(module, full_batch_loader(0), full_batch_loader(0), max_epochs=200, seed=0, variant="toy")
    track = module.tracking["run"]
    assert all(track["stopped"]) and track["epochs"] < 200  # lr 0.3 overfits fast: patience ends the fit
    assert track["epochs"] == max(track["best_epoch"]) + cfg.patience + 1
    check = MLP(5, 8, 2, 0.0, members=2).eval()
    check.load_state_dict(track["state"])
    with torch.no_grad():
        losses = member_losses(check(graph.features, graph.ops), y, graph.val_mask)
    np.testing.assert_allclose(losses.numpy(), track["best_loss"], rtol=1e-5)  # the kept weights are the best ones


# ----------------------------------------------------------------------------- pipeline


def test_smoke_pipeline_runs_and_reports(tmp_path):
    from tasks import steps

    cfg = SPEC.make_config("smoke")
    ref = steps.prepare(SPEC, cfg, tmp_path)
    graphs = json.loads((ref.path / "graphs.json").read_text())
    assert [g["name"] for g in graphs] == ["texas", "cornell", "csbm_h10", "csbm_h90"]
    assert graphs[2]["edge_homophily"] < 0.3 < 0.7 < graphs[3]["edge_homophily"]
    assert ref.meta["source"] == "real" and "graphs/texas.npz" in ref.meta["provenance"]

    artifacts = steps.train(SPEC, cfg, tmp_path)
    assert set(artifacts.history) == {
        "baseline_mlp", "baseline_gpr", "method_gpr", "baseline_wave", "regression_baseline", "regression_method",
    }  # fmt: skip
    assert artifacts.summary["select/method_gpr/texas/lr"] == cfg.lr_grid[0]
    assert 0 <= artifacts.summary["select/method_gpr/texas/best_epoch"] < cfg.max_epochs

    metrics, result = steps.evaluate(SPEC, cfg, tmp_path)
    v = metrics.values
    for role in ("baseline", "method"):
        for g in ("texas", "cornell", "csbm_h10"):
            assert 0.0 <= v[f"{role}/gpr/acc_{g}"] <= 1.0
        assert set(f"{role}/gpr/r2_{t}" for t in cfg.data.targets) <= set(v)
    assert v["method/acc_mean"] == pytest.approx((v["method/gpr/acc_texas"] + v["method/gpr/acc_cornell"]) / 2)
    texas = metrics.unit("test_acc", "method_gpr").as_dict()
    assert v["method/gpr/acc_texas"] == pytest.approx((texas["texas_split0"] + texas["texas_split1"]) / 2)
    assert 0 < v["method/max_step_norm"] < cfg.blowup_norm  # the wave states were monitored
    assert v["baseline/mlp/max_step_norm"] == 0.0
    assert {"no_blowup", "finite_metrics"} <= set(result.sanity)
    passing = result.criterion("filters_passing")
    assert passing.threshold == 1.0 and passing.n_units == 1 and result.verdict in ("holds", "fails", "inconclusive")
    assert result.figures["gpr_untied_runs"] <= 4  # 2 graphs x 2 splits, ties excluded
    assert {p.name for p in metrics.figures} == {
        "accuracy_by_graph.png", "paired_gains.png", "learning_curves.png", "selection.png", "wave_step_norms.png",
        "filter_regression.png", "csbm_accuracy_vs_homophily.png",
    }  # fmt: skip

    net = SPEC.module().load_model(cfg, steps.Layout(tmp_path, SPEC).model_dir)
    assert not net.training and isinstance(net.net, HyperbolicGNN)
    graph = SPEC.module().load_graphs(ref)[0]
    with torch.no_grad():
        logits = net(graph.features, graph.ops)
    test = graph.test_mask[0]
    accuracy = float((logits.argmax(1)[test] == graph.y[test]).float().mean())
    assert accuracy == pytest.approx(texas["texas_split0"])  # the registered model: Texas, split 0


GRAPHS = ("cora", "texas")


def claim_metrics(cfg, method_acc, baseline_acc: float = 0.70) -> Metrics:
    """The keys claim() reads. ``method_acc(f, graph, split)`` gives each PDE run's test accuracy; every base run
    scores ``baseline_acc`` (validation 0.70), the majority class is 0.30."""
    splits = range(cfg.data.splits)
    metrics = Metrics({"method/r2_mean": 0.9, "baseline/r2_mean": 0.9, "method/gpr/max_step_norm": 10.0})
    v = metrics.values
    labels = [f"{g}_split{s}" for g in GRAPHS for s in splits]
    for g in GRAPHS:
        v[f"data/edge_homophily_{g}"], v[f"data/majority_val_{g}"] = 0.5, 0.30
    from models.hpde_gnn.pipeline import arms

    for arm in arms(cfg):
        role, f = arm.split("_", 1)
        if role == "method":
            acc = method_acc
        else:  # the MLP (the negative control's stand-in) far behind the base filters
            acc = (lambda *_: 0.60) if f == "mlp" else (lambda *_: baseline_acc)
        for g in GRAPHS:
            v[f"{role}/{f}/acc_{g}"] = float(np.mean([acc(f, g, s) for s in splits]))
            v[f"{role}/{f}/val_acc_{g}"] = 0.70
        metrics.add_units("test_acc", arm, [acc(f, g, s) for g in GRAPHS for s in splits], labels)
        v[f"{role}/{f}/acc_mean"] = float(np.mean([v[f"{role}/{f}/acc_{g}"] for g in GRAPHS]))
        for t in cfg.data.targets:
            v[f"{role}/{f}/r2_{t}"] = 0.9
    for role in ("method", "baseline"):
        v[f"{role}/acc_mean"] = float(np.mean([v[f"{role}/{f}/acc_mean"] for f in cfg.filters]))
    return metrics


def test_claim_counts_filters_by_their_criteria_states():
    """Per filter: mean gain over the paired (graph x split) runs >= -0.5 pt (t-interval) and a win rate > 1/2 among
    untied runs (Clopper-Pearson); the verdict's criterion counts filters passing both, >= 2 of 3."""
    from models.hpde_gnn.pipeline import claim

    cfg = SPEC.make_config("default", {"data.splits": 10})  # 20 paired runs per filter
    ahead = lambda f, g, s: 0.72 + 0.001 * s  # noqa: E731 (+2 pt on every run: both criteria hold)
    result = claim(cfg, claim_metrics(cfg, ahead))
    assert result.figures["gpr_win_rate"] == 1.0 and result.figures["gpr_untied_runs"] == 20
    assert (result.criterion("filters_passing").low, result.verdict) == (3, "holds")

    # ChebNetII: +1 pt on 11 runs, -1 pt on 9: the mean gain holds (+0.1 pt, interval above -0.5? no: it straddles)
    # and the win rate 11/20 straddles 1/2. BernNet 2 pt behind everywhere: fails both.
    def mixed(f, g, s):
        unit = GRAPHS.index(g) * 10 + s
        return {"gpr": ahead(f, g, s), "chebii": 0.71 if unit < 11 else 0.69, "bern": 0.68}[f]

    result = claim(cfg, claim_metrics(cfg, mixed))
    assert result.figures["chebii_win_rate"] == pytest.approx(11 / 20)
    passing = result.criterion("filters_passing")
    assert (passing.estimate, passing.low, passing.high, passing.threshold) == (2, 1, 2, 2)
    assert passing.state == "inconclusive" and "ChebNetII" in passing.why and result.verdict == "inconclusive"

    # ChebNetII also behind everywhere: at most GPR-GNN can pass, fewer than 2 of 3.
    result = claim(cfg, claim_metrics(cfg, lambda f, g, s: ahead(f, g, s) if f == "gpr" else 0.68))
    assert (result.criterion("filters_passing").high, result.verdict) == (1, "fails")


def test_ties_are_excluded_from_the_win_rate():
    from models.hpde_gnn.pipeline import claim, filter_criteria

    cfg = SPEC.make_config("default", {"data.splits": 10})
    # GPR-GNN: 14 ties, 6 wins (+1 pt): win rate 6/6 among untied runs; every unit tied for the other two.
    result = claim(cfg, claim_metrics(cfg, lambda f, g, s: 0.71 if (f == "gpr" and g == "cora" and s < 6) else 0.70))
    assert result.figures["gpr_untied_runs"] == 6 and result.figures["gpr_win_rate"] == 1.0
    tied = claim(cfg, claim_metrics(cfg, lambda *_: 0.70))
    assert tied.figures["chebii_untied_runs"] == 0 and tied.verdict == "inconclusive"
    _, won = filter_criteria(cfg, claim_metrics(cfg, lambda *_: 0.70), "chebii", list(GRAPHS))
    assert won.state == "inconclusive" and "every unit tied" in won.why


def test_the_base_filters_must_learn_every_judged_graph():
    """Must-pass: each base filter's validation accuracy beats the majority class by 5 pt on every judged graph."""
    from models.hpde_gnn.pipeline import claim

    cfg = SPEC.make_config("default")
    metrics = claim_metrics(cfg, lambda *_: 0.72)
    assert all(ok for name, ok in claim(cfg, metrics).sanity.items() if "majority" in name)
    metrics.values["baseline/bern/val_acc_texas"] = 0.33  # 3 pt above the majority class: a vacuous comparison
    sanity = claim(cfg, metrics).sanity
    assert not sanity["baseline_bern_val_minus_majority_pt_learns_task_>=5"] and sanity["no_blowup"]


def test_member_adam_is_torch_adam_per_member_learning_rate():
    """Member s of a stacked parameter follows torch.optim.Adam at lr[s] exactly (weight decay included)."""
    from models.hpde_gnn.training import MemberAdam

    torch.manual_seed(0)
    start, target = torch.randn(3, 4), torch.randn(3, 4)
    lrs = torch.tensor([0.1, 0.01, 0.05])
    stacked = torch.nn.Parameter(start.clone())
    optimiser = MemberAdam([{"params": [stacked], "lr": lrs}], lr=torch.ones(1), weight_decay=5e-4)
    singles = [torch.nn.Parameter(start[s].clone()) for s in range(3)]
    references = [torch.optim.Adam([p], lr=float(lr), weight_decay=5e-4) for p, lr in zip(singles, lrs)]
    for _ in range(25):
        optimiser.zero_grad()
        ((stacked - target) ** 4).sum().backward()
        optimiser.step()
        for s, (p, opt) in enumerate(zip(singles, references)):
            opt.zero_grad()
            ((p - target[s]) ** 4).sum().backward()
            opt.step()
    torch.testing.assert_close(stacked.detach(), torch.stack([p.detach() for p in singles]), atol=1e-6, rtol=1e-5)


def test_combine_matches_the_stacked_einsum():
    from models.hpde_gnn.networks import combine

    torch.manual_seed(0)
    basis = [torch.randn(7, 3, 4) for _ in range(5)]
    weights = torch.randn(3, 5)
    expected = torch.einsum("knsc,sk->nsc", torch.stack(basis), weights)
    torch.testing.assert_close(combine(basis, weights), expected)


def test_csbm_sweep_runs_at_paper_and_smoke_scale_and_its_gate_wherever_it_runs():
    from models.hpde_gnn.pipeline import claim

    assert not SPEC.make_config("default").data.csbm_sweep
    assert SPEC.make_config("paper").data.csbm_sweep and SPEC.make_config("smoke").data.csbm_sweep
    cfg = SPEC.make_config("paper", {"data.splits": 2})
    metrics = claim_metrics(cfg, lambda *_: 0.72)
    for h, g in ((0.1, "csbm_h10"), (0.9, "csbm_h90")):
        metrics.values[f"data/edge_homophily_{g}"] = h
        metrics.values[f"baseline/mlp/acc_{g}"] = 0.60
        for f in cfg.filters:
            for role in ("baseline", "method"):
                metrics.values[f"{role}/{f}/acc_{g}"] = 0.70 if g == "csbm_h10" else 0.62  # h90: only +2 pt
    sanity = claim(cfg, metrics).sanity
    assert sanity["spectral_beat_mlp_by_5pt_csbm_h10"] and not sanity["spectral_beat_mlp_by_5pt_csbm_h90"]


def test_sparse_features_eval_product_equals_the_block_product():
    """Without dropout the shared-X product (no grad) must equal the per-member block-diagonal product."""
    x = np.random.default_rng(0).random((9, 6)).astype(np.float32) * (np.random.default_rng(1).random((9, 6)) < 0.3)
    features = SparseFeatures.from_dense(x)
    weight = torch.randn(3, 6, 4, requires_grad=True)
    with torch.no_grad():
        shared = features.matmul(weight, 0.5, training=False)
    block = features.matmul(weight, 0.5, training=False)  # grad enabled: the block path
    torch.testing.assert_close(shared, block.detach())
    torch.testing.assert_close(shared, torch.einsum("nf,sfo->nso", torch.from_numpy(x), weight.detach()))


def toy_graph(n: int = 40, features: int = 5, splits: int = 2, seed: int = 3):
    from models.hpde_gnn.training import Graph

    rng = np.random.default_rng(seed)
    y = torch.from_numpy(rng.integers(0, 2, n))
    x = (rng.random((n, features)) < 0.3) * (1.0 + y.numpy()[:, None])  # sparse, class-dependent features
    masks = random_splits(n, splits, 0.5, 0.25, seed=seed)
    return Graph(
        "toy", SparseFeatures.from_dense(x.astype(np.float32)), y,
        *(torch.from_numpy(masks[k]) for k in ("train_mask", "val_mask", "test_mask")),
        graph_operators(small_graph(n, seed=seed), n),
    )  # fmt: skip


def test_removing_a_run_leaves_every_other_runs_fit_unchanged():
    """Each run (arm, graph, grid point, split) draws its initial weights and dropout masks from its own seed and has
    its own Adam state, so its fit does not depend on which other runs share its stacked network or the Lightning
    fit: dropping a grid point and an arm leaves the remaining runs' trajectories equal (float tolerance)."""
    from models.common.lightning import fit
    from models.hpde_gnn.pipeline import build_runs
    from models.hpde_gnn.training import NodeClassification, full_batch_loader

    graph = toy_graph()
    common = {"filters": ("gpr",), "hidden": 8, "patience": 1000, "dropout_grid": (0.5,), "gpr_alpha_grid": (0.1, 0.9)}
    wide = SPEC.make_config("smoke", common | {"lr_grid": (0.01, 0.05), "wave_baseline": True})
    narrow = SPEC.make_config("smoke", common | {"lr_grid": (0.05,), "wave_baseline": False})
    fitted = {}
    for name, cfg in (("wide", wide), ("narrow", narrow)):
        nets, runs = build_runs(cfg, [graph])
        module = NodeClassification(nets, runs, [graph], cfg)
        fit(module, full_batch_loader(0), full_batch_loader(0), max_epochs=12, seed=0, variant=name)
        fitted[name] = (nets, runs, module.tracking)
    (wide_nets, wide_runs, wide_track), (narrow_nets, narrow_runs, narrow_track) = fitted["wide"], fitted["narrow"]
    assert set(narrow_runs) < set(wide_runs)  # the wave arm is gone
    S = graph.splits
    for key, run in narrow_runs.items():
        wide_points = list(wide_runs[key].points)
        for i, point in enumerate(run.points):
            j = wide_points.index(point)
            for s in range(S):
                a, b = i * S + s, j * S + s
                assert narrow_track[key]["best_loss"][a] == pytest.approx(wide_track[key]["best_loss"][b], rel=1e-5)
                for (name, p), (_, q) in zip(narrow_nets[key].named_parameters(), wide_nets[key].named_parameters()):
                    torch.testing.assert_close(p[a], q[b], atol=1e-5, rtol=1e-4, msg=f"{key} {name} member {a}")
    # ... and the masks really are random: two splits of one grid point train differently.
    track = narrow_track[next(key for key in narrow_runs if key.startswith("baseline_mlp__toy__"))]
    assert track["best_loss"][0] != track["best_loss"][1]


def test_member_random_streams_depend_on_their_seed_and_step_only():
    from models.hpde_gnn.networks import MemberRandom

    both, alone = MemberRandom([11, 22]), MemberRandom([22])
    both.step = alone.step = 5
    torch.testing.assert_close(both.draw([3, 4])[1][1], alone.draw([3, 4])[1][0])
    first = both.draw([6])[0]
    both.step = 6
    assert not torch.equal(first, both.draw([6])[0])  # a new step, new masks
    assert not torch.equal(first[0], first[1])  # members differ


def test_filter_coefficients_train_without_weight_decay_at_their_own_lr():
    """GPR-GNN, BernNet and ChebNetII put no weight decay on the propagation coefficients; BernNet and ChebNetII give
    them their own lr (Bern_lr, prop_lr), GPR-GNN its feature lr."""
    from models.hpde_gnn.pipeline import build_runs
    from models.hpde_gnn.training import NodeClassification

    cfg = SPEC.make_config("smoke", {"filters": ("gpr", "bern"), "lr_grid": (0.05,), "bern_prop_lr": 0.002})
    graph = toy_graph()
    nets, runs = build_runs(cfg, [graph])
    groups = NodeClassification(nets, runs, [graph], cfg).configure_optimizers().param_groups
    by_parameter = {id(p): g for g in groups for p in g["params"]}
    for key, net in nets.items():
        for name, p in net.named_parameters():
            group = by_parameter[id(p)]
            coefficient = name.endswith(("gamma", "theta"))
            assert group["weight_decay"] == (0.0 if coefficient else cfg.weight_decay), (key, name)
            expected = 0.002 if coefficient and "bern" in key else 0.05
            assert torch.allclose(group["lr"], torch.tensor(expected)), (key, name)


def test_gpr_members_start_from_their_own_ppr_alpha():
    from models.hpde_gnn.networks import ppr_coefficients

    f = GPRFilter(3, [0.1, 1.0], members=2)
    torch.testing.assert_close(f.gamma[0], torch.tensor([0.1, 0.09, 0.081, 0.729]))
    torch.testing.assert_close(f.gamma[1], torch.tensor([1.0, 0.0, 0.0, 0.0]))  # alpha = 1: the identity (an MLP)
    assert float(ppr_coefficients(10, 0.5).sum()) == pytest.approx(1.0)


def test_a_stacked_fit_of_several_splits_equals_each_split_fitted_alone():
    """Batching: the splits of one (arm, graph, grid point) train as the members of one stacked network; split 1
    of a two-member stack ends where split 1 fitted alone (a one-member stack seeded as split 1) ends, to float
    tolerance (the stack's sparse block product sums in another order). This is the second phase of ``train``."""
    from models.common.lightning import fit
    from models.hpde_gnn.pipeline import build_runs, split_range
    from models.hpde_gnn.training import NodeClassification, full_batch_loader

    graph = toy_graph()
    cfg = SPEC.make_config("smoke", {"filters": ("bern",), "hidden": 8, "patience": 1000, "lr_grid": (0.05,)})
    tracks = {}
    for name, (g, first) in {"stacked": (graph, 0), "alone": (split_range(graph, 1, 2), 1)}.items():
        nets, runs = build_runs(cfg, [g], first_split=first)
        module = NodeClassification(nets, runs, [g], cfg)
        fit(module, full_batch_loader(0), full_batch_loader(0), max_epochs=10, seed=0, variant=name)
        tracks[name] = (nets, module.tracking)
    (stacked, stacked_track), (alone, alone_track) = tracks["stacked"], tracks["alone"]
    assert set(stacked) == set(alone)
    for key in stacked:
        assert alone_track[key]["best_loss"][0] == pytest.approx(stacked_track[key]["best_loss"][1], rel=1e-5)
        for (name, p), (_, q) in zip(alone[key].named_parameters(), stacked[key].named_parameters()):
            torch.testing.assert_close(p[0], q[1], atol=1e-5, rtol=1e-4, msg=f"{key} {name}")


def test_join_members_concatenates_parameters_and_keeps_shared_buffers():
    from models.hpde_gnn.pipeline import build_network, join_members

    cfg = SPEC.make_config("smoke", {"filters": ("bern",)})
    net = build_network(cfg, "baseline_bern", 5, 2, [{"lr": 0.01, "dropout": 0.5}] * 2)
    state = net.state_dict()
    joined = join_members(net, state, state)
    parameters = {name for name, _ in net.named_parameters()}
    for k, v in joined.items():
        assert v.shape[0] == (2 * state[k].shape[0] if k in parameters else state[k].shape[0]), k
