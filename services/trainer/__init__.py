"""Trainer: LoRA rounds from curated training sets, frozen-point evaluation, dataset export."""
