"""The sequence task: a synthetic language, its anchor LM, an oracle reward, preference pairs.

Prompts are single tokens ``<x0> .. <x{K-1}>``; responses are exactly ``L`` symbols from
``a, b, c, ...``. With ``V ** L`` responses per prompt (4096 at the default) every distribution
is enumerated exactly, so win rates and objectives are computed, not estimated.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from models.common.arrays import save_npz  # noqa: F401 (re-exported for tests and pipeline)
from models.common.tiny_lm import TinyLM, Tokenizer, generate

from .config import DataConfig


def make_tokenizer(cfg: DataConfig) -> Tokenizer:
    symbols = [chr(ord("a") + i) for i in range(cfg.n_symbols)]
    prompts = [f"<x{k}>" for k in range(cfg.n_prompts)]
    return Tokenizer.build(symbols + prompts)


def symbol_ids(tok: Tokenizer, n_symbols: int) -> list[int]:
    return [tok.id(chr(ord("a") + i)) for i in range(n_symbols)]


def prompt_ids(tok: Tokenizer, n_prompts: int) -> list[int]:
    return [tok.id(f"<x{k}>") for k in range(n_prompts)]


def all_responses(n_symbols: int, length: int) -> np.ndarray:
    """Every response as symbol indices, (V**L, L), in lexicographic order (index = base-V number)."""
    grid = np.indices((n_symbols,) * length).reshape(length, -1).T
    return np.ascontiguousarray(grid, dtype=np.int64)


def response_index(responses: np.ndarray, n_symbols: int) -> np.ndarray:
    """Inverse of ``all_responses``: (..., L) symbol indices -> position in the enumeration."""
    powers = n_symbols ** np.arange(responses.shape[-1] - 1, -1, -1)
    return (np.asarray(responses) * powers).sum(-1)


# ----------------------------------------------------------------------------- hidden language and oracle


def hidden_language(cfg: DataConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, an initial distribution (K, V) and a transition matrix (K, V, V) with Dirichlet rows."""
    alpha = np.full(cfg.n_symbols, cfg.concentration)
    start = rng.dirichlet(alpha, size=cfg.n_prompts)
    trans = rng.dirichlet(alpha, size=(cfg.n_prompts, cfg.n_symbols))
    return start, trans


def categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``probs`` (n, m), by inverting the row's CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(1), probs.shape[1] - 1)


def sample_corpus(
    start: np.ndarray, trans: np.ndarray, n: int, length: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, sentence) draws from the hidden language."""
    K = start.shape[0]
    prompts = rng.integers(0, K, size=n)
    seqs = np.zeros((n, length), dtype=np.int64)
    seqs[:, 0] = categorical(start[prompts], rng)
    for t in range(1, length):
        seqs[:, t] = categorical(trans[prompts, seqs[:, t - 1]], rng)
    return prompts, seqs


def oracle_preferences(cfg: DataConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per prompt: two liked symbols and a liked bigram (drawn once, then fixed and versioned)."""
    liked = np.stack([rng.choice(cfg.n_symbols, size=2, replace=False) for _ in range(cfg.n_prompts)])
    bigram = np.stack([rng.choice(cfg.n_symbols, size=2, replace=False) for _ in range(cfg.n_prompts)])
    return {"liked": liked, "bigram": bigram}


def oracle_reward(cfg: DataConfig, prefs: dict[str, np.ndarray], responses: np.ndarray) -> np.ndarray:
    """r(x, y) for every prompt and response, (K, n): pattern counts with diminishing returns.

    ``liked_weight sqrt(#liked symbols) + bigram_bonus [liked bigram occurs] - run_penalty (longest run - 1)``
    """
    K, L = cfg.n_prompts, responses.shape[1]
    rewards = np.zeros((K, len(responses)))
    runs = np.ones(len(responses))
    current = np.ones(len(responses))
    for t in range(1, L):
        current = np.where(responses[:, t] == responses[:, t - 1], current + 1, 1)
        runs = np.maximum(runs, current)
    for k in range(K):
        n_liked = np.isin(responses, prefs["liked"][k]).sum(1)
        a, b = prefs["bigram"][k]
        has_bigram = (
            ((responses[:, :-1] == a) & (responses[:, 1:] == b)).any(1) if L > 1 else np.zeros(len(responses), bool)
        )
        rewards[k] = cfg.liked_weight * np.sqrt(n_liked) + cfg.bigram_bonus * has_bigram - cfg.run_penalty * (runs - 1)
    return rewards


# ----------------------------------------------------------------------------- exact policy distributions


def exact_logprobs(model: TinyLM, tok: Tokenizer, cfg: DataConfig, batch: int = 4096) -> torch.Tensor:
    """log pi(y | x) for every prompt and response, (K, V**L), restricted to the symbol tokens.

    One forward pass over the ``V**(L-1)`` longest prefixes per prompt gives the next-symbol
    distribution after every prefix (causal attention), so the cost is 1/V of scoring every response.
    Gradients flow when called with grad enabled.
    """
    V, L, K = cfg.n_symbols, cfg.response_length, cfg.n_prompts
    sym = torch.as_tensor(symbol_ids(tok, V))
    prefixes = torch.as_tensor(all_responses(V, L - 1)) if L > 1 else torch.zeros((1, 0), dtype=torch.long)
    responses = torch.as_tensor(all_responses(V, L))
    prefix_of = (
        responses[:, :-1] @ (V ** torch.arange(L - 2, -1, -1))
        if L > 1
        else torch.zeros(len(responses), dtype=torch.long)
    )
    out = []
    for _k, pid in enumerate(prompt_ids(tok, K)):
        ids = torch.cat([torch.full((len(prefixes), 1), pid), sym[prefixes]], 1)
        logp = torch.cat(
            [torch.log_softmax(model(ids[i : i + batch])[..., sym], -1) for i in range(0, len(ids), batch)]
        )
        # logp[prefix, t, v] = log p(y_{t+1} = v | x, prefix[:t]); pick each response's own path.
        steps = logp[prefix_of[:, None], torch.arange(L)[None, :], responses]
        out.append(steps.sum(1))
    return torch.stack(out)


def sample_responses(
    model: TinyLM, tok: Tokenizer, cfg: DataConfig, prompts: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Sample y ~ pi(. | x) for a batch of prompt indices: (n, L) symbol indices."""
    sym = symbol_ids(tok, cfg.n_symbols)
    ids = torch.as_tensor(prompt_ids(tok, cfg.n_prompts))[prompts][:, None]
    gen = generate(model, ids, cfg.response_length, sample=True, generator=generator, allowed_ids=sym)
    lookup = torch.full((len(tok),), -1, dtype=torch.long)
    lookup[torch.as_tensor(sym)] = torch.arange(len(sym))
    return lookup[gen.tokens]


def token_ids(tok: Tokenizer, cfg: DataConfig, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """(n,) prompt indices and (n, L) symbol indices -> (n, 1 + L) token ids."""
    sym = torch.as_tensor(symbol_ids(tok, cfg.n_symbols))
    pid = torch.as_tensor(prompt_ids(tok, cfg.n_prompts))
    return torch.cat([pid[prompts][:, None], sym[responses]], 1)


# ----------------------------------------------------------------------------- preference pairs


def sample_pairs(
    log_q: np.ndarray, rewards: np.ndarray, n: int, rng: np.random.Generator, responses: np.ndarray
) -> dict[str, np.ndarray]:
    """x uniform, y, y' ~ q(. | x) i.i.d., label ~ Bernoulli(sigma(r(y) - r(y'))): (prompt, chosen, rejected)."""
    K = log_q.shape[0]
    q = np.exp(log_q - log_q.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    prompts = rng.integers(0, K, size=n)
    cdf = np.cumsum(q, 1)
    first = np.minimum([np.searchsorted(cdf[k], u) for k, u in zip(prompts, rng.random(n))], q.shape[1] - 1)
    second = np.minimum([np.searchsorted(cdf[k], u) for k, u in zip(prompts, rng.random(n))], q.shape[1] - 1)
    p_first = 1.0 / (1.0 + np.exp(-(rewards[prompts, first] - rewards[prompts, second])))
    first_wins = rng.random(n) < p_first
    chosen = np.where(first_wins, first, second)
    rejected = np.where(first_wins, second, first)
    return {"prompt": prompts, "chosen": responses[chosen], "rejected": responses[rejected]}


def load_pairs_jsonl(path: Path, tok: Tokenizer, cfg: DataConfig) -> dict[str, np.ndarray]:
    """Pairwise preference records in JSONL: ``{"prompt", "chosen", "rejected"}``, or HH-RLHF style
    ``{"chosen": transcript, "rejected": transcript}`` whose shared prefix is the prompt.

    Texts are tokenised with the anchor's tokeniser; the prompt must be one prompt token and each
    response exactly ``response_length`` symbols (the synthetic task's shape).
    """
    prompts, chosen, rejected = [], [], []
    sym = {t: i for i, t in enumerate(chr(ord("a") + i) for i in range(cfg.n_symbols))}
    pid = {f"<x{k}>": k for k in range(cfg.n_prompts)}
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if "prompt" in rec:
            prompt, good, bad = rec["prompt"], rec["chosen"], rec["rejected"]
        else:  # HH-RLHF: full transcripts sharing the dialogue up to the last "Assistant:"
            a, b = rec["chosen"], rec["rejected"]
            n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            cut = a.rfind("Assistant:", 0, n + 1)
            if cut >= 0:  # the prompt is the last human turn; the responses follow "Assistant:"
                human = a.rfind("Human:", 0, cut)
                prompt = a[human + len("Human:") if human >= 0 else 0 : cut]
                n = cut + len("Assistant:")
            else:
                prompt = a[:n]
            good, bad = a[n:], b[n:]
        prompt = prompt.strip()
        if prompt not in pid:
            raise ValueError(f"{path}:{line_no}: prompt {prompt!r} is not one of {sorted(pid)}")
        pair = []
        for text in (good.strip(), bad.strip()):
            pieces = [tok.tokens[i] for i in tok.encode(text)]
            if len(pieces) != cfg.response_length or any(p not in sym for p in pieces):
                raise ValueError(f"{path}:{line_no}: response {text!r} is not {cfg.response_length} symbols")
            pair.append([sym[p] for p in pieces])
        prompts.append(pid[prompt])
        chosen.append(pair[0])
        rejected.append(pair[1])
    if not prompts:
        raise ValueError(f"{path}: no records")
    return {"prompt": np.array(prompts), "chosen": np.array(chosen), "rejected": np.array(rejected)}


def bt_loglik_optimum(rewards: np.ndarray, pairs: dict[str, np.ndarray], n_symbols: int) -> float:
    """Mean -log sigma(r(y_w) - r(y_l)): the DPO loss of the population optimum on these pairs."""
    k = pairs["prompt"]
    margin = (
        rewards[k, response_index(pairs["chosen"], n_symbols)]
        - rewards[k, response_index(pairs["rejected"], n_symbols)]
    )
    return float(np.mean(np.logaddexp(0.0, -margin)))


def summarize(rewards: np.ndarray, log_q: np.ndarray) -> dict[str, float]:
    q = np.exp(log_q)
    return {
        "reward_mean_under_q": float(np.mean(np.sum(q * rewards, 1))),
        "reward_max": float(rewards.max()),
        "anchor_entropy_nats": float(np.mean(-np.sum(q * log_q, 1))),
        "anchor_mass": float(np.mean(q.sum(1))),
        "log_responses": float(math.log(rewards.shape[1])),
    }
