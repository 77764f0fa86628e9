"""Rewrite a built corpus's live generation in format 1, as the releases before format 2 wrote it.

Format 1 kept the records as one columnar JSON file and the ledger as a JSON
mapping; this writes exactly those bytes (the old writer's ``json.dumps``
calls), drops the format-2 record files, lists blake2b (or crc32) digests and
reseals the manifest in ``CURRENT`` — a corpus of the previous release,
without committing one.

``downgrade_sharded_to_v1`` does the same for a sharded corpus's manifest:
version 1 named no generation (a shard was its ``CURRENT``), kept the rows
files of interleaved shards beside the shard directories, and had no seal.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zlib
from pathlib import Path

from irflow.store.persist import load_store
from irflow.store.recordfiles import V2_FILES


def _old_json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def downgrade_to_v1(root: Path, *, digest: str = "blake2b") -> None:
    """Make the corpus at *root* a format-1 corpus holding the same records, ledger and tombstones."""
    store = load_store(root)
    gen = root / (root / "CURRENT").read_text().split()[0]
    columns = {
        "id": store.record_ids.tolist(),
        "artifact_id": store.artifact_ids.tolist(),
        "surface_kind": [store.kinds[c] for c in store.kind_codes.tolist()],
        "surface_index": store.surface_indices.tolist(),
        "text": list(store.texts),
        "metadata": list(store.metadata),
    }
    ledger = {a: list(ids) for a, ids in store.ledger.items()}
    manifest = json.loads((gen / "manifest.json").read_text())
    for name in V2_FILES:
        (gen / name).unlink()
        del manifest["files"][name]
    (gen / "records.json").write_bytes(_old_json(columns))
    (gen / "ledger.json").write_bytes(_old_json(ledger))
    manifest["version"] = 1
    for name in [*manifest["files"], "records.json", "ledger.json"]:
        data = (gen / name).read_bytes()
        entry = {"bytes": len(data)}
        if digest == "blake2b":
            entry["blake2b"] = hashlib.blake2b(data, digest_size=16).hexdigest()
        else:
            entry["crc32"] = f"{zlib.crc32(data):08x}"
        manifest["files"][name] = entry
    raw = json.dumps(manifest, indent=1, sort_keys=True).encode()
    (gen / "manifest.json").write_bytes(raw)
    (root / "CURRENT").write_text(f"{gen.name} {hashlib.blake2b(raw, digest_size=16).hexdigest()}\n")


def downgrade_sharded_to_v1(root: Path) -> None:
    """Make the sharded corpus at *root* (its shards' CURRENT naming their generations) a version-1 one."""
    data = json.loads((root / "shards.json").read_text())
    del data["checksum"]
    data["version"] = 1
    for entry in data["shards"]:
        generation = entry.pop("generation")
        assert (root / entry["dir"] / "CURRENT").read_text().split()[0] == generation
        entry["rows_checksum"] = None
        if entry["rows_file"] is not None:
            target = root / f"{entry['dir']}.rows.npy"
            shutil.copyfile(root / entry["dir"] / generation / entry["rows_file"], target)
            entry["rows_file"] = target.name
            entry["rows_checksum"] = hashlib.blake2b(target.read_bytes(), digest_size=16).hexdigest()
    (root / "shards.json").write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n")
