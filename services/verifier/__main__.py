"""`python -m services.verifier PROBLEM SOLUTION [--device cpu|cuda] [--json]`."""

import sys

from services.verifier.cli import main

raise SystemExit(main(sys.argv[1:]))
