"""Build the verifier core from the settings (`[services.verifier]` holds VerifyOptions fields)."""

from __future__ import annotations

from kz_common.config import Settings
from kz_common.exceptions import ConfigError
from services.verifier.options import VerifyOptions
from services.verifier.service import VerifierCore


def build_core(settings: Settings) -> VerifierCore:
    section = dict(settings.services.get("verifier", {}))
    section.setdefault("cache_dir", str(settings.paths.data_dir.resolve() / "verifier-cache"))
    try:
        options = VerifyOptions(**section)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"services.verifier: {exc}") from exc
    return VerifierCore(options)
