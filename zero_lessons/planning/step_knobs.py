"""The frameworks a step can run under, each a frozen set of knobs whose defaults are the framework's own.

Defaults were read from the installed sources: PyTorch 2.13 (`torch/nn/parallel/distributed.py`,
`torch/distributed/fsdp/_fully_shard/_fully_shard.py`) and DeepSpeed 0.19.8
(`deepspeed/runtime/zero/config.py`). Sizes in DeepSpeed's knobs count elements, not bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from fractions import Fraction

from .. import checks, units
from ..stages import Stage, as_stage

#: Largest DDP bucket cap accepted, in MiB (a tebibyte).
MAX_BUCKET_MB = 2**20


def _flag(name: str, value: object, *, none: bool = False) -> None:
    """Refuse anything but True or False (or None, when `none`), naming the knob."""
    if not (isinstance(value, bool) or (none and value is None)):
        allowed = "True, False or None" if none else "True or False"
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} {value!r}")


def _elements(name: str, value: object, low: int = 0) -> int:
    """A DeepSpeed size knob: a whole number of elements from `low` to 10**15."""
    return checks.whole(name, value, low=low, high=checks.MAX_PARAMS)


@dataclass(frozen=True)
class Paper:
    """The ZeRO paper's accounting, the naive baseline: its table at every moment, plus activations.

    Not how any framework behaves: no buckets, no fp32 copies, and under stage 3 one layer's
    weights gathered at a time. Set it beside a real framework to see what the table leaves out.
    """

    stage: Stage = Stage.ZERO3  #: the paper's stage: 0 (baseline) to 3 (P_os+g+p)

    def __post_init__(self):
        object.__setattr__(self, "stage", as_stage(self.stage))

    @property
    def label(self) -> str:
        """E.g. "the paper's ZeRO-3"."""
        return f"the paper's {self.stage.label}"


@dataclass(frozen=True)
class DDP:
    """PyTorch DistributedDataParallel: every rank holds everything, gradients are all-reduced in buckets."""

    #: MiB per gradient bucket (distributed.py: `_DEFAULT_BUCKET_CAP_MB = 25`); splits traffic, not memory
    bucket_cap_mb: int | Fraction = 25
    #: let param.grad be views into the buckets (DistributedDataParallel.__init__ default: False)
    gradient_as_bucket_view: bool = False

    def __post_init__(self):
        cap = checks.amount("bucket_cap_mb", self.bucket_cap_mb, positive=True)
        if cap > MAX_BUCKET_MB:
            raise ValueError(f"bucket_cap_mb must be a number > 0 and at most {MAX_BUCKET_MB:,}, got {cap}")
        object.__setattr__(self, "bucket_cap_mb", units.tidy(cap))
        _flag("gradient_as_bucket_view", self.gradient_as_bucket_view)

    @property
    def label(self) -> str:
        """The name a reader knows it by."""
        return "PyTorch DDP"


@dataclass(frozen=True)
class DeepSpeed:
    """DeepSpeed's ZeRO optimizer, stage 1, 2 or 3, with the knobs of its "zero_optimization" config.

    Stage 3's knobs (prefetch to sub-group size) are accepted at every stage, as DeepSpeed accepts
    them, and used at stage 3 only.
    """

    stage: Stage = Stage.ZERO2  #: 1, 2 or 3
    reduce_bucket_size: int = 500_000_000  #: elements per gradient bucket (config.py: pp_int(5e8), gt=0)
    allgather_bucket_size: int = 500_000_000  #: elements per weight all-gather (config.py: pp_int(5e8), ge=0)
    #: overlap reduction with backward; None: True at stage 3 only (config.py: validator overlap_comm_valid)
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True  #: copy gradients into one preallocated bucket (config.py: True)
    prefetch_bucket_size: int = 50_000_000  #: stage 3: elements fetched ahead of use (config.py: pp_int(5e7))
    #: stage 3: gathered elements that stop prefetching (config.py: pp_int(1e9))
    max_live_parameters: int = 1_000_000_000
    #: stage 3: keep a tensor reused within this many elements (pp_int(1e9))
    max_reuse_distance: int = 1_000_000_000
    #: stage 3: tensors of at most this many elements stay whole (pp_int(1e5))
    param_persistence_threshold: int = 100_000
    #: stage 3: elements the optimizer steps at a time (config.py: pp_int(1e9))
    sub_group_size: int = 1_000_000_000

    def __post_init__(self):
        stage = as_stage(self.stage)
        if stage == Stage.DP:
            raise ValueError(
                "stage must be 1, 2 or 3 for DeepSpeed (use DDP for plain data parallelism), got 0"
            )
        object.__setattr__(self, "stage", stage)
        object.__setattr__(
            self, "reduce_bucket_size", _elements("reduce_bucket_size", self.reduce_bucket_size, low=1)
        )
        for name in (
            "allgather_bucket_size",
            "prefetch_bucket_size",
            "max_live_parameters",
            "max_reuse_distance",
            "param_persistence_threshold",
            "sub_group_size",
        ):
            object.__setattr__(self, name, _elements(name, getattr(self, name)))
        _flag("overlap_comm", self.overlap_comm, none=True)
        _flag("contiguous_gradients", self.contiguous_gradients)
        if self.overlap_comm is None:
            object.__setattr__(self, "overlap_comm", stage == Stage.ZERO3)

    @property
    def label(self) -> str:
        """E.g. "DeepSpeed ZeRO-3"."""
        return f"DeepSpeed {self.stage.label}"


@dataclass(frozen=True)
class FSDP2:
    """PyTorch's fully_shard (FSDP2), applied to every layer, each layer one communication group."""

    #: free each layer's gathered weights after its forward; None means True for every non-root module
    #: (_fully_shard.py); the root here holds no parameters of its own, so None acts as True
    reshard_after_forward: bool | None = None

    def __post_init__(self):
        if isinstance(self.reshard_after_forward, int) and not isinstance(self.reshard_after_forward, bool):
            raise ValueError(
                f"reshard_after_forward must be True, False or None (resharding to a smaller "
                f"world size is left out), got {self.reshard_after_forward}"
            )
        _flag("reshard_after_forward", self.reshard_after_forward, none=True)

    @property
    def reshards(self) -> bool:
        """Whether every layer frees its gathered weights after its forward."""
        return self.reshard_after_forward is not False

    @property
    def label(self) -> str:
        """The name a reader knows it by."""
        return "PyTorch FSDP2"


#: Every framework a timeline can follow.
FRAMEWORKS = (Paper, DDP, DeepSpeed, FSDP2)
Framework = Paper | DDP | DeepSpeed | FSDP2


def knob_values(framework: Framework) -> dict:
    """The framework's knobs by name, as set (a Stage shows as its number)."""
    return {
        f.name: int(v) if isinstance(v, Stage) else v
        for f in fields(framework)
        for v in [getattr(framework, f.name)]
    }
