"""Design question: pick a stage and a recomputation level for a transformer whose activations overflow."""

from __future__ import annotations

from .. import memory, units
from ..inputs import Setup
from ..planning.activations import RECOMPUTE, Transformer, activation_bytes, least_recomputation
from ..stages import Stage
from .model import Question, Spec, first, gb, in_gb, in_gib, parts, rng

ID, TITLE = "stage-and-checkpointing", "Stage and checkpointing"
POINT = "No ZeRO stage shrinks activations; when they overflow the card, recomputation does."
ADAM = "mixed-precision Adam (2 + 2 + 12 bytes per parameter)"
NO_STAGE = "no ZeRO stage shrinks activations: every GPU keeps those of its own micro-batch"
PROMPT = (
    "Take {shape}. It trains on {gpus} GPUs of {card} each ({card_e9} × 10⁹ bytes: GB means 10⁹ bytes "
    "throughout), at sequence length {seq:,} and micro-batch "
    "{batch} per GPU, with " + ADAM + ". Activations follow Korthikanti et al. (2022), in bytes per GPU: "
    "s·b·h·(34 + 5·a·s/h) per layer with no recomputation; 34·s·b·h per layer plus one layer's s·b·h·5·a·s/h "
    "with selective recomputation, which keeps none of attention's s × s matrices (the softmax output, "
    "its dropout mask and the dropped-out result: the 5·a·s/h term) and rebuilds them one layer at a time "
    "in the backward pass; and "
    "2·s·b·h per layer plus one layer's full set with full recomputation, which keeps only each layer's "
    "input and reruns the layer's forward in the backward pass. Rule: take the least "
    "recomputation (none, then selective, then full) that lets some stage fit, and with it the lowest stage "
    "that fits; a stage fits when its model state plus activations are at most the card's whole memory (this "
    "sheet keeps no headroom)."
)
WORKING = (
    "Model state per GPU: {states}. Activations do not depend on the stage. {tried}: too much for {card}. "
    "With {recompute} recomputation the activations take {act}, and {stage} is the lowest stage that fits: "
    "{state} + {act} = {need}."
)
SPECS = (
    Spec(
        "activations_gb",
        "activations per GPU with no recomputation, in GB",
        "Korthikanti's s·b·h·(34 + 5·a·s/h) bytes per layer, times the layers",
        unit="GB",
    ),
    Spec(
        "recompute",
        "the least recomputation that lets some stage fit: none, selective or full",
        NO_STAGE + ", so only recomputation makes them smaller",
        kind="choice",
    ),
    Spec(
        "stage",
        "the lowest stage that fits with that recomputation (0-3)",
        "the lowest stage whose model state plus the activations fits the card",
        kind="stage",
    ),
    Spec(
        "gb_per_gpu",
        "model state plus activations per GPU at your choice, in GB",
        "the chosen stage's model state plus the activations left after recomputation",
        unit="GB",
    ),
)
WHY = {
    "activations-split": "that splits the activations over the GPUs, but " + NO_STAGE,
    "stage-for-activations": "no stage fits without recomputation: " + NO_STAGE,
    "selective-is-not-enough": "selective recomputation still keeps 34·s·b·h bytes per layer, and no stage "
    "fits with that",
}


def shape_text(shape: Transformer) -> str:
    """A transformer's shape and parameter count in words."""
    return (
        f"a decoder-only transformer with {shape.layers} layers, hidden size {shape.hidden:,} and "
        f"{shape.heads} heads: {shape.params:,} parameters by 12·L·h² + V·h (V = {shape.vocab:,})"
    )


def state(params: int, gpus: int, stage) -> int:
    """Per-GPU model state under the paper's 16 bytes."""
    return memory.per_gpu(params, gpus, stage).total


def plan(shape: Transformer, gpus: int, card: int):
    """The least recomputation that lets a stage fit, the lowest stage then, and the bytes needed."""
    return least_recomputation(shape, Setup(shape.params, gpus, gpu_memory=card))


def _draw(r):
    """A transformer, a GPU count and a card."""
    hidden = r.choice((2048, 2560, 3072, 4096, 5120))
    shape = Transformer(
        r.choice((24, 32, 40, 48)), hidden, hidden // 128, r.choice((2048, 4096)), r.choice((1, 2, 4, 8))
    )
    return shape, r.choice((4, 8, 16)), r.choice((24, 40, 48, 80)) * units.GB


def _fits(shape, gpus, card) -> bool:
    """Something fits, and only with recomputation."""
    found = plan(shape, gpus, card)
    return found is not None and found[0] != "none"


def _answers(shape: Transformer, gpus: int, card: int) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    recompute, stage, need = plan(shape, gpus, card)
    psi, act = shape.params, activation_bytes(shape, "none")
    values = dict(activations_gb=in_gb(act), recompute=recompute, stage=stage, gb_per_gpu=in_gb(need))
    slips = {
        "activations_gb": [("activations-split", in_gb(act / gpus)), ("gib-for-gb", in_gib(act))],
        "recompute": [("stage-for-activations", "none"), ("selective-is-not-enough", "selective")],
        "stage": stage_slips(psi, gpus, card, activation_bytes(shape, recompute), stage),
        "gb_per_gpu": [("ignored-activations", in_gb(state(psi, gpus, stage))), ("gib-for-gb", in_gib(need))],
    }
    return values, slips


def stage_slips(psi: int, gpus: int, card: int, act: int, stage: Stage) -> list:
    """Each other stage as a slip that names its own numbers: too big for the card, or not the lowest."""
    alone = next(s for s in Stage if state(psi, gpus, s) <= card)  # fits if the activations are forgotten
    out = []
    for other in sorted(Stage, key=lambda s: s != alone):  # that slip first: it is the likeliest
        held = state(psi, gpus, other)
        if other < stage:
            why = (
                f"{other.label} needs {gb(held)} of model state plus {gb(act)} of activations = "
                f"{gb(held + act)} per GPU, which does not fit in {gb(card)}"
            )
            key = "ignored-activations" if other == alone else "does-not-fit"
            out.append((key, other, why + (": the activations count too" if other == alone else "")))
        elif other > stage:
            lowest = f"{stage.label} is lower and fits: {gb(state(psi, gpus, stage) + act)} ≤ {gb(card)}"
            out.append(("not-the-lowest", other, f"{other.label} fits too, but {lowest}"))
    return out


def _working(shape: Transformer, gpus: int, card: int) -> str:
    """The worked solution, with this variant's numbers."""
    recompute, stage, need = plan(shape, gpus, card)
    psi, act = shape.params, {r: activation_bytes(shape, r) for r in RECOMPUTE}
    tried = [
        f"{r}: {gb(act[r])} of activations, {gb(state(psi, gpus, 3) + act[r])} even under ZeRO-3"
        for r in RECOMPUTE[: RECOMPUTE.index(recompute)]
    ]
    states = ", ".join(f"{s.label} {gb(state(psi, gpus, s))}" for s in Stage)
    return WORKING.format(
        states=states,
        tried="; ".join(tried),
        card=gb(card),
        recompute=recompute,
        act=gb(act[recompute]),
        stage=stage.label,
        state=gb(state(psi, gpus, stage)),
        need=gb(need),
    )


def generate(seed: int) -> Question:
    """One variant: the shape, the cluster, and the choice with the numbers behind it."""
    shape, gpus, card = first(rng(ID, seed), _draw, _fits)
    values, slips = _answers(shape, gpus, card)
    prompt = PROMPT.format(
        shape=shape_text(shape),
        gpus=gpus,
        card=gb(card),
        card_e9=units.format_number(in_gb(card)),
        seq=shape.seq_len,
        batch=shape.micro_batch,
    )
    given = dict(
        layers=shape.layers,
        hidden=shape.hidden,
        heads=shape.heads,
        seq_len=shape.seq_len,
        micro_batch=shape.micro_batch,
        gpus=gpus,
        card_gb=int(in_gb(card)),
    )
    answers, working = parts(SPECS, values, slips, WHY), _working(shape, gpus, card)
    return Question(ID, TITLE, seed, prompt, answers, working, POINT, tuple(given.items()))
