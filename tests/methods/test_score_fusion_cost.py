"""score_fusion's cost savings change no number beyond float rounding: the shared 2-D epsilon cache returns
exactly what the 2-D models compute (the same kernels run, so bit for bit), fits that share it end on the same
weights as fits that do not, the per-epoch training means equal Lightning's ``on_epoch`` means, and the
multi-tensor Adam and the channels-last layout match the loop and the default layout to float32 rounding (other
kernels, another summation order: bit-identity there holds on some hosts only)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from models.common.diffusion import DDPMSchedule, linear_betas
from models.common.runtime import set_threads
from models.score_fusion.config import Config, NetConfig, SliceNetConfig
from models.score_fusion.data import make_phantoms, pool_upsample
from models.score_fusion.networks import ScoreFusion, SliceModel, eps_net, make_cond
from models.score_fusion.pipeline import FUSION_ARMS, fit_fusion, schedule_of
from models.score_fusion.training import EpochMeans, EpsCache, SliceDiffusion

set_threads()

SLICE = SliceNetConfig(width=8, layers=3, time_dim=8)
FUSION = NetConfig(width=8, layers=3, time_dim=8)


def perturbed(module: torch.nn.Module, scale: float = 0.3) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module


def test_eps_cache_returns_the_2d_models_output_once_per_distinct_input():
    torch.manual_seed(0)
    model = ScoreFusion(SLICE, FUSION)
    for sm in model.slices:
        perturbed(sm)
    lr = torch.from_numpy(pool_upsample(np.random.default_rng(0).uniform(-1, 1, (2, 4, 6, 8)).astype(np.float32), 2))
    x_t, cond, t = torch.randn(2, 1, 4, 6, 8), make_cond(lr), torch.tensor([3, 70])
    cache = EpsCache()
    with torch.no_grad():
        expected = model.eps_2d(x_t, cond, t)
        first = cache(model, x_t, cond, t)
        again = cache(model, x_t.clone(), cond.clone(), t.clone())  # same content, other tensors: a hit
        assert torch.equal(first, expected) and again is first
        assert (cache.hits, cache.misses) == (1, 1)
        for other in ((x_t + 1e-3, cond, t), (x_t, cond, torch.tensor([3, 71])), (x_t, cond * 0.5, t)):
            assert torch.equal(cache(model, *other), model.eps_2d(*other))  # any change of input: computed
        assert (cache.hits, cache.misses) == (1, 4) and len(cache.entries) == 4
        assert cache.bytes == 4 * expected.nelement() * expected.element_size()
        full = EpsCache(max_bytes=0)  # over the bound: computed, never kept
        assert torch.equal(full(model, x_t, cond, t), expected) and not full.entries
        assert full(model, x_t, cond, t) is not None and full.misses == 2


def test_fusion_fits_sharing_the_cache_end_on_the_same_weights_and_curves():
    """Both arms at two learning rates on one set of 2-D models (the seed-0 selection), with and without
    the cache: identical validation scores, best epochs, learning curves and weights; the later fits hit."""
    cfg = Config.for_scale("smoke", {"data.source": "synthetic", "fusion_train.steps": 8})
    arrays = {k: torch.from_numpy(v) for k, v in make_phantoms(cfg.data, 0).items()}
    schedule = schedule_of(cfg)
    torch.manual_seed(1)
    slices = [perturbed(SliceModel(axis, cfg.slice_net), 0.1).eval() for axis in range(3)]
    cache = EpsCache()
    for i, (arm, lr) in enumerate((arm, lr) for arm in FUSION_ARMS for lr in cfg.fusion_train.lr_grid):
        plain_score, plain = fit_fusion(cfg, arrays, schedule, slices, arm, lr, cfg.seed)
        hits = cache.hits
        cached_score, cached = fit_fusion(cfg, arrays, schedule, slices, arm, lr, cfg.seed, cache)
        assert cached_score == plain_score and cached.best.best_epoch == plain.best.best_epoch
        assert cached.records == plain.records
        for key, value in plain.net.state_dict().items():
            assert torch.equal(cached.net.state_dict()[key], value), (arm, lr, key)
        if i:  # the first fit filled the cache; every later one finds its training and validation inputs
            assert cache.hits - hits >= cfg.fusion_train.steps
    assert cache.misses < cache.hits


def test_epoch_means_equal_lightnings_batch_weighted_epoch_mean():
    module = EpochMeans()
    logged = {}
    module.log_dict = lambda values, **kwargs: logged.update(values)
    module.on_train_epoch_start()
    for value, n in ((1.0, 2), (4.0, 1), (0.5, 3)):
        module.log_train({"loss": torch.tensor(value), "eps_mse": torch.tensor(2 * value)}, n)
    module.on_train_epoch_end()
    mean = (1.0 * 2 + 4.0 + 0.5 * 3) / 6
    assert float(logged["train/loss"]) == pytest.approx(mean, abs=1e-7)
    assert float(logged["train/eps_mse"]) == pytest.approx(2 * mean, abs=1e-7)
    module.on_train_epoch_start()  # a new epoch starts from zero
    logged.clear()
    module.on_train_epoch_end()
    assert not logged


@pytest.mark.numerics
def test_multi_tensor_adam_takes_the_same_steps_as_the_loop():
    torch.manual_seed(2)
    model = SliceModel(0, SLICE)
    module = SliceDiffusion(model, DDPMSchedule(linear_betas(100)), Config().slice_train, lr=3e-3)
    foreach = module.configure_optimizers()
    assert foreach.defaults["foreach"] is True
    twin = copy.deepcopy(model)
    loop = torch.optim.Adam(twin.parameters(), lr=3e-3, foreach=False)
    x, t = torch.randn(4, SliceModel.in_channels(SLICE.neighbours), 6, 6), torch.tensor([1, 20, 50, 99])
    for _ in range(5):
        for net, opt in ((model, foreach), (twin, loop)):
            opt.zero_grad()
            net.forward_slices(x, t).square().mean().backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.numerics
def test_channels_last_3d_layout_keeps_the_forward_pass_and_the_gradients():
    """The 3-D nets' channels-last activations (a speed-up on CPU): output and weight gradients equal up to
    float32 summation order (the layouts pick different convolution kernels); the 2-D nets keep the default
    layout."""
    torch.manual_seed(3)
    net = eps_net(3, ScoreFusion.FUSION_IN, 3, FUSION)
    perturbed(net, 0.1)
    assert net.layout == torch.channels_last_3d and eps_net(2, 4, 1, SLICE).layout == torch.contiguous_format
    plain = copy.deepcopy(net)
    plain.layout = torch.contiguous_format
    x, t = torch.randn(2, ScoreFusion.FUSION_IN, 8, 8, 8), torch.tensor([5, 60])
    outputs = []
    for model in (net, plain):
        y = model(x, t)
        y.square().mean().backward()
        outputs.append(y.detach())
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-4, atol=1e-5 * float(outputs[1].abs().max()))
    for (name, a), b in zip(net.named_parameters(), plain.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-5 * float(b.grad.abs().max())), name
