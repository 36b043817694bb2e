"""DeepSpeed's real per-step traffic and per-rank bytes at real size, by the rules the lab verified, beside
the paper's accounting.

The rules are `ds_traffic`'s: the lab's predictions call the same functions, and tests/test_lab.py checks
them message by message on real ranks. Here they run on a GPT of about 7.5 B parameters with DeepSpeed's
default knobs. Two things are set as the lab sets them: bf16 with Adam (2 + 2 + 12 bytes per parameter),
and at stage 3 every parameter sharded (`stage3_param_persistence_threshold: 0`; by default DeepSpeed
would keep the norms and biases whole, 0.02% of this model's parameters).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from math import prod

from .. import checks, communication, memory, tables
from ..recipes import MIXED_ADAM
from ..stages import Stage
from . import ds_traffic
from .step_choices import MODELS

BF16, FP32_SCALARS = 2, 12  #: bytes per element: bf16 weights and gradients; fp32 master weights and moments
#: The course's 7.5 B model, the `step` command's default: 32 blocks × 4,352, Ψ = 7,493,452,032.
SHAPE = MODELS["7.5b"]
Messages = tuple[tuple[str, int], ...]
WHOLE_KNOBS = ("reduce_bucket_size", "prefetch_bucket_size", "max_live_parameters", "max_reuse_distance")


@dataclass(frozen=True)
class Knobs:
    """The "zero_optimization" settings these rules read, in elements; the defaults are DeepSpeed's."""

    reduce_bucket_size: int = 500_000_000  #: gradient bucket, all stages
    multi_rank_all_reduce: bool = True  #: `use_multi_rank_bucket_allreduce`: stages 1/2 all-reduce buckets
    prefetch_bucket_size: int = 50_000_000  #: `stage3_prefetch_bucket_size`
    max_live_parameters: int = 1_000_000_000  #: `stage3_max_live_parameters`
    max_reuse_distance: int = 1_000_000_000  #: `stage3_max_reuse_distance`

    def __post_init__(self):
        for name in WHOLE_KNOBS:
            checks.whole(name, getattr(self, name), low=1 if name == "reduce_bucket_size" else 0, high=10**15)
        if not isinstance(self.multi_rank_all_reduce, bool):
            raise TypeError(
                f"multi_rank_all_reduce must be True or False, got {self.multi_rank_all_reduce!r}"
            )


def gpt_shapes(
    blocks: int = SHAPE.layers, hidden: int = SHAPE.hidden, vocab: int = SHAPE.vocab
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """A GPT's modules with parameters, in forward order, as tensor shapes (rows first): the embedding, then
    per block a norm, the QKV and output projections, a norm and the two MLP Linears (weight, then bias)."""
    checks.whole("blocks", blocks, low=1, high=10_000)
    checks.whole("hidden", hidden, low=1, high=10**6)
    checks.whole("vocab", vocab, low=1, high=10**7)
    h = hidden
    block = (
        ((h,), (h,)),
        ((3 * h, h), (3 * h,)),
        ((h, h), (h,)),
        ((h,), (h,)),
        ((4 * h, h), (4 * h,)),
        ((h, 4 * h), (h,)),
    )
    return (((vocab, h),), *(block * blocks))


def gpt_modules(
    blocks: int = SHAPE.layers, hidden: int = SHAPE.hidden, vocab: int = SHAPE.vocab
) -> tuple[tuple[int, ...], ...]:
    """`gpt_shapes` as tensor sizes: by default the course's 7.5 B model, Ψ = 7,493,452,032."""
    return tuple(tuple(prod(shape) for shape in module) for module in gpt_shapes(blocks, hidden, vocab))


@dataclass(frozen=True)
class StageTraffic:
    """One stage at real size: what DeepSpeed sends and holds per rank, and the paper's accounting."""

    stage: Stage  #: 0 to 3
    messages: Messages  #: DeepSpeed's bf16 messages in a steady-state step: (collective, elements)
    params: int  #: Ψ
    weights: int  #: bytes of bf16 weights per rank, padding included
    gradients: int  #: bytes of bf16 gradients the fullest rank keeps after backward
    optimizer: int  #: bytes of fp32 master weights and Adam moments per rank
    paper_bytes: Fraction  #: the paper's per-GPU bytes for the stage (2 + 2 + 12, even split)
    paper_sent: int  #: the paper's elements sent per step: 2Ψ, or 3Ψ at stage 3

    @property
    def sent(self) -> int:
        """DeepSpeed's elements sent per step by the paper's count: an all-reduce twice its size."""
        return sum(self.sent_in(op) for op in {op for op, _ in self.messages})

    def sent_in(self, op: str) -> int:
        """`sent`, in `op` messages alone ("all_reduce", "all_gather", "reduce_scatter")."""
        return sum((2 if name == "all_reduce" else 1) * n for name, n in self.messages if name == op)

    @property
    def held(self) -> int:
        """Bytes of weights, gradients and optimizer state on the fullest rank."""
        return self.weights + self.gradients + self.optimizer

    @property
    def before_reduction(self) -> int | None:
        """Stage 1's bytes per rank as it starts reducing, at the end of backward, with every bf16 gradient
        still whole (its peak; the lab measures the same moment); None at other stages."""
        return self.weights + BF16 * self.params + self.optimizer if self.stage == 1 else None


def _held(modules, stage: int, gpus: int) -> tuple[int, int, int]:
    """(weights, fullest rank's gradients, optimizer) bytes per rank after the backward pass."""
    sizes = [n for m in modules for n in m]
    psi = sum(sizes)
    if stage == 0:
        return BF16 * psi, BF16 * psi, FP32_SCALARS * psi
    if stage in (1, 2):
        flat = ds_traffic.padded_flat(psi, gpus)
        touched = max(ds_traffic.touched_gradients(sizes, gpus, rank) for rank in range(gpus))
        return BF16 * flat, BF16 * touched, FP32_SCALARS * flat // gpus
    mine = ds_traffic.pieces(sizes, gpus) // gpus
    return BF16 * mine, BF16 * mine, FP32_SCALARS * mine


def _messages(modules, stage: int, gpus: int, knobs: Knobs) -> list[tuple[str, int]]:
    """DeepSpeed's bf16 messages in a steady-state step on more than one rank."""
    psi = sum(n for m in modules for n in m)
    bucket = knobs.reduce_bucket_size
    if stage == 0:
        return [("all_reduce", psi)]
    if stage in (1, 2):
        reduces = ds_traffic.stage12_reduces(modules, stage, gpus, bucket, knobs.multi_rank_all_reduce)
        return reduces + [("all_gather", ds_traffic.padded_flat(psi, gpus))]
    sizes = [n for m in modules for n in m]
    scatters = [("reduce_scatter", n) for n in ds_traffic.stage3_reduce_scatters(modules, gpus, bucket)]
    gathers = ds_traffic.stage3_gathers(
        modules, knobs.prefetch_bucket_size, knobs.max_live_parameters, knobs.max_reuse_distance
    )
    return scatters + [("all_gather", ds_traffic.pieces([sizes[i] for i in g], gpus)) for g in gathers]


def _checked(modules, knobs: Knobs) -> tuple[tuple[int, ...], ...]:
    """`modules` as tuples (default: the 7.5 B model), after checking them and `knobs`."""
    modules = gpt_modules() if modules is None else tuple(tuple(m) for m in modules)
    if not isinstance(knobs, Knobs):
        raise TypeError(f"knobs must be a ds_scale.Knobs, got {type(knobs).__name__}")
    if not modules or not all(m and all(isinstance(n, int) and n >= 1 for n in m) for m in modules):
        raise ValueError(
            "modules must be a non-empty list of tuples of tensor sizes, each a whole number ≥ 1"
        )
    return modules


@dataclass(frozen=True)
class Reuse:
    """Stage 3's weights gathered once a step: kept whole from their forward use to their backward use."""

    params: int  #: Ψ
    by_distance: int  #: elements kept as their reuse distance is below the max reuse distance
    by_prefetch: int  #: further elements kept as the prefetcher had already walked past their backward use

    @property
    def gathered_twice(self) -> int:
        """Elements gathered again for the backward pass."""
        return self.params - self.by_distance - self.by_prefetch


def _once(modules, prefetch: int, knobs: Knobs) -> int:
    """Elements that stage 3 all-gathers exactly once in a steady-state step."""
    gathers = ds_traffic.stage3_gathers(
        modules, prefetch, knobs.max_live_parameters, knobs.max_reuse_distance
    )
    times = Counter(i for g in gathers for i in g)
    sizes = [n for m in modules for n in m]
    return sum(sizes[i] for i, n in times.items() if n == 1)


def reuse(modules=None, knobs: Knobs = Knobs()) -> Reuse:
    """Which weights stage 3 keeps for backward (default: the 7.5 B model, DeepSpeed's defaults), and why.

    Without prefetching, only the max reuse distance keeps a tensor; with it, the prefetcher may also walk
    past a tensor's backward use before the tensor is released, which keeps it too."""
    modules = _checked(modules, knobs)
    by_distance = _once(modules, 0, knobs)
    return Reuse(
        sum(n for m in modules for n in m),
        by_distance,
        _once(modules, knobs.prefetch_bucket_size, knobs) - by_distance,
    )


def sharded_held(modules, knobs: Knobs, threshold: int) -> tuple[list, list[frozenset[int]]]:
    """The modules' tensors over `threshold` elements (the rest stay whole on every rank, never gathered),
    and which of them (flattened indices) stage 3 holds gathered at each entry of `trace`."""
    modules = _checked(modules, knobs)
    checks.whole("threshold", threshold, low=0, high=10**15)
    big = [tuple(n for n in m if n > threshold) for m in modules]
    knobs_in_order = (knobs.prefetch_bucket_size, knobs.max_live_parameters, knobs.max_reuse_distance)
    return big, ds_traffic.stage3_held(big, *knobs_in_order)


def gathered_in_backward(
    modules=None, knobs: Knobs = Knobs(), *, threshold: int = 100_000, last: int = 6
) -> int:
    """The most weight elements stage 3 holds gathered while the backward pass runs the model's last `last`
    modules (default: the 7.5 B model's block 32 under DeepSpeed's defaults, which keep tensors of up to
    `threshold` elements whole on every rank, so never gathered)."""
    big, held = sharded_held(modules, knobs, threshold)
    checks.whole("last", last, low=1, high=len(big))
    sizes = [n for m in big for n in m]
    entries = (ds_traffic.backward_entry(len(big), len(big) - 1 - k) for k in range(last))
    return max(sum(sizes[i] for i in held[e]) for e in entries)


def held_at_loss(modules=None, knobs: Knobs = Knobs(), *, threshold: int = 100_000) -> dict[int, int]:
    """Weight elements stage 3 holds gathered as the loss runs, between the passes, by module (its index in
    `modules`, in forward order: for `gpt_modules`, 0 the embedding, then six per block)."""
    big, held = sharded_held(modules, knobs, threshold)
    owner = [(m, n) for m, tensors in enumerate(big) for n in tensors]  # each tensor's module and size
    at_loss = [owner[i] for i in sorted(held[ds_traffic.loss_entry(len(big))])]
    return {m: sum(n for k, n in at_loss if k == m) for m in dict.fromkeys(m for m, _ in at_loss)}


def gathered_at_loss(modules=None, knobs: Knobs = Knobs(), *, threshold: int = 100_000) -> int:
    """Weight elements stage 3 holds gathered as the loss runs, between the forward and backward passes."""
    return sum(held_at_loss(modules, knobs, threshold=threshold).values())


def predict(modules=None, gpus: int = 8, knobs: Knobs = Knobs()) -> tuple[StageTraffic, ...]:
    """Every stage's real traffic and bytes per rank for `modules` (default: the 7.5 B model) on `gpus`."""
    modules = _checked(modules, knobs)
    checks.whole("gpus", gpus, low=2, high=1_000_000)
    psi = sum(n for m in modules for n in m)
    out = []
    for stage in Stage:
        paper = memory.per_gpu(psi, gpus, stage, MIXED_ADAM).total
        messages = tuple(_messages(modules, int(stage), gpus, knobs))
        out.append(
            StageTraffic(
                stage,
                messages,
                psi,
                *_held(modules, int(stage), gpus),
                paper,
                communication.multiple_of_psi(communication.collectives(stage)) * psi,
            )
        )
    return tuple(out)


def _gb(nbytes: int) -> str:
    """Bytes as decimal GB (10⁹), two places."""
    return f"{nbytes / 1e9:.2f}"


@dataclass(frozen=True, repr=False)
class Comparison:
    """The per-stage predictions as a table a beginner can read: the paper's column beside DeepSpeed's."""

    rows: tuple[StageTraffic, ...]  #: one per stage
    gpus: int  #: ranks

    def grid(self) -> list[list[str]]:
        """Header and one line per stage, as strings (GB are 10⁹ bytes; traffic in multiples of Ψ)."""
        head = [
            "stage",
            "paper: GB per GPU",
            "DeepSpeed, predicted: GB per rank after backward",
            "paper: sent",
            "DeepSpeed, predicted: sent",
        ]
        lines = [
            [
                f"ZeRO-{int(r.stage)}",
                _gb(float(r.paper_bytes)),
                _gb(r.held)
                + (
                    ""
                    if r.before_reduction is None
                    else f" (before its reduction: {_gb(r.before_reduction)})"
                ),
                f"{r.paper_sent / r.params:.2f}Ψ",
                f"{r.sent / r.params:.2f}Ψ",
            ]
            for r in self.rows
        ]
        return [head, *lines]

    def _repr_markdown_(self) -> str:
        grid = self.grid()
        return tables.markdown(grid, ["---"] * len(grid[0]))

    def __repr__(self) -> str:
        return "\n".join("  ".join(line) for line in self.grid())


def comparison(modules=None, gpus: int = 8, knobs: Knobs = Knobs()) -> Comparison:
    """`predict`, ready to show."""
    return Comparison(predict(modules, gpus, knobs), gpus)
