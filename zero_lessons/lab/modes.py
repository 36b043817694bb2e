"""The lab's modes, in one table: each framework setup, the name a reader knows it by, the paper stage it is
closest to, and how it is set up (PyTorch's wrapping or DeepSpeed's config). No torch.

Adding a mode is a row here and, where its behaviour is new, a rule in its framework's prediction module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import checks
from ..planning import ds_scale
from ..recipes import FP32_ADAM, MIXED_ADAM, Recipe
from ..stages import Stage
from .model import MODEL

PYTORCH, DEEPSPEED = "pytorch", "deepspeed"
#: The recipe each framework's runs follow: fp32 Adam (4 + 4 + 8) for PyTorch; for DeepSpeed bf16 with
#: fp32 master weights (2 + 2 + 12).
RECIPES: dict[str, Recipe] = {PYTORCH: FP32_ADAM, DEEPSPEED: MIXED_ADAM}
WRAPPERS = ("ddp", "zero_redundancy_optimizer", "fully_shard")


@dataclass(frozen=True)
class Wrapping:
    """How a PyTorch mode wraps the model."""

    wrapper: (
        str  #: "ddp", "zero_redundancy_optimizer" (DDP plus the sharded optimizer) or "fully_shard" (FSDP2)
    )
    reshard_after_forward: bool = (
        True  #: fully_shard: free gathered weights after forward, gather again for backward
    )
    param_dtype: str | None = (
        None  #: fully_shard: MixedPrecisionPolicy's param_dtype ("bfloat16"), None for fp32
    )
    bucket_cap_mb: float | None = None  #: ddp: DistributedDataParallel's bucket_cap_mb, None for its default

    def __post_init__(self):
        if self.wrapper not in WRAPPERS:
            raise ValueError(f"wrapper must be one of {', '.join(WRAPPERS)}, got {self.wrapper!r}")


@dataclass(frozen=True)
class Mode:
    """One framework setup the lab runs."""

    key: str  #: the name on the command line, e.g. "ds_zero3"
    name: str  #: the name a reader knows, e.g. "DeepSpeed ZeRO-3, threshold 0"
    stage: Stage  #: the paper's nearest stage; for DeepSpeed also the stage it configures
    wrapping: Wrapping | None = None  #: PyTorch modes: how the model is wrapped
    zero: dict = field(
        default_factory=dict, hash=False
    )  #: DeepSpeed modes: "zero_optimization" beyond the stage

    @property
    def framework(self) -> str:
        """PYTORCH for a wrapped model, else DEEPSPEED."""
        return PYTORCH if self.wrapping else DEEPSPEED

    @property
    def recipe(self) -> Recipe:
        """The bytes per parameter its runs keep, by the package's recipes."""
        return RECIPES[self.framework]

    @property
    def zero_config(self) -> dict:
        """DeepSpeed's "zero_optimization" section: the stage, then this mode's settings."""
        return {"stage": int(self.stage), **self.zero}


#: The lab's DeepSpeed gradient bucket, in elements. It holds the model's largest tensor (900) but not the
#: model (1,505), as DeepSpeed's default (500,000,000) holds any one tensor of a 7.5 B model but not the
#: model; so the lab's gradients fill several buckets, as at real size. (`allgather_bucket_size` stays at
#: its default: DeepSpeed reads it only on a torch without `all_gather_into_tensor`.)
BUCKETS = {"reduce_bucket_size": 1_000}
#: Stage 3's prefetch and live-parameter limits: about a third and two thirds of the model (the defaults,
#: 50,000,000 and 1,000,000,000, are a small part of a 7.5 B model; in the lab one tensor is already a lot).
PREFETCH = {"stage3_prefetch_bucket_size": 500, "stage3_max_live_parameters": 1_000}
#: Every stage 3 parameter sharded (DeepSpeed keeps ones of up to 100,000 elements whole by default).
SHARDED = {"stage3_param_persistence_threshold": 0}

MODES: tuple[Mode, ...] = (
    Mode("ddp", "DDP", Stage.DP, Wrapping("ddp")),
    Mode(
        "zero_redundancy_optimizer",
        "ZeroRedundancyOptimizer",
        Stage.ZERO1,
        Wrapping("zero_redundancy_optimizer"),
    ),
    Mode("fsdp_reshard", "FSDP2 fully_shard", Stage.ZERO3, Wrapping("fully_shard")),
    Mode(
        "fsdp_no_reshard",
        "FSDP2, reshard_after_forward=False",
        Stage.ZERO2,
        Wrapping("fully_shard", reshard_after_forward=False),
    ),
    Mode(
        "fsdp_bf16",
        "FSDP2, bf16 MixedPrecisionPolicy",
        Stage.ZERO3,
        Wrapping("fully_shard", param_dtype="bfloat16"),
    ),
    Mode("ds_zero0", "DeepSpeed ZeRO-0", Stage.DP),
    Mode("ds_zero1", "DeepSpeed ZeRO-1", Stage.ZERO1, zero=BUCKETS),
    Mode("ds_zero2", "DeepSpeed ZeRO-2", Stage.ZERO2, zero=BUCKETS),
    Mode(
        "ds_zero2_reduce",
        "DeepSpeed ZeRO-2, reduce to owners",
        Stage.ZERO2,
        zero={**BUCKETS, "use_multi_rank_bucket_allreduce": False},
    ),
    Mode("ds_zero3", "DeepSpeed ZeRO-3, threshold 0", Stage.ZERO3, zero={**BUCKETS, **PREFETCH, **SHARDED}),
    Mode(
        "ds_zero3_short_reuse",
        "DeepSpeed ZeRO-3, max reuse distance 400",
        Stage.ZERO3,
        zero={**BUCKETS, **PREFETCH, **SHARDED, "stage3_max_reuse_distance": 400},
    ),
    Mode(
        "ds_zero3_reuse0",
        "DeepSpeed ZeRO-3, max reuse distance 0",
        Stage.ZERO3,
        zero={**BUCKETS, **PREFETCH, **SHARDED, "stage3_max_reuse_distance": 0},
    ),
    Mode(
        "ds_zero3_no_reuse",
        "DeepSpeed ZeRO-3, no reuse or prefetch",
        Stage.ZERO3,
        zero={
            **BUCKETS,
            **PREFETCH,
            **SHARDED,
            "stage3_max_reuse_distance": 0,
            "stage3_prefetch_bucket_size": 0,
        },
    ),
    # DeepSpeed's default threshold: parameters of up to 100,000 elements stay whole.
    Mode(
        "ds_zero3_persistent",
        "DeepSpeed ZeRO-3, default threshold",
        Stage.ZERO3,
        zero={**BUCKETS, **PREFETCH},
    ),
)
BY_KEY: dict[str, Mode] = {mode.key: mode for mode in MODES}
#: Key -> name, in report order: every mode, PyTorch's, and DeepSpeed's.
MODE_NAMES: dict[str, str] = {mode.key: mode.name for mode in MODES}
TORCH_NAMES: dict[str, str] = {mode.key: mode.name for mode in MODES if mode.framework == PYTORCH}
DEEPSPEED_NAMES: dict[str, str] = {mode.key: mode.name for mode in MODES if mode.framework == DEEPSPEED}


def get(key: str) -> Mode:
    """The mode called `key`."""
    if not isinstance(key, str) or key not in BY_KEY:
        raise ValueError(f"mode must be one of {', '.join(BY_KEY)}, got {checks.shown(key)}")
    return BY_KEY[key]


#: `ds_scale.Knobs` field -> the "zero_optimization" key a lab mode sets it with.
KNOB_KEYS = {
    "reduce_bucket_size": "reduce_bucket_size",
    "multi_rank_all_reduce": "use_multi_rank_bucket_allreduce",
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "max_live_parameters": "stage3_max_live_parameters",
    "max_reuse_distance": "stage3_max_reuse_distance",
}


def ds_knobs(mode: str) -> ds_scale.Knobs:
    """A lab mode's DeepSpeed settings as `ds_scale.Knobs`; DeepSpeed's defaults where it says nothing."""
    setting = get(mode).zero
    return ds_scale.Knobs(**{knob: setting[key] for knob, key in KNOB_KEYS.items() if key in setting})


def deepspeed_config(mode: Mode) -> dict:
    """The whole DeepSpeed config of a DeepSpeed mode: bf16, torch's Adam, the lab model's batch and rate."""
    if mode.framework != DEEPSPEED:
        raise ValueError(f"mode must be a DeepSpeed mode, got {mode.key!r}")
    return {
        "train_micro_batch_size_per_gpu": MODEL.batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "Adam", "params": {"lr": MODEL.lr, "torch_adam": True, "adam_w_mode": False}},
        "zero_optimization": mode.zero_config,
        "steps_per_print": 10**9,
    }
