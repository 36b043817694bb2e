"""Design question: name the framework setting behind a trace of collectives and a rank's held bytes."""

from __future__ import annotations

from fractions import Fraction

from .. import communication
from ..stages import Stage
from .lab_link import lab_mode, predicted
from .model import Question, Spec, parts, rng

ID, TITLE = "traffic-detective", "Name the setting from its trace"
POINT = "Collectives and dtypes identify the framework and stage; real ZeRO-1/2 sends about 3Ψ, not 2Ψ."
#: The settings a trace may come from; DeepSpeed's ZeRO-1 and ZeRO-2 leave the same trace, so either is right.
#: Reuse distance 0 with prefetch (ds_zero3_reuse0, asked in the stage-3 measurement) is left out: how many
#: layers its prefetcher keeps depends on the layer sizes, so on many MLPs its trace is another setting's
#: (`twins` shows it), and no trace could name it.
OPTIONS = (
    "ddp",
    "zero_redundancy_optimizer",
    "fsdp_reshard",
    "fsdp_no_reshard",
    "ds_zero1",
    "ds_zero2",
    "ds_zero2_reduce",
    "ds_zero3",
    "ds_zero3_no_reuse",
)
SAME_TRACE = {"ds_zero1": ("ds_zero2",), "ds_zero2": ("ds_zero1",)}
PROMPT = (
    "An MLP with layer widths {widths} (a weight and a bias per layer) trains on {gpus} ranks. In one "
    "steady-state step its collectives move, in total per kind: {shown}, all in {dtype} (the lab's "
    "message trace: each collective's full tensor once, an all-gather its output, a reduce-scatter its "
    "input, an all-reduce its tensor; one-element control messages left out). Rank 0 holds {weights:,} "
    "bytes of weights, {gradients:,} of gradients and {optimizer:,} of optimizer state. These numbers "
    "follow the lab's rules for each setting, which its tests check against real ranks. The paper's "
    "count, asked for below, weighs an all-reduce twice (a reduce-scatter plus an all-gather) and every "
    "other collective once; it counts the elements the trace shows, padding included. The "
    "settings: {options}."
)
WORKING = (
    "The {dtype} tensors point to {framework}; {shown} is the pattern of {name}. Ψ = Σ(in·out + out) = "
    "{psi:,}. By the paper's count the step sends {terms} = {paper:,} elements, {ratio:.3f}Ψ, where the "
    "paper's {stage} gives {nearest:g}Ψ: {why}."
)
#: Why each setting's traffic differs from the paper's nearest stage; `padded` and `flat` are read off the
#: trace (the reduce-scatter's and the all-gather's elements), and tests/test_workshop.py checks each claim.
FSDP_PADS = (
    "FSDP2 pads every tensor to N·⌈rows/N⌉ rows, so each collective moves {padded:,} elements, "
    "not Ψ = {psi:,}"
)
DS_PIECES = (
    "DeepSpeed pads every tensor to N pieces of ⌈n/N⌉, so each pass moves {padded:,} elements, "
    "not Ψ = {psi:,}"
)
DS_FLAT = "then all-gathers its flat buffer, Ψ padded to a multiple of 2N: {flat:,} elements"
WHY_RATIO = {
    "ddp": "DDP's one all-reduce is the paper's data parallelism",
    "zero_redundancy_optimizer": "ZeroRedundancyOptimizer keeps DDP's all-reduce (2Ψ by the paper's count) "
    "and adds a broadcast of the updated parameters (Ψ), where the paper's ZeRO-1 reduce-scatters and "
    "all-gathers Ψ once each",
    "fsdp_reshard": FSDP_PADS + "; it reduce-scatters once and, resharding after the forward pass, "
    "all-gathers twice: 3 × {padded:,}",
    "fsdp_no_reshard": FSDP_PADS + "; it reduce-scatters once and, keeping what it gathered for the "
    "backward pass, all-gathers once: 2 × {padded:,}",
    "ds_zero1": "DeepSpeed all-reduces the gradients (2Ψ by the paper's count, where the paper "
    "reduce-scatters Ψ) and " + DS_FLAT,
    "ds_zero2_reduce": "DeepSpeed reduces each gradient bucket to the owners of its slices (Ψ in all, "
    "counted once) and " + DS_FLAT,
    "ds_zero3": DS_PIECES + "; keeping what the forward pass gathered for the backward pass (reuse), it "
    "all-gathers once where the paper gathers twice: 2 × {padded:,}",
    "ds_zero3_no_reuse": DS_PIECES + "; with no reuse or prefetch it gathers every layer again for the "
    "backward pass, as the paper does: 3 × {padded:,}",
}
WHY_RATIO["ds_zero2"] = WHY_RATIO["ds_zero1"]
SPECS = (
    Spec(
        "setting",
        "which setting, by its key in the list",
        "the collectives, their sizes and dtype, and what rank 0 holds",
        kind="choice",
    ),
    Spec(
        "psi",
        "Ψ, the model's parameter count",
        "a weight of in × out and a bias of out per layer",
        unit="params",
        exact=True,
    ),
    Spec(
        "sent_psi",
        "elements sent per rank by the paper's count (the trace's elements, padding included), as a multiple "
        "of Ψ",
        "an all-reduce counts twice its tensor, any other collective once",
        unit="x",
    ),
)
WHY = {
    "dtype-shows-framework": "the dtype shows the framework: the lab's PyTorch runs move float32, "
    "DeepSpeed's bfloat16",
    "broadcast-means-zero-ro": "a broadcast after the all-reduce is ZeroRedundancyOptimizer: each owner "
    "sends its updated parameters; plain DDP only all-reduces",
    "fsdp-gathers": "FSDP2 all-gathers and reduce-scatters padded row chunks; DDP-based settings all-reduce",
    "count-the-gathers": "count the all-gathers against the reduce-scatter: one gather per step "
    "keeps what it gathered for the backward pass, two gather it again",
    "stage3-pieces": "stage 3 reduce-scatters per-parameter pieces and gathers them; stages 1 and 2 reduce "
    "the gradients, then all-gather the flat buffer",
    "reduce-to-owners": "one reduce per slice owner instead of one all-reduce: the bucket all-reduce is off",
    "forgot-biases": "that leaves out the biases: each layer has one per output",
    "paper-not-framework": "that is the paper's figure for the nearest stage; count what this trace shows",
    "all-reduce-once": "an all-reduce is a reduce-scatter plus an all-gather: the paper counts it twice",
}


def tell(option: str, truth: str) -> str:
    """The slip key for mistaking `truth`'s trace for `option`'s: what tells the two apart."""
    a, b, pair = lab_mode(option), lab_mode(truth), {option, truth}
    if a.framework != b.framework:
        return "dtype-shows-framework"
    if pair == {"ddp", "zero_redundancy_optimizer"}:
        return "broadcast-means-zero-ro"
    if a.framework == "pytorch":
        return "count-the-gathers" if pair <= {"fsdp_reshard", "fsdp_no_reshard"} else "fsdp-gathers"
    if (a.stage == Stage.ZERO3) != (b.stage == Stage.ZERO3):
        return "stage3-pieces"
    return "count-the-gathers" if a.stage == Stage.ZERO3 else "reduce-to-owners"


def twins(mode: str, gpus: int, widths) -> tuple[str, ...]:
    """The settings of OPTIONS whose trace and rank 0's bytes equal `mode`'s on an MLP of `widths`."""
    seen = predicted(mode, gpus, 0, tuple(widths))
    return tuple(
        o
        for o in OPTIONS
        if (p := predicted(o, gpus, 0, tuple(widths))).sent == seen.sent and p.held == seen.held
    )


def _draw(seed: int) -> tuple[tuple[int, ...], str, int]:
    """Layer widths, a setting and a rank count."""
    source = rng(ID, seed)
    widths = tuple(source.randint(4, 48) for _ in range(source.choice((3, 4, 5))))
    return widths, source.choice(OPTIONS), source.choice((2, 4))


def _answers(widths: tuple[int, ...], mode: str, gpus: int) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    sent = {op: n for op, n in predicted(mode, gpus, 0, widths).sent.items() if n}
    psi = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    paper = sum(communication.multiple(op) * n for op, n in sent.items())
    nearest = communication.volume_elements(psi, gpus, lab_mode(mode).stage)
    values = dict(setting=mode, psi=psi, sent_psi=Fraction(paper, psi))
    slips = {
        "setting": [(tell(option, mode), option) for option in OPTIONS if option != mode],
        "psi": [("forgot-biases", sum(a * b for a, b in zip(widths, widths[1:], strict=False)))],
        "sent_psi": [
            ("paper-not-framework", nearest / psi),
            ("all-reduce-once", Fraction(sum(sent.values()), psi)),
        ],
    }
    return values, slips


def _terms_and_why(mode: str, sent: dict[str, int], psi: int) -> dict[str, str]:
    """The paper's count term by term, and why it differs from the paper's nearest stage."""
    terms = " + ".join(
        f"{communication.multiple(op)} × {op} {n:,}" if communication.multiple(op) > 1 else f"{op} {n:,}"
        for op, n in sent.items()
    )
    padded, flat = sent.get("reduce_scatter", 0), sent.get("all_gather", 0)
    return {"terms": terms, "why": WHY_RATIO[mode].format(padded=padded, flat=flat, psi=psi)}


def _texts(widths: tuple[int, ...], mode: str, gpus: int) -> tuple[str, str]:
    """The prompt and the worked solution."""
    record, setting = predicted(mode, gpus, 0, widths), lab_mode(mode)
    sent = {op: n for op, n in record.sent.items() if n}
    shown = "; ".join(f"{op} {n:,} elements" for op, n in sent.items())
    dtype = "bfloat16" if setting.framework == "deepspeed" else "float32"
    psi = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    paper = sum(communication.multiple(op) * n for op, n in sent.items())
    nearest = communication.volume_elements(psi, gpus, setting.stage)
    prompt = PROMPT.format(
        widths=" → ".join(map(str, widths)),
        gpus=gpus,
        shown=shown,
        dtype=dtype,
        **record.held,
        options=", ".join(f"{o} ({lab_mode(o).name})" for o in OPTIONS),
    )
    working = WORKING.format(
        **_terms_and_why(mode, sent, psi),
        dtype=dtype,
        framework=setting.framework,
        shown=shown,
        name=setting.name,
        psi=psi,
        paper=paper,
        ratio=float(paper / psi),
        stage=setting.stage.label,
        nearest=float(nearest / psi),
    )
    return prompt, working


def generate(seed: int) -> Question:
    """One variant: a model, a setting and a rank count, shown only by what they send and hold."""
    widths, mode, gpus = _draw(seed)
    values, slips = _answers(widths, mode, gpus)
    prompt, working = _texts(widths, mode, gpus)
    also = {"setting": SAME_TRACE.get(mode, ())}
    return Question(
        ID,
        TITLE,
        seed,
        prompt,
        parts(SPECS, values, slips, WHY, also),
        working,
        POINT,
        (("widths", list(widths)), ("gpus", gpus), ("mode", mode)),
    )
