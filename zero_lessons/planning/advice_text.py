"""The words of `advice`: each rule's sentence, what stood in the way of offload, and what else would help."""

#: What the advice says for each key of `Advice.rule`, naming the article's rule (1, 2 or 3) where one fires.
RULES = {
    "replicate": "Everything fits on every GPU: plain data parallelism, no rule needed.",
    "partition-optimizer": "Rule 1: the whole 16-bit weights fit, but replicating all the state, beside the "
    "activations, leaves too little room, so split the optimizer state: stage 1 or 2.",
    "partition-parameters": "Rule 2: the whole 16-bit weights, with the activations, do not leave the "
    "headroom free, so stage 3.",
    "stage-3-or-more-gpus": "Rule 1 points at stage 1 or 2, but on so few GPUs neither leaves the headroom "
    "free (stage 2 keeps the whole 16-bit weights beside its shards). Rule 2 does not apply: the "
    "whole weights and the activations fit with the headroom free. So stage 3, or add GPUs until stage 2 "
    "fits.",
    "activations": "Rule 3: model state fits under stage 3 but activations do not, so add activation "
    "checkpointing or use a smaller micro-batch.",
    "offload": "Offload (not a numbered rule): no stage fits on the GPUs alone, so move state to host "
    "memory, at a cost in PCIe traffic; with it, the lowest stage that fits is taken.",
    "does-not-fit": "Even stage 3 is not enough: its model state alone does not fit these GPUs with the "
    "headroom free.",
}
#: Each key of RULES as the article's rule it applies, in a few words. A key names the rule's cause, not the
#: stage: "partition-optimizer" (Rule 1) picks stage 2 as well, which splits the gradients too.
ARTICLE_RULE = {
    "replicate": "no rule needed",
    "partition-optimizer": "Rule 1",
    "partition-parameters": "Rule 2",
    "stage-3-or-more-gpus": "Rule 1, taken to stage 3",
    "activations": "Rule 3",
    "offload": "offload",
    "does-not-fit": "none is enough",
}
#: What stood in the way of offload, when nothing fits and host memory was given: added to RULES' sentence.
BLOCKERS = {
    "host": "Offload would fit the GPUs, but not the host memory given.",
    "gpu": "Offload does not fit the GPUs either.",
}
#: When nothing fits, what else would help, by why offload did not: never what the advice just ruled out.
HELP = {"untried": "offload to host memory, ", "host": "more host memory per node, ", "gpu": ""}
#: The warning when the advice counted model state only.
NO_ACTIVATIONS = (
    "activations were left at 0: only model state is counted, but every GPU also keeps the "
    "activations of its micro-batch (give them with activations= in Python, or --activations in "
    "zero-lessons advise)"
)
#: The reason added when a pick's activations outweigh its model state.
OUTWEIGH = "activations outweigh the model state: checkpointing would save more than a higher stage"
