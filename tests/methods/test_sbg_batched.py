"""SBG: the paired sampling seeds run as one batched SMC (issue 36 item 1) and each equals its seed run alone.

Tolerance: float64 particles and energies; the batched energy calls see a larger batch (other matmul blocking,
other summation order), so samples, weights and energies agree to 1e-9 (absolute), not bit for bit. The
resampling draws, the number of resamplings and the distinct lineages are integers and must agree exactly.
"""

import os

import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.sbg import algorithm as alg  # noqa: E402
from models.sbg.networks import TarFlow  # noqa: E402

TOL = 1e-9


def _flow_energy(seed: int = 0):
    """E(x) = -log q(x) of a random (non-identity) float64 TarFlow, with its autograd gradient."""
    torch.manual_seed(seed)
    flow = TarFlow(4, width=16, blocks=2, layers_per_block=1, head_dim=8, channels=3).double()
    with torch.no_grad():
        for p in flow.parameters():
            p.add_(0.2 * torch.randn_like(p))

    def energy(x):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            e = -flow.log_prob(x)
            (grad,) = torch.autograd.grad(e.sum(), x)
        return e.detach(), grad

    return energy


def _target(x):  # a Gaussian well off the source's centre: weights degenerate, SMC must resample
    return ((x - 0.7) ** 2).flatten(1).sum(1) / (2 * 0.6**2), (x - 0.7) / 0.6**2


@pytest.mark.numerics
@pytest.mark.parametrize("metropolis", [False, True])
def test_batched_smc_equals_each_seed_alone(metropolis):
    source = _flow_energy()
    sizes = (37, 50, 23)  # seeds keep different numbers of filtered proposals
    xs = [
        torch.randn(n, 4, 3, generator=torch.Generator().manual_seed(100 + s), dtype=torch.float64)
        for s, n in enumerate(sizes)
    ]
    kwargs = dict(steps=12, eps=0.4, ess_threshold=0.7, metropolis=metropolis)
    batched = alg.smc_batched(
        xs, source, _target, generators=[torch.Generator().manual_seed(s) for s in range(3)], **kwargs
    )
    for s, x in enumerate(xs):
        alone = alg.smc(x, source, _target, generator=torch.Generator().manual_seed(s), **kwargs)
        together = batched[s]
        assert together.samples.shape == alone.samples.shape
        torch.testing.assert_close(together.samples, alone.samples, atol=TOL, rtol=0)
        torch.testing.assert_close(together.energies, alone.energies, atol=TOL, rtol=0)
        assert together.n_resampling == alone.n_resampling and together.n_resampling > 0  # resampled mid-anneal
        assert together.unique_fraction == alone.unique_fraction
        assert together.ess_final == pytest.approx(alone.ess_final, abs=TOL)
        assert together.acceptance == pytest.approx(alone.acceptance, abs=TOL)
        assert together.trace["ess"] == pytest.approx(alone.trace["ess"], abs=TOL)
    # The seeds are not coupled: changing one seed's particles leaves another's result unchanged.
    moved = alg.smc_batched(
        [xs[0] + 0.3, xs[1], xs[2]],
        source,
        _target,
        generators=[torch.Generator().manual_seed(s) for s in range(3)],
        **kwargs,
    )
    torch.testing.assert_close(moved[1].samples, batched[1].samples, atol=TOL, rtol=0)
    assert not torch.allclose(moved[0].samples, batched[0].samples)


def test_batched_smc_refuses_mismatched_generators():
    x = torch.zeros(4, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="generators"):
        alg.smc_batched(
            [x, x],
            _target,
            _target,
            steps=2,
            eps=0.1,
            ess_threshold=0.5,
            metropolis=False,
            generators=[torch.Generator()],
        )
