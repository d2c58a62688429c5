"""The sequence task: an anchor language, an oracle reward, preference pairs (all synthetic, from the seed).

Prompts are ``x in {0..K-1}``; responses ``y`` are ``L`` symbols of ``V`` (``V ** L`` ~ 1e9 per prompt at
the default: too many to enumerate, so every win rate below is a Monte-Carlo estimate). The anchor
q(y | x) is a first-order Markov chain per prompt. The oracle reward is additive over positions,
``r(x, y) = sum_t phi[x, t, y_{t-1}, y_t]`` (at t = 0 the "previous symbol" slot 0 is a dummy), so its
KL-regularised optima are Markov chains too (``algorithm.tilted_chain``). Preference labels are
Bradley-Terry: ``p(y > y' | x) = sigma(r(x, y) - r(x, y'))``.

Tables use one layout everywhere: ``(K, L, V_prev, V)``; a chain's log-probabilities ``log p(y_t | x, y_{t-1})``
and a reward's per-step terms share it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from models.common.arrays import save_npz  # noqa: F401 (re-exported for the pipeline and tests)

from .config import DataConfig


def symbols(n_symbols: int) -> str:
    return "".join(chr(ord("a") + i) for i in range(n_symbols))


def anchor_table(cfg: DataConfig, rng: np.random.Generator) -> np.ndarray:
    """log q(y_t | x, y_{t-1}) as a (K, L, V, V) table: Dirichlet start and transition rows per prompt."""
    alpha = np.full(cfg.n_symbols, cfg.concentration)
    start = rng.dirichlet(alpha, size=cfg.n_prompts)  # (K, V)
    trans = rng.dirichlet(alpha, size=(cfg.n_prompts, cfg.n_symbols))  # (K, V, V)
    table = np.repeat(np.log(trans)[:, None], cfg.response_length, axis=1)
    table[:, 0] = np.log(start)[:, None, :]  # t = 0 ignores the dummy previous symbol
    return table


def oracle_preferences(cfg: DataConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per prompt: two liked symbols and a liked bigram (drawn once, then fixed and versioned)."""
    liked = np.stack([rng.choice(cfg.n_symbols, size=2, replace=False) for _ in range(cfg.n_prompts)])
    bigram = np.stack([rng.choice(cfg.n_symbols, size=2, replace=False) for _ in range(cfg.n_prompts)])
    return {"liked": liked, "bigram": bigram}


def reward_table(cfg: DataConfig, prefs: dict[str, np.ndarray]) -> np.ndarray:
    """phi[x, t, prev, v]: liked_weight [v liked] + (t >= 1)(bigram_bonus [(prev, v) liked] - run_penalty [prev = v])."""
    K, L, V = cfg.n_prompts, cfg.response_length, cfg.n_symbols
    unigram = np.zeros((K, V))
    pair = np.zeros((K, V, V)) - cfg.run_penalty * np.eye(V)
    for k in range(K):
        unigram[k, prefs["liked"][k]] = cfg.liked_weight
        a, b = prefs["bigram"][k]
        pair[k, a, b] += cfg.bigram_bonus
    table = unigram[:, None, None, :] + np.repeat(pair[:, None], L, axis=1)
    table[:, 0] = unigram[:, None, :]
    return table


# ----------------------------------------------------------------------------- scoring and sampling


def previous_symbols(responses: torch.Tensor) -> torch.Tensor:
    """(..., L) responses -> (..., L) previous symbols (the dummy slot 0 at t = 0)."""
    return torch.cat([torch.zeros_like(responses[..., :1]), responses[..., :-1]], -1)


def score(table: torch.Tensor, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """sum_t table[x, t, y_{t-1}, y_t] for (n,) prompts and (n, L) responses; ``table`` is (K, L, V, V)."""
    L = responses.shape[-1]
    steps = torch.arange(L).expand_as(responses)
    return table[prompts[:, None], steps, previous_symbols(responses), responses].sum(-1)


def score_rows(table: torch.Tensor, rows: torch.Tensor, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """As ``score`` with one (K, L, V, V) table per row of a (R, K, L, V, V) stack: row ``rows[i]`` scores item i."""
    L = responses.shape[-1]
    steps = torch.arange(L).expand_as(responses)
    return table[rows[:, None], prompts[:, None], steps, previous_symbols(responses), responses].sum(-1)


def sample_chain(
    log_table: torch.Tensor, rows: torch.Tensor, prompts: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """One response per item from the chain of row ``rows[i]`` of a (R, K, L, V, V) log-probability stack."""
    n, L = len(prompts), log_table.shape[2]
    out = torch.zeros((n, L), dtype=torch.long)
    prev = torch.zeros(n, dtype=torch.long)
    for t in range(L):
        probs = log_table[rows, prompts, t, prev].exp()
        prev = torch.multinomial(probs, 1, generator=generator)[:, 0]
        out[:, t] = prev
    return out


# ----------------------------------------------------------------------------- preference pairs


def sample_pairs(log_q: np.ndarray, reward: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x uniform, y, y' ~ q(. | x) i.i.d., label ~ Bernoulli(sigma(r(y) - r(y'))): (prompt, chosen, rejected)."""
    K, L = log_q.shape[:2]
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    table = torch.as_tensor(log_q)[None]
    prompts = torch.as_tensor(rng.integers(0, K, size=n))
    rows = torch.zeros(n, dtype=torch.long)
    first, second = (sample_chain(table, rows, prompts, generator) for _ in range(2))
    r = torch.as_tensor(reward)
    p_first = torch.sigmoid(score(r, prompts, first) - score(r, prompts, second)).numpy()
    first_wins = torch.as_tensor(rng.random(n) < p_first)[:, None]
    chosen = torch.where(first_wins, first, second)
    rejected = torch.where(first_wins, second, first)
    return {"prompt": prompts.numpy(), "chosen": chosen.numpy(), "rejected": rejected.numpy()}


def load_pairs_jsonl(path: Path, cfg: DataConfig) -> dict[str, np.ndarray]:
    """Pairwise preference records in JSONL: ``{"prompt", "chosen", "rejected"}``, or HH-RLHF style
    ``{"chosen": transcript, "rejected": transcript}`` whose shared dialogue up to the last
    ``Assistant:`` is the prompt (its last human turn is kept).

    Only the synthetic task's shape is accepted: the prompt ``<xk>`` and responses of exactly
    ``response_length`` symbols from ``a, b, ...`` (whitespace ignored).
    """
    alphabet = {c: i for i, c in enumerate(symbols(cfg.n_symbols))}
    prompt_ids = {f"<x{k}>": k for k in range(cfg.n_prompts)}
    prompts, chosen, rejected = [], [], []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "prompt" in record:
            prompt, good, bad = record["prompt"], record["chosen"], record["rejected"]
        else:
            prompt, good, bad = split_transcripts(record["chosen"], record["rejected"])
        prompt = prompt.strip()
        if prompt not in prompt_ids:
            raise ValueError(f"{path}:{line_no}: prompt {prompt!r} is not one of {sorted(prompt_ids)}")
        pair = []
        for text in (good, bad):
            letters = "".join(text.split())
            if len(letters) != cfg.response_length or any(c not in alphabet for c in letters):
                raise ValueError(
                    f"{path}:{line_no}: response {text!r} is not {cfg.response_length} symbols of {symbols(cfg.n_symbols)!r}"
                )
            pair.append([alphabet[c] for c in letters])
        prompts.append(prompt_ids[prompt])
        chosen.append(pair[0])
        rejected.append(pair[1])
    if not prompts:
        raise ValueError(f"{path}: no records")
    return {"prompt": np.array(prompts), "chosen": np.array(chosen), "rejected": np.array(rejected)}


def split_transcripts(a: str, b: str) -> tuple[str, str, str]:
    """HH-RLHF: two transcripts sharing a dialogue -> (last human turn, chosen reply, rejected reply)."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    cut = a.rfind("Assistant:", 0, n + 1)
    if cut < 0:
        return a[:n], a[n:], b[n:]
    human = a.rfind("Human:", 0, cut)
    start = cut + len("Assistant:")
    return a[human + len("Human:") if human >= 0 else 0 : cut], a[start:], b[start:]
