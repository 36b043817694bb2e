"""Single exercises with feedback: `check(exercise_id, answer)` says right or not yet, and which slip it is.

Every expected answer and every trap is computed by the package, never typed in. A trap is the value a
typical mistake produces (GiB for GB, gradients forgotten, the wrong states divided by N, bytes for
elements, a neighbouring stage, a stage that does not fit); an answer near a trap gets its explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, communication, memory, units
from .planning import offload
from .planning.advice import advise
from .recipes import MEGATRON_18, MIXED_ADAM, Recipe, custom
from .stages import STATES, Stage, as_stage
from .workshop.feedback import HEADS, box
from .workshop.model import near  # answers within 0.5% count: "41.3" for 41.25

#: What each typical mistake means, by key.
MISTAKES = {
    "gib-for-gb": "That is the amount in GiB (2**30 bytes); the question asks for decimal GB (10**9 bytes).",
    "gb-for-gib": "That is the amount in decimal GB; the question asks for GiB (2**30 bytes).",
    "forgot-gradients": "That leaves out the gradients: every parameter also has one (2 bytes in fp16).",
    "wrong-states": "That divides by N for the wrong states: check which states this stage partitions.",
    "bytes-vs-elements": "Off by the bytes per element: elements and bytes differ by the dtype's size.",
    "stage-confused": "That is the answer for a different stage: check which stage the question asks about.",
    "does-not-fit": "That stage's model state does not fit in the card: take the lowest stage that fits.",
    "per-gpu-not-node": "That is per GPU; the question asks for a whole node's worth.",
    "node-not-per-gpu": "That adds up the whole node; each GPU has its own link, so count one GPU's share.",
    "one-direction": "That counts one way only: gradients go to the host and updated weights come back.",
}


@dataclass(frozen=True)
class Exercise:
    """One question, its exact answer, and the values typical mistakes give."""

    id: str  #: short key, e.g. "article-zero1"
    prompt: str  #: the question as the learner reads it
    unit: str  #: "GB", "GiB", "params", "elements", "GPUs", "stage", "seconds" or "x"
    answer: Fraction  #: the expected value, in `unit`
    working: str  #: the worked solution, shown on request
    traps: tuple[tuple, ...] = ()  #: (mistake key, value it gives[, what to say instead of MISTAKES])


@dataclass(frozen=True, repr=False)
class Feedback:
    """What `check` says about one answer."""

    correct: bool  #: whether the answer is right, within the tolerance
    message: str  #: what to tell the learner
    mistake: str | None = None  #: key into MISTAKES when a typical slip was recognised
    working: str | None = None  #: the worked solution, when asked for

    def __repr__(self) -> str:
        return self.message + (f"\nWorking: {self.working}" if self.working else "")

    @property
    def state(self) -> str:
        """The state, said in words and colour, never by an emoji alone: correct, unanswered or not yet."""
        return "correct" if self.correct else "unanswered" if self.message == UNANSWERED else "not yet"

    def _repr_html_(self) -> str:
        return box(self.state, self.message, [f"Working: {self.working}"] if self.working else [])


#: What an unanswered exercise says: neutral, neither right nor wrong.
UNANSWERED = f"{HEADS['unanswered'][0]} replace None with your answer, then run the cell."


def _held(params: int, gpus: int, split: set[str], recipe: Recipe) -> Fraction:
    """Per-GPU bytes when exactly the states in `split` are divided by `gpus`."""
    return sum(
        (Fraction(recipe.bytes_for(s)) * params / (gpus if s in split else 1) for s in STATES), Fraction(0)
    )


def _memory_exercise(
    id: str, params: int, gpus: int, stage: int, unit: str, recipe: Recipe = MIXED_ADAM
) -> Exercise:
    """Per-GPU model state for one stage, with the standard traps."""
    stage = as_stage(stage)
    total = memory.per_gpu(params, gpus, stage, recipe).total
    show = lambda b: units.in_unit(b, unit)  # noqa: E731
    other_unit = "GiB" if unit == "GB" else "GB"
    no_grads = custom(recipe.weight_bytes, 0, recipe.optimizer_bytes)
    traps = [
        ("gib-for-gb" if unit == "GB" else "gb-for-gib", units.in_unit(total, other_unit)),
        ("forgot-gradients", show(memory.per_gpu(params, gpus, stage, no_grads).total)),
    ]
    traps += [
        ("stage-confused", show(memory.per_gpu(params, gpus, s, recipe).total)) for s in Stage if s != stage
    ]
    traps += [
        ("wrong-states", show(_held(params, gpus, split, recipe)))
        for split in ({"gradients"}, {"weights"}, {"gradients", "weights"}, {"weights", "optimizer"})
    ]
    parts = " + ".join(
        f"{recipe.bytes_for(s)}Ψ" + ("/N" if stage.partitions(s) else "") for s in STATES[::-1]
    )
    working = (
        f"{stage.label} keeps {parts} bytes per GPU; with Ψ = {params:,} and N = {gpus} that is "
        f"{units.format_bytes(total, unit)}."
    )
    prompt = (
        f"{units.format_count(params)} parameters on {gpus} GPUs, {recipe.summary()}: "
        f"how much model state does each GPU hold under {stage.label}, in {unit}?"
    )
    return Exercise(id, prompt, unit, show(total), working, tuple(traps))


def _calculations() -> list[Exercise]:
    """Single calculations: memory per GPU under each stage, traffic per step, the ZeRO-2 ceiling."""
    psi = 7_500_000_000
    ex = [
        _memory_exercise("article-zero1", psi, 8, 1, "GB"),
        _memory_exercise("zero2-13b-16", 13 * 10**9, 16, 2, "GB"),
        _memory_exercise("zero3-70b-64-gib", 70 * 10**9, 64, 3, "GiB"),
        _memory_exercise("dp-megatron-7b", 7 * 10**9, 8, 0, "GB", MEGATRON_18),
        *_traffic(psi),
    ]
    whole = Fraction(MIXED_ADAM.total_bytes)  # data parallel's bytes per parameter, the same for any N
    ex.append(
        Exercise(
            "zero2-ceiling",
            "Mixed-precision Adam: with unlimited GPUs, at most how many times less memory "
            "per GPU does ZeRO-2 need than data parallelism?",
            "x",
            whole / MIXED_ADAM.weight_bytes,
            "ZeRO-2 keeps the fp16 weights whole: 2Ψ + 14Ψ/N tends to 2Ψ, and 16Ψ / 2Ψ = 8.",
            (("stage-confused", whole / (MIXED_ADAM.weight_bytes + MIXED_ADAM.grad_bytes)),),
        )
    )
    return ex


def _traffic(psi: int) -> list[Exercise]:
    """Traffic per step by the paper's count: data parallel's elements, ZeRO-3's bytes."""
    dp = communication.volume_elements(psi, 8, 0)
    ex = []
    ex.append(
        Exercise(
            "comm-dp-elements",
            "Data parallelism, 7.5B parameters on 8 GPUs: how many elements does each GPU "
            "send per step, by the ZeRO paper's count (no ring factor)?",
            "elements",
            dp,
            "An all-reduce is a reduce-scatter (Ψ) plus an all-gather (Ψ): 2Ψ = 15,000,000,000 elements.",
            (("bytes-vs-elements", dp * 2), ("stage-confused", communication.volume_elements(psi, 8, 3))),
        )
    )
    z3 = communication.volume_bytes(13 * 10**9, 8, 3, "bf16")
    ex.append(
        Exercise(
            "comm-zero3-bytes",
            "ZeRO-3, 13B parameters in bf16 on 8 GPUs: how many GB does each GPU send "
            "per step (paper's count)?",
            "GB",
            units.in_unit(z3, "GB"),
            "Two all-gathers of the weights and one reduce-scatter of the gradients: "
            "3Ψ elements × 2 bytes = 78 GB.",
            (
                ("bytes-vs-elements", units.in_unit(z3 / 2, "GB")),
                ("gib-for-gb", units.in_unit(z3, "GiB")),
                ("stage-confused", units.in_unit(communication.volume_bytes(13 * 10**9, 8, 0, "bf16"), "GB")),
            ),
        )
    )
    return ex


def _design() -> list[Exercise]:
    """Design questions: the largest model, the fewest GPUs, which stage, offload's host and link costs."""
    psi = 7_500_000_000
    pick, card = advise(psi, 8, "24GB"), units.parse_size("24GB")
    needs = {s: memory.per_gpu(psi, 8, s).total for s in Stage}
    said = "{} needs {} per GPU, which does not fit in 24 GB: take the lowest stage that fits."
    too_small = tuple(
        ("does-not-fit", Fraction(int(s)), said.format(s.label, units.format_bytes(need, "GB")))
        for s, need in needs.items()
        if need > card
    )
    which = Exercise(
        "which-stage-24gb",
        "7.5B parameters on 8 GPUs with 24 GB each: what is the lowest stage whose model state fits?",
        "stage",
        Fraction(int(pick.stage)),
        "Data parallel needs 120 GB, ZeRO-1 41.25 GB, ZeRO-2 28.125 GB and ZeRO-3 15 GB: "
        "only ZeRO-3 fits in 24 GB.",
        too_small,
    )
    return [*_sizing(), which, *_offload(psi)]


def _sizing() -> list[Exercise]:
    """Sizing on 80 GB GPUs under ZeRO-3: the largest model on 8 of them, the fewest GPUs for 70B."""
    card, ex = units.parse_size("80GB"), []
    ex.append(
        Exercise(
            "largest-zero3-8x80",
            "On 8 GPUs with 80 GB each, what is the largest model (in parameters) whose "
            "model state fits under ZeRO-3?",
            "params",
            Fraction(memory.max_params(8, card, 3)),
            "(4 + K)Ψ/N ≤ 80 GB with K = 12 and N = 8 gives Ψ ≤ 80 GB × 8 / 16 = 40,000,000,000.",
            (
                ("gib-for-gb", Fraction(memory.max_params(8, units.parse_size("80GiB"), 3))),
                ("forgot-gradients", Fraction(memory.max_params(8, card, 3, custom(2, 0, 12)))),
                ("stage-confused", Fraction(memory.max_params(8, card, 2))),
            ),
        )
    )
    ex.append(
        Exercise(
            "fewest-gpus-70b",
            "A 70B model on 80 GB GPUs under ZeRO-3: how many GPUs at least, for model state alone?",
            "GPUs",
            Fraction(memory.min_gpus(70 * 10**9, card, 3)),
            "16 × 70 × 10**9 bytes / 80 GB = 14 GPUs.",
            (("forgot-gradients", Fraction(memory.min_gpus(70 * 10**9, card, 3, custom(2, 0, 12)))),),
        )
    )
    return ex


def _offload(psi: int) -> list[Exercise]:
    """ZeRO-2 with the optimizer offloaded on one node of 8 GPUs: host memory and link time."""
    ex, (_, off_gpu) = [], offload.offloaded(psi, 8, 2)
    ex.append(
        Exercise(
            "offload-host-node",
            "ZeRO-2 with the optimizer offloaded, 7.5B parameters on one node of 8 GPUs: "
            "how many GB of host memory does the node need for model state?",
            "GB",
            units.in_unit(off_gpu.total * 8, "GB"),
            "Each GPU's optimizer shard is 12Ψ/8 = 11.25 GB; 8 of them make 90 GB on the node.",
            (
                ("per-gpu-not-node", units.in_unit(off_gpu.total, "GB")),
                ("gib-for-gb", units.in_unit(off_gpu.total * 8, "GiB")),
            ),
        )
    )
    link = offload.link_time(psi, 8, 2, "25 GB/s")
    ex.append(
        Exercise(
            "offload-link-time",
            "Same setup: each step sends the gradient shard to the host and brings the "
            "updated fp16 weight shard back over a 25 GB/s link. How many seconds per step is that?",
            "seconds",
            link,
            "(2 + 2) bytes × Ψ/8 = 3.75 GB, and 3.75 GB / 25 GB/s = 0.15 s.",
            (("node-not-per-gpu", link * 8), ("one-direction", link / 2)),
        )
    )
    return ex


def _catalogue() -> dict[str, Exercise]:
    """Every exercise, from single calculations to design questions."""
    return {e.id: e for e in (*_calculations(), *_design())}


EXERCISES = _catalogue()


def _read(exercise: Exercise, answer) -> Fraction:
    """The learner's answer as a number in the exercise's unit; text may carry a unit or a count suffix."""
    if exercise.unit == "stage":
        return Fraction(int(as_stage(answer)))
    if isinstance(answer, str):
        text = answer.strip().replace(",", "")
        if exercise.unit in ("params", "elements"):
            return Fraction(units.parse_count(text, field="answer"))
        if exercise.unit in ("GB", "GiB") and text[-1:].isalpha():
            return units.in_unit(units.parse_size(text, field="answer"), exercise.unit)
        return units.read_ratio(
            text.removesuffix("s").removesuffix("x").strip(), field="answer", forms="41.25, 0.15 or 1/2"
        )
    return checks.exact("answer", answer, "a number or text such as '41.25 GB'")


def check(exercise_id: str, answer, *, show_working: bool = False) -> Feedback:
    """Say whether `answer` is right, and if not, which typical mistake it looks like."""
    exercise = EXERCISES[checks.choice("exercise_id", exercise_id, EXERCISES)]
    working = exercise.working if checks.flag("show_working", show_working) else None
    if answer is None:
        return Feedback(False, UNANSWERED, working=working)
    try:
        value = _read(exercise, answer)
    except (ValueError, TypeError) as err:
        return Feedback(False, f"Not yet: could not read that answer: {err}", working=working)
    if near("number", value, exercise.answer):
        return Feedback(True, "Correct.", working=working)
    for key, trap, *said in exercise.traps:
        if near("number", value, trap):
            return Feedback(False, f"Not yet: {said[0] if said else MISTAKES[key]}", key, working)
    again = "Recompute step by step, or call check(..., show_working=True)."
    return Feedback(False, f"Not yet: it does not match a common slip. {again}", working=working)
