"""Errors raised by the verifier package.

A candidate's failure is never an exception: it is a rejected verdict. These are
for misuse (a bad problem) and for the verifier's own infrastructure failing.
"""

from __future__ import annotations


class VerifierError(Exception):
    """Base class of every verifier error."""


class ProblemError(VerifierError):
    """The problem source is unusable: unparsable, crashing, or non-discriminating (misuse)."""


class SandboxError(VerifierError):
    """The sandbox could not be set up (not the candidate's fault)."""


class DeviceShort(VerifierError):
    """The device had no memory for a reference build in every try (the batch's processes
    share it): no verdict, and nothing kept, so a later use builds the problem again."""
