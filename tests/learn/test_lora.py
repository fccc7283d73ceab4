"""LoRA adapters: only they train, and the merged plain weights compute what the adapters did."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pipelines.learn.config import LearnConfig, LoraConfig
from pipelines.learn.lora import merged_state_dict
from pipelines.learn.policy import make_trainable, plain_weights, store_frozen_bf16
from tests.tiny import TINY_LEARN


def tiny(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_lora_trains_only_adapters_and_merges_exactly():
    model = tiny()
    params = make_trainable(model, LearnConfig(lora=LoraConfig(rank=4, alpha=8.0), **TINY_LEARN))
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert params and all("lora_" in n for n in names)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_b" in n:
                p.normal_(0, 0.1)  # as if trained: B starts at zero
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        want = model(ids).logits
        plain = tiny(1)
        missing = plain.load_state_dict(merged_state_dict(model), strict=False)
        got = plain.eval()(ids).logits
    assert not [k for k in missing.missing_keys if "lm_head" not in k] and not missing.unexpected_keys
    assert torch.allclose(want, got, atol=1e-5)


def test_freezing_lower_layers_keeps_embeddings_and_them_fixed():
    model = tiny()
    make_trainable(model, LearnConfig(freeze_layers=1))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("model.layers.1.") or n.startswith("model.norm") for n in trainable)


def test_frozen_layers_in_bf16_compute_what_autocast_did_and_save_the_same_values():
    model = tiny().to(torch.bfloat16).float()  # as loaded from a bfloat16 package
    model.model.layers[0].self_attn.o_proj.weight.data[0, 0] += 1e-4  # no longer bfloat16: stays float32
    make_trainable(model, LearnConfig(freeze_layers=1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 128, (1, 12))

    def hidden():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model.model(input_ids=ids, use_cache=False).last_hidden_state.float()

    want = hidden()
    originals = store_frozen_bf16(model, 1)
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert model.model.layers[0].input_layernorm.weight.dtype == torch.float32
    assert model.model.layers[0].self_attn.o_proj.weight.dtype == torch.float32
    assert model.model.layers[1].mlp.up_proj.weight.dtype == torch.float32
    assert torch.equal(want, hidden())
    assert set(originals) == {k for k in before if k.startswith("model.layers.0.")
                              and "proj" in k and "o_proj" not in k}
    saved = plain_weights(model, torch.float32, originals)
    assert all(saved[k].dtype == torch.float32 and torch.equal(saved[k], v) for k, v in before.items())
    assert all(saved[k] is v for k, v in originals.items())  # published as they were: no conversion
