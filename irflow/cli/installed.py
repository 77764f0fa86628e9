"""Records of the Python distributions installed here: real data every machine has.

The quickstart needs a corpus that exists offline on any fresh machine, with
the shape irflow is built for — several surfaces per artifact (a name, a
one-line summary, README chunks, a dependency list) and filterable metadata.
The packages installed in the running environment are exactly that, read
through :mod:`importlib.metadata`.

>>> records = distribution_records()
>>> {r.surface_kind for r in records} >= {"name", "summary"}
True
"""

from __future__ import annotations

import importlib.metadata as md
import re
from typing import Any, Iterable, Iterator

from irflow.api.boosts import normalize_name, requirement_name
from irflow.store.records import Record

__all__ = ["distribution_records", "split_chunks"]

_EXTRA_RE = re.compile(r"\bextra\s*==")


def split_chunks(text: str, max_chars: int = 800) -> list[str]:
    """Split *text* into chunks of at most *max_chars*, on paragraph then line boundaries.

    Paragraphs are packed greedily; a paragraph longer than the limit is cut
    at line breaks, and a single overlong line at the limit itself, so no
    chunk ever exceeds *max_chars* and no text is dropped (only blank runs).
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            pieces.append(paragraph)
            continue
        for line in paragraph.splitlines():
            line = line.strip()
            while len(line) > max_chars:
                pieces.append(line[:max_chars])
                line = line[max_chars:]
            if line:
                pieces.append(line)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 2 + len(piece) > max_chars:
            chunks.append(current)
            current = piece
        else:
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def _requirement_names(requires: Iterable[str]) -> list[str]:
    names = {requirement_name(spec) for spec in requires}
    return sorted(name for name in names if name)


def _licence(meta: Any) -> str:  # an email.message.Message: md.PackageMetadata's stubs have no get()
    value = meta.get("License-Expression") or meta.get("License") or ""
    if len(value) > 80 or "\n" in value:  # a whole licence text pasted into the field
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License")]
        value = classifiers[0] if classifiers else "see licence file"
    return value.strip()


def _distributions() -> Iterator[md.Distribution]:
    seen: set[str] = set()
    for dist in md.distributions():
        meta: Any = dist.metadata  # an email.message.Message (the protocol's stubs have no get())
        name = meta.get("Name")
        if not name or normalize_name(name) in seen:
            continue  # the same project on two sys.path entries: keep the first, as import does
        seen.add(normalize_name(name))
        yield dist


def distribution_records(*, max_chunks: int = 12, chunk_chars: int = 800) -> list[Record]:
    """One artifact per installed distribution, in name order, with these surfaces.

    - ``name``: the project name, with its parts spelled out;
    - ``summary``: the one-line summary;
    - ``readme_chunk``: the long description in chunks (at most *max_chunks*);
    - ``deps``: the names of its requirements.

    Metadata (filterable): ``name``, ``version``, ``author``, ``license``,
    ``deps`` (the raw requirement strings, optional extras left out and kept
    as ``optional_deps``), ``url`` (the home page, which is
    also the hit's pointer).
    """
    records: list[Record] = []
    for dist in sorted(_distributions(), key=lambda d: normalize_name(d.metadata["Name"])):
        meta: Any = dist.metadata  # an email.message.Message (the protocol's stubs have no get())
        name = meta["Name"]
        artifact = normalize_name(name)
        # Requirements behind an ``extra == ...`` marker are optional: a package
        # does not depend on them, so they are kept apart from ``deps``.
        all_requires = list(dist.requires or [])
        requires = [r for r in all_requires if not _EXTRA_RE.search(r)]
        optional = [r for r in all_requires if _EXTRA_RE.search(r)]
        urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
        metadata = {
            "name": name,
            "version": meta.get("Version") or "",
            "author": (meta.get("Author") or meta.get("Author-email") or meta.get("Maintainer") or "").strip(),
            "license": _licence(meta),
            "deps": requires,
            "optional_deps": optional,
            "url": meta.get("Home-page") or (urls[0] if urls else ""),
        }
        spelled = artifact.replace("-", " ")
        name_text = name if spelled == name.lower() else f"{name} ({spelled})"
        surfaces: list[tuple[str, str]] = [("name", name_text)]
        summary = (meta.get("Summary") or "").strip()
        if summary and summary.upper() != "UNKNOWN":
            surfaces.append(("summary", summary))
        description = meta.get_payload() if hasattr(meta, "get_payload") else None
        description = description or meta.get("Description") or ""
        for chunk in split_chunks(description, chunk_chars)[:max_chunks]:
            surfaces.append(("readme_chunk", chunk))
        dep_names = _requirement_names(requires)
        if dep_names:
            surfaces.append(("deps", " ".join(dep_names)))
        for index, (kind, text) in enumerate(surfaces):
            records.append(Record(artifact, kind, text, metadata, surface_index=index))
    return records
