"""The shared tiny GPT-2: tokeniser, architecture against a reference GPT-2 forward, HF-format I/O, LoRA, decoding."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import torch

from models.common.tiny_lm import (
    EOS,
    LanguageModelling,
    LMConfig,
    TinyLM,
    Tokenizer,
    add_lora,
    generate,
    left_pad,
    load_pretrained,
    load_tokenizer,
    merge_lora,
    next_token_logprobs,
    read_safetensors,
    save_pretrained,
    sequence_logprob,
    to_hf_state_dict,
    write_safetensors,
)

torch.set_num_threads(1)


def _model(seed=0, vocab=13, **kw) -> TinyLM:
    torch.manual_seed(seed)
    model = TinyLM(LMConfig(vocab_size=vocab, n_positions=12, n_embd=16, n_layer=2, n_head=2, **kw))
    with torch.no_grad():  # move biases and LayerNorms off their trivial init so the tests see them
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _ids(batch=3, length=7, vocab=13, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- tokeniser


def test_tokenizer_longest_match_roundtrip_and_growth(tmp_path):
    tok = Tokenizer.build(list("0123456789+="))
    ids = tok.encode("12+3=", bos=True, eos=True)
    assert tok.tokens[ids[0]] == "<bos>" and tok.tokens[ids[-1]] == EOS
    assert tok.decode(ids) == "12+3="
    grown = tok.with_tokens(("<CN>", "<UN>"))
    assert grown.tokens[: len(tok)] == tok.tokens  # old ids unchanged
    assert grown.encode("7=<CN>") == [tok.id("7"), tok.id("="), len(tok)]  # a special is ONE token
    grown.save(tmp_path)
    assert load_tokenizer(tmp_path) == grown
    with pytest.raises(KeyError, match="'x'"):
        tok.encode("1x2")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(ValueError, match="BPE"):
        load_tokenizer(tmp_path)


# ----------------------------------------------------------------------------- architecture


def _reference_gpt2(hf: dict[str, torch.Tensor], config: LMConfig, ids: torch.Tensor) -> torch.Tensor:
    """GPT-2 written from its definition on the Hugging Face tensors (Conv1D: x @ W + b)."""
    sd = {k: v.double() for k, v in hf.items()}
    T = ids.shape[1]
    x = sd["transformer.wte.weight"][ids] + sd["transformer.wpe.weight"][:T]

    def ln(x, p):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + config.layer_norm_epsilon) * sd[p + ".weight"] + sd[p + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    H, C = config.n_head, config.n_embd
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(config.n_layer):
        p = f"transformer.h.{i}."
        h = ln(x, p + "ln_1")
        qkv = h @ sd[p + "attn.c_attn.weight"] + sd[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(*t.shape[:2], H, C // H).transpose(1, 2) for t in qkv.split(C, -1))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        att = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v
        x = x + att.transpose(1, 2).reshape(x.shape) @ sd[p + "attn.c_proj.weight"] + sd[p + "attn.c_proj.bias"]
        h = ln(x, p + "ln_2")
        x = (
            x
            + gelu_new(h @ sd[p + "mlp.c_fc.weight"] + sd[p + "mlp.c_fc.bias"]) @ sd[p + "mlp.c_proj.weight"]
            + sd[p + "mlp.c_proj.bias"]
        )
    return ln(x, "transformer.ln_f") @ sd["transformer.wte.weight"].T


def test_forward_matches_a_reference_gpt2_on_hf_tensors():
    model = _model()
    ids = _ids()
    hf = to_hf_state_dict(model)
    assert hf["transformer.h.0.attn.c_attn.weight"].shape == (16, 48)  # Conv1D layout (in, out)
    expected = _reference_gpt2(hf, model.config, ids)
    assert torch.allclose(model(ids).double(), expected, atol=1e-5)


def test_causal_and_left_padding_equivalence():
    model = _model()
    ids = _ids(2, 6)
    changed = ids.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 13
    assert torch.allclose(model(ids)[:, :4], model(changed)[:, :4], atol=1e-6)  # the future is invisible
    short, long = [1, 5, 7], [2, 3, 4, 8, 9]
    padded, mask = left_pad([short, long], pad_id=0)
    out = model(padded, mask)
    assert torch.allclose(out[0, -3:], model(torch.tensor([short]))[0], atol=1e-5)
    assert torch.allclose(out[1], model(torch.tensor([long]))[0], atol=1e-5)


def test_sequence_logprob_is_the_sum_of_masked_next_token_logprobs():
    model = _model()
    ids = _ids(2, 6)
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 1, 1]])
    logp = torch.log_softmax(model(ids), -1)
    manual = torch.stack([sum(logp[b, t - 1, ids[b, t]] for t in range(1, 6) if mask[b, t]) for b in range(2)])
    assert torch.allclose(sequence_logprob(model, ids, mask), manual, atol=1e-6)
    # The Lightning module's weighted loss is the weighted mean of the same quantities.
    weights = mask.float()
    module = LanguageModelling(model, lr=1e-3)
    module.log_dict = lambda *a, **k: None
    expected = -(next_token_logprobs(model, ids) * weights[:, 1:]).sum() / weights[:, 1:].sum()
    assert torch.allclose(module.shared_step((ids, weights), "train"), expected, atol=1e-6)


def test_distillation_term_matches_soft_targets_at_the_marked_positions():
    model = _model()
    ids = _ids(2, 6)
    weights = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.float32)
    marked = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.float32)
    soft = torch.softmax(torch.randn(2, 6, 10), -1)  # a reference over the first 10 tokens only
    module = LanguageModelling(model, lr=1e-3)
    module.log_dict = lambda *a, **k: None
    logp = torch.log_softmax(model(ids[:, :-1]), -1)
    ce = -(next_token_logprobs(model, ids) * weights[:, 1:]).sum()
    distill = -((soft[:, 1:] * logp[..., :10]).sum(-1) * marked[:, 1:]).sum()
    expected = (ce + distill) / weights[:, 1:].sum()
    assert torch.allclose(module.shared_step((ids, weights, marked, soft), "train"), expected, atol=1e-6)
    assert torch.allclose(module.shared_step((ids, weights), "train"), ce / weights[:, 1:].sum(), atol=1e-6)


# ----------------------------------------------------------------------------- Hugging Face folders


@pytest.mark.parametrize("weights", ["safetensors", "bin"])
def test_save_and_load_pretrained_roundtrip(tmp_path, weights):
    model = _model(vocab=15)
    tok = Tokenizer.build(list("0123456789+="))
    save_pretrained(model, tmp_path, tok, weights=weights)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["n_embd"] == 16 and config["n_layer"] == 2
    loaded = load_pretrained(tmp_path)
    ids = _ids(vocab=15)
    assert torch.equal(loaded(ids), model(ids))
    assert load_tokenizer(tmp_path) == tok


def test_loads_bare_gpt2model_keys_legacy_buffers_and_shards(tmp_path):
    model = _model()
    hf = to_hf_state_dict(model)
    bare = {k.removeprefix("transformer."): v for k, v in hf.items()}
    bare["h.0.attn.bias"] = torch.ones(1, 1, 12, 12)  # old checkpoints store the causal mask
    bare["h.1.attn.masked_bias"] = torch.tensor(-1e4)
    first = {k: v for k, v in bare.items() if k.startswith(("wte", "wpe", "h.0"))}
    rest = {k: v for k, v in bare.items() if k not in first}
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", first)
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", rest)
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first} | {
        k: "model-00002-of-00002.safetensors" for k in rest
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps({**model.config.to_hf(), "n_ctx": 12, "unknown_key": 1}))
    ids = _ids()
    assert torch.allclose(load_pretrained(tmp_path)(ids), model(ids))


def test_loader_rejects_other_architectures_and_misfit_weights(tmp_path):
    model = _model()
    save_pretrained(model, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(ValueError, match="llama"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "n_layer": 3}))
    with pytest.raises(ValueError, match="missing"):
        load_pretrained(tmp_path)


def test_safetensors_format_roundtrip_and_determinism(tmp_path):
    tensors = {
        "a": torch.randn(3, 4),
        "b": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "c": torch.randn(5).to(torch.bfloat16),
        "d": torch.randn(2, 2).to(torch.float16),
        "e": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 3),
    }
    path = tmp_path / "x.safetensors"
    write_safetensors(path, tensors, {"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert (8 + n) % 8 == 0 and header["__metadata__"] == {"format": "pt"}
    assert header["a"] == {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}
    assert max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__") == len(raw) - 8 - n
    back = read_safetensors(path)
    assert back.keys() == tensors.keys()
    for k in tensors:
        assert back[k].dtype == tensors[k].dtype and torch.equal(back[k], tensors[k])
    write_safetensors(tmp_path / "y.safetensors", dict(reversed(list(tensors.items()))), {"format": "pt"})
    assert (tmp_path / "y.safetensors").read_bytes() == raw  # bytes depend on the values only


def test_safetensors_interoperates_with_the_reference_package(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.randn(4, 3), "i": torch.arange(5)}
    st.save_file(tensors, str(tmp_path / "ref.safetensors"))
    assert all(torch.equal(read_safetensors(tmp_path / "ref.safetensors")[k], v) for k, v in tensors.items())
    write_safetensors(tmp_path / "ours.safetensors", tensors)
    assert all(torch.equal(st.load_file(str(tmp_path / "ours.safetensors"))[k], v) for k, v in tensors.items())


# ----------------------------------------------------------------------------- LoRA and new tokens


def test_lora_starts_as_identity_and_merges_exactly():
    model = _model()
    ids = _ids()
    before = model(ids)
    params = add_lora(model, rank=2, alpha=4.0, seed=3)
    assert len(params) == 2 * model.config.n_layer
    assert all(p.requires_grad for p in params)
    assert not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    assert torch.allclose(model(ids), before, atol=1e-6)  # B = 0 at the start
    with torch.no_grad():
        for p in params:
            p.add_(0.1 * torch.randn_like(p))
    adapted = model(ids)
    assert not torch.allclose(adapted, before, atol=1e-3)
    merged = merge_lora(model)
    assert torch.allclose(merged(ids), adapted, atol=1e-5)
    assert "h.0.attn.c_attn.weight" in merged.state_dict()


def test_new_tokens_start_at_the_mean_embedding_and_leave_old_logits_unchanged():
    model = _model()
    ids = _ids()
    old_logits = model(ids)
    old_rows = model.wte.weight.detach().clone()
    new = model.add_tokens(2)
    assert new == [13, 14] and model.config.vocab_size == 15
    assert torch.equal(model.wte.weight[:13], old_rows)
    assert torch.allclose(model.wte.weight[13], old_rows.mean(0)) and torch.allclose(
        model.wte.weight[14], old_rows.mean(0)
    )
    assert torch.allclose(model(ids)[..., :13], old_logits, atol=1e-6)


# ----------------------------------------------------------------------------- decoding


def test_greedy_generation_matches_stepwise_argmax_and_stops():
    model = _model()
    prompts = [[1, 2, 3], [4, 5]]
    ids, mask = left_pad(prompts, pad_id=0)
    gen = generate(model, ids, 4, attention_mask=mask, pad_id=0)
    for b, prompt in enumerate(prompts):
        seq = list(prompt)
        for t in range(4):
            nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
            assert int(gen.tokens[b, t]) == nxt
            seq.append(nxt)
    stop = int(gen.tokens[0, 1])
    stopped = generate(model, ids, 4, attention_mask=mask, stop_ids=[stop], pad_id=0)
    assert int(stopped.length[0]) <= 2 and torch.all(stopped.tokens[0, int(stopped.length[0]) :] == 0)


def test_sampling_follows_the_constrained_next_token_distribution():
    model = _model()
    allowed = [3, 4, 5, 6]
    n = 20000
    prompt = torch.full((n, 1), 2)
    gen = generate(model, prompt, 1, sample=True, generator=torch.Generator().manual_seed(0), allowed_ids=allowed)
    assert set(gen.tokens[:, 0].tolist()) <= set(allowed)
    p = torch.softmax(model(torch.tensor([[2]]))[0, -1, allowed], -1).detach().numpy()
    freq = np.array([(gen.tokens[:, 0] == a).float().mean().item() for a in allowed])
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n) + 1e-9)
    assert torch.allclose(gen.logprobs[0, 0, allowed].exp().sum(), torch.tensor(1.0), atol=1e-5)
