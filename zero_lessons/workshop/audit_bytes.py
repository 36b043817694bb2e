"""The calculator audit, part 2: bytes per parameter. A "4× the model size" rule and a 10-byte count, each
reproduced with the package's recipes and set against the paper's 16 bytes.

Facts (checked in the tools' public code and docs; see the project's FACTS): a popular estimator counts Adam
training as about 4× the model's size (model, gradients, two Adam moments), with no fp32 master copy. The
JAX scaling book counts 10 bytes per parameter for model and optimizer state: bf16 weights, two fp32
moments.
"""

from __future__ import annotations

from .. import memory
from ..recipes import MIXED_ADAM, custom
from ..stages import Stage
from .audit_deepspeed import SIZES
from .model import Question, Spec, billions, gb, in_gb, in_gib, parts, rng

RULE = "audit-4x-rule"
RULE_PROMPT = (
    "A popular estimator counts training with Adam as 4 times the model's size: weights, gradients and two "
    "Adam moments, each as big as the model. The model has {psi:,} parameters loaded in {dtype}. The paper's "
    "mixed-precision Adam counts 2 + 2 + 12 = 16 bytes per parameter."
)
RULE_WORKING = (
    "The rule is recipes.custom(2, 2, 4): 8 bytes per parameter, {rule}. The paper's 16 bytes give {paper}. "
    "The 8 missing bytes are the fp32 master copy (4) and the moments kept in fp32 (4 + 4 instead of 2 + 2). "
    "For a model loaded in fp32 the rule gives 16, which is plain fp32 Adam (4 + 4 + 8), with no master "
    "copy needed."
)
RULE_SPECS = (
    Spec(
        "rule_gb",
        "what the 4× rule gives, in GB",
        "4 × (2 bytes × Ψ): weights, gradients and two moments, each the model's size",
        unit="GB",
    ),
    Spec("rule_bytes", "bytes per parameter the rule counts", "four arrays of the model's dtype", unit="B"),
    Spec(
        "missing_bytes",
        "bytes per parameter the rule leaves out, against the paper's 16",
        "the fp32 master weights (4) and the moments' fp32 width (4 bytes each, not 2)",
        unit="B",
    ),
)
RULE_WHY = {
    "fp32-size": "that takes the model's size in fp32; it is loaded in 16 bits, 2 bytes per parameter",
    "master-only": "the master weights are 4 of them; Adam's moments are also fp32, 4 bytes each, not 2",
}


def four_times_rule(seed: int) -> Question:
    """A "4× the model size" rule, set against the paper's 16 bytes."""
    source = rng(RULE, seed)
    psi, dtype = billions(source.choice(SIZES)), source.choice(("fp16", "bf16"))
    rule = custom(2, 2, 4, name="4x-rule").total_bytes * psi
    values = dict(rule_gb=in_gb(rule), rule_bytes=8, missing_bytes=8)
    slips = {
        "rule_gb": [("fp32-size", in_gb(2 * rule)), ("gib-for-gb", in_gib(rule))],
        "missing_bytes": [("master-only", 4)],
    }
    working = RULE_WORKING.format(rule=gb(rule), paper=gb(MIXED_ADAM.total_bytes * psi))
    prompt, answers = RULE_PROMPT.format(psi=psi, dtype=dtype), parts(RULE_SPECS, values, slips, RULE_WHY)
    point = "A rule that scales the model's size cannot see the fp32 master copy mixed precision keeps."
    given = (("params", psi), ("dtype", dtype))
    return Question(RULE, "Audit: the 4× rule", seed, prompt, answers, working, point, given)


TEN = "audit-10-bytes"
TEN_PROMPT = (
    "The JAX scaling book counts 10 bytes per parameter for model and optimizer state: bf16 weights (2) and "
    "two fp32 Adam moments (8). Take a model of {psi:,} parameters trained with ZeRO-1 on {gpus} GPUs, and "
    "compare that count with the paper's 2 + 2 + 12."
)
TEN_WORKING = (
    "10 bytes is recipes.custom(2, 0, 8). ZeRO-1 keeps the weights whole and splits the moments: 2Ψ + 8Ψ/N = "
    "{mine}. The paper's 4Ψ + 12Ψ/N = {paper}. The 6 bytes between 10 and 16 are the gradients (2) and the "
    "fp32 master weights (4)."
)
TEN_SPECS = (
    Spec(
        "book_gb",
        "ZeRO-1 per GPU by the 10-byte count, in GB",
        "2Ψ of bf16 weights kept whole, 8Ψ/N of moments split",
        unit="GB",
    ),
    Spec("paper_gb", "ZeRO-1 per GPU by the paper's 16 bytes, in GB", "4Ψ + 12Ψ/N", unit="GB"),
    Spec(
        "left_out",
        "bytes per parameter the 10-byte count leaves out of the paper's 16",
        "the 2-byte gradients and the 4-byte fp32 master copy",
        unit="B",
    ),
)
TEN_WHY = {
    "wrong-states": "ZeRO-1 splits only the optimizer state: the weights stay whole",
    "master-only": "the master copy is 4 of them; the 2-byte gradients are not in the 10 either",
}


def ten_bytes(seed: int) -> Question:
    """The 10-byte count (bf16 weights, fp32 moments, no master copy) under ZeRO-1, against the paper's."""
    source = rng(TEN, seed)
    psi, gpus = billions(source.choice(SIZES)), source.choice((4, 8, 16, 32, 64))
    mine, paper, no_grads = (
        memory.per_gpu(psi, gpus, Stage.ZERO1, r).total
        for r in (custom(2, 0, 8), MIXED_ADAM, custom(2, 0, 12))
    )
    values = dict(book_gb=in_gb(mine), paper_gb=in_gb(paper), left_out=6)
    slips = {
        "book_gb": [("wrong-states", in_gb(10 * psi) / gpus), ("gib-for-gb", in_gib(mine))],
        "paper_gb": [("forgot-gradients", in_gb(no_grads)), ("gib-for-gb", in_gib(paper))],
        "left_out": [("master-only", 4)],
    }
    return Question(
        TEN,
        "Audit: the 10-byte count",
        seed,
        TEN_PROMPT.format(psi=psi, gpus=gpus),
        parts(TEN_SPECS, values, slips, TEN_WHY),
        TEN_WORKING.format(mine=gb(mine), paper=gb(paper)),
        "10 bytes is model plus optimizer state, without a master copy or gradients; 16 has both.",
        (("params", psi), ("gpus", gpus)),
    )
