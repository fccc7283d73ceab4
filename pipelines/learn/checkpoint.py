"""Learner checkpoints: what a restart needs to continue as if nothing happened.

One folder per checkpoint (Ray Train copies it into a local OUT; into an s3:// one, upload_to):
    learner.pt   trainable weights (LoRA adapters, or the unfrozen layers), optimizer, scheduler
    state.json   step, policy version, data cursor, RNG states, the base model's fingerprint
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from pipelines.errors import UserError

ARCH_KEYS = ("architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "intermediate_size")


def model_fingerprint(model_dir: str) -> str:
    """What makes two models interchangeable for a checkpoint: architecture and shapes."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return hashlib.sha1(json.dumps({k: cfg.get(k) for k in ARCH_KEYS}, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class LearnerState:
    step: int = 0  # optimizer steps done
    version: int = 0  # policy version published last
    weights: str | None = None  # where that version lives
    cursor: dict = field(default_factory=dict)
    best_loss: float | None = None  # SFT: the best held-back loss so far
    fingerprint: str = ""
    rng: dict = field(default_factory=dict)


def save(dest: Path, blob: dict, state: LearnerState) -> Path:
    """blob: Policy.training_state()."""
    dest.mkdir(parents=True, exist_ok=True)
    torch.save(blob, dest / "learner.pt")
    v, ints, gauss = random.getstate()
    state.rng = {"torch": torch.get_rng_state().tolist(), "python": [v, list(ints), gauss]}
    (dest / "state.json").write_text(json.dumps(asdict(state)))
    return dest


def upload_to(out: str) -> Callable | None:
    """Ray Train's upload of a checkpoint into an s3:// OUT (train.report's checkpoint_upload_fn),
    each file retried with storage's policy: Ray Train's own copy tries pyarrow's few times, and
    an endpoint refusing for seconds then fails the report, so Ray Train restarts the learner from
    the previous checkpoint (the steps since then redone, and a restart while the endpoint is down
    fails again); this waits instead, or ends the run with one line naming the checkpoint.
    state.json goes last (runs.newest_complete reads a folder without it as cut). None for a local
    OUT: Ray Train's copy (a full disk is caught around it)."""
    from pipelines.storage import is_s3

    if not is_s3(out):
        return None

    def upload(checkpoint, name: str):
        from ray.train import Checkpoint

        from pipelines.storage import resolve, upload_dir

        uri = f"{out.rstrip('/')}/learner/{name}"  # launch.fit's RunConfig: storage OUT, name `learner`
        upload_dir(Path(checkpoint.path), uri, last="state.json")
        fs, path = resolve(uri)
        return Checkpoint(path, filesystem=fs)

    return upload


def read_state(src: Path, fingerprint: str) -> LearnerState:
    """The checkpoint's state; a corrupt one or one of another model is a one-line error."""
    try:
        state = LearnerState(**json.loads((src / "state.json").read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"checkpoint '{src}': unreadable ({e.__class__.__name__})") from None
    if state.fingerprint != fingerprint:
        raise UserError(f"checkpoint '{src}': of another model (fingerprint {state.fingerprint}, "
                        f"this model's is {fingerprint})")
    return state


def load(src: Path, policy, fingerprint: str) -> LearnerState:
    state = read_state(src, fingerprint)
    try:
        policy.load_training_state(torch.load(src / "learner.pt", map_location="cpu", weights_only=True))
    except (OSError, RuntimeError, ValueError, KeyError, EOFError) as e:
        raise UserError(f"checkpoint '{src}': corrupt or not this learner's ({str(e).splitlines()[0][:120]})") from None
    if state.rng:
        torch.set_rng_state(torch.tensor(state.rng["torch"], dtype=torch.uint8))
        v, ints, gauss = state.rng["python"]
        random.setstate((v, tuple(ints), gauss))
    return state
