"""Hyperbolic-PDE GNN: Spectral Graph Neural Networks in the Perspective of A System of Hyperbolic PDEs.

Juwei Yue, Haikuo Li, Jiawei Sheng, Xiaodong Li, Taoyu Su, Tingwen Liu, Li Guo; ICML 2025,
PMLR 267:73810-73827, arXiv 2505.23014. Official code: YueAWu/Hyperbolic-GNN (``HyperbolicGNN.py``
only; its polynomial-filter package ``models.discrete`` and all training code are not published),
and the Laplacian-only predecessor YueAWu/Graph-Wave-Networks (``GWN.py``). Re-implemented here on
torch-geometric (operators and data utilities; no torch-scatter/torch-sparse).

Node features follow the graph wave equation d^2X/dt^2 = G(X), X(0) = W_0 x, X'(0) = W_1 x,
integrated by a leapfrog scheme whose spatial operator G_m at every step is a learnable polynomial
spectral filter with its own parameters; a linear head classifies X(T). Each base spectral GNN
(GPR-GNN, ChebNetII, BernNet: MLP then an order-10 filter) is compared with its PDE version
(T = 4, dt = 1, per-step order 2: 8 hops against the base's 10), with an MLP floor (and, optionally,
the fixed-adjacency wave model of Graph Wave Networks, laplacian='sym').

Data (``data.py``): the real benchmark graphs committed under ``data/raw/graphs`` (Cora, Citeseer from
shchur/gnn-benchmark; Chameleon, Squirrel, their de-duplicated versions, Actor, Texas, Cornell, Wisconsin
from yandex-research/heterophilous-graphs), a subset at default (see ``config.py``); PubMed and Amazon
Computers/Photo, also in the paper's suite, cannot be had offline and are not run. Secondary: a CSBM
homophily sweep (figure and its must-pass spectral-vs-MLP check; at paper scale or ``data.csbm_sweep=true``, off at
default for budget) and the BernNet-style regression of five known filters on a grid graph of
upsampled digits (R^2 on held-out images). ``data.source="synthetic"`` judges the claim on the CSBM levels.

Protocol (REVIEW.md): every arm (MLP, each base filter, each PDE version) gets the same lr x dropout grid,
chosen per arm and graph on the mean validation accuracy over the splits; every run trains full-batch
with Adam (weight decay 5e-4) until its validation loss has not improved for ``patience`` epochs (at most
``max_epochs``), ending on its lowest-validation-loss weights (BernNet/ChebNetII's early stopping). The
chosen values, best epochs and epochs trained are logged under ``select/``.

Claim (restated by REVIEW.md): for each base filter, over the paired (graph x split) units, (a) the mean
PDE - base test accuracy >= -0.5 pt (t-interval) and (b) among units that are not tied, the PDE version
wins more than half (Clopper-Pearson interval, > 0.5); the verdict's criterion counts the filters passing
both, >= 2 of 3 (interval: filters whose two criteria hold .. those with none failing).

Deliberate deviations (and why):
  * Splits: the heterophilous files carry the Geom-GCN splits, 48/32/20, not 60/20/20; the paper's numbers
    (e.g. GPR-GNN 88.57 on Cora, the ChebNetII table) come from random 60/20/20 splits, so the default draws
    seeded 60/20/20 splits for every graph; ``data.split_protocol="geom_gcn"`` uses the files' splits.
  * Budget: see ``config.py`` (default: 5 of the 10 graphs, 3 splits, hidden 16, the lr grid with dropout fixed,
    patience 50 of at most 300 epochs, no CSBM sweep; the paper's protocol at ``paper`` scale).
  * The polynomial filters are re-implemented from the GPR-GNN, BernNet and ChebNetII papers
    (scalar coefficients shared over channels; GPR on the self-loop GCN matrix, BernNet and
    ChebNetII on L = I - D^{-1/2} A D^{-1/2} with lambda_max = 2; BernNet evaluated in the Chebyshev basis,
    the same polynomial). SGC, APPNP, ARMA, Cheb and JacobiConv are not run (budget); the official 'fa'
    attention operator, ``init_residual`` and the ``method='imp'`` fixed-point scheme (which raises an
    AttributeError as shipped) are not implemented. One lr for all parameters of a run (the original
    papers' separate lr / weight decay for the filter coefficients are not searched).
  * For speed, the splits of one (arm, graph, grid point) train as the members of one stacked network
    (parameters with a leading member dimension, each member its own dropout masks) and all runs train
    side by side in one Lightning fit; disjoint parameters and a summed loss give each member the
    Adam trajectory it would have alone. Sparse products use custom autograd functions (symmetric
    operators; prebuilt transposes) because torch's CSR backward transposes the matrix at every call.
  * Filter regression: trained and scored in the eigenbasis of each filter's operator, where a
    polynomial filter (and the bias-free linear wave network) is diagonal (Parseval); BernNet's Adam lr 0.01,
    200 epochs at default (its 2000 at paper scale).
  * Registered model: the PDE version of the first base filter on the first graph, split 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from models.base import (
    ClaimResult,
    Control,
    Criterion,
    DatasetRef,
    Metrics,
    Scale,
    Separation,
    TrainedArtifacts,
    dataset_meta,
    user_data_path,
    verdict_of,
    write_manifest,
)
from models.common import verdicts as V
from models.common.evidence import record_fit
from models.common.lightning import fit
from models.common.selection import grid, learns_task, select_on_validation
from models.common.units import UnitValues

from . import plots
from .config import Config
from .data import (
    csbm,
    csr_arrays,
    edge_homophily,
    filter_regression,
    graph_provenance,
    level_name,
    load_benchmark_graph,
    load_npz,
    load_planetoid,
    majority_rate,
    random_splits,
    save_npz,
)
from .networks import (
    MLP,
    HyperbolicGNN,
    MemberRandom,
    SingleMember,
    SparseFeatures,
    SpectralGNN,
    graph_operators,
    initialise_members,
    make_filter,
    member_state,
)
from .training import FilterRegression, Graph, NodeClassification, Run, full_batch_loader, regression_member

NAMES = {"gpr": "GPR-GNN", "chebii": "ChebNetII", "bern": "BernNet", "mlp": "MLP", "wave": "wave (sym, GWN)"}
GRAPHS_FILE, REGRESSION_FILE, SELECTION_FILE, REGISTERED_FILE = (
    "graphs.json", "filter_regression.npz", "selection.json", "registered.json"
)  # fmt: skip
CLAIM_MARGIN_PT = 0.5  # the PDE variant's mean may trail its base by at most 0.5 pt
SANITY_MLP_GAP_PT = 5.0  # CSBM: spectral models must beat the MLP by 5 pt at the extreme homophily levels
SANITY_MAJORITY_GAP_PT = 5.0  # every base filter must beat the majority class by 5 pt on every claim graph
# The paper's numbers (REVIEW.md, from a secondary copy of its tables: approximate), test accuracy %,
# 60/20/20 random splits: base -> PDE version.
PAPER = {("gpr", "cora"): (88.57, 90.82), ("gpr", "texas"): (92.95, 93.28)}


# ----------------------------------------------------------------------------- data


def prepare(cfg: Config, data_dir: Path) -> DatasetRef:
    d = cfg.data
    entries: list[tuple[dict, dict]] = []  # (description, arrays)
    provenance = []

    def add(name: str, kind: str, features, edge_index, y, file_splits, target_h=None) -> None:
        n = len(y)
        index = len(entries)
        if file_splits is not None and d.split_protocol == "geom_gcn":
            masks = {k: v[: d.splits] for k, v in file_splits.items()}
            if masks["train_mask"].shape[0] < d.splits:
                raise ValueError(f"{name}: the file carries {masks['train_mask'].shape[0]} splits, {d.splits} asked")
        else:
            masks = random_splits(n, d.splits, d.train_fraction, d.val_fraction, seed=cfg.seed * 1000 + index)
        description = {
            "name": name, "kind": kind, "target_homophily": target_h, "edge_homophily": edge_homophily(edge_index, y),
            "nodes": n, "edges": int(edge_index.shape[1]) // 2, "features": int(features.shape[1]),
            "classes": int(y.max()) + 1, "majority_val": float(np.mean([majority_rate(y, m) for m in masks["val_mask"]])),
        }  # fmt: skip
        entries.append((description, {**csr_arrays(features), "edge_index": edge_index, "y": y, **masks}))

    if d.source == "real":
        if d.planetoid_dir:
            x, edge_index, y = load_planetoid(user_data_path(d.planetoid_dir), d.planetoid_name)
            add(d.planetoid_name.lower(), "benchmark", x, edge_index, y, None)
            provenance.append(f"Planetoid raw files {d.planetoid_name} from data/{d.planetoid_dir}")
        else:
            for name in d.graphs:
                graph = load_benchmark_graph(name)
                add(name, "benchmark", graph["features"], graph["edge_index"], graph["y"], graph["splits"])
                provenance.append(graph_provenance(name))
        split_words = "Geom-GCN file splits (48/32/20)" if d.split_protocol == "geom_gcn" else "random 60/20/20"
        provenance.append(f"{d.splits} {split_words} splits per graph, seed {cfg.seed}")
    c = d.csbm
    if d.source == "synthetic" or d.csbm_sweep:
        for i, h in enumerate(c.homophily):
            x, edge_index, y = csbm(c.nodes, c.classes, c.features, c.avg_degree, h, c.signal, seed=cfg.seed * 1000 + i)
            add(f"csbm_{level_name(h)}", "csbm", x, edge_index, y, None, target_h=h)
        provenance.append(
            f"{'' if d.source == 'synthetic' else 'secondary sweep: '}CSBM (torch_geometric stochastic_blockmodel_graph)"
            f", seed {cfg.seed}: {c.nodes} nodes, {c.classes} classes, {c.features} features, degree {c.avg_degree:g}, "
            f"signal {c.signal:g}, homophily {list(c.homophily)}"
        )
    for description, arrays in entries:
        save_npz(data_dir / f"{description['name']}.npz", **arrays)
    (data_dir / GRAPHS_FILE).write_text(json.dumps([e for e, _ in entries], indent=1))
    save_npz(data_dir / REGRESSION_FILE, **filter_regression(d.grid_side, d.images, d.targets, cfg.seed))
    provenance.append(f"filter regression on {d.images} sklearn digits upsampled to a {d.grid_side}x{d.grid_side} grid")
    source = "synthetic" if d.source == "synthetic" else "real"
    return write_manifest(data_dir, meta={
        **dataset_meta(source, "; ".join(provenance)),
        "graphs": [e["name"] for e, _ in entries],
        "edge_homophily": [round(e["edge_homophily"], 4) for e, _ in entries],
        "regression": f"digits on a {d.grid_side}x{d.grid_side} grid, targets {list(d.targets)}",
    })  # fmt: skip


def graph_descriptions(data: DatasetRef) -> list[dict]:
    return json.loads(data.file(GRAPHS_FILE).read_text())


def load_graphs(data: DatasetRef) -> list[Graph]:
    """Every prepared graph with its sparse operators built once."""
    graphs = []
    for description in graph_descriptions(data):
        a = load_npz(data.file(f"{description['name']}.npz"))
        edge_index, n = torch.from_numpy(a["edge_index"]), len(a["y"])
        graphs.append(Graph(
            name=description["name"],
            features=SparseFeatures(a["x_indptr"], a["x_indices"], a["x_data"], tuple(int(v) for v in a["x_shape"])),
            y=torch.from_numpy(a["y"]), train_mask=torch.from_numpy(a["train_mask"]),
            val_mask=torch.from_numpy(a["val_mask"]), test_mask=torch.from_numpy(a["test_mask"]),
            ops=graph_operators(edge_index, n),
        ))  # fmt: skip
    return graphs


def claim_graphs(cfg: Config, descriptions: list[dict]) -> list[str]:
    """The graphs the claim is judged on: the benchmark graphs, or the CSBM levels with source="synthetic"."""
    kind = "csbm" if cfg.data.source == "synthetic" else "benchmark"
    return [d["name"] for d in descriptions if d["kind"] == kind]


# ----------------------------------------------------------------------------- networks


def arms(cfg: Config) -> list[str]:
    """History/weights names: baseline_mlp, then baseline_<filter> and method_<filter>, then baseline_wave."""
    names = ["baseline_mlp"] + [f"{role}_{f}" for f in cfg.filters for role in ("baseline", "method")]
    return names + (["baseline_wave"] if cfg.wave_baseline else [])


def family_of(arm: str) -> str:
    return arm.split("_", 1)[1]


def grid_points(cfg: Config, arm: str) -> list[dict]:
    """The arm's declared grid: lr x dropout for every arm, x GPR-GNN's PPR alpha for the GPR arms (its paper
    searches alpha per dataset; the PDE version's per-step GPR filters start from the same PPR coefficients)."""
    if family_of(arm) == "gpr":
        return grid(lr=cfg.lr_grid, dropout=cfg.dropout_grid, alpha=cfg.gpr_alpha_grid)
    return grid(lr=cfg.lr_grid, dropout=cfg.dropout_grid)


# Ends of an axis's domain (a choice there is not a grid edge): alpha = 1 starts GPR-GNN at the identity filter,
# alpha = 0 at the pure K-hop one.
GRID_LIMITS = {"alpha": [0.0, 1.0]}


def prop_lr(cfg: Config, arm: str) -> float | None:
    """The filter coefficients' own lr (BernNet's Bern_lr, ChebNetII's prop_lr); GPR-GNN uses the feature lr."""
    return {"bern": cfg.bern_prop_lr, "chebii": cfg.chebii_prop_lr}.get(family_of(arm))


def build_network(cfg: Config, arm: str, in_dim: int, classes: int, points: list[dict]) -> torch.nn.Module:
    """The arm's network with one member per entry of ``points`` (its dropout, and alpha for the GPR arms)."""
    role, family = arm.split("_", 1)
    members, dropout = len(points), [p["dropout"] for p in points]
    alpha = [p.get("alpha", 0.1) for p in points]
    if family == "mlp":
        return MLP(in_dim, cfg.hidden, classes, dropout, members)
    if family == "wave":
        step = lambda: make_filter("sym", 1, members=members)  # noqa: E731
        return HyperbolicGNN(in_dim, cfg.hidden, classes, dropout, step, cfg.pde_time, cfg.pde_dt, members=members)
    if role == "baseline":
        base_filter = make_filter(family, cfg.base_order, alpha, members)
        return SpectralGNN(in_dim, cfg.hidden, classes, dropout, cfg.dprate, base_filter, members)
    step = lambda: make_filter(family, cfg.pde_order, alpha, members)  # noqa: E731
    return HyperbolicGNN(in_dim, cfg.hidden, classes, dropout, step, cfg.pde_time, cfg.pde_dt, members=members)


def run_key(arm: str, graph: str, point: dict) -> str:
    """``method_gpr__texas__lr0p01_dropout0p5_alpha0p1``: a stack's name, from what it is (no '.': module names)."""
    values = "_".join(f"{k}{v:g}" for k, v in point.items()).replace(".", "p").replace("-", "m")
    return f"{arm}__{graph}__{values}"


def member_seed(cfg: Config, arm: str, graph: str, split: int, purpose: str) -> int:
    """A run's own seed for ``purpose`` ("init", "dropout"): a function of (cfg.seed, arm, graph, split) only, so
    it is the same whichever other runs share the fit; every grid point of a split starts from the same weights
    and draws the same masks (common random numbers across the grid)."""
    import zlib

    key = zlib.crc32(f"{arm}/{graph}/{split}/{purpose}".encode())
    return int(np.random.SeedSequence([cfg.seed, key]).generate_state(1, np.uint64)[0] >> 1)


def build_runs(
    cfg: Config, graphs: list[Graph], points=None, first_split: int = 0
) -> tuple[dict[str, torch.nn.Module], dict[str, Run]]:
    """One stacked network per (arm, graph, grid point) with a member per split, each member with its own initial
    weights and dropout stream (``member_seed``). A stack is computed until its last split stops, so the grid points
    that converge fast do not wait for the slow ones. ``points(arm, graph_name)`` gives the grid points (default:
    the arm's whole grid); ``graphs``' split s is split ``first_split + s`` of the prepared graph (its seeds)."""
    nets, runs = {}, {}
    for g, graph in enumerate(graphs):
        for arm in arms(cfg):
            for point in points(arm, graph.name) if points else grid_points(cfg, arm):
                run = Run(arm, g, (point,), prop_lr(cfg, arm))
                splits = [first_split + s for s in run.splits_of(graph.splits)]
                net = build_network(cfg, arm, graph.features.shape[1], graph.classes, run.members(graph.splits))
                initialise_members(net, [member_seed(cfg, arm, graph.name, s, "init") for s in splits])
                net.random = MemberRandom([member_seed(cfg, arm, graph.name, s, "dropout") for s in splits])
                key = run_key(arm, graph.name, point)
                nets[key], runs[key] = net, run
    return nets, runs


def split_range(graph: Graph, start: int, stop: int) -> Graph:
    """``graph`` with only its splits ``start .. stop - 1`` (the masks' rows)."""
    masks = {k: getattr(graph, k)[start:stop] for k in ("train_mask", "val_mask", "test_mask")}
    return dataclasses.replace(graph, **masks)


def join_members(net: torch.nn.Module, first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]):
    """One stacked state from two: the parameters' members concatenated, the shared buffers kept."""
    parameters = {name for name, _ in net.named_parameters()}
    return {k: torch.cat([v, second[k]]) if k in parameters else v for k, v in first.items()}


# ----------------------------------------------------------------------------- training


def regression_network(cfg: Config, role: str, family: str) -> torch.nn.Module:
    """Baseline: the order-10 filter alone (BernNet's protocol). Method: the bias-free 1 -> hidden -> 1 wave network."""
    if role == "baseline":
        return make_filter(family, cfg.base_order, cfg.gpr_alpha)
    step = lambda: make_filter(family, cfg.pde_order, cfg.gpr_alpha)  # noqa: E731
    return HyperbolicGNN(1, cfg.hidden, 1, 0.0, step, cfg.pde_time, cfg.pde_dt, bias=False)


def regression_members(cfg: Config) -> dict[str, torch.nn.Module]:
    torch.manual_seed(cfg.seed)
    return {
        f"{role}__{family}__{target}": regression_network(cfg, role, family)
        for role in ("baseline", "method") for family in cfg.filters for target in cfg.data.targets
    }  # fmt: skip


def regression_batch(data: DatasetRef) -> dict[str, torch.Tensor]:
    """Spectral-domain signals/targets per operator; images [0, half) fit the filters, the rest score them."""
    arrays = {k: torch.from_numpy(v) for k, v in load_npz(data.file(REGRESSION_FILE)).items()}
    half = arrays["signals"].shape[1] // 2
    batch = {"test_targets": arrays["targets"][:, :, half:]}
    for op in ("laplacian", "gcn_adjacency"):
        batch[f"{op}_eigenvalues"] = arrays[f"{op}_eigenvalues"]
        signals, targets = arrays[f"{op}_signals_hat"], arrays[f"{op}_targets_hat"]
        batch |= {f"{op}_train_signals_hat": signals[:, :half], f"{op}_test_signals_hat": signals[:, half:]}
        batch |= {f"{op}_train_targets_hat": targets[:, :, :half], f"{op}_test_targets_hat": targets[:, :, half:]}
    return batch


def split_history(records: list[dict[str, float]], names: list[str]) -> dict[str, list[dict[str, float]]]:
    """Turn the joint run's records ("<arm>/<graph>/<stage>/<metric>") into one learning curve per arm."""
    history: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for record in records:
        for name in names:
            picked = {k.removeprefix(name + "/"): v for k, v in record.items() if k.startswith(name + "/")}
            if picked:
                history[name].append(
                    {"step": record["step"], **({"epoch": record["epoch"]} if "epoch" in record else {}), **picked}
                )
    return history


def weights_file(model_dir: Path, arm: str) -> Path:
    return Path(model_dir) / f"{arm}.pt"


def train(cfg: Config, data: DatasetRef, out_dir: Path) -> TrainedArtifacts:
    """Two fits. (1) Every arm's whole grid on each graph's first ``select_splits`` splits: the grid point with the
    best mean validation accuracy over them is chosen per (arm, graph). (2) The chosen point on the remaining
    splits. Every member has its own seeds, so a split's fit is the same whichever phase or stack it trains in."""
    graphs = load_graphs(data)
    names = arms(cfg)
    summary: dict[str, float] = {}

    started = time.perf_counter()
    k = {g.name: min(cfg.select_splits, g.splits) for g in graphs}
    searched = [split_range(g, 0, k[g.name]) for g in graphs]
    nets, runs = build_runs(cfg, searched)
    module = NodeClassification(nets, runs, searched, cfg)
    loader = full_batch_loader(0)
    records = fit(module, loader, loader, max_epochs=cfg.max_epochs, seed=cfg.seed, variant=f"{len(nets)} grid runs")
    history = split_history(records, names)
    summary["classification_epochs"] = float(max(t["epochs"] for t in module.tracking.values()))

    chosen: dict[tuple[str, str], dict] = {}
    for arm in names:
        for graph in graphs:
            points = grid_points(cfg, arm)

            def score(point: dict) -> tuple[float, int]:
                i = points.index(point)  # the stack of this grid point: one member per searched split
                return float(np.mean(module.tracking[run_key(arm, graph.name, point)]["val_acc"])), i

            # One search per (arm, graph), over the mean of its searched splits: it serves every split of the graph.
            choice, _ = select_on_validation(
                arm, points, score, metric="acc", unit=graph.name, limits=GRID_LIMITS if "alpha" in points[0] else None
            )
            chosen[arm, graph.name] = choice
            summary |= {
                key.replace(f"select/{arm}/", f"select/{arm}/{graph.name}/", 1): x
                for key, x in choice.summary().items()
            }

    rest = [split_range(g, k[g.name], g.splits) for g in graphs if g.splits > k[g.name]]
    tracks = {}  # (arm, graph) -> tracking dicts of its chosen point, per phase
    states = {}
    for arm in names:
        for graph in searched:
            key = run_key(arm, graph.name, chosen[arm, graph.name].chosen)
            tracks[arm, graph.name] = [module.tracking[key]]
            states[arm, graph.name] = (nets[key], module.tracking[key]["state"])
    if rest:
        by_graph = {g.name: g for g in graphs}
        nets2, runs2 = build_runs(
            cfg, rest, points=lambda arm, name: [chosen[arm, name].chosen], first_split=k[rest[0].name]
        )
        if len({k[g.name] for g in rest}) > 1:
            raise ValueError("every graph searches the same number of splits")
        module2 = NodeClassification(nets2, runs2, rest, cfg)
        fit(module2, loader, loader, max_epochs=cfg.max_epochs, seed=cfg.seed, variant=f"{len(nets2)} chosen runs")
        summary["classification_epochs"] = max(
            summary["classification_epochs"], float(max(t["epochs"] for t in module2.tracking.values()))
        )
        for arm in names:
            for graph in rest:
                key = run_key(arm, graph.name, chosen[arm, graph.name].chosen)
                tracks[arm, graph.name].append(module2.tracking[key])
                net, first = states[arm, graph.name]
                states[arm, graph.name] = (net, join_members(net, first, module2.tracking[key]["state"]))
        for arm in names:
            module.max_step_norm[arm] = max(module.max_step_norm.get(arm, 0.0), module2.max_step_norm.get(arm, 0.0))
        assert all(by_graph[g.name].splits == k[g.name] + g.splits for g in rest)
    summary["classification_seconds"] = time.perf_counter() - started

    selection: dict[str, dict] = {}
    for arm in names:
        chosen_states = {}
        for graph in graphs:
            choice = chosen[arm, graph.name]
            chosen_states[graph.name] = states[arm, graph.name][1]
            best_epochs, trained, stopped = [], [], []
            for track in tracks[arm, graph.name]:  # splits 0 .. k-1 (the search's), then the rest
                for s in range(len(track["best_epoch"])):
                    stop = bool(track["stopped"][s])
                    best_epochs.append(track["best_epoch"][s])
                    trained.append(track["best_epoch"][s] + cfg.patience + 1 if stop else track["epochs"])
                    stopped.append(stop)
            for s in range(graph.splits):  # the chosen point's members are the compared fits, one per unit
                record_fit(arm, unit_label(graph.name, s), best_epochs[s], trained[s], stopped[s], cfg.patience)
            summary[f"select/{arm}/{graph.name}/best_epoch"] = float(np.mean(best_epochs))
            summary[f"select/{arm}/{graph.name}/epochs_trained"] = float(np.mean(trained))
            selection[f"{arm}/{graph.name}"] = {
                "chosen": choice.chosen, "table": choice.table, "best_epochs": best_epochs,
                "epochs": trained, "stopped": stopped, "searched_splits": k[graph.name],
            }  # fmt: skip
        torch.save(chosen_states, weights_file(out_dir, arm))
        summary[f"{arm}/max_step_norm"] = module.max_step_norm.get(arm, 0.0)
    (Path(out_dir) / SELECTION_FILE).write_text(json.dumps(selection, indent=1))

    started = time.perf_counter()
    regression = FilterRegression(regression_members(cfg), cfg.data.targets, cfg.regression_lr)
    loader = full_batch_loader(regression_batch(data))
    records = fit(regression, loader, None, max_epochs=cfg.regression_epochs, seed=cfg.seed, variant="regression")
    history |= split_history(records, ["regression_baseline", "regression_method"])
    torch.save(regression.nets.state_dict(), weights_file(out_dir, "regression"))
    summary["regression_seconds"] = time.perf_counter() - started

    first = graphs[0]
    registered = {
        "arm": f"method_{cfg.filters[0]}", "graph": first.name, "chosen": selection[f"method_{cfg.filters[0]}/{first.name}"]["chosen"],
        "in_dim": int(first.features.shape[1]), "classes": first.classes,
    }  # fmt: skip
    (Path(out_dir) / REGISTERED_FILE).write_text(json.dumps(registered, indent=1))
    return TrainedArtifacts(out_dir, history, summary)


def load_model(cfg: Config, model_dir: Path) -> SingleMember:
    """The PDE version of the first base filter on the first graph, split 0, at its chosen grid point.

    Call it as ``net(x, edge_index)`` (x dense or ``networks.SparseFeatures``) -> logits (n, classes).
    """
    info = json.loads((Path(model_dir) / REGISTERED_FILE).read_text())
    net = build_network(cfg, info["arm"], info["in_dim"], info["classes"], [info["chosen"]])
    state = torch.load(weights_file(model_dir, info["arm"]), weights_only=True)[info["graph"]]
    net.load_state_dict(member_state(net, state, 0))  # split 0
    return SingleMember(net).eval()


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate_classification(cfg: Config, graphs: list[Graph], model_dir: Path) -> dict:
    """Per (arm, graph): per-split test/val accuracy and per-step norms at the chosen run's best weights."""
    selection = json.loads((Path(model_dir) / SELECTION_FILE).read_text())
    results = {}
    for arm in arms(cfg):
        states = torch.load(weights_file(model_dir, arm), weights_only=True)
        for graph in graphs:
            chosen = selection[f"{arm}/{graph.name}"]["chosen"]
            net = build_network(cfg, arm, graph.features.shape[1], graph.classes, [chosen] * graph.splits)
            net.load_state_dict(states[graph.name])
            correct = (net.eval()(graph.features, graph.ops).argmax(-1) == graph.y[:, None]).float()  # (n, splits)
            solver = getattr(net, "solver", None)
            results[arm, graph.name] = {
                "test_acc": [float(correct[m, s].mean()) for s, m in enumerate(graph.test_mask)],
                "val_acc": [float(correct[m, s].mean()) for s, m in enumerate(graph.val_mask)],
                "step_norms": solver.step_norms.tolist() if solver is not None else [],
            }
    return results


@torch.no_grad()
def evaluate_regression(cfg: Config, batch: dict, model_dir: Path) -> dict:
    """Held-out R^2 of every learned filter (node-domain total sum of squares) and its response curve."""
    from .training import operator_of, response_of

    module = FilterRegression(regression_members(cfg), cfg.data.targets, cfg.regression_lr)
    module.nets.load_state_dict(torch.load(weights_file(model_dir, "regression"), weights_only=True))
    results = {}
    for key, (prediction, truth) in module.predictions(batch, "test").items():
        role, family, target = regression_member(key)
        node_truth = batch["test_targets"][cfg.data.targets.index(target)]
        r2 = 1.0 - float(((prediction - truth) ** 2).sum() / ((node_truth - node_truth.mean()) ** 2).sum())
        op = operator_of(family)
        eigenvalues = batch[f"{op}_eigenvalues"]
        response = response_of(module.nets[key], eigenvalues).numpy()
        # plotted against lambda of L; GPR's operator A_tilde is plotted against 1 - mu (its Laplacian-like axis)
        axis = eigenvalues.numpy() if op == "laplacian" else 1.0 - eigenvalues.numpy()
        results[(role, family, target)] = {"r2": r2, "eigenvalues": axis, "response": response}
    return results


def unit_label(graph: str, split: int) -> str:
    """The paired unit of one (graph, split): ``cora_split2`` (the same for every arm)."""
    return f"{graph}_split{split}"


def graph_of(label: str) -> str:
    return label.rsplit("_split", 1)[0]


def evaluate(cfg: Config, data: DatasetRef, artifacts: TrainedArtifacts, out_dir: Path) -> Metrics:
    graphs = load_graphs(data)
    descriptions = graph_descriptions(data)
    runs = evaluate_classification(cfg, graphs, artifacts.model_dir)
    regression = evaluate_regression(cfg, regression_batch(data), artifacts.model_dir)
    judged = claim_graphs(cfg, descriptions)

    metrics = Metrics({}, [])
    values = metrics.values
    for d in descriptions:
        values[f"data/edge_homophily_{d['name']}"] = d["edge_homophily"]
        values[f"data/majority_val_{d['name']}"] = d["majority_val"]
    for arm in arms(cfg):
        role, family = arm.split("_", 1)
        for graph in graphs:
            r = runs[arm, graph.name]
            values[f"{role}/{family}/acc_{graph.name}"] = float(np.mean(r["test_acc"]))
            values[f"{role}/{family}/acc_std_{graph.name}"] = float(np.std(r["test_acc"]))
            values[f"{role}/{family}/val_acc_{graph.name}"] = float(np.mean(r["val_acc"]))
        # Per (graph, split) unit: the claim pairs the PDE version and its base on these.
        labels = [unit_label(g.name, s) for g in graphs for s in range(g.splits)]
        metrics.add_units("test_acc", arm, [a for g in graphs for a in runs[arm, g.name]["test_acc"]], labels)
        metrics.add_units("val_acc", arm, [a for g in graphs for a in runs[arm, g.name]["val_acc"]], labels)
        values[f"{role}/{family}/acc_mean"] = float(np.mean([values[f"{role}/{family}/acc_{g}"] for g in judged]))
        norms = [max(runs[arm, g.name]["step_norms"], default=0.0) for g in graphs]
        values[f"{role}/{family}/max_step_norm"] = max(max(norms), artifacts.summary.get(f"{arm}/max_step_norm", 0.0))
    values["method/acc_mean"] = float(np.mean([values[f"method/{f}/acc_mean"] for f in cfg.filters]))
    values["baseline/acc_mean"] = float(np.mean([values[f"baseline/{f}/acc_mean"] for f in cfg.filters]))
    values["method/max_step_norm"] = max(values[f"method/{f}/max_step_norm"] for f in cfg.filters)
    for (role, family, target), r in regression.items():
        values[f"{role}/{family}/r2_{target}"] = r["r2"]
    for role in ("baseline", "method"):
        values[f"{role}/r2_mean"] = float(np.mean([r["r2"] for (ro, _, _), r in regression.items() if ro == role]))

    selection = json.loads((Path(artifacts.model_dir) / SELECTION_FILE).read_text())
    folder = Path(out_dir) / "plots"
    figures = [
        plots.accuracy_by_graph(cfg, arms(cfg), judged, values, PAPER, folder / "accuracy_by_graph.png"),
        plots.paired_gains(cfg, judged, metrics, folder / "paired_gains.png"),
        plots.learning_curves(artifacts.history, [g.name for g in graphs], folder / "learning_curves.png"),
        plots.selection_summary(arms(cfg), [g.name for g in graphs], selection, cfg, folder / "selection.png"),
        plots.step_norms(cfg, [g.name for g in graphs], runs, folder / "wave_step_norms.png"),
        plots.filter_regression(cfg, regression, folder / "filter_regression.png"),
    ]
    sweep = [d for d in descriptions if d["kind"] == "csbm"]
    if sweep:
        figures.append(plots.csbm_sweep(cfg, arms(cfg), sweep, values, folder / "csbm_accuracy_vs_homophily.png"))
    metrics.figures = figures
    return metrics


# ----------------------------------------------------------------------------- claim


# The random draws the (graph x split) units vary: each split is its own 60/20/20 draw, and every member of a stacked
# network starts from its own initial weights and draws its own dropout masks.
COVERS = ("data split", "training seed (initial weights, dropout masks)")
MLP_ARM = "baseline_mlp"


def unit_gains(metrics: Metrics, method: str, baseline: str, graphs: list[str]) -> UnitValues:
    """``method`` - ``baseline`` test accuracy (pt) per paired (graph, split) unit of the judged ``graphs``."""
    p = metrics.paired("test_acc", method, baseline)
    gains = 100 * (p[method] - p[baseline])
    keep = [i for i, label in enumerate(gains.labels) if graph_of(label) in graphs]
    return UnitValues([gains.labels[i] for i in keep], gains.values[keep])


def filter_criteria(
    cfg: Config, metrics: Metrics, f: str, graphs: list[str], method: str | None = None
) -> tuple[Criterion, Criterion]:
    """Filter ``f``'s two conjuncts: mean gain >= -margin, and more wins than losses among the untied units.
    ``method`` replaces the PDE version by another arm (the negative control scores the MLP in its place)."""
    method = method or f"method_{f}"
    gains = unit_gains(metrics, method, f"baseline_{f}", graphs)
    units = f"paired (graph x split) runs over {len(graphs)} graphs"
    paper = "; ".join(
        f"{graph}: {NAMES[f]} {base:.2f} -> PDE {pde:.2f} (+{pde - base:.2f} pt)"
        for (family, graph), (base, pde) in PAPER.items()
        if family == f
    )
    paper = f"paper table (secondary copy, approximate; 60/20/20 splits): {paper}" if paper else ""
    gain = V.mean_criterion(
        f"{f}_mean_gain_pt",
        f"{NAMES[f]}: PDE version - base test accuracy (pt), mean over paired (graph x split) runs",
        gains,
        -CLAIM_MARGIN_PT,
        ">=",
        units=units,
        paper=paper,
        covers=COVERS,
    )
    x = np.asarray(gains)
    wins, losses = int((x > 0).sum()), int((x < 0).sum())
    statement = f"{NAMES[f]}: fraction of untied (graph x split) runs where the PDE version's test accuracy is higher"
    if wins + losses == 0:
        won = Criterion(
            f"{f}_win_rate", statement, 0.5, 0.0, 1.0, 0.5, ">", units="0 untied runs", n_units=0,
            interval="clopper-pearson", reason="every unit tied: no evidence either way", covers=COVERS,
        )  # fmt: skip
    else:
        won = V.proportion_criterion(
            f"{f}_win_rate", statement, wins, wins + losses, 0.5, ">", units="untied runs", covers=COVERS
        )
    return gain, won


def filters_passing_criterion(
    per_filter: dict[str, tuple[Criterion, Criterion]], required: int, at_estimate: int, labels: tuple[str, ...] = ()
) -> Criterion:
    """How many filters pass both conjuncts ("k of F"). The estimate counts filters passing at the point estimates;
    the interval runs from the filters whose criteria all hold to those with none failing, so the count holds
    only when ``required`` filters surely pass and fails only when too few can. ``labels``: the paired units."""
    states = {f: verdict_of(pair) for f, pair in per_filter.items()}
    surely = sum(state == "holds" for state in states.values())
    possibly = sum(state != "fails" for state in states.values())
    undecided = [NAMES[f] for f, state in states.items() if state == "inconclusive"]
    reason = f"undecided filters: {', '.join(undecided)}" if surely < required <= possibly else ""
    return Criterion(
        "filters_passing",
        "base filters whose PDE version passes both its mean-gain and win-rate criteria",
        at_estimate,
        surely,
        possibly,
        required,
        ">=",
        units=f"{len(per_filter)} filters",
        n_units=len(per_filter),
        interval="per-filter states",
        reason=reason,
        labels=labels,
        covers=COVERS,
    )


def graph_separations(metrics: Metrics, names: list[str], graphs: list[str]) -> dict[str, dict[str, float]]:
    """Per graph, the arms whose test accuracy differs from the MLP's: the paired 95 % t-interval of arm - MLP (pt)
    over the graph's splits excludes 0. Maps graph -> {arm: mean difference}; an empty dict: no arm differs."""
    out: dict[str, dict[str, float]] = {}
    for g in graphs:
        out[g] = {}
        for arm in names:
            if arm == MLP_ARM:
                continue
            d = unit_gains(metrics, arm, MLP_ARM, [g])
            if len(d) < 2:
                continue
            c = V.mean_criterion(f"{arm}_vs_mlp_{g}", f"{arm} - MLP on {g}", d, 0.0, ">")
            if c.low > 0 or c.high < 0:
                out[g][arm] = float(c.estimate)
    return out


def passes_at_estimate(gain: Criterion, won: Criterion) -> bool:
    return gain.estimate >= -CLAIM_MARGIN_PT and won.estimate > won.threshold


def claim(cfg: Config, metrics: Metrics) -> ClaimResult:
    v = metrics.values
    graphs = {k.removeprefix("data/edge_homophily_"): h for k, h in v.items() if k.startswith("data/edge_homophily_")}
    synthetic = cfg.data.source == "synthetic"
    judged = [g for g in graphs if g.startswith("csbm_") == synthetic]
    figures: dict[str, float] = {}
    per_filter: dict[str, tuple[Criterion, Criterion]] = {}
    placebo: dict[str, tuple[Criterion, Criterion]] = {}
    passing = placebo_passing = 0
    for f in cfg.filters:
        gain, won = per_filter[f] = filter_criteria(cfg, metrics, f, judged)
        passing += passes_at_estimate(gain, won)
        placebo[f] = filter_criteria(cfg, metrics, f, judged, method=MLP_ARM)
        placebo_passing += passes_at_estimate(*placebo[f])
        figures |= {
            f"{f}_mean_gain_pt": gain.estimate, f"{f}_mean_gain_pt_low": gain.low, f"{f}_mean_gain_pt_high": gain.high,
            f"{f}_win_rate": won.estimate, f"{f}_untied_runs": won.n_units,
            f"{f}_mlp_minus_base_pt": placebo[f][0].estimate,
        }  # fmt: skip
        for g in graphs:
            figures[f"{f}_gain_pt_{g}"] = 100 * (v[f"method/{f}/acc_{g}"] - v[f"baseline/{f}/acc_{g}"])
        figures[f"{f}_r2_gain"] = float(
            np.mean([v[f"method/{f}/r2_{t}"] - v[f"baseline/{f}/r2_{t}"] for t in cfg.data.targets])
        )
    for (f, g), (base, pde) in PAPER.items():
        if f in cfg.filters and g in judged:
            figures[f"paper_{f}_gain_pt_{g}"] = pde - base
    required = math.ceil(2 * len(cfg.filters) / 3)
    labels = per_filter[cfg.filters[0]][0].labels
    # The claim is "k of F filters", not "every filter": the per-filter criteria enter the verdict through this count
    # (they are reported in figures and notes), so one undecided filter does not decide the claim on its own.
    criteria = [filters_passing_criterion(per_filter, required, passing, labels)]
    # Negative control: the MLP (no graph, so no wave propagation at all) scored as every filter's PDE version.
    controls = [
        Control(
            "filters_passing",
            "the graph removed: the MLP scored in place of every filter's PDE version",
            filters_passing_criterion(placebo, required, placebo_passing, labels),
        )
    ]
    separations = [
        Separation(
            f"test accuracy on {g}",
            {arm: v[f"{arm.replace('_', '/', 1)}/acc_{g}"] for arm in arms(cfg)},
            floor=v[f"data/majority_val_{g}"],
            ceiling=1.0,
        )
        for g in judged
    ]
    separated = graph_separations(metrics, arms(cfg), judged)
    for g, differing in separated.items():
        figures[f"arms_differing_from_mlp_{g}"] = float(len(differing))
    figures["mean_gain_pt"] = 100 * (v["method/acc_mean"] - v["baseline/acc_mean"])
    figures["max_step_norm"] = max(v[k] for k in v if k.endswith("/max_step_norm"))
    figures["r2_mean_method"], figures["r2_mean_baseline"] = v["method/r2_mean"], v["baseline/r2_mean"]

    sanity = {"no_blowup": figures["max_step_norm"] < cfg.blowup_norm}
    for f in cfg.filters:
        # The comparison means something only if the base filter learns every graph it is judged on.
        margin = min(100 * (v[f"baseline/{f}/val_acc_{g}"] - v[f"data/majority_val_{g}"]) for g in judged)
        figures[f"{f}_base_val_minus_majority_pt_min"] = margin
        check, ok = learns_task(f"baseline_{f}_val_minus_majority_pt", margin, SANITY_MAJORITY_GAP_PT)
        sanity[check] = ok
    sweep = sorted((h, g) for g, h in graphs.items() if g.startswith("csbm_"))
    if cfg.scale != Scale.smoke and len(sweep) >= 2:  # wherever the sweep runs (paper, synthetic, opted in)
        for _, g in (sweep[0], sweep[-1]):  # the brief's check on the CSBM sweep's lowest and highest homophily
            mlp = 100 * v[f"baseline/mlp/acc_{g}"]
            margin = min(100 * v[f"baseline/{f}/acc_{g}"] for f in cfg.filters) - mlp
            figures[f"spectral_minus_mlp_pt_{g}"] = margin
            figures[f"pde_minus_mlp_pt_{g}"] = min(100 * v[f"method/{f}/acc_{g}"] for f in cfg.filters) - mlp
            sanity[f"spectral_beat_mlp_by_5pt_{g}"] = margin >= SANITY_MLP_GAP_PT

    where = "CSBM levels" if synthetic else "benchmark graphs"
    statement = (
        f"The Hyperbolic-PDE version (T={cfg.pde_time:g}, dt={cfg.pde_dt:g}, per-step order {cfg.pde_order}) matches or "
        f"beats its base filter (order {cfg.base_order}) for >= {required} of {len(cfg.filters)} filters "
        f"({', '.join(NAMES[f] for f in cfg.filters)}) over paired (graph x split) runs on {len(judged)} {where} "
        f"({', '.join(judged)}): mean test-accuracy gain >= -{CLAIM_MARGIN_PT} pt (95 % t-interval) and a win rate "
        f"above 1/2 among untied runs (95 % Clopper-Pearson interval); each arm's lr in {list(cfg.lr_grid)} and dropout in "
        f"{list(cfg.dropout_grid)} chosen on validation, early stopping with patience {cfg.patience}."
    )
    notes = (
        f"{passing}/{len(cfg.filters)} filters pass at the point estimates; per filter: "
        + "; ".join(f"{NAMES[f]} " + ", ".join(c.describe() for c in per_filter[f]) for f in cfg.filters)
        + ". Per graph (PDE - base, pt): "
        + "; ".join(
            f"{NAMES[f]} " + ", ".join(f"{g} {figures[f'{f}_gain_pt_{g}']:+.1f}" for g in judged) for f in cfg.filters
        )
        + f". Filter regression mean R2: PDE {figures['r2_mean_method']:.3f} vs base {figures['r2_mean_baseline']:.3f}."
        + ". Per graph, arms whose test accuracy differs from the MLP's (paired 95 % t-interval over its splits): "
        + "; ".join(
            f"{g}: " + (", ".join(f"{a} {d:+.1f} pt" for a, d in separated[g].items()) or "no arm differs from the MLP")
            for g in judged
        )
        + ". PubMed and Amazon Computers/Photo (in the paper's suite) cannot be had offline and are not run."
    )
    return ClaimResult(statement, criteria, sanity, figures, notes, controls, separations)
