"""The importer tests write real upstream stores with the upstream software
itself, installed by `make import-test-venv` (a prerequisite of `make test`)
into .venv-import, and run there in a subprocess; then memproj imports the
store and the test reads it back through memproj's dialects."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(__file__).resolve().parent / "upstream"
IMPORT_VENV = ROOT / ".venv-import"
IMPORT_PYTHON = IMPORT_VENV / "bin" / "python"
NODE_PREFIX = IMPORT_VENV / "node"


def require_import_venv() -> None:
    if not (IMPORT_VENV / ".installed").exists():
        pytest.fail("the upstream systems are not installed: run `make import-test-venv` (make test does)")


def run_upstream(script: str, *args: str, timeout: int = 600, env: dict[str, str] | None = None) -> dict:
    """Run one of tests/importers/upstream/ with .venv-import's python; its last stdout line is JSON."""
    require_import_venv()
    done = subprocess.run(
        [str(IMPORT_PYTHON), str(UPSTREAM / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})},
        cwd=str(ROOT),
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def owner_url() -> str:
    """A libpq URL of the test database as its owner (the upstream software creates its own tables)."""
    from django.conf import settings
    from django.db import connection

    db = dict(connection.settings_dict)
    db.update({k: v for k, v in getattr(settings, "MEMPROJ_DB_OWNER", {}).items() if v})
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or ""
    port = db.get("PORT") or ""
    if host.startswith("/"):
        query = f"?host={quote(host, safe='')}" + (f"&port={port}" if port else "")
        return f"postgresql://{auth}/{db['NAME']}{query}"
    return f"postgresql://{auth}{host}{':' + str(port) if port else ''}/{db['NAME']}"


def stripe_claim(caller: Any) -> Any:
    """A pce claim with two entities and a relation: what a knowledge-graph
    export (COGX) must carry across whole."""
    from memory.services.claims import claim_upsert
    from memory.services.graph import EntityInput, RelationInput

    return claim_upsert(
        caller=caller,
        text="Stripe is the payment provider",
        kind="fact",
        scope="project",
        boundary_class="internal",
        entities=[
            EntityInput(ref="e1", type="Artifact", name="Stripe"),
            EntityInput(ref="e2", type="Concept", name="payments"),
        ],
        relations=[RelationInput(src_ref="e1", dst_ref="e2", type="provides")],
        provenance={"actor": "test"},
    )
