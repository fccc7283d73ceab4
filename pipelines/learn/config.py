"""The `learn:` config section: optimizer, loss, packing, what is trained, checkpoints, pushes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from pipelines.typed import Strict


class LoraConfig(Strict):
    # Rank 8-32 with ~10x the full fine-tuning learning rate matches full RL ("LoRA without regret").
    rank: int = Field(16, gt=0)
    alpha: float = Field(32.0, gt=0)
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ContinuousConfig(Strict):
    """`memagent train --continuous` (pipelines/learn/continuous.py)."""

    poll_s: float = Field(60.0, gt=0)  # between listings of the task folder while nothing is new
    # A round's model is registered when the 95% interval of its paired held-out strict-score gain over
    # @production lies above this (its lower bound; learn/gate.verdict).
    margin: float = Field(0.02, ge=0)
    # Optimizer steps per round; None: one pass over the round's new rows (RL: rows /
    # rollout.batch_groups; SFT: learn.sft_epochs passes over their traces, at most learn.steps).
    steps: int | None = Field(None, gt=0)
    # The fixed held-out rows (`--heldout`); None: learn.task's eval split, built once in OUT.
    heldout: str | None = None
    eval_n: int = Field(64, gt=0)  # held-out rows scored per task


class PassFilterConfig(Strict):
    """RL on the questions that teach (pipelines/learn/teach.py): the starting model's pass rate on
    each training row, from `samples` rollouts, must lie in [low, high] for the row to be trained on."""

    samples: int = Field(4, gt=1)
    low: float = Field(0.01, ge=0, le=1)  # 0.01: drop the never-right rows
    high: float = Field(0.99, ge=0, le=1)  # 0.99: drop the always-right rows


class SftConfig(Strict):
    """What the warm start (`memagent train --sft`) does differently from RL; unset: learn:'s value.
    `memagent train` applies it once, at its start (LearnConfig.for_mode)."""

    lr: float | None = Field(2e-4, gt=0)  # SmolLM2: ten times RL's; supervised targets move less noisily
    steps: int | None = Field(120, gt=0)  # ~40 min here: the needle cells of benchmarks/learning.py
    threads: int | None = Field(2, gt=0)  # no rollout engine beside it: both cores (Ray Data keeps a CPU)
    checkpoint_every: int | None = Field(10, gt=0)  # each also scores the held-back slice, keeps the best


class LearnConfig(Strict):
    """Defaults: the SmolLM2-135M-Instruct recipe on 2 CPU cores (RL; SFT's differences in `sft:`).
    The paper's 7B settings (lr 1e-6, KL 0.001, every layer) are configs/cluster-qwen2.5-7b.yaml's."""

    lr: float = Field(2e-5, gt=0)  # RL of the top layers of a 135M model; the paper's 7B rate is 1e-6
    warmup_steps: int = Field(4, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    # Multi-Conv DAPO (MEMAGENT.md): decoupled clip bounds, k3 KL to a frozen reference when > 0.
    eps_low: float = Field(0.2, ge=0)
    eps_high: float = Field(0.28, ge=0)
    kl_coef: float = Field(0.0, ge=0)
    # Truncated importance sampling for the engine/learner mismatch: each token's surrogate times
    # min(pi_learner / pi_engine, tis_cap) (pipelines/learn/policy.py). None: off, until measured.
    tis_cap: float | None = Field(None, ge=1)
    # token_mean: the paper's (long documents, more conversations, weigh more); rollout_mean:
    # each rollout weighs the same whatever its number of chunks.
    loss_agg: Literal["token_mean", "rollout_mean"] = "token_mean"
    norm_std: bool = False  # Dr.GRPO: no division by the group's std
    # Reward cost per chunk read, subtracted from the answer's reward (agent.gates: exiting early pays).
    turn_cost: float = Field(0.0, ge=0)
    # Reward cost per memory turn that states a number its prompt does not hold (invented before the
    # needle was read, or cut short): pipelines/rollout/rewards.py. 0: off, until measured.
    ground_cost: float = Field(0.0, ge=0)
    # Tokens one micro-batch packs (prompt + response of whole conversations, no padding).
    # 1024: packed attention is T x T, so ~2 conversations per micro-batch step ~2-3x faster than 4096 on
    # CPU cores, and it bounds activation memory. A GPU takes far more (the cluster preset: 32768).
    token_budget: int = Field(1024, gt=0)
    dtype: Literal["float32", "bfloat16"] = "float32"
    # Mixed precision: bf16 matmuls over these float32 weights (pipelines/learn/forward.py); the loss
    # stays float32. ~2.5x faster steps on AVX512-BF16 cores, ~20x slower on AVX2-only ones, which
    # emulate bf16. auto: on where the worker computes bf16 natively (a GPU, engine.config.BF16_FLAGS).
    autocast: bool | Literal["auto"] = "auto"
    # Activation checkpointing per decoder layer: keeps only each layer's input and recomputes the
    # rest in backward (~1/3 more compute), so a long packed micro-batch fits a GPU.
    grad_checkpoint: bool = False
    # Cheaper steps: train only the top layers (freeze_layers lower decoder layers and the
    # embeddings stay fixed), or LoRA adapters (merged into plain HF folders when saved).
    freeze_layers: int = Field(20, ge=0)  # SmolLM2: train the top 10 of 30 layers, steps cost ~half
    lora: LoraConfig | None = None
    # Ray Train workers (gloo on CPU, NCCL on GPU). ddp: every rank holds the whole model and
    # gradients are summed over ranks after each rank's micro-batches; fsdp2: parameters,
    # gradients and optimizer state sharded over the ranks (pipelines/learn/sharding.py), for
    # models whose training state does not fit one device (the paper's 7B).
    num_workers: int = Field(1, gt=0)
    strategy: Literal["ddp", "fsdp2"] = "ddp"
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0)
    # How often Ray Train's controller reads the workers' reports. A worker's report waits until
    # the previous one is read (a queue of one), so Ray's default of 2 s held every step of a
    # quick run to 2 s (tiny models: 40 steps, 80 s lost); each read is one call per worker.
    report_poll_s: float = Field(0.2, gt=0)
    # Ray custom resources each Ray Train worker also reserves (ScalingConfig.resources_per_worker),
    # e.g. {"learner_node": 1}: places the learner on the nodes that offer them.
    worker_resources: dict[str, float] = {}
    # torch threads per learner worker; None: its CPUs, rounded up. More threads than CPUs is
    # how a 2-core machine trains on both cores while Ray Data keeps a CPU for the SFT traces
    # (Ray Data gets no budget when the learner reserves more than all but one CPU).
    threads: int | None = Field(None, gt=0)
    # The cores a learner worker's threads run on (CPU training; None: any). With
    # engine.cpu_cores, rollout and learner on disjoint cores of one node instead of contending.
    cpu_cores: tuple[int, ...] | None = None
    # Optimizer steps of a run (`--steps` overrides); the wall-clock bound (`--max-minutes`).
    steps: int = Field(60, gt=0)
    max_minutes: float | None = Field(None, gt=0)
    # Publish the policy every k steps; keep the last n versions on disk.
    push_every: int = Field(1, gt=0)
    keep_versions: int = Field(2, gt=0)
    checkpoint_every: int = Field(5, gt=0)  # an RL step takes minutes here: lose at most 4 to a stop
    max_failures: int = Field(2, ge=0)  # Ray Train restarts of a killed learner worker
    # Held-out evaluation every N steps (0: never), on eval_n rows of the eval split.
    eval_every: int = Field(10, ge=0)
    eval_n: int = Field(32, gt=0)
    # RL without signal: stop after this many groups in a row had equal rewards (dynamic sampling
    # drops them). An SFT model right 95% of the time drops 81% of its groups of 4: 32 in a row
    # happen once in ~900 such windows; a model that never earns a reward reaches it in minutes.
    max_dropped_groups: int = Field(32, gt=0)
    pass_filter: PassFilterConfig | None = None  # None: every row of the split (dynamic sampling still drops)
    status_s: float = Field(30.0, gt=0)  # a status line this often while RL waits for a batch
    # SFT warm start: passes over the traces, conversations per optimizer step, held-back share.
    sft_epochs: int = Field(1, gt=0)
    sft_batch: int = Field(32, gt=0)  # ~14K tokens of SmolLM2's short traces
    sft_heldout: float = Field(0.05, gt=0, lt=1)
    # Before any evidence, the traces' memory keeps the most question-like sentence read so far
    # instead of the initial memory (pipelines/learn/traces.py: Decoys): QA among distractors.
    sft_decoys: bool = False
    # The share of copy turns (a memory turn writing what the turn before wrote) SFT trains on, by
    # hash: with decoys, 40% of SQuAD's turns are copies and the model learned never to replace a
    # memory (benchmarks/results/learning/squad). The held-back loss keeps every turn.
    sft_copies: float = Field(1.0, gt=0, le=1)
    # [N, W]: the first N tokens of each SFT response weigh W times the rest in the loss (and the
    # held-back loss). A memory write's first tokens are where it chooses which sentence to keep;
    # the rest copies it, and token-mean loss is mostly that copying. None: every token alike.
    sft_lead: tuple[Annotated[int, Field(gt=0)], Annotated[float, Field(gt=0)]] | None = None
    seed: int = 0
    # Without --tasks: a train split built on the fly (documents inline) from these.
    task: str = "niah_single"  # or a comma list, e.g. "niah_single,niah_multikey" (rows interleaved)
    task_lengths: str | int = "512,768,1024"  # document lengths (K = 1024 tokens): 2-4 chunks of agent.chunk_size
    task_n: int = Field(256, gt=0)  # rows per length
    # The needle tasks' haystack: Paul Graham's essays (real text, whose sentences look like needles'
    # neighbours) or RULER's repeated noise sentences (the easy case).
    haystack: Literal["essay", "noise"] = "essay"
    # Length curriculum: with N > 0 the train split opens with N rows of each task (interleaved)
    # at the shortest length, then N at the next, and so on, before the rest with lengths
    # interleaved: RL starts at the fewest chunks and grows. 0: lengths interleaved throughout.
    curriculum: int = Field(0, ge=0)
    # The registered model's name in the MLflow registry (a new version per run).
    registry_name: str = "memagent"
    continuous: ContinuousConfig = ContinuousConfig()
    sft: SftConfig = SftConfig()

    def bf16_autocast(self, cpuinfo: str | None = None) -> bool:
        """autocast, with auto resolved for the machine this runs on (a learner: its worker's)."""
        if self.autocast != "auto":
            return self.autocast
        from pipelines.engine.config import native_bf16

        return native_bf16(self.use_gpu, cpuinfo)

    def for_mode(self, sft: bool) -> LearnConfig:
        """The settings one run uses: `sft:`'s over the rest for the warm start, the rest for RL."""
        if not sft:
            return self
        return self.model_copy(update={k: v for k, v in self.sft.model_dump().items() if v is not None})
