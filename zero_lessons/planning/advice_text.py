"""The words of `advice`: each rule's sentence, what stood in the way of offload, and what else would help."""

#: What the advice says for each key of `Advice.rule`, naming the article's rule (1, 2 or 3) where one fires.
RULES = {
    "replicate": "Everything fits on every GPU: plain data parallelism, no rule needed.",
    "partition-optimizer": "Rule 1: the parameters fit, but replicating the optimizer state leaves too "
    "little room, so stage 1 or 2.",
    "partition-parameters": "Rule 2: fully replicated parameters do not fit, so stage 3.",
    "stage-3-or-more-gpus": "Rule 1 points at stage 1 or 2, but with this few GPUs their shards leave too "
    "little room, so stage 3 (not Rule 2: the whole parameters fit), or add GPUs until stage 2 fits.",
    "activations": "Rule 3: model state fits under stage 3 but activations do not, so add activation "
    "checkpointing or use a smaller micro-batch.",
    "offload": "Offload (not a numbered rule): no stage fits on the GPUs alone, so move state to host "
    "memory, at a cost in PCIe traffic; with it, the lowest stage that fits is taken.",
    "does-not-fit": "No rule is enough: even under stage 3 the model state leaves too little room on these "
    "GPUs.",
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
