"""Win-rate maths: closed forms on a tabular bandit, and exact population objectives and optima.

Notation (per prompt x, responses y enumerated): anchor q(y), preference P[y, y'] = p(y > y'),
w(y) = sum_y' q(y') P[y, y'] (the win rate of the fixed response y against q).

    WR(pi; q)      = sum_y pi(y) w(y)                (E_{y~pi, y'~q} p(y > y'))
    SFT optimum    = 2 q w            ->  WR = 2 E_q[w^2]      (the winner of a random pair)
    RLHF/DPO opt.  = q e^{r/beta} / Z                           (KL-regularised BT reward)
    WRO optimum    = argmax_y w       ->  WR = max_y w
    h-WRO value    v_h(y) = sum_y' q(y') h(P[y, y'])            (h = identity, log, logit)

The tabular part is float64 numpy/torch over the last axis (responses). The sequence task's responses
are too many to enumerate; its chains and optima are computed by dynamic programming over positions.
"""

from __future__ import annotations

import numpy as np
import torch

H_FUNCTIONS = {
    "id": lambda p: p,
    "log": lambda p: np.log(p),
    "logit": lambda p: np.log(p) - np.log1p(-p),
}


def sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64)))


def bt_matrix(r: np.ndarray) -> np.ndarray:
    """Bradley-Terry preferences P[y, y'] = sigma(r_y - r_y') (last two axes)."""
    return sigmoid(r[..., :, None] - r[..., None, :])


def win_against(P: np.ndarray, q: np.ndarray) -> np.ndarray:
    """w(y) = sum_y' P[y, y'] q(y')."""
    return np.einsum("...ij,...j->...i", P, q)


def win_rate(pi: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.sum(pi * w, axis=-1)


def sft_optimum(q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The distribution of the preferred sample of a pair: 2 q w (sums to 1 because E_q[w] = 1/2)."""
    return 2.0 * q * w


def kl_optimum(q: np.ndarray, r: np.ndarray, beta: float) -> np.ndarray:
    """argmax_pi E_pi[r] - beta KL(pi || q) = q e^{r/beta} / Z (the RLHF and population-DPO optimum)."""
    logits = np.log(q) + r / beta
    logits = logits - logits.max(-1, keepdims=True)
    pi = np.exp(logits)
    return pi / pi.sum(-1, keepdims=True)


def h_values(P: np.ndarray, q: np.ndarray, h: str) -> np.ndarray:
    """v_h(y) = E_{y'~q} h(P[y, y']): the per-response value of the h-win-rate objective."""
    P = np.clip(P, 1e-12, 1 - 1e-12)
    return np.einsum("...ij,...j->...i", H_FUNCTIONS[h](P), q)


def nontransitive_matrix(r: np.ndarray, strength: float) -> np.ndarray:
    """sigma(r_y - r_y' + s C[y, y']) with C the cyclic tournament (y beats y+1): still P + P^T = 1."""
    n = len(r)
    C = np.zeros((n, n))
    for i in range(n):
        C[i, (i + 1) % n], C[(i + 1) % n, i] = 1.0, -1.0
    return sigmoid(r[:, None] - r[None, :] + strength * C)


def bt_fit(P: np.ndarray, q: np.ndarray, iterations: int = 50) -> np.ndarray:
    """Population Bradley-Terry fit by Newton's method (convex; r centred):
    argmin_r E_{y,y'~q}[-P log sigma(r_y - r_y') - (1-P) log sigma(r_y' - r_y)]."""
    W = q[:, None] * q[None, :]
    r = np.zeros(len(q))
    for _ in range(iterations):
        s = sigmoid(r[:, None] - r[None, :])
        G = W * (s - P)  # d loss / d (r_i - r_j)
        grad = G.sum(1) - G.sum(0)
        C = W * s * (1 - s)
        C = C + C.T
        hess = np.diag(C.sum(1)) - C + np.outer(q, q)  # the rank-one term fixes the free shift
        r = r - np.linalg.solve(hess, grad)
    return r - r.mean()


# ----------------------------------------------------------------------------- tabular training


def sample_pairs(P: np.ndarray, q: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """wins[y, y'] = how often y was preferred to y' in ``n`` pairs y, y' ~ q with BT labels."""
    y = rng.choice(len(q), size=n, p=q)
    y2 = rng.choice(len(q), size=n, p=q)
    first_wins = rng.random(n) < P[y, y2]
    winner, loser = np.where(first_wins, y, y2), np.where(first_wins, y2, y)
    wins = np.zeros((len(q), len(q)))
    np.add.at(wins, (winner, loser), 1.0)
    return wins


def train_tabular(
    sft_counts: np.ndarray,
    dpo_wins: np.ndarray,
    dpo_log_q: np.ndarray,
    dpo_betas: np.ndarray,
    wro_w: np.ndarray,
    steps: int,
    lr: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam on softmax logits with exact full-batch gradients, many bandits at once.

    Rows are independent problems: SFT (maximise E_{y_w}[log pi(y_w)] on the preferred samples'
    counts), DPO (minimise -E log sigma(beta [log pi/q (y_w) - log pi/q (y_l)]) on the pair
    counts) and exact-gradient WRO (maximise sum_y pi(y) w(y)). Adam acts elementwise, so
    summing the rows' losses trains each row exactly as if alone. Returns the three pi arrays.
    """
    n = sft_counts.shape[1]
    sft_target = torch.as_tensor(sft_counts / sft_counts.sum(1, keepdims=True))
    dpo_weights = torch.as_tensor(dpo_wins / dpo_wins.sum((1, 2), keepdims=True))
    log_q, betas, w = torch.as_tensor(dpo_log_q), torch.as_tensor(dpo_betas)[:, None, None], torch.as_tensor(wro_w)
    z_sft, z_dpo, z_wro = (
        torch.zeros(len(a), n, dtype=torch.float64, requires_grad=True) for a in (sft_target, log_q, w)
    )
    opt = torch.optim.Adam([z_sft, z_dpo, z_wro], lr=lr)
    for _ in range(steps):
        sft = -(sft_target * torch.log_softmax(z_sft, 1)).sum()
        u = torch.log_softmax(z_dpo, 1) - log_q
        dpo = (dpo_weights * torch.nn.functional.softplus(-betas * (u[:, :, None] - u[:, None, :]))).sum()
        wro = -(torch.softmax(z_wro, 1) * w).sum()
        opt.zero_grad()
        (sft + dpo + wro).backward()
        opt.step()
    return tuple(torch.softmax(z.detach(), 1).numpy() for z in (z_sft, z_dpo, z_wro))


def tabular_study(
    n: int, low: float, high: float, betas, n_pairs: int, steps: int, lr: float, strength: float, seed: int
) -> dict[str, float]:
    """Closed forms and trained values on the uniform and skewed (q ~ e^{-r}) bandits, plus a non-transitive P."""
    rng = np.random.default_rng(seed)
    r = np.linspace(low, high, n)
    P = bt_matrix(r)
    settings = {"uniform": np.full(n, 1.0 / n), "skewed": np.exp(-r) / np.exp(-r).sum()}
    out: dict[str, float] = {}
    wins = {name: sample_pairs(P, q, n_pairs, rng) for name, q in settings.items()}
    ws = {name: win_against(P, q) for name, q in settings.items()}
    names = list(settings)
    grid = [(name, beta) for name in names for beta in betas]
    pi_sft, pi_dpo, pi_wro = train_tabular(
        np.stack([wins[name].sum(1) for name in names]),
        np.stack([wins[name] for name, _ in grid]),
        np.stack([np.log(settings[name]) for name, _ in grid]),
        np.array([beta for _, beta in grid], dtype=np.float64),
        np.stack([ws[name] for name in names]),
        steps,
        lr,
    )
    for i, name in enumerate(names):
        q, w, p = settings[name], ws[name], f"{name}_"
        out[p + "anchor_wr"] = float(win_rate(q, w))
        out[p + "sft_closed_form"] = float(2 * np.sum(q * w * w))
        out[p + "sft_optimum_mass"] = float(sft_optimum(q, w).sum())
        out[p + "wro_optimum"] = float(w.max())
        out[p + "sft_trained"] = float(win_rate(pi_sft[i], w))
        out[p + "wro_trained"] = float(win_rate(pi_wro[i], w))
        for beta in betas:
            out[p + f"rlhf_optimum_b{beta:g}"] = float(win_rate(kl_optimum(q, r, beta), w))
            out[p + f"dpo_trained_b{beta:g}"] = float(win_rate(pi_dpo[grid.index((name, beta))], w))
    # A non-transitive preference (deliberately: BT-based RLHF is then misspecified).
    q = np.full(n, 1.0 / n)
    Pn = nontransitive_matrix(r, strength)
    w = win_against(Pn, q)
    best = {h: int(np.argmax(h_values(Pn, q, h))) for h in H_FUNCTIONS}
    r_fit = bt_fit(Pn, q)
    out["nontransitive_wro_optimum"] = float(w.max())
    for h, y in best.items():
        out[f"nontransitive_h_{h}_argmax_wr"] = float(w[y])
    out["nontransitive_h_variants_disagree"] = float(len(set(best.values())) > 1)
    out["nontransitive_bt_rlhf_wr_b0.1"] = float(win_rate(kl_optimum(q, r_fit, 0.1), w))
    out["nontransitive_bt_argmax_wr"] = float(w[int(np.argmax(r_fit))])
    return out


# ----------------------------------------------------------------------------- Markov chains (the sequence task)
#
# A chain is a (..., L, V_prev, V) table of log p(y_t | y_{t-1}) (t = 0 reads the dummy previous slot 0); a
# reward additive over positions is a table of the same shape. Responses number V ** L, so nothing here
# enumerates them: dynamic programming over positions gives the optima exactly.


def tilted_chain(log_q: np.ndarray, phi: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """The KL-regularised optimum pi*(y) = q(y) e^{r(y)/beta} / Z for r(y) = sum_t phi[t, y_{t-1}, y_t].

    Backward recursion: M_t[a, b] = log q_t[a, b] + phi_t[a, b] / beta + V_{t+1}(b), V_t(a) = logsumexp_b M_t[a, b];
    pi*_t[a, b] = M_t[a, b] - V_t(a). Returns (log pi* table, log Z) with log Z = V_0(0)."""
    from scipy.special import logsumexp

    L = log_q.shape[-3]
    table = np.empty_like(log_q, dtype=np.float64)
    value = np.zeros(log_q.shape[:-3] + (log_q.shape[-1],))
    for t in range(L - 1, -1, -1):
        M = log_q[..., t, :, :] + phi[..., t, :, :] / beta + value[..., None, :]
        value = logsumexp(M, axis=-1)
        table[..., t, :, :] = M - value[..., :, None]
    return table, value[..., 0]


def kl_optimum_value(log_q: np.ndarray, phi: np.ndarray, beta: float) -> np.ndarray:
    """max_pi E_pi[r] - beta KL(pi || q) = beta log E_q e^{r/beta} (RLHF's objective at its optimum)."""
    return beta * tilted_chain(log_q, phi, beta)[1]


def best_response(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """argmax_y sum_t phi[t, y_{t-1}, y_t] by Viterbi, per leading index: (responses (..., L), max reward (...))."""
    L, V = phi.shape[-3], phi.shape[-1]
    lead = phi.shape[:-3]
    value = np.zeros(lead + (V,))
    choice = np.zeros(lead + (L, V), dtype=np.int64)
    for t in range(L - 1, -1, -1):
        M = phi[..., t, :, :] + value[..., None, :]
        choice[..., t, :] = M.argmax(-1)
        value = M.max(-1)
    y = np.zeros(lead + (L,), dtype=np.int64)
    prev = np.zeros(lead, dtype=np.int64)
    for t in range(L):
        prev = np.take_along_axis(choice[..., t, :], prev[..., None], -1)[..., 0]
        y[..., t] = prev
    return y, value[..., 0]


def chain_expectation(log_q: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """E_{y ~ q}[sum_t phi[t, y_{t-1}, y_t]] exactly, by forward marginals of the chain."""
    V = log_q.shape[-1]
    marginal = np.zeros(log_q.shape[:-3] + (V,))
    marginal[..., 0] = 1.0  # the dummy previous symbol at t = 0
    total = np.zeros(log_q.shape[:-3])
    for t in range(log_q.shape[-3]):
        joint = marginal[..., :, None] * np.exp(log_q[..., t, :, :])
        total = total + np.sum(joint * phi[..., t, :, :], axis=(-2, -1))
        marginal = joint.sum(-2)
    return total


def fraction_of_optimum(value: float, start: float, optimum: float) -> float:
    """How much of the way from the start to the objective's optimum a policy got."""
    span = optimum - start
    return float((value - start) / span) if abs(span) > 1e-12 else 1.0


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)
