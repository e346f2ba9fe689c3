"""Training of the planner (docs/ALGORITHMS.md §1, §3, §6): data sets, SASD noising and losses,
the two-stream attention layout, and a trainer for one process or torchrun DDP.

Everything here exists only at training time; the model's `forward` stays pure.
"""
