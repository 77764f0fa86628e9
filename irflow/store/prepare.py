"""Records as a corpus takes them: converted, every ``surface_index`` and ``id`` filled, checked for duplicates.

:func:`irflow.build` and every update of a corpus (``add``, ``upsert``,
``put_artifact``) take records the same way: :class:`~irflow.store.records.Record`
objects or dicts with the same keys.

>>> [r.surface_index for r in prepare_records([Record("a", "name", "a"), Record("a", "readme", "b")])]
[0, 1]
>>> [r.surface_index for r in prepare_records([Record("a", "readme", "c")], first_index={"a": 2}.get)]
[2]
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from irflow.errors import RecordError
from irflow.store.recordcheck import checked_record, record_label
from irflow.store.records import Record

__all__ = ["prepare_records"]


def _to_record(item: Any, position: int) -> Record:
    if isinstance(item, Record):
        return item
    if isinstance(item, Mapping):
        try:
            return Record.from_dict(item)
        except (TypeError, ValueError) as exc:
            raise RecordError(f"record #{position} is invalid: {exc}") from exc
    raise RecordError(f"record #{position} is a {type(item).__name__}; pass irflow.Record objects or dicts with the same keys")


def prepare_records(records: Iterable[Any], *, duplicates: list[tuple[int, int, str]] | None = None,
                    first_index: Callable[[str], int | None] | None = None) -> list[Record]:
    """Records as a corpus stores them: checked, every ``surface_index`` and ``id`` filled, no duplicates.

    Each record is checked (:func:`~irflow.store.recordcheck.checked_record`:
    UTF-8 text, JSON metadata, as a stored corpus holds them); a
    :class:`RecordError` names the record and the field.  An omitted ``surface_index`` is the record's position among its
    artifact's records in input order (one index across all kinds); explicit
    indices are kept.  Ids default to :meth:`Record.make_id`.  Two records of
    one artifact with the same index, or two records with the same id, are an
    error naming both positions — silently keeping one would lose a surface.
    With a ``duplicates`` list, each later duplicate is left out and reported
    there instead, as ``(position, first position, what is duplicated)``, so
    a caller can report every one (``irflow index``).  ``first_index(artifact)``:
    where the omitted indices of an artifact start (an update appends
    surfaces after those its artifact holds already; None or 0: from 0).
    """
    prepared: list[Record] = []
    seen_per_artifact: dict[str, int] = {}
    index_owner: dict[tuple[str, int | None], int] = {}
    id_owner: dict[str, int] = {}
    for position, item in enumerate(records):
        record = _to_record(item, position)
        seen = seen_per_artifact.get(record.artifact_id, 0)
        seen_per_artifact[record.artifact_id] = seen + 1
        ordinal = seen if first_index is None else seen + (first_index(record.artifact_id) or 0)
        try:
            # one copy: the checked metadata, and the index when omitted (evolve keeps an explicit id;
            # Record fills a missing one from the index)
            record = checked_record(record, **({"surface_index": ordinal} if record.surface_index is None else {}))
        except RecordError as error:
            raise RecordError(f"record #{position} ({record_label(record)}): {error}") from None
        key = (record.artifact_id, record.surface_index)
        record_id = str(record.id)  # Record fills it once surface_index is known
        if key in index_owner and duplicates is not None:
            duplicates.append((position, index_owner[key], f"surface_index {record.surface_index} of artifact "
                                                            f"{record.artifact_id!r} again"))
            continue
        if key in index_owner:
            raise RecordError(
                f"records #{index_owner[key]} and #{position} are both surface_index {record.surface_index} of "
                f"artifact {record.artifact_id!r}; give each surface of an artifact its own index (or omit them all)"
            )
        if record_id in id_owner and duplicates is not None:
            duplicates.append((position, id_owner[record_id], f"record id {record_id!r} again"))
            continue
        if record_id in id_owner:
            raise RecordError(
                f"records #{id_owner[record_id]} and #{position} have the same id {record_id!r}; record ids must be unique"
            )
        index_owner[key] = position
        id_owner[record_id] = position
        prepared.append(record)
    return prepared
