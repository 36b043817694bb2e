"""The DeepSpeed config keys that matter beyond the stage, with the package's numbers for one example model
at the default and one other value. No torch. Defaults are DeepSpeed 0.19.8's: `planning.step_knobs` (from
`runtime/zero/config.py`; overlap_comm's None is True at stage 3 only), else `runtime/constants.py`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property

from .. import checks, communication, memory, units
from ..planning import ds_config, offload
from ..planning.activations import Transformer
from ..planning.step import DeepSpeed, Timeline, transformer_model
from ..recipes import DEEPSPEED_FP32
from ..stages import Stage
from .example import GPUS, SHAPE, example_step, loss_bytes  # the example, shared with `baseline`
from .key_table import Table, markdown
from .precision import largest

KNOBS = DeepSpeed()  #: the package's DeepSpeed knobs at their defaults (stage 2)


@dataclass(frozen=True)
class Key:
    """One config key: where it sits, its default, what it changes, and a second value to compare."""

    path: str  #: where it sits in the config, e.g. "zero_optimization.reduce_bucket_size"
    default: object  #: DeepSpeed's default
    tried: object  #: the other value the numbers compare with the default
    changes: str  #: "memory", "traffic", "memory and traffic", "numerics", "host memory" or "nothing here"
    effect: str  #: what it changes, in one sentence
    knob: str | None = None  #: the `planning.step.DeepSpeed` knob that models it, if one does
    stage: int = 2  #: the stage its numbers are computed at
    required: bool = False  #: DeepSpeed has no default (None): a config must set it; `default` is ours

    @property
    def measure(self) -> str:
        """What its numbers measure (`MEASURES`): the peak per GPU for a step-model knob or the micro-batch,
        the rest otherwise (model state, traffic, numerics)."""
        return "peak" if self.knob or self.required else "other"


KEYS: tuple[Key, ...] = (
    Key("train_micro_batch_size_per_gpu", 1, 2, "memory", "samples per GPU per forward pass: the "
        "activations grow with it", required=True),
    Key("gradient_accumulation_steps", 1, 4, "traffic", "micro-batches per optimizer step: a larger batch "
        "with the same activations"),
    Key("bf16.enabled", False, True, "memory and traffic", "16-bit weights and gradients with fp32's "
        "exponent range; off by default, so DeepSpeed trains in fp32 unless a config turns bf16 or fp16 on"),
    Key("fp16.enabled", False, True, "numerics", "16-bit with a 5-bit exponent: needs loss scaling (dynamic, "
        "starting at 2**16, the key fp16.initial_scale_power = 16); overflowing steps are skipped"),
    Key("zero_optimization.overlap_comm", None, True, "memory", "reduce each bucket beside the backward "
        "pass's compute, not blocking it; at stages 1-2 a second bucket", "overlap_comm"),
    Key("zero_optimization.contiguous_gradients", KNOBS.contiguous_gradients, False, "memory", "copy each "
        "gradient into one preallocated bucket (no fragments); off, no bucket: gradients stay apart until a "
        "bucket's worth is ready to reduce", "contiguous_gradients"),
    Key("zero_optimization.reduce_bucket_size", KNOBS.reduce_bucket_size, 50_000_000, "memory and traffic",
        "elements reduced per call: a smaller bucket is reduced sooner", "reduce_bucket_size"),
    Key("zero_optimization.allgather_bucket_size", KNOBS.allgather_bucket_size, 50_000_000, "nothing here",
        "stages 1-2: elements per weight all-gather, ignored where PyTorch has all_gather_into_tensor, as "
        "here", "allgather_bucket_size"),
    Key("zero_optimization.offload_optimizer.device", "none", "cpu", "memory and traffic", "gradient "
        "and optimizer shards, and the step, on the host"),
    Key("zero_optimization.offload_optimizer.pin_memory", False, True, "host memory", "page-locked host "
        "buffers: faster copies, never swapped out"),
    Key("zero_optimization.stage3_prefetch_bucket_size", KNOBS.prefetch_bucket_size, 0, "memory", "stage 3: "
        "elements fetched ahead, so gathers overlap compute; 0: each waits", "prefetch_bucket_size", 3),
    Key("zero_optimization.stage3_max_live_parameters", KNOBS.max_live_parameters, 100_000_000, "memory",
        "stage 3: gathered elements at which prefetch stops; lower, less overlap", "max_live_parameters", 3),
    Key("zero_optimization.stage3_max_reuse_distance", KNOBS.max_reuse_distance, 0, "memory and traffic",
        "stage 3: keep a gathered weight if it is used again within this many elements; 0: gather again",
        "max_reuse_distance", 3),
    Key("zero_optimization.stage3_param_persistence_threshold", KNOBS.param_persistence_threshold,
        20_000_000, "memory and traffic", "stage 3: tensors up to this many elements stay whole on every "
        "GPU, in no gather", "param_persistence_threshold", 3),
    Key("zero_optimization.sub_group_size", KNOBS.sub_group_size, 100_000_000, "memory", "stage 3: "
        "elements the optimizer steps at a time", "sub_group_size", 3),
)  # fmt: skip


def _step(key: Key, value: object) -> tuple[Transformer, Timeline]:
    """The example's shape and step with `key` at `value`, checked first: a bad value gets its own error."""
    shape = replace(SHAPE, micro_batch=value) if key.path == "train_micro_batch_size_per_gpu" else SHAPE
    return shape, example_step(shape, DeepSpeed(stage=key.stage, **({key.knob: value} if key.knob else {})))


def peak(key: Key, value: object, loss: bool = False) -> Fraction:
    """Peak bytes per GPU over one step of the example, with `key` at `value`; with `loss`, a cross-entropy's
    copies of the logits counted after the forward pass, as lesson 14 counts them."""
    shape, line = _step(key, value)
    return line.peak_with_loss(loss_bytes(shape)) if loss else line.peak.total


def _shown(value: object) -> str:
    """A key's value as a reader types it: whole numbers with thousands separators."""
    return f"{value:,}" if type(value) is int else str(value)


def default_shown(key: Key) -> str:
    """A key's default as the table shows it; None (overlap_comm's) with what DeepSpeed makes of it."""
    if key.required:  # set it, or train_batch_size
        return f"none, required; {key.default} here"
    if key.default is not None:
        return _shown(key.default)
    at = [getattr(DeepSpeed(stage=stage), key.knob) for stage in (2, 3)]
    return f"None: {at[0]} at stages 0-2, {at[1]} at 3"


def peak_parts(key: Key, value: object) -> dict[str, Fraction]:
    """The peak's bytes per GPU by kind ("gradient buckets", ...), with `key` at `value`."""
    top = _step(key, value)[1].peak
    return {part.kind: Fraction(top.bytes_of(part.kind)) for part in top.parts}


def _with_loss(key: Key) -> str:
    """The key's peak per GPU once lesson 14's loss is counted, at the default → tried, and its stage."""
    at = (_gb(peak(key, value, loss=True)) for value in (key.default, key.tried))
    return f"stage {key.stage}: " + " → ".join(at)


def _unsaid(cell: str, prefixes: tuple[str, ...]) -> str:
    """`cell` without the first of `prefixes` it starts with: a table of one stage need not say it."""
    return next((cell.removeprefix(p) for p in prefixes if cell.startswith(p)), cell)


def _gb(value) -> str:
    """Bytes as decimal GB with two decimals."""
    return f"{float(Fraction(value) / units.GB):.2f} GB"


#: Two ways to count traffic: the paper's collectives, and DeepSpeed's defaults (3Ψ at stages 1-2; lesson 11)
ACCOUNTS = {"ZeRO paper": communication.collectives, "DeepSpeed default": communication.deepspeed_collectives}


def sent(stage: int, micro_batches: int, account: str) -> Fraction:
    """Elements one GPU sends per optimizer step of `micro_batches`, in units of Ψ, counted by `account`:
    per-micro-batch collectives repeat. No stage 3: its traffic depends on the model's size (lesson 11)."""
    checks.choice("account", account, ACCOUNTS)
    if type(stage) is not int or not 0 <= stage <= 2:
        raise ValueError(f"stage must be 0, 1 or 2, got {checks.shown(stage)}")
    repeats = checks.whole("micro_batches", micro_batches, high=10**6)
    plan = ACCOUNTS[account](Stage(stage))
    return Fraction(sum(c.multiple * (repeats if c.per_micro_batch else 1) for c in plan))


def _psi(multiple: Fraction) -> str:
    """A multiple of Ψ as shown: 0.75Ψ."""
    return f"{float(multiple):g}Ψ"


def numbers(key: Key) -> str:
    """The package's numbers for the example at the default and at the tried value, in a few words."""
    psi = transformer_model(SHAPE).params
    if key.path == "gradient_accumulation_steps":
        one, many, account = key.default, key.tried, "DeepSpeed default"
        return f"sent per micro-batch, {account}: " + "; ".join(
            f"stage {s} {_psi(sent(s, one, account) / one)} → {_psi(sent(s, many, account) / many)}"
            for s in (1, 2)
        )
    if key.path in ("bf16.enabled", "fp16.enabled"):
        mixed, fp32 = (memory.per_gpu(psi, GPUS, Stage(2), r).total for r in ("mixed-adam", DEEPSPEED_FP32))
        if key.path == "fp16.enabled":
            return (
                "fp16 against bf16, not the default: the same bytes; largest value "
                f"{largest('float16'):,} in fp16, {float(largest('bfloat16')):.3g} in bf16"
            )
        sends = sent(2, 1, "DeepSpeed default") * psi  # elements, in the config's dtype (its default)
        return (
            f"stage 2 model state per GPU: {_gb(fp32)} (fp32, with a cloned fp32 master) → {_gb(mixed)} "
            f"(bf16, fp32 master); stage 2 sends {_psi(sends / psi)} per step, in the training "
            f"dtype: {_gb(4 * sends)} → {_gb(2 * sends)}"
        )
    if key.path.endswith("offload_optimizer.device"):
        two = (psi, GPUS, Stage(2))
        gpu, held = offload.offloaded(*two)[0], memory.per_gpu(*two).total
        link, code = offload.link_bytes(*two), offload.deepspeed_pcie_bytes(*two)
        return (
            f"stage 2 model state per GPU: {_gb(held)} → {_gb(gpu.total)}; over PCIe per step "
            f"{_gb(code)} by DeepSpeed's code ({_gb(link)} by the package's count)"
        )
    if key.path.endswith("pin_memory"):
        return "no change on the GPU; the host buffers are page-locked"
    shown = f"peak per GPU at stage {key.stage}: {_gb(peak(key, key.default))} → {_gb(peak(key, key.tried))}"
    if key.path.endswith("contiguous_gradients"):
        (on, off), wait = (peak_parts(key, v) for v in (key.default, key.tried)), "unreduced gradients"
        return (
            f"{shown}: the {_gb(on['gradient buckets'])} bucket goes; {_gb(on[wait])} → {_gb(off[wait])} of "
            f"gradients wait"
        )
    return shown


def lookup(config: dict, path: str) -> object | None:
    """The value at a dotted `path` of a DeepSpeed config ("bf16.enabled"), or None where it is not set."""
    for part in path.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def advisor_sets(key: Key) -> str:
    """What the advisor's config writes for `key` at the key's stage (with offload, if only then), or "—"."""
    if key.path == "train_micro_batch_size_per_gpu":
        return "the micro-batch you give"
    for choice, note in (("none", ""), ("optimizer", " (when it offloads)")):
        value = lookup(ds_config.zero_config(Stage(key.stage), choice), key.path)
        if value is not None:
            return _shown(value) + note
    return "—"


HEAD = ("key", "DeepSpeed default", "advisor sets", "tried", "changes", "what it does",
        "numbers (7.5 B GPT, 8 GPUs): default → tried")  # fmt: skip
MEASURES = ("peak", "other")  #: what a key's numbers measure (`Key.measure`)


@dataclass(frozen=True, repr=False)
class KeyTable:
    """The keys as a table, with the package's numbers for the example model."""

    keys: tuple[Key, ...] = KEYS  #: the rows

    @cached_property
    def rows(self) -> list[list[str]]:
        """Every key as strings, computed once (each number is a step timeline or two)."""
        return [
            [k.path, default_shown(k), advisor_sets(k), _shown(k.tried), k.changes, k.effect, numbers(k)]
            for k in self.keys
        ]

    def get(self, path: str) -> Key:
        """The key at `path`."""
        found = [k for k in self.keys if k.path == path]
        if not found:
            raise ValueError(f"path must be one of {', '.join(k.path for k in self.keys)}, got {path!r}")
        return found[0]

    def effects(self, measure: str | None = None, stage: int | None = None) -> Table:
        """Each key's default → tried value, what it does, and the package's numbers at the two values; with
        `measure`, only the keys whose numbers are the peak per GPU ("peak": the peak with the loss counted,
        then without it) or the rest ("other"); with `stage` (2 or 3), only its keys, the stage unsaid."""
        keep = MEASURES if measure is None else (checks.choice("measure", measure, MEASURES),)
        if stage is not None:
            stage = int(checks.choice("stage", str(stage) if type(stage) is int else stage, ("2", "3")))
        picked = [(k, r) for k, r in zip(self.keys, self.rows, strict=True) if k.measure in keep]
        picked = [(k, r) for k, r in picked if stage in (None, k.stage)]
        head = ("key", "DeepSpeed default → tried", "what it does", "numbers: default → tried")
        rows = [(r[0], f"{r[1]} → {r[3]}", r[5], r[6]) for _, r in picked]
        if measure == "peak":  # the peak with the loss first, then the step model's own, where a knob shows
            head = (*head[:3], "peak with the loss", "without the loss (the step model's own peak)")
            rows = [(*r[:3], _with_loss(k), r[3]) for r, (k, _) in zip(rows, picked, strict=True)]
        said = (f"peak per GPU at stage {stage}: ", f"stage {stage}: ") if stage else ()
        return Table(head, tuple(tuple(_unsaid(c, said) for c in r) for r in rows))

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in [list(HEAD), *self.rows])

    def _repr_markdown_(self) -> str:
        return markdown([list(HEAD), *self.rows])


@dataclass(frozen=True, repr=False)
class Accumulation:
    """What one GPU sends at stages 0-2, per step and per micro-batch, by the paper and by DeepSpeed."""

    micro_batches: int = 4  #: gradient_accumulation_steps, set beside 1

    def __post_init__(self):
        checks.whole("micro_batches", self.micro_batches, high=10**6)

    def cells(self) -> list[list[str]]:
        """The table as strings."""
        m = self.micro_batches
        return [
            [f"ZeRO-{stage}", account, _psi(sent(stage, 1, account)), _psi(sent(stage, m, account)),
             _psi(sent(stage, m, account) / m)]
            for stage in (0, 1, 2)
            for account in ACCOUNTS
        ]  # fmt: skip

    def head(self) -> list[str]:
        """The column names."""
        m = self.micro_batches
        per = f"{m} micro-batches"
        return [
            "stage",
            "counted by",
            "per step of 1 micro-batch",
            f"per step of {per}",
            f"per micro-batch of {per}",
        ]

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in [self.head(), *self.cells()])

    def _repr_markdown_(self) -> str:
        return markdown([self.head(), *self.cells()])
