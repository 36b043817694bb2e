"""Planning: what a run will hold beyond the paper's table, and how to fit it.

For now this holds the step's timeline; activations, offload, advice and the DeepSpeed
estimator and config move here with the layout refactor.
"""

from .step import DDP, FSDP2, DeepSpeed, Model, Paper, layered_model, timeline, transformer_model

__all__ = ["DDP", "FSDP2", "DeepSpeed", "Model", "Paper", "layered_model", "timeline", "transformer_model"]
