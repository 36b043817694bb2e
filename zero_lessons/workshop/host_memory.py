"""Design question: the least offload for a model ZeRO-3 cannot hold, with host memory checked two ways."""

from __future__ import annotations

from fractions import Fraction

from .. import units
from ..inputs import Setup
from ..planning import ds_estimator, offload
from ..planning.activations import Transformer, activation_bytes
from ..stages import Stage
from .checkpointing import ADAM, shape_text, state
from .model import Question, Spec, first, gb, in_gb, in_gib, parts, rng

ID, TITLE = "offload-and-host", "Offload and host memory"
POINT = "Offload trades GPU memory for host memory: check the host with DeepSpeed's accounting too."
PROMPT = (
    "Take {shape}, on one node of {gpus} GPUs with {card} each and {host} of host memory, with " + ADAM + ". "
    "Full recomputation leaves {act} of activations per GPU. Offload is considered in this order, each with "
    "what stays on a GPU and what moves to the host by the package's count (`offloaded` in "
    "zero_lessons.planning.offload), in bytes per GPU for Ψ parameters on N GPUs: {split}. The node's host "
    "memory holds the host parts of its {gpus} GPUs. Rule: take the first whose GPU part plus activations "
    "fits the card's whole memory (this sheet keeps no headroom) and whose host part fits by the package's "
    "count, then check the host with DeepSpeed's "
    "own estimator, as lesson 06 (DeepSpeed's memory estimator) re-derives it: "
    "estimate_zero2_model_states_mem_needs for ZeRO-2, estimate_zero3_model_states_mem_needs for ZeRO-3, "
    "with the model built under zero.Init (zero_init on) and additional_buffer_factor 1.5. On this one "
    'node its host bytes are: {ds_split}. It divides bytes by 2³⁰ and prints "GB": convert before you '
    "compare it with the host's GB."
)
#: The names of the kinds of state in `split_text`.
STATE_NAMES = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state"}
#: A parameter count for `split_text` to read the package's split off: any even count gives the same formulas.
SPLIT_PSI = 2 * 10**6
WORKING = (
    "ZeRO-3 without offload needs {state3} + {act} per GPU: more than {card}. {stage} with {what} offload "
    "keeps {on_gpu} per GPU (activations included) and puts {paper} on the host by the package's count. "
    "DeepSpeed's estimator prints "
    '{ds_gib} (as "GB"), which is {ds_gb}: {verdict} the node\'s {host}.{next}'
)
#: What to plan when both counts fit, and when DeepSpeed's does not (lesson 07: plan host memory by it).
FITS = " Both counts fit, so the plan stands; DeepSpeed's is the one to plan host memory by."
SPREAD = (
    " Plan host memory by DeepSpeed's count, as lesson 07 advises. With zero.Init (assumed here) its ZeRO-3 "
    "host figure is shared among the nodes: under ZeRO-3 with {what} offloaded it is {per_node} per node "
    "on {where}, within {host}{why}. The other ways: a node with at least {one_node} of host memory, or "
    "offload to NVMe (ZeRO-Infinity), which this estimator does not count."
)
#: Why a ZeRO-2 pick moves to ZeRO-3 when it spreads over more nodes.
ZERO2_GROWS = (
    " (DeepSpeed's ZeRO-2 offload figure grows with the job's GPUs, so more nodes would not help it)"
)
#: What is offloaded, in words.
OFFLOADED = {"optimizer": "the optimizer", "optimizer+parameters": "the optimizer and parameters"}
#: The most nodes `spread` tries.
MOST_NODES = 64
SPECS = (
    Spec(
        "stage3_gb",
        "ZeRO-3 model state per GPU with no offload, in GB",
        "16Ψ/N: every state split",
        unit="GB",
    ),
    Spec(
        "stage",
        "the stage of the least offload that fits (2 or 3)",
        "offload in order: ZeRO-2 optimizer, ZeRO-3 optimizer, ZeRO-3 optimizer and parameters",
        kind="stage",
    ),
    Spec(
        "offload",
        "what is offloaded: optimizer or optimizer+parameters",
        "take the least offload whose GPU part (plus activations) fits the card",
        kind="choice",
    ),
    Spec(
        "host_gb",
        "host memory per node by the package's count, in GB",
        "each GPU's offloaded shard, times the GPUs that share the node",
        unit="GB",
    ),
    Spec(
        "deepspeed_host_gib",
        'host memory per node by DeepSpeed\'s estimator, in GiB: a number, or with "GiB" (it prints "GB")',
        "DeepSpeed's host formula for this choice, times its margin of 1.5 (additional_buffer_factor)",
        unit="GiB",
    ),
    Spec(
        "deepspeed_fits",
        "does DeepSpeed's estimate fit the node's host memory? yes or no",
        "compare DeepSpeed's figure (GiB) with the host memory in the same unit",
        kind="yes/no",
    ),
)
WHY = {
    "more-than-needed": "the optimizer alone is enough here, and parameter offload sends every weight over "
    "PCIe twice more per step",
    "forgot-buffer-factor": "that leaves out DeepSpeed's additional_buffer_factor of 1.5",
    "paper-count": "that is the package's count; DeepSpeed counts more bytes per parameter on the host",
    "paper-count-only": "the package's count fits, but DeepSpeed's own estimate is larger than the node's "
    "host memory",
}


def _formula(one, two) -> str:
    """Bytes on 1 and on 2 GPUs as a formula in Ψ and N by state, e.g. "2Ψ weights + 2Ψ/N gradients"."""
    terms = []
    for name, label in STATE_NAMES.items():
        at_one, at_two = getattr(one, name) / SPLIT_PSI, getattr(two, name) / SPLIT_PSI
        whole, split = 2 * at_two - at_one, 2 * (at_one - at_two)  # bytes = whole·Ψ + split·Ψ/N
        shown = [f"{units.format_number(whole)}Ψ"] * bool(whole) + [
            f"{units.format_number(split)}Ψ/N"
        ] * bool(split)
        if shown:
            terms.append(f"({' + '.join(shown)}) {label}" if len(shown) > 1 else f"{shown[0]} {label}")
    return " + ".join(terms) or "no model state"


def split_text() -> str:
    """Each choice in `offload.ORDER` with its GPU and host bytes per GPU, read off `offload.offloaded`."""
    lines = []
    for stage, what in offload.ORDER:
        on_one, off_one = offload.offloaded(SPLIT_PSI, 1, stage, parameters=what != "optimizer")
        on_two, off_two = offload.offloaded(SPLIT_PSI, 2, stage, parameters=what != "optimizer")
        lines.append(
            f"{stage.label} with {OFFLOADED[what]} offloaded: GPU {_formula(on_one, on_two)}, "
            f"host {_formula(off_one, off_two)}"
        )
    return "; ".join(lines)


def deepspeed_formula(gpus: int, stage: Stage, what: str) -> str:
    """DeepSpeed's host formula for an offload choice on one node of `gpus` GPUs, by `ds_estimator`."""
    params, psi = what != "optimizer", SPLIT_PSI  # the formula is in Ψ: any count gives the same text
    if stage is Stage.ZERO3:
        line = ds_estimator.zero3(psi, 0, gpus, cpu_offload_params=params)
        explained = ds_estimator.explain_zero3(psi, 0, gpus)
    else:
        line, explained = ds_estimator.zero2(psi, gpus), ds_estimator.explain_zero2(psi, gpus)
    host = next(host for est, _, host in explained.lines if est.options == line.options)
    return " + ".join(term.formula for term in host)


def deepspeed_text(gpus: int) -> str:
    """Each choice in `offload.ORDER` with DeepSpeed's host formula for it on one node."""
    return "; ".join(
        f"{stage.label} with {OFFLOADED[what]} offloaded: {deepspeed_formula(gpus, stage, what)}"
        for stage, what in offload.ORDER
    )


def plan(psi: int, act: int, card: int, host: int, gpus: int):
    """The least offload (in `offload.ORDER`) that fits the card and, by the package's count, the host."""
    found = offload.least(Setup(psi, gpus, gpu_memory=card), act, host, gpus)
    return None if found is None else (found.stage, found.offload != "optimizer", found.gpu, found.host)


def deepspeed_host(shape: Transformer, stage: Stage, params_too: bool, gpus: int) -> int:
    """Host bytes DeepSpeed's own estimator gives one node for an offload choice (zero_init on)."""
    what = "optimizer+parameters" if params_too else "optimizer"
    return offload.deepspeed_host(Setup(shape.params, gpus), stage, what, gpus)


def spread(psi: int, gpus: int, host: int, stage: Stage, what: str) -> tuple[int, str, int]:
    """The fewest nodes of `gpus` GPUs over which ZeRO-3 with the pick's offload (the optimizer's, for a
    ZeRO-2 pick) fits DeepSpeed's host count per node: (nodes, what is offloaded, bytes per node)."""
    what = what if stage is Stage.ZERO3 else "optimizer"
    for nodes in range(1, MOST_NODES + 1):
        need = offload.deepspeed_host(Setup(psi, nodes * gpus), Stage.ZERO3, what, gpus)
        if need <= host:
            return nodes, what, need
    raise ValueError(f"host must hold DeepSpeed's ZeRO-3 count on at most {MOST_NODES} nodes, got {host:,} B")


def _next_step(psi: int, gpus: int, host: int, stage: Stage, what: str) -> str:
    """What to plan after DeepSpeed's host check: nothing more when it fits, else more nodes under ZeRO-3."""
    one_node = offload.deepspeed_host(Setup(psi, gpus), stage, what, gpus)
    if one_node <= host:
        return FITS
    nodes, moved, need = spread(psi, gpus, host, stage, what)
    return SPREAD.format(
        where="this one node" if nodes == 1 else f"{nodes} such nodes ({nodes * gpus} GPUs)",
        host=gb(host),
        what=OFFLOADED[moved],
        per_node=gb(need),
        why=ZERO2_GROWS if stage is Stage.ZERO2 else "",
        one_node=gb(one_node),
    )


def _draw(r):
    """A transformer, GPUs per node, a card and the node's host memory."""
    hidden = r.choice((5120, 6144, 7168, 8192))
    shape = Transformer(r.choice((32, 40, 48, 60, 64, 80)), hidden, hidden // 128, 2048, 1)
    host = r.choice((256, 384, 512, 768, 1024, 1536)) * units.GB
    return shape, r.choice((4, 8)), r.choice((24, 32, 40, 48)) * units.GB, host


def _fits(shape, gpus, card, host) -> bool:
    """ZeRO-3 alone does not fit, and some offload does."""
    act = activation_bytes(shape, "full")
    return state(shape.params, gpus, 3) + act > card and plan(shape.params, act, card, host, gpus) is not None


def _answers(shape: Transformer, gpus: int, card: int, host: int) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    psi, act = shape.params, activation_bytes(shape, "full")
    stage, params_too, _, paper = plan(psi, act, card, host, gpus)
    ds_host, state3 = deepspeed_host(shape, stage, params_too, gpus), state(psi, gpus, 3)
    what = "optimizer+parameters" if params_too else "optimizer"
    values = dict(
        stage3_gb=in_gb(state3),
        stage=stage,
        offload=what,
        host_gb=in_gb(paper),
        deepspeed_host_gib=in_gib(ds_host),
        deepspeed_fits=ds_host <= host,
    )
    slips = {
        "stage3_gb": [("gib-for-gb", in_gib(state3))],
        "stage": stage_slips(psi, act, card, host, gpus, stage),
        "offload": [("more-than-needed", "optimizer+parameters")],
        "host_gb": [("per-gpu-not-node", in_gb(paper / gpus)), ("gib-for-gb", in_gib(paper))],
        "deepspeed_host_gib": [
            ("gb-for-gib", in_gb(ds_host)),
            ("forgot-buffer-factor", in_gib(ds_host) / Fraction(3, 2)),
            ("paper-count", in_gib(paper)),
        ],
        "deepspeed_fits": [] if ds_host <= host else [("paper-count-only", True)],
    }
    return values, slips


def stage_slips(psi: int, act: int, card: int, host: int, gpus: int, stage: Stage) -> list:
    """The other stage as a slip that names ZeRO-2's numbers: it does not fit, or it already does."""
    two = offload.plans(Setup(psi, gpus), act, gpus)[0]  # ZeRO-2 with the optimizer offloaded
    said = f"ZeRO-2 with the optimizer offloaded keeps {gb(two.gpu)} per GPU (activations included)"
    if stage == Stage.ZERO2:
        return [("not-the-least", 3, f"{said} and {gb(two.host)} on the host: it fits, so take the least")]
    if two.gpu > card:
        return [("does-not-fit", 2, f"{said}, which does not fit in {gb(card)}")]
    return [("does-not-fit", 2, f"ZeRO-2 puts {gb(two.host)} on the host, more than the node's {gb(host)}")]


def _working(shape: Transformer, gpus: int, card: int, host: int) -> str:
    """The worked solution, with this variant's numbers."""
    psi, act = shape.params, activation_bytes(shape, "full")
    stage, params_too, on_gpu, paper = plan(psi, act, card, host, gpus)
    ds_host = deepspeed_host(shape, stage, params_too, gpus)
    return WORKING.format(
        state3=gb(state(psi, gpus, 3)),
        act=gb(act),
        card=gb(card),
        stage=stage.label,
        what="optimizer and parameter" if params_too else "optimizer",
        on_gpu=gb(on_gpu),
        paper=gb(paper),
        ds_gib=units.format_bytes(ds_host, "GiB"),
        ds_gb=gb(ds_host),
        verdict="within" if ds_host <= host else "more than",
        host=gb(host),
        next=_next_step(psi, gpus, host, stage, "optimizer+parameters" if params_too else "optimizer"),
    )


def generate(seed: int) -> Question:
    """One variant: the model, the node, and the offload choice with the host checked two ways."""
    shape, gpus, card, host = first(rng(ID, seed), _draw, _fits)
    values, slips = _answers(shape, gpus, card, host)
    prompt = PROMPT.format(
        shape=shape_text(shape),
        gpus=gpus,
        card=gb(card),
        host=gb(host),
        act=gb(activation_bytes(shape, "full")),
        split=split_text(),
        ds_split=deepspeed_text(gpus),
    )
    given = dict(
        layers=shape.layers,
        hidden=shape.hidden,
        params=shape.params,
        activations=activation_bytes(shape, "full"),  # exact bytes; the prompt shows them rounded
        gpus=gpus,
        card_gb=int(in_gb(card)),
        host_gb=int(in_gb(host)),
    )
    answers, working = parts(SPECS, values, slips, WHY), _working(shape, gpus, card, host)
    return Question(ID, TITLE, seed, prompt, answers, working, POINT, tuple(given.items()))
