"""The verifier: sandboxed, cheat-resistant verification of Triton kernel solutions.

Entry points: `verify`, `verify_many` (services.verifier.core), the CLI
(services.verifier.cli.main) and the ServiceCore `VerifierCore` (services.verifier.service,
imported lazily because it needs pydantic/schemas).
"""

from services.verifier.core import Session, verify, verify_many
from services.verifier.options import VERIFIER_VERSION, VerifyOptions
from services.verifier.report import Timings, VerifyReport

__all__ = ["Session", "verify", "verify_many", "VerifyOptions", "VerifyReport", "Timings",
           "VERIFIER_VERSION"]
