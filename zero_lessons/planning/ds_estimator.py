"""DeepSpeed's own model-state estimators, re-derived exactly, so the lessons can set them beside the paper.

Source: DeepSpeed 0.19.8, `estimate_zero2_model_states_mem_needs` (runtime/zero/stage_1_and_2.py) and its
zero3 twin (stage3.py), which the `*_all_cold` functions print. What they count that the paper's 16 do not:
- an fp32 copy of the gradients (4 bytes): 18 split, not 14 (at stage 3 not 16: fp16 gradients dropped);
- under stage 3, 4 bytes per parameter of the largest layer, for the layer it gathers while working;
- host memory: a per-node figure times a margin, `additional_buffer_factor` (1.5 by default).
DeepSpeed divides by 2**30 and prints "GB": those figures are GiB. int() truncates bytes as DeepSpeed's does.
`explain_zero2` and `explain_zero3` take every printed line apart into the terms that add up to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, units
from ..inputs import Setup
from .ds_explained import Explained, Term

#: The DeepSpeed release whose formulas this module follows.
DEEPSPEED_VERSION = "0.19.8"
#: Largest margin (`additional_buffer_factor`) accepted (DeepSpeed's default is 1.5).
MAX_BUFFER_FACTOR = 1000
#: (cpu_offload, cpu_offload_params, zero_init) of each line of DeepSpeed's ZeRO-3 printout, in its order.
ZERO3_LINES = tuple(
    (o, p, i) for o in (True, False) for p in (True, False) if o or not p for i in (True, False)
)
#: The 18 split bytes per parameter, by stage. ZeRO-2: DeepSpeed's comment in stage_1_and_2.py. ZeRO-3: our
#: reading (stage3.py has none): 2 stay on the GPU under optimizer offload.
OPTIMIZER_12 = "12 optimizer state (4 fp32 master weights + 8 Adam moments)"
SPLIT_18 = {
    s: f"split 18 B ({how}2 fp16 {w} + 4 fp32 gradients + {OPTIMIZER_12})"
    for s, how, w in ((2, "", "gradients"), (3, "our reading: ", "weights"))
}
#: The header DeepSpeed prints above the lines: "per CPU" is host memory per node.
HEADER = "  per CPU  |  per GPU |   Options"


@dataclass(frozen=True)
class Estimate:
    """One line of DeepSpeed's estimate: bytes per GPU and per node's CPU memory, for a choice of options."""

    options: str  #: the options as DeepSpeed prints them, e.g. "offload_optimizer=cpu "
    gpu_bytes: int  #: model-state bytes per GPU
    cpu_bytes: int  #: host bytes per node

    def __post_init__(self):
        checks.instance("options", self.options, str, "text")
        for name in ("gpu_bytes", "cpu_bytes"):
            checks.whole(name, getattr(self, name), low=0, high=10**24)  # the estimators stay below 10**22

    def line(self) -> str:
        """The line as DeepSpeed prints it: GiB figures labelled "GB"."""
        return f" {self.cpu_bytes / units.GiB:7.2f}GB | {self.gpu_bytes / units.GiB:6.2f}GB | {self.options}"


def printout(rows) -> str:
    """`rows` (Estimates) under DeepSpeed's header, as it prints them, without its trailing blanks."""
    if not isinstance(rows, (tuple, list)) or not all(isinstance(r, Estimate) for r in rows):
        raise TypeError(f"rows must be a list of ds_estimator.Estimate, got {checks.kind(rows)}")
    return "\n".join(line.rstrip() for line in [HEADER, *(r.line() for r in rows)])


def _zero2_gpu(total_params: int, gpus: int) -> int:
    """DeepSpeed's ZeRO-2 bytes per GPU without offload: 2Ψ whole, 18Ψ split across `gpus`."""
    return 2 * total_params + int(Fraction(18 * total_params, gpus))


def zero2_gpu(setup: Setup) -> int:
    """DeepSpeed's ZeRO-2 bytes per GPU without offload, for a `setup` whose inputs are checked already."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    return _zero2_gpu(setup.params, setup.gpus)


def _common(
    total_params: int, gpus_per_node: int, nodes: int, buffer_factor
) -> tuple[int, int, int, Fraction]:
    """Validate the shared inputs: the package's bounds, and a margin from > 0 to 1,000."""
    per_node = checks.gpus_per_node(gpus_per_node)
    nodes = checks.whole("nodes", nodes, high=checks.MAX_GPUS // per_node)  # at most MAX_GPUS GPUs in all
    factor = checks.amount(
        "additional_buffer_factor",
        buffer_factor,
        positive=True,
        high=(MAX_BUFFER_FACTOR, f"{MAX_BUFFER_FACTOR:,} (DeepSpeed's default is 1.5)"),
    )
    return checks.params(total_params), per_node, nodes, factor


def zero2(
    total_params: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    *,
    cpu_offload: bool = True,
    additional_buffer_factor=1.5,
) -> Estimate:
    """DeepSpeed's ZeRO-2 estimate: fp16 weights whole on each GPU, 18 bytes/parameter split or offloaded."""
    p, per_node, nodes, factor = _common(total_params, gpus_per_node, nodes, additional_buffer_factor)
    gpus = per_node * nodes
    if checks.flag("cpu_offload", cpu_offload):
        gpu, cpu = 2 * p, p * max(4 * gpus, 16) * factor
    else:
        gpu, cpu = _zero2_gpu(p, gpus), p * 4 * per_node * factor
    return Estimate(f"offload_optimizer={'cpu ' if cpu_offload else 'none'}", gpu, int(cpu))


def zero3(
    total_params: int,
    largest_layer_params: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    *,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor=1.5,
) -> Estimate:
    """DeepSpeed's ZeRO-3 estimate: 18 bytes/parameter split (or on the host), plus 4 × the largest layer."""
    p, per_node, nodes, factor = _common(total_params, gpus_per_node, nodes, additional_buffer_factor)
    layer = checks.whole("largest_layer_params", largest_layer_params, low=0, high=p)
    cpu_offload = checks.flag("cpu_offload", cpu_offload)
    cpu_offload_params = checks.flag("cpu_offload_params", cpu_offload_params)
    zero_init = checks.flag("zero_init", zero_init)
    if cpu_offload_params and not cpu_offload:
        raise ValueError(
            "cpu_offload_params needs cpu_offload: DeepSpeed offloads parameters only with the optimizer"
        )
    gpus, working = per_node * nodes, 4 * layer
    if cpu_offload:
        host = 18 if cpu_offload_params else 16  # bytes per parameter kept on the host, across the nodes
        gpu = working if cpu_offload_params else working + int(Fraction(2 * p, gpus))
        cpu = p * (Fraction(host, nodes) if zero_init else max(4 * per_node, Fraction(host, nodes))) * factor
    else:
        gpu = working + int(Fraction(18 * p, gpus))
        cpu = (layer if zero_init else p) * 4 * per_node * factor
    options = (
        f"offload_param={'cpu ' if cpu_offload_params else 'none'}, "
        f"offload_optimizer={'cpu ' if cpu_offload else 'none'}, zero_init={int(zero_init)}"
    )
    return Estimate(options, gpu, int(cpu))


def zero2_all_cold(
    total_params: int, gpus_per_node: int = 1, nodes: int = 1, additional_buffer_factor=1.5
) -> list[Estimate]:
    """Every line of `estimate_zero2_model_states_mem_needs_all_cold`, in DeepSpeed's order."""
    args, factor = (total_params, gpus_per_node, nodes), additional_buffer_factor
    return [zero2(*args, cpu_offload=o, additional_buffer_factor=factor) for o in (True, False)]


def zero3_all_cold(
    total_params: int,
    largest_layer_params: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    additional_buffer_factor=1.5,
) -> list[Estimate]:
    """Every line of `estimate_zero3_model_states_mem_needs_all_cold`, in DeepSpeed's order."""
    args, factor = (total_params, largest_layer_params, gpus_per_node, nodes), additional_buffer_factor
    return [
        zero3(*args, cpu_offload=o, cpu_offload_params=p, zero_init=i, additional_buffer_factor=factor)
        for o, p, i in ZERO3_LINES
    ]


def _host_max(p: int, processes: int, state: Fraction, factor: Fraction, whose: str = "processes") -> Term:
    """DeepSpeed's max(an fp32 model per process, the offloaded state) × Ψ × its margin; `whose` names the
    processes counted ("processes" of the node, or ZeRO-2's "GPUs of the job")."""
    return Term(
        "larger of fp32 model per process and offloaded state (our reading)",
        f"max(4 B × {processes} {whose}, {units.format_number(state)} B) × Ψ × {units.format_number(factor)}",
        p * max(4 * processes, state) * factor,
    )


def _per_process(size: int, name: str, per_node: int, factor: Fraction) -> Term:
    """`size` parameters in fp32 for each of the node's processes, × DeepSpeed's margin."""
    return Term(
        f"fp32 {'model' if name == 'Ψ' else 'layer'} per process (our reading)",
        f"4 B × {name} × {per_node} × {units.format_number(factor)}",
        4 * size * per_node * factor,
    )


def explain_zero2(total_params: int, gpus_per_node: int = 1, nodes: int = 1, additional_buffer_factor=1.5):
    """Every line of DeepSpeed's ZeRO-2 estimate, each column taken apart into its terms."""
    p, per_node, nodes, factor = _common(total_params, gpus_per_node, nodes, additional_buffer_factor)
    gpus, whole = per_node * nodes, Term("fp16 weights, whole", "2 B × Ψ", Fraction(2 * p))
    split = Term(SPLIT_18[2], f"18 B × Ψ / {gpus}", Fraction(18 * p, gpus))
    offloaded = _host_max(p, gpus, Fraction(16), factor, "GPUs of the job")  # every GPU, not the node's
    rows = zero2_all_cold(p, per_node, nodes, factor)
    return Explained(
        (
            (rows[0], (whole,), (offloaded,)),
            (rows[1], (whole, split), (_per_process(p, "Ψ", per_node, factor),)),
        )
    )


def _zero3_terms(
    p: int, layer: int, per_node: int, nodes: int, factor: Fraction, opt: bool, par: bool, init: bool
) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """The GPU and host terms of one ZeRO-3 line."""
    gpus, gpu = per_node * nodes, [Term("largest layer, gathered", "4 B × layer", Fraction(4 * layer))]
    if not par:
        bytes_each, what = (2, "fp16 weight shard (our reading)") if opt else (18, SPLIT_18[3])
        gpu.append(Term(what, f"{bytes_each} B × Ψ / {gpus}", Fraction(bytes_each * p, gpus)))
    if not opt:
        size, name = (layer, "layer") if init else (p, "Ψ")
        return tuple(gpu), (_per_process(size, name, per_node, factor),)
    state = Fraction(18 if par else 16, nodes)
    if not init:
        return tuple(gpu), (_host_max(p, per_node, state, factor),)
    share = f" / {nodes} nodes" if nodes > 1 else ""  # one node holds all of it
    formula = f"{18 if par else 16} B × Ψ{share} × {units.format_number(factor)}"
    what = "offloaded state" + (", this node's share" if nodes > 1 else "") + " (our reading)"
    return tuple(gpu), (Term(what, formula, p * state * factor),)


def explain_zero3(
    total_params: int,
    largest_layer_params: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    additional_buffer_factor=1.5,
):
    """Every line of DeepSpeed's ZeRO-3 estimate, each column taken apart into its terms."""
    p, per_node, nodes, factor = _common(total_params, gpus_per_node, nodes, additional_buffer_factor)
    layer = checks.whole("largest_layer_params", largest_layer_params, low=0, high=p)
    rows = zero3_all_cold(p, layer, per_node, nodes, factor)
    return Explained(
        tuple(
            (row, *_zero3_terms(p, layer, per_node, nodes, factor, *c))
            for row, c in zip(rows, ZERO3_LINES, strict=True)
        )
    )
