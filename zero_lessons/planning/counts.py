"""The four counts of training-state bytes that lessons 07 and 08 set side by side (`INCLUDES` says what each
includes): the ZeRO paper's (`memory.per_gpu`), the package's under offload (`offload.offloaded`,
`link_bytes`), DeepSpeed's code's (`offload.deepspeed_zero2_host`, `deepspeed_zero3_host`,
`deepspeed_pcie_bytes`) and DeepSpeed's estimator's (`ds_estimator`). `four` and `table` give their figures
for ZeRO-2 on one node, without offload and with the optimizer offloaded; `bytes_table` (per kind of state),
`host_table` (per node's host) and `pcie_table` (over PCIe) set the package's count, DeepSpeed's code and its
estimator side by side; `gpu_table` gives the package's count per GPU for each offload of `CHOICES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory, tables, units
from ..inputs import Setup
from ..recipes import MIXED_ADAM
from ..stages import Stage
from . import ds_estimator, offload

#: What each count includes and where it comes from, in the order the lesson meets them: no figures.
INCLUDES = {
    "the ZeRO paper": "the model state of the earlier lessons (16-bit weights and gradients, the optimizer "
    "state), all on the GPUs: no offload",
    "the package's count": "the paper's bytes, placed as the ZeRO-Offload and ZeRO-Infinity papers design "
    "it: what leaves a GPU lands on the host in the same bytes",
    "DeepSpeed's code": "what DeepSpeed's source keeps on GPU and host once the model is partitioned, "
    "and sends over PCIe: more than the design, as its gradients go to the host in fp32; this package works "
    "it out by reading DeepSpeed's source, as no DeepSpeed function prints it",
    "DeepSpeed's estimator": "what DeepSpeed's memory estimate functions print (lesson 06), converted from "
    "their GiB to decimal GB: on the GPU, the model state left there and, where parameters are gathered, an "
    "allowance for the largest layer; on the host, fp32 copies and a safety margin; no traffic",
}
#: What each offload count includes and where it comes from (the paper's has no offload), as a Markdown table.
OVERVIEW = tables.markdown(
    [
        ["count", "what it counts, and where it comes from"],
        *([f"**{n}**", i] for n, i in INCLUDES.items() if n != "the ZeRO paper"),
    ],
    ["---", "---"],
)
#: DeepSpeed's stage-3 PCIe bytes per shard element with the parameters offloaded too, least and most: the
#: gradients' trips as without (2 + 2 + 4), the 16-bit weight shard fetched for the forward pass (2) and,
#: unless the layer is still held, again for the backward pass (2); the CPU updates the weights on the host.
PARAMS_PCIE = tuple(offload.DEEPSPEED_BACKWARD[Stage.ZERO3] + 2 * fetches for fetches in (1, 2))
#: The recap table's header: each count's figures for ZeRO-2 on one node, in decimal GB.
HEADER = ["count", "per GPU, no offload", "per GPU, optimizer offloaded"]
HEADER += ["host per node, optimizer offloaded", "PCIe per GPU per step, optimizer offloaded"]


@dataclass(frozen=True)
class Count:
    """One count's name, what it includes, and its bytes for the worked example (None: it gives no figure)."""

    name: str  #: the name the lesson calls it by
    gpu: Fraction | None  #: model-state bytes per GPU without offload
    gpu_offloaded: Fraction | None  #: bytes per GPU with the optimizer offloaded
    host: Fraction | None  #: host bytes per node with the optimizer offloaded
    pcie: Fraction | None  #: bytes one GPU sends over PCIe per step with the optimizer offloaded

    def __post_init__(self):
        checks.choice("name", self.name, tuple(INCLUDES))

    @property
    def includes(self) -> str:
        """What this count includes."""
        return INCLUDES[self.name]

    def row(self) -> list[str]:
        """Its row of the recap table: name, then figures in decimal GB (a dash: no figure)."""
        shown = [
            "—" if value is None else units.format_bytes(value)
            for value in (self.gpu, self.gpu_offloaded, self.host, self.pcie)
        ]
        return [f"**{self.name}**", *shown]


def four(params: int, gpus: int = 8) -> tuple[Count, ...]:
    """The four counts for ZeRO-2 on one node of `gpus` GPUs, in the order the lesson meets them."""
    gpus = checks.gpus_per_node(gpus, "gpus")  # one node: DeepSpeed's host figure is per node
    on_gpu, off_gpu = offload.offloaded(params, gpus, Stage.ZERO2)
    plain = ds_estimator.zero2(params, gpus, cpu_offload=False)
    offloaded = ds_estimator.zero2(params, gpus, cpu_offload=True)
    paper = memory.per_gpu(params, gpus, Stage.ZERO2).total
    return (
        Count("the ZeRO paper", paper, None, None, None),
        Count(
            "the package's count",
            paper,
            on_gpu.total,
            gpus * off_gpu.total,
            offload.link_bytes(params, gpus, Stage.ZERO2),
        ),
        Count(
            "DeepSpeed's code",
            None,
            on_gpu.total,  # the 16-bit weights, whole: what stays on the GPU between steps
            gpus * offload.deepspeed_zero2_host(params, gpus),
            offload.deepspeed_pcie_bytes(params, gpus, Stage.ZERO2),
        ),
        Count(
            "DeepSpeed's estimator",
            Fraction(plain.gpu_bytes),
            Fraction(offloaded.gpu_bytes),
            Fraction(offloaded.cpu_bytes),
            None,
        ),
    )


def table(params: int, gpus: int = 8) -> str:
    """`four` as a Markdown table, one row per count: its figures."""
    rows = [HEADER, *(count.row() for count in four(params, gpus))]
    return tables.markdown(rows, ["---", "--:", "--:", "--:", "--:"])


#: The kinds of bytes per parameter that the counts place, in `bytes_table`'s column order.
KINDS = ("16-bit weights", "16-bit gradients", "fp32 gradients", "fp32 master weights", "Adam moments")
#: The "also" of DeepSpeed's code's rows: what it keeps once the fp32 model built at start-up is gone.
PARTITIONED = "once the model is partitioned"


def _code(host: dict[str, int], weights: str) -> dict[int, tuple[int, str]]:
    """A row of DeepSpeed's code from its host bytes by kind (`offload.DEEPSPEED_ZERO*_HOST`): each kind
    on the host but the 16-bit weights, 2 B where `weights` says (with their host buffer, if any, there)."""
    cells = {KINDS.index(kind): (size, "host") for kind, size in host.items() if kind != "16-bit weights"}
    return cells | {0: (2, weights)}


#: What an offload moves to the host, by the package's count and by DeepSpeed's estimator (* our reading);
#: each of their rows adds the 16-bit weights where its offload leaves them.
PACKAGE_HOST = {1: (2, "host"), 3: (4, "host"), 4: (8, "host")}
ESTIMATOR_HOST = {2: (4, "host*"), 3: (4, "host*"), 4: (8, "host*")}
#: The "also" of DeepSpeed's estimator's offload rows: at ZeRO-2 its formula; at ZeRO-3 its buffer, and how
#: the host figure is shared.
ZERO2_ALSO = "it prints max(16, 4 × GPUs) × 1.5 per parameter: 48 on one node of 8"
ZERO3_ALSO = "GPU: and 4 per parameter of the largest layer; host: × 1.5 ÷ nodes with zero.Init"


def _offloaded(choice: str, weights: str, code_weights: str, code_host: dict[str, int], also: str) -> tuple:
    """PLACES' three rows for one offload `choice`: the package's count, DeepSpeed's code and its estimator,
    which differ in where they put the 16-bit weights (`weights`; the estimator's starred at ZeRO-3)."""
    starred = weights if weights == "GPU" else f"{weights}*"  # it prints 2Ψ whole on the GPU: no reading
    return (
        (f"the package's count, {choice}", {0: (2, weights)} | PACKAGE_HOST, ""),
        (f"DeepSpeed's code, {choice}", _code(code_host, code_weights), PARTITIONED),
        (f"DeepSpeed's estimator, {choice}", {0: (2, starred)} | ESTIMATOR_HOST, also),
    )


#: Where each count puts each kind, for ZeRO-2 (and ZeRO-3 last): (bytes per parameter, where, also).
#: Where: "GPU" whole on every GPU, "÷ N" split across the N GPUs, "host" in host memory.
PLACES = (
    ("the ZeRO paper", {0: (2, "GPU"), 1: (2, "÷ N"), 3: (4, "÷ N"), 4: (8, "÷ N")}, ""),
    (
        "DeepSpeed's estimator",
        {0: (2, "GPU"), 1: (2, "÷ N"), 2: (4, "÷ N"), 3: (4, "÷ N"), 4: (8, "÷ N")},
        "",
    ),
    *_offloaded("optimizer offloaded", "GPU", "GPU, 2 host", offload.DEEPSPEED_ZERO2_HOST, ZERO2_ALSO),
    ("the ZeRO paper, ZeRO-3", {0: (2, "÷ N"), 1: (2, "÷ N"), 3: (4, "÷ N"), 4: (8, "÷ N")}, ""),
    (
        "DeepSpeed's estimator, ZeRO-3",
        {0: (2, "÷ N*"), 2: (4, "÷ N*"), 3: (4, "÷ N*"), 4: (8, "÷ N*")},
        "4 per parameter of the largest layer",
    ),
    *_offloaded("ZeRO-3, optimizer offloaded", "÷ N", "÷ N", offload.DEEPSPEED_ZERO3_HOST, ZERO3_ALSO),
    *_offloaded(
        "ZeRO-3, optimizer and parameters offloaded", "host", "host", offload.DEEPSPEED_ZERO3_HOST, ZERO3_ALSO
    ),
)
#: The paper against DeepSpeed's estimator, without offload, at stages 2 and 3 (lesson 06 draws them).
NO_OFFLOAD = (
    "the ZeRO paper",
    "DeepSpeed's estimator",
    "the ZeRO paper, ZeRO-3",
    "DeepSpeed's estimator, ZeRO-3",
)
#: The rows lesson 07 shows: every offload, at ZeRO-2 and at ZeRO-3.
OFFLOADED = tuple(name for name, _, _ in PLACES if "offloaded" in name)
OFFLOADED_ZERO2 = tuple(name for name in OFFLOADED if "ZeRO-3" not in name)
OFFLOADED_ZERO3 = tuple(name for name in OFFLOADED if "ZeRO-3" in name)


def bytes_table(names: tuple[str, ...] | None = None) -> str:
    """Bytes per parameter by kind and place, one row per count named in `names` (every row of `PLACES` when
    None), in `PLACES`' order (ZeRO-2 unless named; * our reading)."""
    known = tuple(name for name, _, _ in PLACES)
    if names is not None and not isinstance(names, (tuple, list)):
        raise TypeError(f"names must be a tuple of row names ({', '.join(known)}), got {checks.kind(names)}")
    wanted = known if names is None else tuple(checks.choice("names", name, known) for name in names)
    chosen = [(*place, _host(place[1])) for place in PLACES if place[0] in wanted]
    hosted = any(host != "—" for *_, host in chosen)  # a column for host bytes, when any row has some
    stages = {"ZeRO-3" if "ZeRO-3" in name else "ZeRO-2" for name, *_ in chosen}
    stage = stages.pop() if len(stages) == 1 else "ZeRO-2 unless named"
    rows = [[f"count ({stage})", *KINDS, *["on the host"] * hosted, "also"]]
    for name, cells, also, host in chosen:
        shown = [f"{cells[k][0]} {cells[k][1]}" if k in cells else "—" for k in range(len(KINDS))]
        rows.append([f"**{name}**", *shown, *[host] * hosted, also])
    return tables.markdown(rows, ["---", *["--:"] * (len(KINDS) + hosted), "---"])


def _host(cells: dict) -> str:
    """A row's bytes per parameter in host memory ("2 GPU, 2 host" puts 2 there); * if any is our reading."""
    parts = [part for size, where in cells.values() for part in _parts(size, where) if "host" in part[1]]
    if not parts:
        return "—"
    starred = any("*" in where for _, where in parts)  # the estimator's: it prints the total times its margin
    return f"{sum(size for size, _ in parts)}{'* × 1.5' if starred else ''}"


def _parts(size: int, where: str) -> list[tuple[int, str]]:
    """One cell's pieces: (2, "GPU, 2 host") -> [(2, "GPU"), (2, "host")]; (4, "host*") -> [(4, "host*")]."""
    pieces = [piece.split(" ", 1) if piece[0].isdigit() else [size, piece] for piece in where.split(", ")]
    return [(int(amount), place) for amount, place in pieces]


#: `host_table`'s header: each offload choice's host memory per node, by three counts.
HOST_HEADER = [
    "host per node: bytes per parameter (GB)",
    "the package's count",
    "DeepSpeed's code, once partitioned",
    "DeepSpeed's estimator, with zero.Init",
    "DeepSpeed's estimator, without",
]


def _choice(stage: Stage, what: str) -> str:
    """An offload choice of `offload.ORDER` as a row label: "ZeRO-3, optimizer and parameters offloaded"."""
    return f"{stage.label}, {what.replace('+', ' and ')} offloaded"


#: The offloads of `offload.ORDER` by row label: (stage, whether the parameters are offloaded too).
CHOICES = {_choice(stage, what): (stage, what != "optimizer") for stage, what in offload.ORDER}


def gpu_table(params: int, gpus: int) -> str:
    """What each offload of `offload.ORDER` leaves on each of `gpus` GPUs and moves off it, by the package's
    count, in decimal GB."""
    rows = [["by the package's count", "left on each GPU", "moved off each GPU"]]
    for name, (stage, params_too) in CHOICES.items():
        on, off = offload.offloaded(params, gpus, stage, parameters=params_too)
        rows.append([name, units.format_bytes(on.total), units.format_bytes(off.total)])
    return tables.markdown(rows, ["---", "--:", "--:"])


def _per_parameter(nbytes: int | None, params: int) -> str:
    """`nbytes` as bytes per parameter, then in GB: "18 (135 GB)"; "—" for None."""
    if nbytes is None:
        return "—"
    return f"{units.format_number(Fraction(nbytes, params))} ({units.format_bytes(nbytes)})"


def host_table(params: int, gpus: int = 8) -> str:
    """Host memory of one node of `gpus` GPUs for each offload of `offload.ORDER`, by the package's count,
    DeepSpeed's code and DeepSpeed's estimator (with zero.Init, a stage-3 line, and without), as bytes per
    parameter and in GB."""
    gpus = checks.gpus_per_node(gpus, "gpus")  # one node: the host figures are per node
    setup = Setup(checks.params(params), gpus)
    rows = [HOST_HEADER]
    for stage, what in offload.ORDER:
        both = what != "optimizer"
        if stage is Stage.ZERO3:
            code = offload.deepspeed_zero3_host(setup.params, gpus, parameters=both)
        else:
            code = offload.deepspeed_zero2_host(setup.params, gpus)
        three = stage is Stage.ZERO3  # zero.Init is stage 3's: stage 2's estimator has one line
        counted = (
            gpus * offload.offloaded(setup.params, gpus, stage, parameters=both)[1].total,
            gpus * code,
            offload.deepspeed_host(setup, stage, what, gpus) if three else None,
            offload.deepspeed_host(setup, stage, what, gpus, zero_init=False),
        )
        shown = [_per_parameter(b, setup.params) for b in counted]
        rows.append([_choice(stage, what), *shown])
    return tables.markdown(rows, ["---", "--:", "--:", "--:", "--:"])


def pcie_table(params: int, gpus: int, bandwidth) -> str:
    """Bytes one GPU's share sends over PCIe per step for each offload of `offload.ORDER`, by the package's
    count and by DeepSpeed's code (with the parameters offloaded, each a range: a layer still held for the
    backward pass is not fetched again), as bytes per shard element, GB and seconds at `bandwidth`."""
    rate = units.as_rate("bandwidth", bandwidth)
    elements = memory.shard_elements(checks.params(params), gpus)
    head = f"PCIe per GPU per step at {units.format_rate(rate)} (bytes per shard element: total, time)"
    rows, number = [[head, "the package's count", "DeepSpeed's code"]], units.format_number

    def cell(*per_element) -> str:  # bytes per shard element, one figure or a least and a most
        sizes = " to ".join(units.format_bytes(b * elements) for b in per_element)
        times = " to ".join(number(b * elements / rate) for b in per_element)
        return f"{' to '.join(map(number, per_element))} B: {sizes}, {times} s"

    for stage, what in offload.ORDER:
        both = what != "optimizer"
        design = offload.link_bytes(params, gpus, stage, parameters=both) / elements
        code = PARAMS_PCIE if both else (offload.DEEPSPEED_PCIE[stage],)
        # with the parameters offloaded, a layer still held for the backward pass needs no second trip up
        mine = (design - MIXED_ADAM.weight_bytes, design) if both else (design,)
        rows.append([_choice(stage, what), cell(*mine), cell(*code)])
    return tables.markdown(rows, ["---", "--:", "--:"])
