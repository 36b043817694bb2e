"""Predict, then measure: what one lab rank holds and sends, predicted by the attendee, measured by the lab.

The attendee predicts, for the lab's small model under one framework setting, the bytes their rank
holds by kind of state and the elements each collective moves in one steady-state step. `check`
grades the prediction against the package's lab predictions; after a lab run (`run_cases`),
`compare` grades it against the measurement and says whether the package predicted it right.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from fractions import Fraction

from .. import communication, memory, units
from .derivation import by_hand
from .feedback import Feedback, assess
from .lab_link import (
    COLLECTIVES,
    FIELDS,
    Record,
    lab_mode,
    lab_model,
    measure_many,
    predicted,
    with_defaults,
)
from .model import Question, Spec, parts, rng

#: The exercises: title, the settings an attendee may draw, and the collectives asked about.
FAMILIES = {
    "measure-pytorch": (
        "Predict, then measure: PyTorch",
        ("zero_redundancy_optimizer", "fsdp_reshard", "fsdp_no_reshard"),
        ("all_reduce", "broadcast", "reduce_scatter", "all_gather"),
    ),
    "measure-deepspeed-12": (
        "Predict, then measure: DeepSpeed stage 1/2",
        ("ds_zero1", "ds_zero2", "ds_zero2_reduce"),
        ("all_reduce", "reduce", "reduce_scatter", "all_gather"),
    ),
    "measure-deepspeed-3": (
        "Predict, then measure: DeepSpeed stage 3",
        ("ds_zero3", "ds_zero3_reuse0", "ds_zero3_no_reuse"),
        ("all_reduce", "reduce_scatter", "all_gather"),
    ),
}
POINT = (
    "Real frameworks split, pad and gather by their own rules; the paper's Ψ/N is where the counting starts."
)
PROMPT = (
    "The lab trains its small MLP ({widths}, {psi:,} parameters) on {gpus} CPU ranks with {name}; you are "
    "rank {rank}.{note} It uses {recipe}. Predict the bytes your rank holds {when}, by kind of state, and "
    "the elements each collective moves in one steady-state step, training tensors only{messages}. Count "
    "them as the lab's message trace does: each collective's full tensor once, so an all-gather counts its "
    "output, a reduce-scatter its input and an all-reduce its tensor. The paper's count, which lesson 11's "
    '"sent" columns use, differs: it weighs an all-reduce twice (a reduce-scatter plus an all-gather). '
    "Then run the lab for this case."
)
#: What the question says of its settings beyond their names, by family ({threshold}: DeepSpeed's default).
NOTES = {
    "measure-deepspeed-12": " DeepSpeed's stages 1 and 2 lay every parameter end to end, in model order, in "
    "one flat bf16 buffer, padded to a multiple of 2N elements. Every rank keeps that whole buffer as its "
    "weights; its slice, the padded buffer divided by N, padding included, holds its fp32 master weights and "
    "Adam moments; and after the backward pass it keeps, whole, the gradients of every parameter that "
    "touches its slice, plus the padding that falls in its slice. The gradients travel in buckets that hold "
    "the Ψ real elements, no padding, whether all-reduced (the default) or reduced to each slice's owner; "
    "the all-gather after the step returns the whole padded buffer (lesson 11, sections 4 and 5).",
    "measure-deepspeed-3": " Every tensor is sharded: the lab sets stage3_param_persistence_threshold = 0, "
    "where DeepSpeed's default, {threshold:,} elements, would keep every tensor of this MLP whole on every "
    "rank. Stage 3 cuts every parameter on its own into N pieces of ⌈n/N⌉ elements, the last padded, and "
    "a rank holds its pieces of the bf16 weights and gradients and of the fp32 master weights and moments "
    "(lesson 11, section 6).",
}
#: What the question says of FSDP2's uneven row chunks (lesson 10, section 5), as `by_hand` counts them.
FSDP_NOTE = (
    " FSDP2 cuts each tensor along its rows into N chunks of ⌈rows/N⌉ rows, so a rank may get fewer rows "
    "than the others. Count your weights and gradients as the full padded chunk, padding included, and your "
    "Adam state by your own rows only, padding left out (lesson 10, the PyTorch lab, section 5)."
)
#: What the ds_zero3 setting leaves at DeepSpeed's default (its prefetch and live limits are the lab's).
DS_DEFAULTS = " stage3_max_reuse_distance keeps DeepSpeed's default, {reuse} elements, far beyond this MLP."
#: Notes for single settings, added after the family's note.
MODE_NOTES = {"fsdp_reshard": FSDP_NOTE, "fsdp_no_reshard": FSDP_NOTE, "ds_zero3": DS_DEFAULTS}
#: What the lab leaves out of each framework's messages.
MESSAGES = {
    "pytorch": "",
    "deepspeed": " (leave out DeepSpeed's one-element messages: the gradient norm, and the overflow flag "
    "where it sends one)",
}
RECIPES = {
    "pytorch": ("fp32 weights, gradients and Adam (4 + 4 + 8 bytes)", "after the optimizer step"),
    "deepspeed": (
        "bf16 weights and gradients with fp32 master weights and Adam moments (2 + 2 + 12 bytes)",
        "after the backward pass, before engine.step()",
    ),
}
NAMES = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state"}
SPECS = {
    f: Spec(
        f,
        f"bytes of {NAMES[f]} your rank holds",
        f"the framework's own split of the {NAMES[f]}",
        unit="B",
        exact=True,
    )
    for f in FIELDS
} | {
    op: Spec(
        op,
        f"elements {op} moves in one step (0 if it does not run)",
        "which collectives the framework runs, and on how many elements",
        unit="elements",
        exact=True,
    )
    for op in COLLECTIVES
}
#: Why a prediction missed, by slip key.
WHY = {
    "zero-ro-split": "ZeroRedundancyOptimizer gives each rank whole parameters, largest first, to the rank "
    "holding least so far: the split is uneven, not Ψ/N",
    "keeps-weights": "this setting splits only the optimizer state: every rank keeps all weights and "
    "gradients",
    "fsdp-pads-rows": "FSDP2 cuts each parameter into chunks of ceil(rows/N) rows, and pads the "
    "weight and gradient shards to that size on every rank",
    "fsdp-optimizer-rows": "FSDP2 creates Adam's state like the rank's own unpadded rows, so the last "
    "ranks hold less",
    "flat-buffer": "stages 1 and 2 keep the whole flat bf16 buffer, padded to a multiple of 2N elements",
    "touched-gradients": "after the backward pass a stage 1/2 rank keeps, whole, the gradients of every "
    "parameter that touches its slice of the flat buffer",
    "slice-padded": "each rank's slice is the padded flat buffer divided by N, padding included",
    "stage3-pieces": "stage 3 cuts every parameter on its own into N pieces of ceil(n/N) elements, padded",
    "unpadded": "that leaves out the padding: the framework pads what it gathers and reduce-scatters",
    "doubled-all-reduce": "that doubles the all-reduce, as the paper's count does; give the tensor's "
    "elements, as the lab's message trace counts them",
    "reuse-gathers-once": "with prefetch and reuse DeepSpeed keeps what it gathered in the forward pass for "
    "the backward pass: one all-gather of every piece per step",
    "no-reuse-gathers-twice": "with no reuse and no prefetch, stage 3 gathers every layer in the forward "
    "pass and again in the backward pass",
    "reshard-gathers-twice": "resharding after the forward pass means gathering again for the backward pass",
    "no-reshard-gathers-once": "reshard_after_forward=False keeps the gathered parameters for the "
    "backward pass",
    "reuse0-not-once": "at reuse distance 0 DeepSpeed keeps a gathered piece only if its next use comes "
    "at once, so almost every layer is gathered again in the backward pass",
    "reuse0-not-twice": "even at reuse distance 0 the last layer's backward follows its forward at once, "
    "so DeepSpeed keeps its pieces and does not gather them again: a little under two full passes",
}
#: How each family's frameworks depart from the paper's plan of collectives (the slip "paper-plan").
PAPER_GAP = {
    "measure-pytorch": "that is the paper's plan; ZeroRedundancyOptimizer runs DDP's all-reduce and then "
    "each owner broadcasts its parameters, and FSDP2 gathers and reduce-scatters padded row chunks",
    "measure-deepspeed-12": "that is the paper's plan; DeepSpeed's stages 1 and 2 all-reduce the gradients "
    "in buckets by default (or reduce each slice to its owner), then all-gather the flat buffer",
    "measure-deepspeed-3": "that is the paper's plan of two all-gathers; DeepSpeed's prefetch and reuse "
    "change how often it gathers",
}
#: The slip for getting the number of all-gathers wrong, by setting; the first group gathers once.
GATHERS = {
    "ds_zero3": "reuse-gathers-once",
    "fsdp_no_reshard": "no-reshard-gathers-once",
    "ds_zero3_no_reuse": "no-reuse-gathers-twice",
    "fsdp_reshard": "reshard-gathers-twice",
}
#: Reuse distance 0 gathers between once and twice: its slips are the settings that gather exactly so.
BETWEEN = {"ds_zero3_reuse0": (("reuse0-not-once", "ds_zero3"), ("reuse0-not-twice", "ds_zero3_no_reuse"))}


def paper(mode: str, psi: int, gpus: int) -> tuple[dict[str, Fraction], dict[str, int]]:
    """The paper's bytes per field for the setting's nearest stage and recipe, and its collectives."""
    setting = lab_mode(mode)
    held = memory.per_gpu(psi, gpus, setting.stage, setting.recipe)
    sent: Counter = Counter()
    for c in communication.collectives(setting.stage):
        sent[c.op.replace("-", "_")] += psi
    return {f: getattr(held, f) for f in FIELDS}, dict(sent)


def held_slips(family: str, mode: str, gpus: int, truth: Record) -> dict[str, list]:
    """Typical wrong predictions of the held bytes, by field: mostly the paper's even split."""
    psi = lab_model()[1]
    even = paper(mode, psi, gpus)[0]
    if mode == "zero_redundancy_optimizer":
        return {
            "weights": [("keeps-weights", even["weights"] / gpus)],
            "gradients": [("keeps-weights", even["gradients"] / gpus)],
            "optimizer": [("zero-ro-split", even["optimizer"])],
        }
    if family == "measure-pytorch":  # FSDP2: padded row chunks for weights and gradients, own rows for Adam
        shard = 4 * Fraction(psi, gpus)  # fp32 bytes of an even Ψ/N share
        return {
            "weights": [("fsdp-pads-rows", shard)],
            "gradients": [("fsdp-pads-rows", shard)],
            "optimizer": [
                ("fsdp-optimizer-rows", 2 * shard),
                ("fsdp-optimizer-rows", 2 * truth.held["weights"]),
            ],
        }
    if family == "measure-deepspeed-3":
        return {f: [("stage3-pieces", even[f])] for f in FIELDS}
    shard = 2 * Fraction(psi, gpus)  # bf16 bytes of an even Ψ/N share
    return {
        "weights": [("flat-buffer", even["weights"]), ("flat-buffer", shard)],
        "gradients": [("touched-gradients", 2 * psi), ("touched-gradients", shard)],
        "optimizer": [("slice-padded", even["optimizer"])],
    }


def sent_slips(mode: str, gpus: int, truth: Record) -> dict[str, list]:
    """Typical wrong predictions of the elements per collective: the paper's plan, padding, gathers, ×2."""
    out = {op: [] for op in COLLECTIVES}
    gathered = truth.sent["all_gather"]
    if mode in GATHERS:  # twice what runs once, or half of what runs twice
        once = GATHERS[mode].endswith("once")
        out["all_gather"].append((GATHERS[mode], 2 * gathered if once else Fraction(gathered, 2)))
    for key, other in BETWEEN.get(mode, ()):
        out["all_gather"].append((key, predicted(other, gpus, truth.rank).sent["all_gather"]))
    plan = paper(mode, lab_model()[1], gpus)[1]
    for op in COLLECTIVES:
        expected, real = plan.get(op, 0), truth.sent[op]
        if expected != real:  # the same collective a little bigger is padding; anything else is another plan
            out[op].append(("unpadded" if expected and 1 < real / expected < 1.5 else "paper-plan", expected))
    if truth.sent["all_reduce"]:
        out["all_reduce"].append(("doubled-all-reduce", 2 * truth.sent["all_reduce"]))
    return out


def _working(mode: str, gpus: int, rank: int, even: dict) -> str:
    """The worked answer, tensor by tensor, then the paper's even split beside it."""
    shares = ", ".join(f"{units.format_number(v, grouped=True)} B of {NAMES[f]}" for f, v in even.items())
    return f"{by_hand(mode, gpus, rank).working()} The paper's even split would give {shares}."


def measure_question(family: str, seed: int) -> Question:
    """One predict-then-measure variant: a setting of the family, a rank count, and the attendee's rank."""
    title, modes, asked = FAMILIES[family]
    source = rng(family, seed)
    mode, gpus = source.choice(modes), source.choice((2, 4))
    rank = source.randrange(gpus)
    truth, (widths, psi), setting = predicted(mode, gpus, rank), lab_model(), lab_mode(mode)
    recipe, when = RECIPES[setting.framework]
    prompt = PROMPT.format(
        widths=" → ".join(map(str, widths)),
        psi=psi,
        name=setting.name,
        gpus=gpus,
        rank=rank,
        recipe=recipe,
        when=when,
        messages=MESSAGES[setting.framework],
        note=with_defaults(NOTES.get(family, "") + MODE_NOTES.get(mode, "")),
    )
    slips = held_slips(family, mode, gpus, truth) | sent_slips(mode, gpus, truth)
    specs = tuple(SPECS[name] for name in (*FIELDS, *asked))
    working = _working(mode, gpus, rank, paper(mode, psi, gpus)[0])
    return Question(
        family,
        title,
        seed,
        prompt,
        parts(specs, truth.values(), slips, WHY | {"paper-plan": PAPER_GAP[family]}),
        working,
        POINT,
        (("mode", mode), ("gpus", gpus), ("rank", rank)),
    )


def case(question: Question) -> tuple[str, int, int]:
    """The lab case a predict-then-measure variant needs: (setting, ranks, the attendee's rank)."""
    given = dict(question.given)
    return given["mode"], given["gpus"], given["rank"]


def run_cases(questions, timeout: float = 120) -> dict[str, Record]:
    """Run the lab for several variants' cases at once (one set of ranks per rank count), by question id."""
    cases = {q.id: case(q) for q in questions}
    found = measure_many(tuple(cases.values()), timeout)
    return {qid: found[c] for qid, c in cases.items()}


def compare(question: Question, answer, measured: Record) -> Feedback:
    """Mark `answer` against the lab's measurement, and say whether the package's prediction matched it."""
    values = measured.values()
    differ = [
        f"{p.name} (predicted {p.value}, measured {values[p.name]})"
        for p in question.parts
        if p.value != values[p.name]
    ]
    feedback = assess(
        replace(question, parts=tuple(replace(p, value=values[p.name]) for p in question.parts)), answer
    )
    if feedback.state == "unanswered":  # no prediction yet: say nothing that reads like a result
        note = (
            "the lab has run this case and grades your prediction against its measurement once you give one."
        )
    elif not differ:
        note = "the lab measured exactly what the package predicts."
    else:
        note = "the measurement differs from the package's prediction in " + "; ".join(differ) + "."
    return replace(feedback, note=" ".join(filter(None, (feedback.note, note))))
