"""The LightningModules: node classification of every (arm, graph, grid point) run with early stopping, and the
spectral-domain filter regression."""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from .networks import GraphOperators, HyperbolicGNN, SparseFeatures, make_filter


@dataclass
class Graph:
    """One prepared graph: sparse features, labels, its split masks (splits, n) and its operators."""

    name: str
    features: SparseFeatures
    y: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    ops: GraphOperators

    @property
    def splits(self) -> int:
        return self.train_mask.shape[0]

    @property
    def classes(self) -> int:
        return int(self.y.max()) + 1


@dataclass(frozen=True)
class Run:
    """A stacked network's arm, graph (index into the graph list) and grid points: member m trains at grid point
    m // splits on split m % splits."""

    arm: str
    graph: int
    points: tuple[dict, ...]  # every grid point: {"lr": ..., "dropout": ..., ["alpha": ...]}
    prop_lr: float | None = None  # the filter coefficients' own lr (BernNet/ChebNetII); None: the point's lr

    def members(self, splits: int) -> list[dict]:
        return [point for point in self.points for _ in range(splits)]

    def splits_of(self, splits: int) -> list[int]:
        return [s for _ in self.points for s in range(splits)]


FILTER_PARAMETERS = ("filter.", "solver.filters.")  # the polynomial coefficients (gamma, theta) of a network


def is_filter_parameter(name: str) -> bool:
    return any(part in name for part in FILTER_PARAMETERS)


class MemberAdam(torch.optim.Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient, bias-corrected moments) with one learning rate per
    member: ``lr`` (members,) broadcasts along every parameter's first (member) dimension."""

    def __init__(self, params, lr: Tensor, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(())
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                t = float(state["step"])
                state["exp_avg"].lerp_(grad, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                lr = group["lr"].to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
                denominator = (state["exp_avg_sq"] / (1 - beta2**t)).sqrt_().add_(group["eps"])
                p.sub_(lr / (1 - beta1**t) * state["exp_avg"] / denominator)
        return loss


def member_losses(logits: Tensor, y: Tensor, masks: Tensor) -> Tensor:
    """(members,) mean cross-entropy of member s on the nodes of ``masks[s]``; logits (n, members, classes)."""
    nll = -torch.log_softmax(logits, -1).gather(-1, y[:, None, None].expand(-1, logits.shape[1], 1))[..., 0]
    weights = masks.T.to(nll.dtype)
    return (nll * weights).sum(0) / weights.sum(0).clamp_min(1)


def member_accuracy(logits: Tensor, y: Tensor, masks: Tensor) -> Tensor:
    correct = (logits.argmax(-1) == y[:, None]).to(torch.float32) * masks.T
    return correct.sum(0) / masks.sum(1).clamp_min(1)


class NodeClassification(L.LightningModule):
    """Every run (a network holding one member per split) trained side by side, each with its own Adam lr.

    The loss is the sum of all members' cross-entropies over disjoint parameters, so Adam (elementwise) gives
    each member the trajectory it would have alone. Early stopping per member, as BernNet/ChebNetII do: the
    weights at its lowest validation loss are kept, and a member stops once ``patience`` epochs pass without
    a lower one; a run whose members have all stopped is no longer computed, and the fit ends when every
    run has stopped (or at ``max_epochs``). The bookkeeping is plain tensors and lists so a resumed fit
    continues it exactly.
    """

    def __init__(self, nets: dict[str, nn.Module], runs: dict[str, Run], graphs: list[Graph], cfg) -> None:
        super().__init__()
        self.nets = nn.ModuleDict(nets)
        self.runs, self.graphs, self.cfg = runs, graphs, cfg
        self.tracking = {}
        for key, run in runs.items():
            members = len(run.members(graphs[run.graph].splits))
            self.tracking[key] = {
                "best_loss": [float("inf")] * members, "best_epoch": [-1] * members, "val_acc": [0.0] * members,
                "waited": [0] * members, "stopped": [False] * members, "epochs": 0,
                "state": {k: v.detach().clone() for k, v in self.nets[key].state_dict().items()},
            }  # fmt: skip
        self.max_step_norm: dict[str, float] = {}

    def masks(self, run: Run, stage: str) -> Tensor:
        """(members, n): member m's nodes of ``stage`` (its split's mask, repeated over the grid points)."""
        return getattr(self.graphs[run.graph], f"{stage}_mask").repeat(len(run.points), 1)

    def active(self) -> list[str]:
        return [key for key, t in self.tracking.items() if not all(t["stopped"])]

    def _log_curves(self, values: dict[tuple[str, str], list[float]], name: str) -> None:
        logged = {f"{arm}/{graph}/{name}": sum(v) / len(v) for (arm, graph), v in values.items()}
        self.log_dict(logged, on_step=False, on_epoch=True, batch_size=1)

    def training_step(self, batch, batch_idx):
        total, curves = torch.zeros(()), {}
        for key in self.active():
            run, net = self.runs[key], self.nets[key]
            graph = self.graphs[run.graph]
            if getattr(net, "random", None) is not None:
                net.random.step = self.current_epoch  # each member's masks: a function of (its seed, epoch)
            losses = member_losses(net(graph.features, graph.ops), graph.y, self.masks(run, "train"))
            total = total + losses.sum()
            curves.setdefault((run.arm, graph.name), []).append(float(losses.detach().mean()))
            solver = getattr(net, "solver", None)
            if solver is not None:
                norm = float(solver.step_norms.max())
                self.max_step_norm[run.arm] = max(self.max_step_norm.get(run.arm, 0.0), norm)
        self._log_curves(curves, "train/loss")
        return total

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        curves = {}
        for key in self.active():
            run, net, track = self.runs[key], self.nets[key], self.tracking[key]
            graph = self.graphs[run.graph]
            logits = net(graph.features, graph.ops)
            val_mask = self.masks(run, "val")
            losses = member_losses(logits, graph.y, val_mask).tolist()
            accs = member_accuracy(logits, graph.y, val_mask).tolist()
            curves.setdefault((run.arm, graph.name), []).extend(accs)
            track["epochs"] = self.current_epoch + 1
            improved = [s for s, loss in enumerate(losses) if not track["stopped"][s] and loss < track["best_loss"][s]]
            for s in range(len(losses)):
                if track["stopped"][s]:
                    continue
                if s in improved:
                    track["best_loss"][s], track["best_epoch"][s] = losses[s], self.current_epoch
                    track["val_acc"][s], track["waited"][s] = accs[s], 0
                else:
                    track["waited"][s] += 1
                    track["stopped"][s] = track["waited"][s] >= self.cfg.patience
            if improved:
                parameters = dict(net.named_parameters())
                index = torch.tensor(improved)
                for name, value in track["state"].items():
                    if name in parameters:  # member slices; buffers never change
                        value[index] = parameters[name].detach()[index]
        self._log_curves(curves, "val/acc")

    def on_validation_epoch_end(self) -> None:
        if not self.active():
            self.trainer.should_stop = True

    def configure_optimizers(self):
        """Per run two groups, as GPR-GNN/BernNet/ChebNetII train: the feature maps at the member's lr with weight
        decay, the filter coefficients at the filter lr (the member's lr where the family has none) without."""
        groups = []
        for key, run in self.runs.items():
            members = run.members(self.graphs[run.graph].splits)
            rates = torch.tensor([p["lr"] for p in members])
            prop_rates = rates if run.prop_lr is None else torch.full_like(rates, run.prop_lr)
            named = list(self.nets[key].named_parameters())
            features = [p for name, p in named if not is_filter_parameter(name)]
            coefficients = [p for name, p in named if is_filter_parameter(name)]
            groups.append({"params": features, "lr": rates, "weight_decay": self.cfg.weight_decay})
            if coefficients:
                groups.append({"params": coefficients, "lr": prop_rates, "weight_decay": self.cfg.prop_weight_decay})
        return MemberAdam(groups, lr=torch.ones(1))


class FullBatch(Dataset):
    """One item per epoch (full-batch training: the module holds the graphs itself)."""

    def __init__(self, item) -> None:
        self.item = item

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int):
        return self.item


def _as_is(batch):
    return batch


def full_batch_loader(item) -> DataLoader:
    return DataLoader(FullBatch(item), batch_size=None, collate_fn=_as_is)


# ----------------------------------------------------------------------------- filter regression


def response_of(net: nn.Module, eigenvalues: Tensor) -> Tensor:
    """A regression member's scalar response on its operator's eigenvalues (differentiable)."""
    if isinstance(net, HyperbolicGNN):
        return net.spectral_response(eigenvalues)[0, :, 0, 0]
    return net.response(eigenvalues)[0]


def operator_of(family: str) -> str:
    return make_filter(family, 1).operator


def regression_member(key: str) -> tuple[str, str, str]:
    role, family, target = key.split("__")
    return role, family, target


class FilterRegression(L.LightningModule):
    """Fit each member's response to its target filter on the training images (mean squared error).

    A polynomial filter, and the bias-free linear wave network, is diagonal in its operator's eigenbasis,
    so ||U r(Lambda) U^T x - y||^2 = ||r(Lambda) x_hat - y_hat||^2 (Parseval): training there is exact and cheap.
    """

    def __init__(self, members: dict[str, nn.Module], targets: tuple[str, ...], lr: float) -> None:
        super().__init__()
        self.nets, self.targets, self.lr = nn.ModuleDict(members), targets, lr

    def predictions(self, batch: dict, stage: str) -> dict[str, tuple[Tensor, Tensor]]:
        """(prediction, truth) in the spectral domain for every member."""
        out = {}
        for key, net in self.nets.items():
            role, family, target = regression_member(key)
            op = operator_of(family)
            response = response_of(net, batch[f"{op}_eigenvalues"])
            prediction = response[:, None] * batch[f"{op}_{stage}_signals_hat"]
            out[key] = (prediction, batch[f"{op}_{stage}_targets_hat"][self.targets.index(target)])
        return out

    def training_step(self, batch, batch_idx):
        losses: dict[str, list[Tensor]] = {}
        for key, (prediction, truth) in self.predictions(batch, "train").items():
            losses.setdefault(regression_member(key)[0], []).append(F.mse_loss(prediction, truth))
        logged = {f"regression_{role}/train/mse": torch.stack(ls).mean().detach() for role, ls in losses.items()}
        self.log_dict(logged, on_step=False, on_epoch=True, batch_size=1)
        return sum(torch.stack(ls).sum() for ls in losses.values())

    def configure_optimizers(self):
        return torch.optim.Adam(self.nets.parameters(), lr=self.lr)
