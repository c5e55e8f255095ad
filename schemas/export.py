"""Export one JSON Schema file per topic from the pydantic models.

`python -m schemas.export` rewrites schemas/jsonschema/; a test fails when the
committed files drift from the models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from schemas.envelope import Envelope
from schemas.registry import EVENTS, TOPICS

OUT = Path(__file__).with_name("jsonschema")


def topic_schema(topic: str) -> dict[str, Any]:
    """A schema accepting exactly the envelopes of the event types that travel on `topic`."""
    variants, defs = [], {}
    for event_type in TOPICS[topic]:
        spec = EVENTS[event_type]
        schema = Envelope[spec.model].model_json_schema()  # type: ignore[name-defined]
        schema["properties"]["type"] = {"const": event_type}
        schema["properties"]["schema_version"] = {"const": spec.version}
        defs.update(schema.pop("$defs", {}))  # refs are "#/$defs/...": they must live at the root
        variants.append(schema)
    doc = variants[0] if len(variants) == 1 else {"oneOf": variants}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": f"topic {topic}",
            **doc, "$defs": defs}


def render_all() -> dict[str, str]:
    return {f"{topic}.json": json.dumps(topic_schema(topic), indent=2, sort_keys=True) + "\n" for topic in TOPICS}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    files = render_all()
    for stale in set(p.name for p in OUT.glob("*.json")) - set(files):
        (OUT / stale).unlink()
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {len(files)} schemas to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
