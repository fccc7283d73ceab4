"""The embedded recipe shrunk for tiny random models (torchtune's way: shrink the real config).

The learn: defaults are SmolLM2-135M's recipe (pipelines/learn/config.py): 20 of its 30 layers
frozen, bf16 autocast, a warm-up. A 2-layer random model trains every layer in float32 from step 1.
"""

TINY_LEARN = {"freeze_layers": 0, "autocast": False, "warmup_steps": 0, "eval_every": 0}
TINY_LEARN_OVERRIDES = [f"learn.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in TINY_LEARN.items()]
