"""sdcib: the batched (all views at once) encoders, critics and loss equal per-view modules.

The reference is the per-view formulation the batched one replaces: one ``nn.Linear`` /
``nn.BatchNorm1d`` encoder and one critic per (view, layer), the loss summed view by view and
pair by pair, loaded with the batched network's weights. Forward values, every loss part, every
gradient and the BatchNorm running statistics must agree.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

torch.set_num_threads(int(os.environ.get("PAPERLINE_THREADS", "1")))

from models.sdcib.algorithm import compression_kl, jsd_mi, nt_xent, sdcib_loss  # noqa: E402
from models.sdcib.networks import SDCIB, SIGMA_FLOOR, GroupedBlock, GroupedCritic, GroupedLinear  # noqa: E402

VIEW_DIMS, WIDTHS, K, BATCH = (5, 9, 3), (6, 6, 4), 3, 12


def fixed_noise(t: torch.Tensor) -> torch.Tensor:
    """Stand-in for ``torch.randn_like``: a fixed (batch, w) pattern, the same for every view, so a
    batched draw of (views, batch, w) and per-view draws of (batch, w) see identical noise."""
    batch, width = t.shape[-2:]
    pattern = torch.sin(0.7 * torch.arange(batch * width, dtype=t.dtype) + 0.3).view(batch, width) * 1.3
    return pattern.expand(t.shape).clone()


def linear_from(grouped: GroupedLinear, g: int, n_in: int) -> nn.Linear:
    layer = nn.Linear(n_in, grouped.weight.shape[2])
    with torch.no_grad():
        layer.weight.copy_(grouped.weight[g, :n_in].T)
        layer.bias.copy_(grouped.bias[g])
    return layer


def block_from(grouped: GroupedBlock, g: int, n_in: int) -> nn.Sequential:
    linear = linear_from(grouped.linear, g, n_in)
    width = linear.out_features
    norm = nn.BatchNorm1d(width)
    with torch.no_grad():
        channels = slice(g * width, (g + 1) * width)
        norm.weight.copy_(grouped.norm.bn.weight[channels])
        norm.bias.copy_(grouped.norm.bn.bias[channels])
    return nn.Sequential(linear, norm, nn.ReLU())


class ReferenceEncoder(nn.Module):
    """View ``v`` of the batched SDCIB as a plain per-view network."""

    def __init__(self, net: SDCIB, v: int) -> None:
        super().__init__()
        dims = (net.view_dims[v], *net.widths)
        self.blocks = nn.ModuleList(block_from(b, v, n) for b, n in zip(net.blocks, dims[:-1]))
        self.heads = nn.ModuleList(block_from(h.fc, v, w) for h, w in zip(net.heads, net.widths))
        self.cluster = linear_from(net.cluster, v, net.widths[-1])

    def forward(self, x: torch.Tensor, sample: bool = True) -> dict:
        mus, sigmas, codes, a = [], [], [], x
        for block, head in zip(self.blocks, self.heads):
            a = block(a)
            mu, s = head(a).chunk(2, dim=1)
            sigma = F.softplus(s) + SIGMA_FLOOR
            mus.append(mu)
            sigmas.append(sigma)
            codes.append(mu + sigma * torch.randn_like(mu) if sample else mu)
        return {"mus": mus, "sigmas": sigmas, "codes": codes, "probs": F.softmax(self.cluster(codes[-1]), dim=1)}


class ReferenceCritic(nn.Module):
    def __init__(self, critic: GroupedCritic, v: int, code_dim: int) -> None:
        super().__init__()
        first, second, last = critic.net
        hidden = second.linear.weight.shape[1]
        self.net = nn.Sequential(
            block_from(first, v, code_dim + K), block_from(second, v, hidden), linear_from(last, v, hidden)
        )

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([h, c], dim=1)).squeeze(1)


def reference_loss(outs: list[dict], critics: dict, layers, alpha, beta, tau, mi_sign) -> dict:
    """The loss view by view and ordered pair by pair (the paper's sums, written out)."""
    compression = mi = instance = cluster = torch.zeros(())
    for v, out in enumerate(outs):
        for k in layers:
            compression = compression + compression_kl(out["codes"][k])
            h = out["mus"][k] + out["sigmas"][k] * torch.randn_like(out["mus"][k])
            mi = mi + jsd_mi(critics[v, k], h, out["probs"])
    pairs = [(v, u) for v in range(len(outs)) for u in range(len(outs)) if u != v]
    for v, u in pairs:
        for k in layers:
            instance = instance + nt_xent(outs[v]["codes"][k], outs[u]["codes"][k], tau)
        cluster = cluster + nt_xent(outs[v]["probs"].T, outs[u]["probs"].T, tau)
    total = alpha * (compression + beta * mi_sign * mi) + (1 - alpha) * (instance + cluster)
    return {"loss": total, "compression": compression, "mi": mi, "instance": instance, "cluster": cluster}


def grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient, zero where it took no part in the loss (e.g. unused heads)."""
    return torch.zeros_like(p) if p.grad is None else p.grad


def batched_grad_slices(net: SDCIB, v: int) -> list[torch.Tensor]:
    """View v's slice of every batched gradient, in the reference encoder's parameter order."""
    grads = []
    dims = (net.view_dims[v], *net.widths)
    for block, n_in in [*zip(net.blocks, dims[:-1]), *((h.fc, w) for h, w in zip(net.heads, net.widths))]:
        width = block.linear.weight.shape[2]
        channels = slice(v * width, (v + 1) * width)
        grads += [grad(block.linear.weight)[v, :n_in].T, grad(block.linear.bias)[v]]
        grads += [grad(block.norm.bn.weight)[channels], grad(block.norm.bn.bias)[channels]]
    return grads + [grad(net.cluster.weight)[v].T, grad(net.cluster.bias)[v]]


def reference_grads(ref: ReferenceEncoder) -> list[torch.Tensor]:
    modules = [*ref.blocks, *ref.heads]
    grads = []
    for seq in modules:
        grads += [grad(seq[0].weight), grad(seq[0].bias), grad(seq[1].weight), grad(seq[1].bias)]
    return grads + [grad(ref.cluster.weight), grad(ref.cluster.bias)]


@pytest.fixture
def float64():
    """Double precision, so that the two summation orders agree to ~1e-12 and any real difference shows."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize("layers", [(0, 1, 2), (2,)])
def test_batched_views_equal_per_view_modules_in_values_losses_gradients_and_bn_stats(layers, monkeypatch, float64):
    torch.manual_seed(0)
    net = SDCIB(VIEW_DIMS, WIDTHS, K, (True, False, True))
    xs = [torch.rand(BATCH, VIEW_DIMS[0]) * 5, torch.randn(BATCH, VIEW_DIMS[1]), torch.rand(BATCH, VIEW_DIMS[2])]
    net.fit_input_scaling(xs)
    critics = {f"k{k}": GroupedCritic(len(VIEW_DIMS), WIDTHS[k], K) for k in layers}
    refs = [ReferenceEncoder(net, v) for v in range(len(VIEW_DIMS))]
    ref_critics = {(v, k): ReferenceCritic(critics[f"k{k}"], v, WIDTHS[k]) for v in range(3) for k in layers}
    monkeypatch.setattr(torch, "randn_like", fixed_noise)
    kw = dict(alpha=0.3, beta=2.0, mi_sign=-1.0)

    out = net(xs, sample=True)
    parts = sdcib_loss(out, critics, layers, tau_instance=0.2, tau_cluster=0.2, sample=True, **kw)
    ref_outs = [ref(net.transformed(v, x)) for v, (ref, x) in enumerate(zip(refs, xs))]
    ref_parts = reference_loss(ref_outs, ref_critics, layers, tau=0.2, **kw)

    for v, ref_out in enumerate(ref_outs):
        for name in ("mus", "sigmas", "codes"):
            for k in range(len(WIDTHS)):
                torch.testing.assert_close(getattr(out, name)[k][v], ref_out[name][k], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(out.probs[v], ref_out["probs"], rtol=1e-9, atol=1e-12)
    for name, value in ref_parts.items():
        assert float(parts[name].detach()) == pytest.approx(float(value.detach()), rel=1e-10, abs=1e-12), name

    parts["loss"].backward()
    ref_parts["loss"].backward()
    for v, ref in enumerate(refs):
        for got, expected in zip(batched_grad_slices(net, v), reference_grads(ref), strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
        # The zero-padded input rows of the first weight get no gradient, so Adam leaves them at zero.
        assert torch.all(net.blocks[0].linear.weight.grad[v, VIEW_DIMS[v] :] == 0)
        assert torch.all(net.blocks[0].linear.weight[v, VIEW_DIMS[v] :] == 0)
    for (v, k), ref_critic in ref_critics.items():
        grouped_first = critics[f"k{k}"].net[0].linear.weight.grad[v].T
        torch.testing.assert_close(grouped_first, ref_critic.net[0][0].weight.grad, rtol=1e-9, atol=1e-12)

    # Running statistics (what eval mode uses) moved per view exactly as the per-view BatchNorms did.
    for v, ref in enumerate(refs):
        width = WIDTHS[0]
        channels = slice(v * width, (v + 1) * width)
        for stat in ("running_mean", "running_var"):
            expected = getattr(ref.blocks[0][1], stat)
            torch.testing.assert_close(getattr(net.blocks[0].norm.bn, stat)[channels], expected, rtol=1e-9, atol=1e-12)
    net.eval()
    for ref in refs:
        ref.eval()
    evaluated = net(xs, sample=False)
    for v, (ref, x) in enumerate(zip(refs, xs)):
        torch.testing.assert_close(
            evaluated.probs[v], ref(net.transformed(v, x), sample=False)["probs"], rtol=1e-9, atol=1e-12
        )


def test_first_layer_initialisation_follows_each_views_own_fan_in():
    torch.manual_seed(0)
    layer = GroupedLinear(2, 400, 3, fan_in=(4, 400))
    assert float(layer.weight[0, :4].abs().max()) <= 0.5 and float(layer.weight[0, :4].abs().max()) > 0.25
    assert float(layer.weight[1].abs().max()) <= 0.05 and torch.all(layer.weight[0, 4:] == 0)
