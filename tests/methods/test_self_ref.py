"""Core maths of self_ref: confidence tokens, loss masking, the confidence read-out, ECE, routing curves, data."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("PAPERLINE_PROGRESS", "0")

from models.base import ValidationError  # noqa: E402
from models.common.tiny_lm import EOS, LanguageModelling, LMConfig, TinyLM  # noqa: E402
from models.self_ref import SPEC  # noqa: E402
from models.self_ref import algorithm as A  # noqa: E402
from models.self_ref import pipeline as P  # noqa: E402
from models.self_ref.config import Config, DataConfig  # noqa: E402
from models.self_ref.data import (  # noqa: E402
    CONFIDENT,
    UNCONFIDENT,
    by_split,
    load_questions_jsonl,
    make_questions,
    make_tokenizer,
)
from models.self_ref.networks import EMBEDDING, merge_adapters, with_adapters  # noqa: E402
from models.self_ref.training import base_soft_targets  # noqa: E402

torch.set_num_threads(1)


def _base(seed=0) -> tuple[TinyLM, object]:
    tok = make_tokenizer()
    torch.manual_seed(seed)
    model = TinyLM(LMConfig(vocab_size=len(tok), n_positions=24, n_embd=16, n_layer=1, n_head=2))
    with torch.no_grad():
        model.wte.weight.mul_(20)
    return model.eval(), tok


def _answers(correct, text=None):
    correct = np.asarray(correct, bool)
    text = text or [str(i) for i in range(len(correct))]
    nan = np.full(len(correct), np.nan)
    return A.Answers(text, correct, nan, nan, nan, nan)


# ----------------------------------------------------------------------------- confidence tokens and masking


def test_confidence_tokens_are_single_new_tokens_at_the_mean_embedding():
    base, tok = _base()
    cfg = Config()
    model, tok2, params, masks = with_adapters(
        base, tok, (CONFIDENT, UNCONFIDENT), (CONFIDENT, UNCONFIDENT), cfg, seed=0
    )
    cn, un = tok2.id(CONFIDENT), tok2.id(UNCONFIDENT)
    assert (cn, un) == (len(tok), len(tok) + 1)
    assert tok2.encode("12+3=51" + CONFIDENT)[-1] == cn  # one token, not "<", "C", "N", ">"
    mean = base.wte.weight.mean(0)
    assert torch.allclose(model.wte.weight[cn], mean) and torch.allclose(model.wte.weight[un], mean)
    # Only the new rows move freely, and the fresh adapters leave the old tokens' logits unchanged.
    assert masks[EMBEDDING].sum(1).nonzero().flatten().tolist() == [cn, un]
    ids = torch.as_tensor([tok.encode("12+34=", bos=True)])
    assert torch.allclose(model(ids)[..., : len(tok)], base(ids), atol=1e-5)
    assert sum(p.numel() for p in params) < sum(p.numel() for p in model.parameters())


def test_un_answers_get_zero_loss_weight_and_un_is_subsampled():
    tok = make_tokenizer()
    records = [{"prompt": f"{i}+1=", "answer": str(i + 1), "group": "+1x1"} for i in range(9)]
    base = _answers([1, 1, 1, 1, 0, 0, 0, 0, 0], [str(i + 1)[::-1] if i < 4 else "7" for i in range(9)])
    cfg = Config(un_ratio=0.5, cn_answer_loss=True)  # the paper's recipe: <CN> answers are learned too
    recs, answers, suffixes, weights = A.selfref_data(tok, records, base, cfg, np.random.default_rng(0))
    default = A.selfref_data(tok, records, base, Config(un_ratio=0.5), np.random.default_rng(0))
    assert default[2] == suffixes and all(w == 0.0 for w in default[3])  # the default teaches the tokens only
    assert sum(s == [CONFIDENT] for s in suffixes) == 4 and sum(s == [UNCONFIDENT] for s in suffixes) == 2  # 0.5 x 4
    tok2 = tok.with_tokens((CONFIDENT, UNCONFIDENT))
    ids, w, answer_mask = A.lm_examples(tok2, recs, answers, suffixes, weights)
    for row, wrow, suffix in zip(ids, w, suffixes):
        n_prompt = len(tok2.encode(recs[0]["prompt"], bos=True))
        assert torch.all(wrow[:n_prompt] == 0)  # prompts are never targets
        conf_pos = (row == tok2.id(suffix[0])).nonzero().item()
        assert wrow[conf_pos] == 1
        answer_w = wrow[n_prompt:conf_pos]
        assert torch.all(answer_w == (1.0 if suffix == [CONFIDENT] else 0.0))
    assert torch.equal(answer_mask.sum(1), torch.tensor([float(len(a)) for a in answers]))
    # The masked loss of an <UN> sample is exactly -log P(<UN> | x, y_hat): the wrong answer is not learned.
    model = TinyLM(LMConfig(vocab_size=len(tok2), n_positions=24, n_embd=16, n_layer=1, n_head=2))
    k = next(i for i, s in enumerate(suffixes) if s == [UNCONFIDENT])
    row, wrow = ids[k : k + 1], w[k : k + 1]
    module = LanguageModelling(model, lr=1e-3)
    module.log_dict = lambda *a, **kw: None
    conf_pos = (row[0] == tok2.id(UNCONFIDENT)).nonzero().item()
    expected = -torch.log_softmax(model(row)[0, conf_pos - 1], -1)[tok2.id(UNCONFIDENT)]
    assert torch.allclose(module.shared_step((row, wrow), "train"), expected, atol=1e-6)


def test_base_soft_targets_are_the_base_next_token_distributions():
    base, tok = _base(2)
    tok2 = tok.with_tokens((CONFIDENT, UNCONFIDENT))
    ids = torch.as_tensor([tok2.encode("12+3=51" + CONFIDENT, bos=True)])
    soft = base_soft_targets(base, ids)
    assert soft.shape == (1, ids.shape[1], len(tok)) and torch.all(soft[:, 0] == 0)
    for t in range(1, ids.shape[1]):
        expected = torch.softmax(base(ids[:, :t].clamp(max=len(tok) - 1))[0, -1], -1).detach()
        assert torch.allclose(soft[0, t], expected, atol=1e-6)


def test_baseline_data_builders():
    records = [
        {"prompt": "1+1=", "answer": "2", "group": "a"},
        {"prompt": "9*9=", "answer": "81", "group": "b"},
        {"prompt": "2+2=", "answer": "4", "group": "a"},
        {"prompt": "8*9=", "answer": "72", "group": "b"},
    ]
    base = _answers([1, 0, 1, 1], ["2", "11", "4", "27"])
    mix = A.selfref_data(make_tokenizer(), records, base, Config(), np.random.default_rng(0))
    recs, answers, suffixes, weights = A.finetuned_logits_data(records, base, mix)
    assert answers == ["2", "4", "27"] and all(s == [EOS] for s in suffixes)  # <UN> answers had no signal left
    recs, answers, suffixes, weights = A.verbalized_data(records, base, mix)
    digits = {r["prompt"]: s[1] for r, s in zip(recs, suffixes)}
    assert digits == {"1+1=": "9", "2+2=": "9", "9*9=": "4", "8*9=": "4"}  # round(9 x group accuracy)


def test_confidence_is_read_right_after_the_answer():
    base, tok = _base(1)
    model, tok2, _, _ = with_adapters(base, tok, (CONFIDENT, UNCONFIDENT), (CONFIDENT, UNCONFIDENT), Config(), seed=0)
    model.eval()
    table = model.get_parameter(EMBEDDING)  # the embedding under its LoRA parametrisation
    with torch.no_grad():  # make the confidence tokens likely somewhere
        table[tok2.id(CONFIDENT)] += torch.randn(16) * 5
        table[tok2.id(UNCONFIDENT)] += torch.randn(16) * 5
    records = [{"prompt": p, "answer": "0"} for p in ("1+2=", "34+5=", "7*8=")]
    out = A.answer_questions(model, tok2, records, reverse=False)
    assert np.all((out.selfref >= 0) & (out.selfref <= 1))
    for i, rec in enumerate(records):
        ids = torch.as_tensor([tok2.encode(rec["prompt"], bos=True) + tok2.encode(out.text[i])])
        probs = torch.softmax(model(ids)[0, -1], -1).detach()
        cn, un = probs[tok2.id(CONFIDENT)], probs[tok2.id(UNCONFIDENT)]
        assert out.selfref[i] == pytest.approx(float(cn / (cn + un)), abs=1e-5)


def _random_model(seed: int, sharpness: float):
    """A random small model with new <CN>/<UN> rows; ``sharpness`` scales its embeddings (peaked outputs)."""
    tok = make_tokenizer().with_tokens((CONFIDENT, UNCONFIDENT))
    torch.manual_seed(seed)
    model = TinyLM(LMConfig(vocab_size=len(tok), n_positions=24, n_embd=16, n_layer=1, n_head=2))
    with torch.no_grad():
        model.wte.weight.mul_(sharpness)
        model.wpe.weight.mul_(sharpness)
    return model.eval(), tok


def test_cached_decoding_matches_generate():
    from models.common.tiny_lm import generate

    for seed, sharpness in ((4, 30.0), (5, 60.0), (6, 1.0)):
        model, tok = _random_model(seed, sharpness)
        stop = [tok.id(t) for t in (EOS, CONFIDENT, UNCONFIDENT)]
        prompts = torch.as_tensor([tok.encode(p, bos=True) for p in ("12+34=", "99*98=", "5+61=1", "70*3+=")])
        tokens, logprobs = A.greedy_decode(model, prompts, 8, stop, tok.pad_id)
        reference = generate(model, prompts, 8, stop_ids=stop, pad_id=tok.pad_id)
        assert torch.equal(tokens, reference.tokens)
        assert torch.allclose(logprobs, reference.logprobs, atol=1e-5)
    with pytest.raises(ValueError, match="n_positions"):
        A.greedy_decode(model, prompts, 30, stop, tok.pad_id)


def _read_out_reference(row: list[int], logp: np.ndarray, digits: dict[int, int], semicolon: int):
    """The previous per-row read-out of answer_questions: text, product, mean, after (None past the end), verbal."""
    end = next((t for t, x in enumerate(row) if x not in digits), len(row))
    probs = np.exp(logp[np.arange(end), row[:end]]) if end else np.array([0.0])
    after = logp[end] if end < len(row) else None
    written = end + 1 < len(row) and row[end] == semicolon and row[end + 1] in digits
    verbal = digits[row[end + 1]] / 9.0 if written else float("nan")
    return "".join(str(digits[x]) for x in row[:end]), float(np.prod(probs)), float(np.mean(probs)), after, verbal


def test_read_out_matches_the_per_row_reading_for_every_ending():
    tok = make_tokenizer().with_tokens((CONFIDENT, UNCONFIDENT))
    d = {tok.id(str(i)): i for i in range(10)}
    digit_of = np.full(len(tok), -1)
    digit_of[list(d)] = list(d.values())
    ids = lambda text: tok.encode(text)  # noqa: E731
    pad = [tok.pad_id] * 8
    rows = [  # every way an answer ends, padded to 6 decoded positions as greedy decoding leaves them
        ids("42") + [tok.id(EOS)] + pad[:3],
        ids("7") + [tok.id(CONFIDENT)] + pad[:4],
        ids("123") + [tok.id(UNCONFIDENT)] + pad[:2],
        ids("58;3") + [tok.id(EOS)] + pad[:1],
        ids("9;;") + pad[:3],  # ';' without a digit: no verbal confidence
        ids("31;") + pad[:3],  # ';' at the end of the budget
        ids("+") + pad[:5],  # no answer
        ids("654321"),  # no stop inside the budget
    ]
    tokens = np.array(rows)
    logp = np.log(np.random.default_rng(0).dirichlet(np.ones(len(tok)), size=tokens.shape)).astype(np.float32)
    out = A.read_out(tokens, logp, digit_of, tok.id(";"))
    for i, row in enumerate(rows):
        text, product, mean, after, verbal = _read_out_reference(row, logp[i], d, tok.id(";"))
        assert out.text[i] == text
        assert out.product[i] == pytest.approx(product, rel=1e-6) and out.mean[i] == pytest.approx(mean, rel=1e-6)
        assert np.all(np.isnan(out.after[i])) if after is None else np.array_equal(out.after[i], after)
        assert (np.isnan(out.verbal[i]) and np.isnan(verbal)) or out.verbal[i] == verbal
    assert out.text[:4] == ["42", "7", "123", "58"] and out.verbal[3] == pytest.approx(3 / 9)
    assert out.product[6] == out.mean[6] == 0.0 and np.isnan(out.verbal[:3]).all()


def test_answer_questions_matches_decoding_each_question_alone():
    """Length-grouped batches give every question the answer and confidences it gets decoded on its own
    with tiny_lm.generate (the budget-filling answers included)."""
    from models.common.tiny_lm import generate

    prompts = [f"{a}{op}{b}=" for a in (3, 17, 250) for op in "+*" for b in (4, 86)]
    records = [{"prompt": p, "answer": "123"} for p in prompts]
    d = {tok_id: i for i, tok_id in enumerate(range(3, 13))}  # the digit tokens follow <pad>, <bos>, <eos>
    for seed in range(3):
        model, tok = _random_model(10 + seed, 30.0)
        assert {tok.id(str(i)): i for i in range(10)} == d
        out = A.answer_questions(model, tok, records, reverse=False, batch=5)
        stop = [tok.id(t) for t in (EOS, CONFIDENT, UNCONFIDENT)]
        for i, rec in enumerate(records):
            prompt = torch.as_tensor([tok.encode(rec["prompt"], bos=True)])
            gen = generate(model, prompt, 7, stop_ids=stop, pad_id=tok.pad_id)
            text, product, mean, after, verbal = _read_out_reference(
                gen.tokens[0].tolist(), gen.logprobs[0].numpy(), d, tok.id(";")
            )
            if after is None:
                after = torch.log_softmax(model(torch.cat([prompt, gen.tokens], 1))[0, -1], -1).detach().numpy()
            p_cn, p_un = np.exp(after[tok.id(CONFIDENT)]), np.exp(after[tok.id(UNCONFIDENT)])
            assert out.text[i] == text
            assert out.prob_product[i] == pytest.approx(product, rel=1e-4, abs=1e-7)
            assert out.prob_mean[i] == pytest.approx(mean, rel=1e-4, abs=1e-7)
            assert out.selfref[i] == pytest.approx(float(p_cn / (p_cn + p_un)), abs=1e-5)


def test_scored_loss_equals_the_full_loss():
    """Running the output layer only where a weight is set changes neither the loss nor its gradients."""
    from models.self_ref.networks import scored_logits
    from models.self_ref.training import ScoredLanguageModelling, base_soft_targets

    base, tok = _base(7)
    records = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in ((1, 2), (34, 5), (61, 78), (9, 90))]
    answers, suffixes = ["3", "9", "931", "99"], [[CONFIDENT], [UNCONFIDENT], [CONFIDENT], [UNCONFIDENT]]
    for distill in (False, True):
        model, tok2, params, masks = with_adapters(
            base, tok, (CONFIDENT, UNCONFIDENT), (CONFIDENT, UNCONFIDENT), Config(), seed=1
        )
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn_like(p) * 0.3)  # away from the identity adapters
        ids, weights, answer_mask = A.lm_examples(tok2, records, answers, suffixes, [0.5, 0.0, 1.0, 0.0])
        batch = (ids, weights, answer_mask, base_soft_targets(base, ids)) if distill else (ids, weights)
        scored = weights[:, 1:] > 0
        assert torch.allclose(scored_logits(model, ids[:, :-1], scored), model(ids[:, :-1])[scored], atol=1e-5)
        losses, grads = [], []
        for cls in (LanguageModelling, ScoredLanguageModelling):
            module = cls(model, 1e-3, params=params, grad_masks=masks)
            module.log_dict = lambda *a, **kw: None
            for p in params:
                p.grad = None
            loss = module.shared_step(batch, "train")
            loss.backward()
            module.on_after_backward()
            losses.append(loss.detach())
            grads.append([p.grad.clone() for p in params])
        assert torch.allclose(losses[0], losses[1], atol=1e-6), distill
        assert all(torch.allclose(g0, g1, atol=1e-6) for g0, g1 in zip(*grads)), distill
        assert grads[1][-1][: len(tok)].abs().sum() == 0  # the old embedding rows stay frozen


def test_weight_space_lora():
    """The weight-space adapter is LoRALinear's function and gradients, and merges the same way."""
    from models.common.tiny_lm import LoRALinear
    from models.self_ref.networks import WeightSpaceLoRA

    torch.manual_seed(0)
    plain = LoRALinear(torch.nn.Linear(16, 24), 4, 8.0, torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain.lora_B.normal_()
    fast = WeightSpaceLoRA(plain.base, 4, 8.0, torch.Generator().manual_seed(1))
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(5, 7, 16, requires_grad=True)
    outputs, grads = [], []
    for layer in (plain, fast):
        x.grad = None
        y = layer(x)
        (y * torch.linspace(-1, 1, 24)).sum().backward()
        outputs.append(y.detach())
        grads.append([x.grad.clone(), layer.lora_A.grad.clone(), layer.lora_B.grad.clone()])
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))
    assert torch.allclose(fast.merged()(x), outputs[0], atol=1e-5)


def test_tensor_batches_match_the_dataloader():
    from torch.utils.data import DataLoader, TensorDataset

    from models.self_ref.training import TensorBatches

    ids, weights = torch.arange(103 * 3).view(103, 3), torch.randn(103, 3, 2)
    loader = DataLoader(TensorDataset(ids, weights), 16, shuffle=True, generator=torch.Generator().manual_seed(5))
    batches = TensorBatches((ids, weights), 16, torch.Generator().manual_seed(5))
    assert len(batches) == len(loader) == 7
    for _ in range(3):  # epoch after epoch: the generator advances as DataLoader's does
        for expected, got in zip(loader, batches, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(expected, got))
    in_order = [b[0] for b in TensorBatches((ids, weights), 50)]
    assert [len(b) for b in in_order] == [50, 50, 3] and torch.equal(torch.cat(in_order), ids)


def test_every_arm_gets_the_same_adapter_on_all_projections_and_the_embedding_head():
    from models.common.tiny_lm import LoRALinear

    base, tok = _base(3)
    cfg = Config()
    adapted = {
        name: with_adapters(base, tok, new, rows, cfg, seed=0) for name, (new, rows, _, _) in P.FINETUNED.items()
    }

    def projection_adapters(model, params):  # shapes of every adapter factor but the vocabulary-sized ones
        skip = {id(model.get_parameter(EMBEDDING)), id(model.wte.parametrizations.weight[0].lora_A)}
        return sorted(tuple(p.shape) for p in params if id(p) not in skip)

    reference = projection_adapters(adapted["finetuned_logits"][0], adapted["finetuned_logits"][2])
    for name, (model, tok2, params, _) in adapted.items():
        wrapped = {n for n, m in model.named_modules() if isinstance(m, LoRALinear)}
        assert wrapped == {f"h.0.{t}" for t in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}, name
        assert all(type(model.get_submodule(n)).__name__ == "WeightSpaceLoRA" for n in wrapped), name
        assert projection_adapters(model, params) == reference, name  # the same adapter for every arm
        assert any(p is model.wte.parametrizations.weight[0].lora_A for p in params)  # the embedding/head LoRA
        assert model.wte.parametrizations.weight[0].lora_A.shape == (len(tok2), cfg.lora_rank)
    # The embedding LoRA reaches the tied head: moving it changes the old tokens' logits, and merging keeps them.
    model, tok2, params, _ = adapted["selfref"]
    with torch.no_grad():
        model.wte.parametrizations.weight[0].lora_A.normal_()
        params[0].normal_()  # and a projection adapter
    ids = torch.as_tensor([tok.encode("12+34=", bos=True)])
    adapted_logits = model(ids).detach()
    assert not torch.allclose(adapted_logits[..., : len(tok)], base(ids), atol=1e-3)
    merged = merge_adapters(model)
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    assert torch.allclose(merged(ids), adapted_logits, atol=1e-5)
    assert "wte.weight" in dict(merged.named_parameters())  # a plain TinyLM again: it saves as a GPT-2 folder


def test_selection_score_is_the_validation_auroc_and_guards_the_answers():
    base_v = _answers([1, 1, 0, 0] * 25)
    same = _answers([1, 1, 0, 0] * 25)
    same.selfref = np.tile([0.9, 0.8, 0.2, 0.1], 25)
    assert P.validation_score("selfref", same, base_v) == pytest.approx(1.0)
    moved = _answers([1, 1, 1, 0] * 25)  # 25 pts more accurate: a distilled arm's answers changed
    moved.selfref = np.tile([0.9, 0.8, 0.7, 0.1], 25)
    assert np.isnan(P.validation_score("selfref", moved, base_v))
    moved.prob_product = moved.selfref
    assert P.validation_score("finetuned_logits", moved, base_v) == pytest.approx(1.0)  # it may learn answers
    with pytest.raises(ValidationError, match="lr_grid"):
        Config.for_scale("default", {"lr_grid": [1e-2, 0.0]})


# ----------------------------------------------------------------------------- metrics


def _hand_ece(correct, score, bins):
    """The previous hand-written ECE (equal-width bins, np.digitize, the last bin closed at 1)."""
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(score, edges[1:-1]), 0, bins - 1)
    return sum(
        (which == b).mean() * abs(correct[which == b].mean() - score[which == b].mean())
        for b in range(bins)
        if (which == b).any()
    )


def test_torchmetrics_auroc_and_ece_match_the_previous_values_on_a_hand_example():
    from sklearn.metrics import roc_auc_score

    correct = np.array([1, 0, 1, 1, 0, 1, 0, 0, 1, 1], bool)
    score = np.array([0.95, 0.15, 0.55, 1.0, 0.62, 0.55, 0.05, 0.33, 0.88, 1.0])  # ties and exact ones
    # AUROC by hand: 6 right x 4 wrong pairs; the right 0.55s lose to the wrong 0.62 only: (24 - 2) / 24
    assert A.auroc(correct, score) == pytest.approx(22 / 24) == pytest.approx(roc_auc_score(correct, score))
    # ECE by hand, 10 bins: [0,.1): {.05 wrong}; [.1,.2): {.15 wrong}; [.3,.4): {.33 wrong};
    # [.5,.6): {.55, .55 right}; [.6,.7): {.62 wrong}; [.8,.9): {.88 right}; [.9,1]: {.95, 1, 1 right}
    by_hand = (0.05 + 0.15 + 0.33 + 2 * 0.45 + 0.62 + 0.12 + (0.05 + 0 + 0)) / 10
    assert A.ece(correct.astype(float), score, 10) == pytest.approx(by_hand, abs=1e-12)
    assert A.ece(correct.astype(float), score, 10) == pytest.approx(_hand_ece(correct, score, 10), abs=1e-12)
    rng = np.random.default_rng(3)
    s, c = rng.random(500), rng.random(500) < 0.6
    assert A.ece(c.astype(float), s, 10) == pytest.approx(_hand_ece(c, s, 10), abs=1e-9)
    assert A.auroc(c, s) == pytest.approx(roc_auc_score(c, s), abs=1e-6)  # torchmetrics sums in float32


def test_ece_of_calibrated_and_overconfident_scores():
    rng = np.random.default_rng(0)
    score = rng.random(200_000)
    correct = (rng.random(200_000) < score).astype(float)
    assert A.ece(correct, score, 10) < 0.01
    overconfident = np.ones(1000)
    labels = (np.arange(1000) < 600).astype(float)
    assert A.ece(labels, overconfident, 10) == pytest.approx(0.4)


def test_routing_curve_endpoints_oracle_order_and_random_expectation():
    rng = np.random.default_rng(1)
    n = 400
    small = (rng.random(n) < 0.6).astype(float)
    large = (rng.random(n) < 0.95).astype(float)
    rates = np.linspace(0, 1, 21)
    tie = rng.random(n)
    oracle = A.routing_curve(small, large, small, rates, tie)  # route the wrong answers first
    assert oracle[0] == pytest.approx(small.mean()) and oracle[-1] == pytest.approx(large.mean())
    for _ in range(20):  # no score beats routing the small model's errors first
        other = A.routing_curve(small, large, rng.random(n), rates, tie)
        assert np.all(other <= oracle + 1e-12)
    draws = np.stack([A.routing_curve(small, large, rng.random(n), rates, tie) for _ in range(3000)])
    line = small.mean() + rates * (large.mean() - small.mean())
    assert np.max(np.abs(draws.mean(0) - line)) < 3e-3
    sd = A.random_routing_sd(small, large, rates, draws=1)
    assert np.allclose(draws.std(0), sd, atol=3e-3)
    assert A.trapezoid(np.ones(21), rates) == pytest.approx(1.0)


def test_auroc_degenerate_and_perfect():
    assert A.auroc(np.array([True, True]), np.array([0.1, 0.9])) == 0.5
    assert A.auroc(np.array([False, True, True]), np.array([0.1, 0.5, 0.9])) == 1.0


# ----------------------------------------------------------------------------- data


def test_questions_have_the_configured_widths_and_answers():
    cfg = DataConfig(n_a=300, n_b=20, n_v=20, n_c=50, n_u=40)
    records = make_questions(cfg, np.random.default_rng(0))
    splits = by_split(records)
    assert {s: len(v) for s, v in splits.items()} == {"A": 300, "B": 20, "V": 20, "C": 50, "U": 40}
    for rec in records:
        a, b = rec["prompt"][:-1].replace("*", "+").split("+")
        value = int(a) * int(b) if "*" in rec["prompt"] else int(a) + int(b)
        assert rec["answer"] == str(value)
        width = cfg.max_mul_width if "*" in rec["prompt"] else cfg.max_add_width
        assert (len(a) == len(b) == width + 1) if rec["split"] == "U" else (len(a) <= width and len(b) <= width)
    assert records == make_questions(cfg, np.random.default_rng(0))  # deterministic from the seed
    assert [r["split"] for r in records] == sorted((r["split"] for r in records), key="ABVCU".index)
    assert A.target_text({"answer": "120"}, reverse=True) == "021"
    # held out: no B/V/C/U question was in the small LM's training split A, nor in another held-out split
    held_out = [r["prompt"] for r in records if r["split"] != "A"]
    assert len(set(held_out)) == len(held_out) and not set(held_out) & {r["prompt"] for r in splits["A"]}
    with pytest.raises(
        ValueError, match="only .* of the 170 split-B"
    ):  # 1-digit questions: 200 exist, A takes most of them
        make_questions(
            DataConfig(max_add_width=1, max_mul_width=1, n_a=300, n_b=10, n_v=10, n_c=150, n_u=10),
            np.random.default_rng(0),
        )
    overlapping = make_questions(
        DataConfig(n_a=300, n_b=20, n_v=20, n_c=50, n_u=40, held_out_distinct=False), np.random.default_rng(0)
    )  # the pre-fix sampler, kept for smoke
    assert {r["prompt"] for r in overlapping if r["split"] == "C"} & {
        r["prompt"] for r in overlapping if r["split"] == "A"
    }


def test_held_out_splits_are_exchangeable():
    """B, V and C are cut from one shuffled pool: their operand-width mix is the same, whereas filling them in
    order (the earlier sampler) gave B the easy groups A had not exhausted."""
    cfg = DataConfig(n_a=1000, n_b=3000, n_v=1000, n_c=2000, n_u=10)
    splits = by_split(make_questions(cfg, np.random.default_rng(0)))
    easy = {s: np.mean([r["group"] in ("+1x1", "+1x2", "+2x1", "*1x1") for r in splits[s]]) for s in "BVC"}
    for s in "VC":  # a common share p: two-proportion z test at |z| < 4
        p = (easy["B"] * 3000 + easy[s] * len(splits[s])) / (3000 + len(splits[s]))
        sd = np.sqrt(p * (1 - p) * (1 / 3000 + 1 / len(splits[s])))
        assert abs(easy["B"] - easy[s]) < 4 * sd, easy


def test_jsonl_loader_reads_gsm8k_style_answers(tmp_path):
    tok = make_tokenizer()
    path = tmp_path / "qa.jsonl"
    path.write_text(
        json.dumps({"question": "12+30", "answer": "12 plus 30 is 42\n#### 42", "split": "C"})
        + "\n"
        + json.dumps({"prompt": "7*6=", "answer": "1,042", "large_correct": False})
        + "\n"
    )
    records = load_questions_jsonl(path, tok, 0.9, seed=0)
    assert records[0]["prompt"] == "12+30=" and records[0]["answer"] == "42" and records[0]["split"] == "C"
    assert records[1]["answer"] == "1042" and records[1]["large_correct"] is False and records[1]["split"] in "ABVC"
    path.write_text(json.dumps({"question": "what is 2+2", "answer": "4"}) + "\n")
    with pytest.raises(KeyError, match="'w'"):
        load_questions_jsonl(path, tok, 0.9, seed=0)


def test_prepare_reads_user_supplied_weights_and_questions(tmp_path, monkeypatch):
    from models.common.tiny_lm import load_pretrained, save_pretrained

    monkeypatch.setenv("PAPERLINE_ROOT", str(tmp_path))
    user, tok = _base(4)
    save_pretrained(user, tmp_path / "data" / "my_lm", tok, weights="bin")  # a Hugging Face folder
    records = [{"question": f"{i}+{i}", "answer": str(2 * i), "split": s} for i, s in enumerate("ABVCUABVCU")]
    (tmp_path / "data" / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = Config.for_scale("smoke", {"data.base_lm": "my_lm", "data.questions_jsonl": "qa.jsonl"})
    out = tmp_path / "prepared"
    out.mkdir()
    ref = P.prepare(cfg, out)
    assert ref.meta["synthetic"] is False and ref.meta["n_C"] == 2
    assert ref.source == "real" and "data/qa.jsonl" in ref.provenance and "data/my_lm" in ref.provenance
    ids = torch.as_tensor([tok.encode("12+3=", bos=True)])
    assert torch.equal(load_pretrained(out / P.SMALL_LM)(ids), user(ids))


def test_config_rejects_bad_values():
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"rejection_coverage": 1.5})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.lm.n_embd": 30, "data.lm.n_head": 4})
    with pytest.raises(ValidationError):
        Config.for_scale("default", {"data.base_lm": "../outside"})


# ----------------------------------------------------------------------------- the pipeline at smoke scale


def test_smoke_pipeline(smoke_run):
    run = smoke_run("self_ref")
    cfg, ref, artifacts, v, claim = run.cfg, run.dataset, run.artifacts, run.metrics.values, run.claim
    assert {"small_lm/config.json", "small_lm/model.safetensors", "small_lm/vocab.json", "questions.jsonl"} <= set(
        ref.files
    )
    assert {"selfref", "finetuned_logits", P.CONTROL} <= artifacts.history.keys()
    assert (
        artifacts.summary["select/selfref/lr"] in cfg.lr_grid and "select/selfref/seed0/best_epoch" in artifacts.summary
    )
    assert 0 <= v["method/confidence_min"] <= v["method/confidence_max"] <= 1
    assert v["method/routing_curve_start"] == pytest.approx(v["method/answer_acc"])
    assert v["method/routing_curve_end"] == pytest.approx(v["large/answer_acc"])
    assert all(0 <= v[f"{s}/auroc"] <= 1 for s in ("method", "baseline", "baseline_mean", "finetuned_logits", "random"))
    assert claim.sane, claim.sanity
    assert {"auroc_gain", "routing_auc_selfref", "routing_auc_token_prob"} <= claim.figures.keys()
    assert [c.name for c in claim.criteria] == ["auroc_gain", "routing_auc_gain"]
    assert [c.of for c in claim.controls] == ["auroc_gain"] and 0 <= v["control_shuffled/auroc"] <= 1
    assert claim.criterion("auroc_gain").estimate == pytest.approx(v["method/auroc"] - v["baseline/auroc"])
    assert claim.criterion("auroc_gain").n_units == cfg.n_seeds == 1 and claim.verdict in ("inconclusive", "fails")
    assert ref.source == "synthetic" and "synthetic arithmetic" in ref.provenance
    assert any(f.name == "lr_selection.png" for f in run.metrics.figures)
    model = SPEC.module().load_model(cfg, run.layout.model_dir)
    assert isinstance(model, TinyLM) and model.config.vocab_size == len(make_tokenizer()) + 2


def _claim_metrics(method_auroc, baseline_auroc, method_routing, baseline_routing):
    """Hand-built evaluation numbers for ``claim``: per-seed AUROC and routing area of Self-REF and token
    probability (their means as the headline keys), every must-pass check passing."""
    from models.base import Metrics

    v = {
        "random/routing_auc": 0.70,
        "method/acc_at_30pct_routing": 0.7,
        "baseline/acc_at_30pct_routing": 0.69,
        "method/accuracy_change_pts": 0.2,
        "method/abstain_unanswerable": 0.5,
        "baseline/abstain_unanswerable": 0.4,
        "method/confidence_min": 0.01,
        "method/confidence_max": 0.99,
        "method/routing_curve_start": 0.4,
        "method/answer_acc": 0.4,
        "method/routing_curve_end": 0.95,
        "large/answer_acc": 0.95,
        "baseline/answer_acc": 0.398,
        "random/max_deviation_from_line": 0.001,
        "random/deviation_tolerance": 0.01,
        "baseline_mean/auroc": 0.78,
        "finetuned_logits/auroc": 0.79,
        "control_shuffled/auroc": 0.70,
    }
    metrics = Metrics(v, [])
    labels = [f"seed{k}" for k in range(len(method_auroc))]
    for name, key, series in (
        ("method", "auroc", method_auroc),
        ("baseline", "auroc", baseline_auroc),
        ("control_shuffled", "auroc", [0.70] * len(method_auroc)),  # the shuffled-label control: no gain
        ("method", "routing_auc", method_routing),
        ("baseline", "routing_auc", baseline_routing),
    ):
        v[f"{name}/{key}"] = float(np.mean(series))
        metrics.add_units(key, name, series, labels)
    return metrics


def test_claim_intervals_over_paired_fine_tuning_seeds():
    import math

    cfg = SPEC.make_config("default")
    assert cfg.n_seeds == 3
    base = [0.800, 0.800, 0.800]  # the base model's token probability: the same answers every seed
    # AUROC gains 0.06 / 0.00 / 0.03 (mean 0.03): the interval straddles the 0.03 threshold
    spread = P.claim(cfg, _claim_metrics([0.86, 0.80, 0.83], base, [0.80, 0.80, 0.81], [0.78, 0.78, 0.78]))
    gain = spread.criterion("auroc_gain")
    diffs = np.array([0.06, 0.0, 0.03])
    half = 4.302653 * diffs.std(ddof=1) / math.sqrt(3)  # t_{0.975, 2}
    assert (gain.estimate, gain.low, gain.high) == pytest.approx((0.03, 0.03 - half, 0.03 + half))
    assert gain.n_units == 3 and gain.state == "inconclusive" and spread.sane
    assert spread.criterion("routing_auc_gain").state == "holds"  # +0.02 / +0.02 / +0.03 over 0.78
    assert spread.verdict == "inconclusive"
    # The audited default (0.800 vs 0.801 over 3 seeds, within +-0.01): no 0.03 gain, the claim fails
    null = P.claim(cfg, _claim_metrics([0.795, 0.805, 0.803], base, [0.78, 0.779, 0.781], [0.78, 0.78, 0.78]))
    assert null.criterion("auroc_gain").state == "fails" and null.verdict == "fails"
    assert null.criterion("routing_auc_gain").state == "inconclusive"
    # Consistent gains on both: the claim holds
    clear = P.claim(cfg, _claim_metrics([0.85, 0.86, 0.855], base, [0.80, 0.805, 0.81], [0.78, 0.78, 0.78]))
    assert [c.state for c in clear.criteria] == ["holds", "holds"] and clear.verdict == "holds"
    assert clear.figures["auroc_gain"] == pytest.approx(0.055)
