"""Shared LLM layer: a locally built tiny model, model loading and text-generation backends.

Used by the challenge generator (LLM generator), the solver and the trainer. Heavy
imports (torch, transformers, vLLM) happen inside the submodules, never here.
"""
