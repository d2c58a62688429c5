"""Synthetic data of the kernel-SGD study: one stream of (x_t, y_t) per seed, for each regime.

The paper's experiments are synthetic (no dataset exists); both generators are seeded and written
by ``prepare`` into ``data/kernel_sgd_synthetic/stream.npz``.

* Circle S^1 (fixed d = 2): theta_t uniform on [0, 2 pi), y_t = f*(theta_t) + noise * N(0, 1) for the
  top eigenfunction and the power-law targets of ``algorithm.target_coefficients``.
* Sphere S^{d-1} (high dimension): x_t uniform on the sphere (normalised Gaussians), y_t = f*(x_t) +
  noise * N(0, 1), f* = sum_k c_k sqrt(N(d, k)) P_k(<x, v_k>) with c_k = mu_k^(s/2) (every degree on the
  edge of the [H]^s ball) and one random direction v_k per degree and seed; the sample sizes are
  n = round(d^gamma) on a gamma grid.

Within a regime every target of a seed shares its inputs and noise draws (common random numbers).
"""

from __future__ import annotations

import numpy as np
import torch

from . import algorithm as alg
from .config import Config, SphereDataConfig

CLAIM_TARGET = "top"  # the circle's claim target: f* = sqrt(2) cos(theta)


def circle_targets(cfg: Config) -> list[dict]:
    """The claim target first, then the power-law targets: name, source s (None = every s), seeds, noise."""
    d = cfg.data
    out = [{"name": CLAIM_TARGET, "source": None, "seeds": d.top_seeds, "noise": d.top_noise}]
    out += [{"name": f"s{s:g}", "source": s, "seeds": d.source_seeds, "noise": d.source_noise} for s in d.sources]
    return out


def sphere_target_name(source: float) -> str:
    return f"sphere_s{source:g}"


def sphere_sample_sizes(sphere: SphereDataConfig) -> list[int]:
    """n = round(d^gamma) for gamma = gamma_min, gamma_min + step, ..., gamma_max (duplicates dropped)."""
    count = int(round((sphere.gamma_max - sphere.gamma_min) / sphere.gamma_step)) + 1
    gammas = sphere.gamma_min + sphere.gamma_step * np.arange(count)
    return sorted({int(round(sphere.dim**g)) for g in gammas})


def uniform_sphere(rng: np.random.Generator, shape: tuple[int, ...], dim: int) -> np.ndarray:
    """Points uniform on S^{d-1}: normalised standard Gaussians."""
    g = rng.standard_normal((*shape, dim))
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


def circle_arrays(cfg: Config) -> tuple[dict[str, np.ndarray], list[dict]]:
    """The circle streams (``theta``, ``y_<target>``, ``coef_<target>``, ...) and the target list."""
    d = cfg.data
    rng = np.random.default_rng(cfg.seed)
    targets = circle_targets(cfg)
    n_max, seeds = 2**d.log2_n_max, max(t["seeds"] for t in targets)
    theta = rng.uniform(0.0, 2.0 * np.pi, size=(seeds, n_max))
    noise = rng.standard_normal((seeds, n_max))
    theta_test = rng.uniform(0.0, 2.0 * np.pi, size=d.test_points)
    arrays = {"theta": theta, "theta_test": theta_test, "eigenvalues": alg.eigenvalues(d.harmonics, d.beta)}
    for t in targets:
        coef = alg.target_coefficients(t["source"], d.harmonics, d.beta)
        s = t["seeds"]
        arrays[f"coef_{t['name']}"] = coef
        arrays[f"y_{t['name']}"] = alg.target_function(theta[:s], coef) + t["noise"] * noise[:s]
        t["tail_energy"] = alg.tail_energy(t["source"], d.harmonics, d.beta)
    return arrays, targets


def sphere_arrays(cfg: Config) -> tuple[dict[str, np.ndarray], dict]:
    """The sphere streams (keys ``sphere_*``) and their description for the manifest.

    Drawn from an RNG of its own (seed sequence [seed, 1]) so the circle streams stay those of the seed."""
    sp = cfg.data.sphere
    rng = np.random.default_rng([cfg.seed, 1])
    ns = sphere_sample_sizes(sp)
    mu = alg.sphere_eigenvalues(sp.dim, sp.degree)
    x = uniform_sphere(rng, (sp.seeds, ns[-1]), sp.dim)
    noise = rng.standard_normal((sp.seeds, ns[-1]))
    directions = uniform_sphere(rng, (sp.seeds, sp.degree + 1), sp.dim)
    x_test = uniform_sphere(rng, (sp.test_points,), sp.dim)
    arrays = {"sphere_x": x, "sphere_x_test": x_test, "sphere_directions": directions, "sphere_eigenvalues": mu}
    targets = []
    for source in sp.sources:
        name = sphere_target_name(source)
        amplitude = alg.source_amplitudes(source, mu)
        clean = np.stack(
            [
                alg.zonal_target(
                    torch.from_numpy(x[s]), torch.from_numpy(directions[s]), torch.from_numpy(amplitude), sp.dim
                ).numpy()
                for s in range(sp.seeds)
            ]
        )
        arrays[f"{name}_amplitude"] = amplitude
        arrays[f"{name}_y"] = clean + sp.noise * noise
        targets.append({"name": name, "source": source, "norm_sq": float((amplitude**2).sum())})
    meta = {
        "dim": sp.dim,
        "degree": sp.degree,
        "n": ns,
        "gamma": [float(np.log(n) / np.log(sp.dim)) for n in ns],
        "seeds": sp.seeds,
        "noise": sp.noise,
        "targets": targets,
        "claim_target": sphere_target_name(sp.claim_source),
        "kernel_diagonal": alg.sphere_kernel_diagonal(mu, sp.dim),
    }
    return arrays, meta


def provenance(cfg: Config) -> str:
    """One line naming both generators and their parameters."""
    d, sp = cfg.data, cfg.data.sphere
    return (
        f"synthetic, generated from seed {cfg.seed} by models.kernel_sgd.data: circle S^1 (uniform theta, kernel "
        f"eigenvalues k^-{d.beta:g} truncated at K = {d.harmonics}, n up to 2^{d.log2_n_max}); sphere S^{sp.dim - 1} "
        f"in d = {sp.dim} (uniform x, kernel eigenvalues d^-k up to degree {sp.degree}, n = d^gamma for gamma in "
        f"[{sp.gamma_min:g}, {sp.gamma_max:g}], zonal targets of source s in {list(sp.sources)}, noise {sp.noise:g})"
    )
