"""Read galaxy-importer's importer_result.json: fail unless every plugin has documentation.

Galaxy shows a collection's modules, filters and tests from these doc strings. A filter
file that holds several filters (plugins/filter/<file>.py) is listed under its file name
too; its filters are documented one by one (plugins/filter/<filter>.yml) and listed
under their own names, so the file's own entry is not a plugin a user calls.

    python scripts/collection/importer_result.py importer_result.json COLLECTION_DIR
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

DOCUMENTED_TYPES = ("module", "filter", "test", "lookup", "inventory", "callback", "connection")


def undocumented(result: dict[str, object], collection: Path) -> list[str]:
    """``type name`` of each plugin Galaxy would show without documentation."""
    blob = result.get("docs_blob") or {}
    contents = blob.get("contents", []) if isinstance(blob, dict) else []
    missing = []
    for item in contents:
        kind, name = item["content_type"], item["content_name"]
        if kind not in DOCUMENTED_TYPES or item.get("doc_strings"):
            continue
        if kind == "filter" and (collection / "plugins" / "filter" / f"{name}.py").is_file():
            continue
        missing.append(f"{kind} {name}")
    return missing


def main(argv: list[str]) -> int:
    result = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    collection = Path(argv[2])
    counts = Counter(item["content_type"] for item in result.get("contents", []))
    print("galaxy-importer contents: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    missing = undocumented(result, collection)
    for entry in missing:
        print(f"galaxy-importer: {entry} has no documentation", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
