"""LoRA adapters: only they train, and the merged plain weights compute what the adapters did."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pipelines.learn.config import LearnConfig, LoraConfig
from pipelines.learn.lora import merged_state_dict
from pipelines.learn.policy import make_trainable


def tiny(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_lora_trains_only_adapters_and_merges_exactly():
    model = tiny()
    params = make_trainable(model, LearnConfig(lora=LoraConfig(rank=4, alpha=8.0)))
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
