"""The calculator audit, part 1: what a tool divides by. DeepSpeed's two ZeRO-2 formulas, and ZeRO shards
divided by every GPU instead of the data-parallel degree under tensor and pipeline parallelism.

Facts (checked in the tools' public code and docs; see the project's FACTS): DeepSpeed's documentation shows
ZeRO-2 as 4Ψ + 16Ψ/N per GPU, while its estimator code counts 2Ψ + 18Ψ/N; both divide by 2**30 and print "GB".
A stored version of EleutherAI's memory calculator (18 B per parameter) divides ZeRO shards by the total GPU
count instead of the data-parallel degree when tensor or pipeline parallelism is on.
"""

from __future__ import annotations

from fractions import Fraction

from .. import memory, units
from ..planning import ds_estimator
from ..recipes import INFINITY_20, MEGATRON_18, MIXED_ADAM
from ..stages import Stage
from .model import Question, Spec, billions, gb, in_gb, in_gib, parts, rng

SIZES = (1.3, 2.7, 6.7, 13, 20, 30, 70)  #: model sizes to draw from, in billions of parameters

FORMULA = "audit-deepspeed-formula"
FORMULA_PROMPT = (
    "For a model of {psi:,} parameters on {gpus} GPUs, DeepSpeed's documentation formula for ZeRO-2, "
    '4Ψ + 16Ψ/N, gives {docs} "GB", and the estimator in its code (estimate_zero2_model_states_mem_needs, '
    'no offload) prints {code} "GB"; for the same model on {more} GPUs it prints {code_more} "GB". Both '
    "divide bytes by 2**30, and both have the form aΨ + bΨ/N, with a and b whole bytes per parameter. "
    "The paper's ZeRO-2 with mixed-precision Adam is 2Ψ + 14Ψ/N."
)
FORMULA_WORKING = (
    "Write each figure as aΨ + bΨ/N bytes. The code's figures at N = {gpus} and 2N = {more} GPUs differ by "
    "bΨ/N − bΨ/2N = bΨ/2N, which gives b = {split} bytes split: bf16 gradients (2), an fp32 gradient copy "
    "(4) and Adam (12). Its figure at N, in bytes, over Ψ is {per_param} = a + {split}/{gpus}, so a = "
    "{whole}: only the bf16 weights are kept whole, stage 2's shape, {code_gib} = {code_gb}. The docs keep "
    "4Ψ whole and split 16Ψ/N: stage 1's shape. Both total 20 bytes per parameter, the package's recipe "
    "INFINITY_20 (2 + 2 + 16): the docs are per_gpu(Ψ, N, 1, INFINITY_20), the code per_gpu(Ψ, N, 2, "
    "INFINITY_20). The paper's ZeRO-2 is {paper}; the {gap} between them is the fp32 gradient copy, 4Ψ/N."
)
FORMULA_SPECS = (
    Spec(
        "docs_stage",
        "which paper stage also keeps 4Ψ whole (0-3)",
        "4Ψ kept whole means weights and gradients both whole: only the optimizer state is split",
        kind="stage",
    ),
    Spec(
        "split_bytes",
        "bytes per parameter the code divides by N",
        "2 of fp16 gradients, 4 of an fp32 gradient copy, and 12 of Adam's state",
        unit="B",
    ),
    Spec(
        "code_gb",
        "the code's figure at the first GPU count, in true decimal GB",
        "DeepSpeed divides by 2**30: the printed number is GiB",
        unit="GB",
    ),
    Spec(
        "gap_gb",
        "how much more the code counts than the paper's ZeRO-2, per GPU at the first GPU count, in GB",
        "the fp32 gradient copy: 4Ψ/N",
        unit="GB",
    ),
)
FORMULA_WHY = {
    "named-stage": "the page says ZeRO-2, but keeping 4Ψ whole is stage 1's shape: stage 2 splits the "
    "gradients too",
    "paper-split": "that is the paper's 2 + 12: DeepSpeed's code adds a 4-byte fp32 gradient copy",
    "docs-split": "that is the documentation's figure, not the code's",
    "gib-labelled-gb": 'that is the printed number, which is GiB under a "GB" label',
    "mixed-units": "that subtracts GB from GiB: put both in the same unit first",
}


def deepspeed_formula(seed: int) -> Question:
    """DeepSpeed's docs (4Ψ + 16Ψ/N) against its code (2Ψ + 18Ψ/N), both in GiB printed as "GB"."""
    source = rng(FORMULA, seed)
    psi, gpus = billions(source.choice(SIZES)), source.choice((2, 4, 8, 16))
    docs = memory.per_gpu(psi, gpus, Stage.ZERO1, INFINITY_20).total  # 4Ψ whole, 16Ψ/N split
    code = ds_estimator.zero2(psi, min(gpus, 8), max(1, gpus // 8), cpu_offload=False).gpu_bytes
    paper = memory.per_gpu(psi, gpus, Stage.ZERO2, MIXED_ADAM).total
    values = dict(docs_stage=Stage.ZERO1, split_bytes=18, code_gb=in_gb(code), gap_gb=in_gb(code - paper))
    slips = {
        "docs_stage": [("named-stage", Stage.ZERO2)],
        "split_bytes": [("paper-split", 14), ("docs-split", 16)],
        "code_gb": [("gib-labelled-gb", in_gib(code))],
        "gap_gb": [("mixed-units", in_gib(code) - in_gb(paper))],
    }
    more = ds_estimator.zero2(psi, min(2 * gpus, 8), max(1, gpus // 4), cpu_offload=False).gpu_bytes
    printed = {
        name: units.format_number(in_gib(b), 2)
        for name, b in (("docs", docs), ("code", code), ("code_more", more))
    }
    split = (code - more) / Fraction(psi, 2 * gpus)  # bΨ/N − bΨ/2N = bΨ/2N
    working = FORMULA_WORKING.format(
        gpus=gpus,
        more=2 * gpus,
        split=units.format_number(split),
        per_param=units.format_number(code / psi),
        whole=units.format_number(code / psi - split / gpus),
        code_gib=units.format_bytes(code, "GiB"),
        code_gb=gb(code),
        paper=gb(paper),
        gap=gb(code - paper),
    )
    prompt = FORMULA_PROMPT.format(psi=psi, gpus=gpus, more=2 * gpus, **printed)
    answers = parts(FORMULA_SPECS, values, slips, FORMULA_WHY)
    point = "Two formulas in one project, and GiB printed as GB: name the accounting first."
    given = (("params", psi), ("gpus", gpus))
    return Question(FORMULA, "Audit: DeepSpeed's two formulas", seed, prompt, answers, working, point, given)


SHARDING = "audit-tp-sharding"
SHARDING_PROMPT = (
    "A model of {psi:,} parameters trains on {total} GPUs with tensor parallelism {tp}, pipeline "
    "parallelism {pp} and {stage}, counted at 18 bytes per parameter ("
    + MEGATRON_18.summary()
    + "). A stored version of a popular "
    "calculator prints {printed} per GPU: it splits by tensor and pipeline parallelism twice. It takes "
    "each GPU's slice, Ψ/(TP·PP) parameters, and divides that slice's ZeRO shards by all {total} GPUs, a "
    "count that already includes TP × PP."
)
SHARDING_WORKING = (
    "Each GPU holds a slice of Ψ/(TP·PP) = {local:,} parameters, and ZeRO splits it over the {dp} "
    "data-parallel copies, not all {total} GPUs: {right} per GPU. The tool's {printed} is {gap} short."
)
SHARDING_SPECS = (
    Spec(
        "dp_degree", "the data-parallel degree ZeRO shards over", "GPUs ÷ (TP × PP)", unit="GPUs", exact=True
    ),
    Spec(
        "right_gb",
        "the right model state per GPU under the stage given, in GB",
        "the model slice Ψ/(TP·PP) under the stage, split over the data-parallel degree",
        unit="GB",
    ),
    Spec(
        "gap_gb", "how much the tool's figure falls short, per GPU, in GB", "right minus printed", unit="GB"
    ),
)
SHARDING_WHY = {
    "total-not-dp": "that is every GPU; ZeRO shards only across the data-parallel copies of one model slice",
    "divided-by-all": "that is the tool's figure: it divides by every GPU",
    "forgot-model-split": "each GPU holds only its tensor- and pipeline-parallel slice of the model",
}


def tp_sharding(seed: int) -> Question:
    """ZeRO shards divided by every GPU instead of the data-parallel degree, under tensor and pipeline."""
    source = rng(SHARDING, seed)
    psi, tp, pp = billions(source.choice(SIZES)), source.choice((2, 4, 8)), source.choice((1, 2, 4))
    dp, stage = source.choice((2, 4, 8, 16)), Stage(source.choice((1, 2, 3)))
    total, local = tp * pp * dp, psi // (tp * pp)
    right, printed = (memory.per_gpu(local, n, stage, MEGATRON_18).total for n in (dp, total))
    whole = memory.per_gpu(psi, dp, stage, MEGATRON_18).total
    values = dict(dp_degree=dp, right_gb=in_gb(right), gap_gb=in_gb(right - printed))
    slips = {
        "dp_degree": [("total-not-dp", total)],
        "right_gb": [("divided-by-all", in_gb(printed)), ("forgot-model-split", in_gb(whole))],
    }
    facts = dict(psi=psi, tp=tp, pp=pp, dp=dp, total=total, local=local)
    prompt = SHARDING_PROMPT.format(**facts, stage=stage.label, printed=gb(printed))
    working = SHARDING_WORKING.format(**facts, right=gb(right), printed=gb(printed), gap=gb(right - printed))
    return Question(
        SHARDING,
        "Audit: sharding under TP and PP",
        seed,
        prompt,
        parts(SHARDING_SPECS, values, slips, SHARDING_WHY),
        working,
        "ZeRO shards over the data-parallel degree, which tensor and pipeline parallelism divide.",
        (("params", psi), ("tp", tp), ("pp", pp), ("gpus", total), ("stage", int(stage))),
    )
