"""Malformed corpora are refused on open, even with checksums recomputed after tampering (issue 10, items 5 and 6).

Each test alters one file of a built corpus, then rewrites its manifest entry
and ``CURRENT`` so that sizes and checksums agree again — the corpus is
"self-consistent but malformed" — and expects a CorpusError naming the file
and saying to rebuild, where the old code ranked wrongly, raised IndexError /
KeyError, hung on a FIFO or read /dev/zero without end.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from irflow.store.corpus import build, open_corpus
from irflow.store.vectors import check_unit_rows
from irflow.errors import CorpusError
from irflow.store.ledger import records_for_artifact
from irflow.kernels.postings import Postings
from irflow.store.records import Record
from old_format import downgrade_to_v1

REPO = Path(__file__).resolve().parents[1]


def _records() -> list[Record]:
    return [Record(f"pkg{a}", kind, f"{kind} of package {a} parses json files", {"n": a})
            for a in range(4) for kind in ("name", "description")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "corpus"
    build(_records(), embedder="hash:16", path=path)
    return path


def _gen(root: Path) -> Path:
    return root / (root / "CURRENT").read_text().split()[0]


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _file_digest(entry: dict, data: bytes) -> dict:
    """A manifest entry's checksum recomputed by its own algorithm: crc32 (this release) or blake2b (earlier)."""
    return {"crc32": f"{zlib.crc32(data):08x}"} if "crc32" in entry else {"blake2b": _digest(data)}


def _reseal(root: Path, change: Callable[[dict], None] | None = None) -> None:
    """Recompute every listed file's size and checksum, apply *change* to the manifest, then reseal it in CURRENT."""
    gen = _gen(root)
    manifest = json.loads((gen / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (gen / name).read_bytes()
        entry.update(bytes=len(data), **_file_digest(entry, data))
    if change is not None:
        change(manifest)
    raw = json.dumps(manifest).encode()
    (gen / "manifest.json").write_bytes(raw)
    (root / "CURRENT").write_text(f"{gen.name} {_digest(raw)}\n")


def _rewrite_array(root: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = _gen(root) / name
    array = np.load(path, allow_pickle=False)
    out = io.BytesIO()
    np.save(out, change(array.copy()), allow_pickle=False)
    os.unlink(path)  # files are hard-linked across generations: never write through one
    path.write_bytes(out.getvalue())
    _reseal(root)


def _rewrite_json(root: Path, name: str, change: Callable[[Any], Any]) -> None:
    path = _gen(root) / name
    value = change(json.loads(path.read_text()))
    os.unlink(path)
    path.write_text(json.dumps(value))
    _reseal(root)


def _set(array: np.ndarray, index: int, value: Any) -> np.ndarray:
    array[index] = value
    return array


# -- postings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, change, says", [
    ("post_rows", lambda a: _set(a, 0, -1), "post_rows.npy holds rows outside"),  # negative: wraps around
    ("post_rows", lambda a: _set(a, 0, 8), "post_rows.npy holds rows outside"),  # IndexError before
    # an index written by an older build holds int32 frequencies, where -3 can be
    ("post_tfs", lambda a: _set(a.astype(np.int32), 0, -3), "post_tfs.npy holds a term frequency below 1"),
    ("post_tfs", lambda a: _set(a, 0, 0), "post_tfs.npy holds a term frequency below 1"),
    ("doc_lengths", lambda a: _set(a, 2, -5), "doc_lengths.npy holds a negative length"),
    ("term_offsets", lambda a: _set(a, 1, a[2] + 1), "term_offsets.npy decrease"),
    ("row_offsets", lambda a: _set(a, 1, a[2] + 1), "row_offsets.npy decrease"),
    ("row_terms", lambda a: _set(a, 0, 10_000), "row_terms.npy holds term ids outside the vocabulary"),
    ("row_terms", lambda a: _set(a, 0, -1), "row_terms.npy holds term ids outside the vocabulary"),
    ("row_offsets", lambda a: _set(a, -1, a[-1] - 1), "row_offsets.npy must run from 0"),
])
def test_malformed_postings_are_refused(root: Path, name: str, change: Callable, says: str) -> None:
    _rewrite_array(root, f"postings.{name}.npy", change)
    for verify in (True, False):
        with pytest.raises(CorpusError, match=rf"{says}.*rebuild"):
            open_corpus(root, verify=verify)


def test_from_arrays_checks_values_of_a_valid_index() -> None:
    postings = Postings.build([["a", "b", "a"], ["b"], []])
    assert Postings.from_arrays(postings.vocab_terms, postings.arrays(), n_rows=3).n_rows == 3
    with pytest.raises(CorpusError, match="doc_lengths covers 3 rows, the corpus has 4"):
        Postings.from_arrays(postings.vocab_terms, postings.arrays(), n_rows=4)
    arrays = dict(postings.arrays(), post_tfs=postings.post_tfs.astype(np.float64))
    arrays["post_tfs"][1] = np.nan
    with pytest.raises(CorpusError, match="post_tfs holds a term frequency that is not a positive finite"):
        Postings.from_arrays(postings.vocab_terms, arrays)


# -- vectors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, says", [(np.nan, "NaN or inf"), (np.inf, "NaN or inf"), (3.0, "squared norm")])
def test_invalid_vectors_are_refused_on_first_use(root: Path, value: float, says: str) -> None:
    _rewrite_array(root, "vectors.npy", lambda a: _set(a, (5, 3), value))
    corpus = open_corpus(root)  # opening maps the matrix without reading it...
    assert [r.artifact_id for r in records_for_artifact(corpus, "pkg1")] == ["pkg1", "pkg1"]
    assert corpus.bm25_topk(corpus.tokenize_queries(["json"]), None, 3).row.size == 3  # ...lexical never needs it
    record_id = corpus.record_ids[5]
    for _ in range(2):  # refused on every use, not only the first
        with pytest.raises(CorpusError, match=rf"vectors.npy: row 5 \(record '{record_id}'\).*{says}.*rebuild"):
            corpus.dense_topk(corpus.embed_queries(["json files"]), None, 3)
    with pytest.raises(CorpusError, match="vectors.npy"):
        _ = corpus.vectors


def test_valid_vectors_are_checked_once_and_stay_mapped(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import irflow.store.vectors as vectors_module

    calls = []
    real = vectors_module.check_unit_rows
    monkeypatch.setattr(vectors_module, "check_unit_rows", lambda *a: calls.append(1) or real(*a))
    corpus = open_corpus(root)
    assert calls == []  # not on open
    for _ in range(3):
        corpus.dense_topk(corpus.embed_queries(["json"]), None, 2)
    assert calls == [1]
    base = corpus.vectors
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)  # never copied


def test_check_unit_rows_accepts_zero_rows_and_tiny_rounding() -> None:
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(1000, 384))
    matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    matrix[7] = 0.0
    check_unit_rows(matrix, "m")
    matrix[999] *= 1.01
    with pytest.raises(CorpusError, match="m: row 999 .*squared norm 1.02"):
        check_unit_rows(matrix, "m")


# -- manifest ----------------------------------------------------------------------------------------------


def _edit_manifest(root: Path, change: Callable[[dict], None]) -> None:
    _reseal(root, change)


@pytest.mark.parametrize("change, says", [
    (lambda m: m.pop("counts"), "'counts' must be a table"),  # KeyError before
    (lambda m: m["counts"].pop("rows"), "'counts' must be a table whose 'rows'"),
    (lambda m: m["counts"].update(rows="8"), "'rows' is a non-negative integer"),
    (lambda m: m["counts"].update(rows=True), "'rows' is a non-negative integer"),
    (lambda m: m["counts"].update(live=-1), r"'counts' entries \['live'\]"),
    (lambda m: m.pop("analyzer"), "'analyzer' must be a table"),  # KeyError before
    (lambda m: m["analyzer"].update(version=99), "analyzer cannot be restored"),
    (lambda m: m.update(embedder={"spec": "hash:16"}), "unreadable embedder entry"),
    (lambda m: m.update(embedder={"spec": "hash:16", "dim": "16", "description": "", "source": "embedded"}),
     "unreadable embedder entry"),
    (lambda m: m.update(embedder=[16]), "unreadable embedder entry"),
    (lambda m: m.update(postings_arrays=["post_rows", "../../x"]), "'postings_arrays' must list names"),
    (lambda m: m.update(kinds="name"), "'kinds' must be a list"),
    (lambda m: m["files"].update({"../../../etc/passwd": {"bytes": 1, "blake2b": "0" * 32}}),
     "lists a file named '../../../etc/passwd'"),
    (lambda m: m["files"]["ledger.rows.npy"].pop("bytes"), "ill-formed entry for 'ledger.rows.npy'"),
    (lambda m: m["files"]["ledger.rows.npy"].update(bytes=-1), "ill-formed entry for 'ledger.rows.npy'"),
    (lambda m: m.update(version=4), "corpus format version 4 is unknown to this irflow"),
    (lambda m: m.update(version=True), "corpus format version True is unknown"),
    (lambda m: m["files"].update({"vocab.json": "x"}), "ill-formed entry for 'vocab.json'"),
    (lambda m: m.update(files=[]), "no 'files' table"),
])
def test_malformed_manifests_are_refused(root: Path, change: Callable, says: str) -> None:
    _edit_manifest(root, change)
    with pytest.raises(CorpusError, match=rf"manifest.json.*{says}|{says}.*manifest.json"):
        open_corpus(root)


def test_manifest_that_is_a_directory_is_refused(root: Path) -> None:
    gen = _gen(root)
    (gen / "manifest.json").unlink()
    (gen / "manifest.json").mkdir()
    with pytest.raises(CorpusError, match="manifest.json is a directory, not a regular file.*rebuild"):
        open_corpus(root)


# -- records, ledger, vocabulary, tombstones ------------------------------------------------------------------


@pytest.mark.parametrize("file, change, says", [
    ("records.json", lambda c: c["id"].__setitem__(0, 17) or c, "column 'id' holds a int at row 0"),
    ("records.json", lambda c: c["metadata"].__setitem__(2, [1]) or c, "column 'metadata' holds a list at row 2"),
    ("records.json", lambda c: c["surface_index"].__setitem__(1, "1") or c, "column 'surface_index' holds a str"),
    ("records.json", lambda c: c["surface_index"].__setitem__(1, 2 ** 70) or c, "surface_index does not fit"),
    ("records.json", lambda c: c["text"].pop() and c, "does not hold 8 rows"),
    ("records.json", lambda c: c["id"].__setitem__(1, c["id"][0]) or c, "duplicate record ids"),
    ("ledger.json", lambda ledger: {**ledger, "pkg0": "one-id"}, "is not a mapping of artifact ids to lists"),
    ("ledger.json", lambda ledger: {**ledger, "pkg0": [1, 2]}, "is not a mapping of artifact ids to lists"),
    ("vocab.json", lambda v: [*v[:-1], 5], "is not a list of terms"),
])
def test_malformed_store_files_of_format_1_are_refused(root: Path, file: str, change: Callable, says: str) -> None:
    downgrade_to_v1(root, digest="crc32")
    _rewrite_json(root, file, change)
    with pytest.raises(CorpusError, match=rf"{file}.*{says}|{says}.*{file}"):
        open_corpus(root)
    if file != "vocab.json":
        with pytest.raises(CorpusError, match=file):
            records_for_artifact(root, "pkg0")  # the store alone (sibling lookup by path) checks the same


def _rewrite_strings(root: Path, stem: str, change: Callable[[list[str]], list[str]]) -> None:
    """Replace a format-2 string column (blob + offsets) by *change* of its strings, both files resealed."""
    gen = _gen(root)
    blob = np.load(gen / f"{stem}.bytes.npy", allow_pickle=False).tobytes()
    offsets = np.load(gen / f"{stem}.offsets.npy", allow_pickle=False).tolist()
    values = change([blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])])
    encoded = [v.encode("utf-8", "surrogateescape") for v in values]
    new_offsets = np.concatenate(([0], np.cumsum([len(e) for e in encoded]))).astype(np.int64)
    _rewrite_array(root, f"{stem}.bytes.npy", lambda _: np.frombuffer(b"".join(encoded), dtype=np.uint8))
    _rewrite_array(root, f"{stem}.offsets.npy", lambda _: new_offsets)


@pytest.mark.parametrize("file, change, says", [
    ("records.id.offsets.npy", lambda a: _set(a, 2, a[1] - 1), "are not offsets rising from 0 to the"),
    ("records.text.offsets.npy", lambda a: a[:-1], r"holds int64 \(8,\), expected int64 \(9,\)"),
    ("records.artifact_id.offsets.npy", lambda a: a.astype(np.int32), r"holds int32 \(9,\), expected int64"),
    ("records.text.bytes.npy", lambda a: a.astype(np.int16), "holds int16 .* expected a 1-d uint8 blob"),
    ("records.metadata.bytes.npy", lambda a: _set(a, -1, ord(" ")), "not hold one comma-terminated JSON text"),
    ("records.kind_code.npy", lambda a: _set(a, 3, 2), r"holds values outside 0..1"),
    ("records.kind_code.npy", lambda a: a.astype(np.int64), r"holds int64 \(8,\), expected int32 \(8,\)"),
    ("records.surface_index.npy", lambda a: _set(a, 0, -1), "holds values outside 0.."),
    ("ledger.rows.npy", lambda a: _set(a, 0, 8), r"holds values outside -1..7"),
    ("ledger.rows.npy", lambda a: _set(a, 0, -1), "ledger.missing.json is not the list of the ledger's ids"),
    ("ledger.offsets.npy", lambda a: _set(a, -1, a[-1] - 1), r"ledger.rows.npy holds int64 \(8,\), expected int64 \(7,\)"),
    ("ledger.offsets.npy", lambda a: _set(a, 1, a[2] + 1), "are not offsets rising"),
])
def test_malformed_store_files_are_refused_on_open(root: Path, file: str, change: Callable, says: str) -> None:
    # shapes, dtypes, offsets and ranges are checked when the store opens: vectorized passes, nothing decoded
    _rewrite_array(root, file, change)
    for verify in (True, False):
        with pytest.raises(CorpusError, match=rf"{says}.*rebuild"):
            open_corpus(root, verify=verify)
    with pytest.raises(CorpusError, match=rf"{says}.*rebuild"):
        records_for_artifact(root, "pkg0")  # the store alone (sibling lookup by path) checks the same


def test_malformed_ledger_missing_list_is_refused(root: Path) -> None:
    _rewrite_json(root, "ledger.missing.json", lambda _: ["ghost"])
    with pytest.raises(CorpusError, match="ledger.missing.json is not the list of the ledger's ids the store lacks"):
        open_corpus(root)


def test_strings_are_checked_when_first_decoded(root: Path) -> None:
    # a blob that is not UTF-8, or metadata that is not a mapping, is found on its first read: a CorpusError
    # naming the file, never a wrong answer (checksums catch damage first; this is a resealed, malformed file)
    _rewrite_strings(root, "records.metadata", lambda v: [*v[:2], "[2],", *v[3:]])
    _rewrite_strings(root, "records.text", lambda v: [*v[:5], "bad \udcff byte", *v[6:]])
    corpus = open_corpus(root)
    assert corpus.record(0).metadata == {"n": 0} and corpus.record(1).text.startswith("description of package 0")
    with pytest.raises(CorpusError, match=r"records.metadata.bytes.npy: row 2 holds a list, expected a metadata "
                                          r"mapping.*rebuild"):
        corpus.record(2)
    with pytest.raises(CorpusError, match=r"records.metadata.bytes.npy: row 2 holds a list.*rebuild"):
        corpus.candidate_mask({"n": 1})  # every row's metadata at once, for the filter's columns
    with pytest.raises(CorpusError, match=r"records.text.bytes.npy is not UTF-8.*rebuild"):
        corpus.hits([5], [1.0])


def test_duplicate_record_ids_are_refused_on_first_lookup_by_id(root: Path) -> None:
    _rewrite_strings(root, "records.id", lambda v: [v[0], v[0], *v[2:]])
    corpus = open_corpus(root)  # no id -> row table is built on open (a million-record open would pay it)
    with pytest.raises(CorpusError, match=r"records.id.bytes.npy: the store holds duplicate record ids.*rebuild"):
        corpus.row_of(corpus.record_ids[3])
    with pytest.raises(CorpusError, match=r"records.id.bytes.npy: the store holds duplicate record ids"):
        records_for_artifact(root, "pkg1")


def test_tombstones_out_of_range_name_their_file(root: Path) -> None:
    _rewrite_array(root, "tombstones.npy", lambda a: np.array([8], dtype=np.int64))
    with pytest.raises(CorpusError, match=r"tombstones.npy names rows outside 0..7.*rebuild"):
        open_corpus(root)


# -- small files read with a bound, special files refused (item 6) -------------------------------------------


def test_current_linked_to_dev_zero_is_refused_without_reading_it(root: Path) -> None:
    (root / "CURRENT").unlink()
    (root / "CURRENT").symlink_to("/dev/zero")
    with pytest.raises(CorpusError, match="CURRENT is a character device, not a regular file.*rebuild"):
        open_corpus(root)
    build(_records()[:2], embedder=None, path=root)  # what the message says to do works, and only swaps the link
    assert open_corpus(root).n_rows == 2 and (root / "CURRENT").is_file() and not (root / "CURRENT").is_symlink()


def test_a_huge_current_is_refused(root: Path) -> None:
    (root / "CURRENT").write_bytes(b"gen-000001 " + b"0" * 10_000_000)
    with pytest.raises(CorpusError, match="CURRENT is larger than the 256 bytes.*rebuild"):
        open_corpus(root)
    build(_records()[:2], embedder=None, path=root)
    assert open_corpus(root).n_rows == 2


@pytest.mark.parametrize("target", ["CURRENT", "manifest.json", "ledger.missing.json"])
def test_a_fifo_never_hangs_a_reader(root: Path, target: str) -> None:
    path = root / target if target == "CURRENT" else _gen(root) / target
    path.unlink()
    os.mkfifo(path)
    script = textwrap.dedent("""
        import sys
        from irflow.store.corpus import open_corpus
        from irflow.errors import CorpusError
        try:
            open_corpus(sys.argv[1])
        except CorpusError as exc:
            print(exc)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=60, env=env)
    assert f"{target} is a FIFO" in out.stdout or (target != "CURRENT" and "is a FIFO, not a regular file" in out.stdout)


@pytest.mark.parametrize("file", ["ledger.missing.json", "records.text.bytes.npy"])
def test_a_store_file_replaced_by_a_link_to_dev_zero_is_refused(root: Path, file: str) -> None:
    path = _gen(root) / file
    path.unlink()
    path.symlink_to("/dev/zero")
    for verify in (True, False):
        with pytest.raises(CorpusError, match=f"{file} is a character device, not a regular file"):
            open_corpus(root, verify=verify)


def test_a_lock_file_that_is_a_directory_is_a_corpus_error(root: Path) -> None:
    (root / ".lock").unlink()
    (root / ".lock").mkdir()
    corpus = open_corpus(root)
    with pytest.raises(CorpusError, match=r"\.lock"):
        corpus.store.delete_record(corpus.record_ids[0])
    assert corpus.record_ids[0] in corpus.store


# -- consistency between files (each edit resealed: sizes and checksums agree again) --------------------------


def _array(root: Path, name: str) -> np.ndarray:
    return np.load(_gen(root) / name, allow_pickle=False)


def _a_term_with_two_rows(root: Path) -> int:
    """The first posting of a term listed in two rows or more."""
    offsets = _array(root, "postings.term_offsets.npy")
    term = int(np.flatnonzero(np.diff(offsets) >= 2)[0])
    return int(offsets[term])


def _swap(array: np.ndarray, i: int, j: int) -> np.ndarray:
    array[[i, j]] = array[[j, i]]
    return array


def _term_of_row_zero_changed(root: Path) -> Callable[[np.ndarray], np.ndarray]:
    """row_terms with row 0's last term replaced by a term row 0 lacks, still in ascending order."""
    end = int(_array(root, "postings.row_offsets.npy")[1])
    n_terms = _array(root, "postings.term_offsets.npy").size - 1

    def change(terms: np.ndarray) -> np.ndarray:
        terms[end - 1] = next(t for t in range(int(terms[end - 1]) + 1, n_terms) if t not in terms[:end])
        return terms
    return change


@pytest.mark.parametrize("file, change, says", [
    # a document length set to 0: the lengths no longer sum to the frequencies (BM25's avgdl and norms change)
    ("postings.doc_lengths.npy", lambda root: lambda a: _set(a, 2, 0), "doc_lengths.npy sums to"),
    ("postings.doc_lengths.npy", lambda root: lambda a: _set(_set(a, 2, a[2] + 40), 3, a[3]),
     "doc_lengths.npy sums to"),
    # a row shorter than its distinct terms (the total kept)
    ("postings.doc_lengths.npy", lambda root: lambda a: _set(_set(a, 2, 1), 3, a[3] + a[2] - 1),
     "doc_lengths.npy: row 2 has length 1 but"),
    # a term's rows out of order, or a row listed twice in a term
    ("postings.post_rows.npy", lambda root: lambda a: _swap(a, _a_term_with_two_rows(root),
                                                            _a_term_with_two_rows(root) + 1),
     "post_rows.npy: the rows of term .* are not strictly ascending"),
    ("postings.post_rows.npy", lambda root: lambda a: _set(a, _a_term_with_two_rows(root) + 1,
                                                           a[_a_term_with_two_rows(root)]),
     "post_rows.npy: the rows of term .* are not strictly ascending"),
    ("postings.row_terms.npy", lambda root: lambda a: _swap(a, 0, 1), "row_terms.npy: the terms of row 0 are not"),
    ("tombstones.npy", lambda root: lambda a: np.array([3, 1], dtype=np.int64), "tombstones.npy does not list rows"),
    ("tombstones.npy", lambda root: lambda a: np.array([1, 1], dtype=np.int64), "tombstones.npy does not list rows"),
    ("ledger.rows.npy", lambda root: lambda a: _set(a, 1, a[0]), "ledger.rows.npy lists row 0 more than once"),
])
def test_files_that_disagree_are_refused_on_open(root: Path, file: str, change: Callable, says: str) -> None:
    _rewrite_array(root, file, change(root))
    for verify in (True, False):
        with pytest.raises(CorpusError, match=rf"{says}.*rebuild"):
            open_corpus(root, verify=verify)


@pytest.mark.parametrize("change, says", [
    (lambda m: m.update(kinds=["name", "name"]), "'kinds' lists 'name' more than once"),
    (lambda m: m.update(kinds=[*m["kinds"], "name"]), "'kinds' lists 'name' more than once"),
    (lambda m: m["counts"].update(live=7), "'counts' says 7 live records, but the files hold 8"),
    (lambda m: m["counts"].update(artifacts=5), "'counts' says 5 artifacts in the ledger, but the files hold 4"),
    (lambda m: m["counts"].update(terms=m["counts"]["terms"] + 1), "'counts' says .* terms, but the files hold"),
    (lambda m: m["counts"].update(postings=0), "'counts' says 0 postings, but the files hold"),
])
def test_a_manifest_that_disagrees_with_the_files_is_refused(root: Path, change: Callable, says: str) -> None:
    _edit_manifest(root, change)
    with pytest.raises(CorpusError, match=rf"manifest.json: {says}.*rebuild"):
        open_corpus(root)


def test_a_kind_no_row_has_is_refused(root: Path) -> None:
    """A surface restriction to a kind no row has would return nothing where it raises a FilterError."""
    _edit_manifest(root, lambda m: m.update(kinds=[*m["kinds"], "ghost"]))
    with pytest.raises(CorpusError, match=r"records.kind_code.npy gives no row the kind 'ghost'.*rebuild"):
        open_corpus(root)


@pytest.mark.parametrize("change, says", [
    # lengths moved between two rows: the total kept, each row still as long as its distinct terms
    (lambda root: ("postings.doc_lengths.npy", lambda a: _set(_set(a, 2, a[2] + 1), 5, a[5] - 1)),
     "doc_lengths.npy does not match .*post_tfs.npy row by row"),
    # the row-major half names a term the term-major half does not give row 0
    (lambda root: ("postings.row_terms.npy", _term_of_row_zero_changed(root)),
     "a term is in other rows row-major than term-major"),
])
def test_lengths_and_halves_are_cross_checked_on_first_lexical_use(tmp_path: Path, change: Callable,
                                                                     says: str) -> None:
    root = tmp_path / "repeats"  # row 5 repeats a word: its length exceeds its distinct terms
    build([Record(f"pkg{a}", kind, f"{kind} of package {a} parses json files" + (" json" if a == 2 else ""))
           for a in range(4) for kind in ("name", "description")], embedder="hash:16", path=root)
    file, edit = change(root)
    _rewrite_array(root, file, edit)
    corpus = open_corpus(root)  # the exact row-by-row checks read every posting at random: not on open
    assert corpus.dense_topk(corpus.embed_queries(["json files"]), None, 3).row.size == 3  # dense never needs them
    for _ in range(2):  # refused on every lexical use, not only the first
        with pytest.raises(CorpusError, match=rf"{says}.*rebuild"):
            corpus.bm25_topk(corpus.tokenize_queries(["json"]), None, 3)


def test_a_valid_corpus_runs_its_cross_checks_once(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import irflow.kernels.postings as postings_module

    calls = []
    real = postings_module.cross_problems
    monkeypatch.setattr(postings_module, "cross_problems", lambda *a: calls.append(1) or real(*a))
    corpus = open_corpus(root)
    assert calls == []  # not on open
    for _ in range(3):
        assert corpus.bm25_topk(corpus.tokenize_queries(["json"]), None, 2).row.size == 2
    assert calls == [1]
    built = build(_records(), embedder=None)
    built.bm25_topk(built.tokenize_queries(["json"]), None, 2)
    assert calls == [1]  # an index built in memory holds by construction


@pytest.mark.parametrize("old_format", [False, True])
def test_a_ledger_listing_another_artifacts_record_is_refused_on_lookup(root: Path, old_format: bool) -> None:
    if old_format:
        downgrade_to_v1(root, digest="crc32")
        _rewrite_json(root, "ledger.json", lambda ledger: {**ledger, "pkg0": [ledger["pkg1"][0], *ledger["pkg0"][1:]],
                                                           "pkg1": [ledger["pkg0"][0], *ledger["pkg1"][1:]]})
    else:  # pkg0's first row and pkg1's first row swapped in the ledger
        _rewrite_array(root, "ledger.rows.npy", lambda a: _swap(a, 0, 2))
    corpus = open_corpus(root)  # which artifact a row belongs to is checked when the ledger entry is read
    ledger_file = "ledger.json" if old_format else "ledger.rows.npy"
    says = rf"{ledger_file}: the ledger lists record .* under artifact 'pkg0', but it is a record of 'pkg1'.*rebuild"
    with pytest.raises(CorpusError, match=says):
        records_for_artifact(corpus, "pkg0")
    with pytest.raises(CorpusError, match=says):
        corpus.sibling_rows(["pkg0"])
    assert [r.artifact_id for r in records_for_artifact(corpus, "pkg2")] == ["pkg2", "pkg2"]  # the rest still reads
