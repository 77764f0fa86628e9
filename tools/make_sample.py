"""Generate irflow's built-in sample collection (``--dataset sample``): made-up software packages.

The collection ships inside the package (``irflow/evaluation/sample/``) so
that ``irflow eval lexical --dataset sample`` works anywhere, with no
download and no third-party text: every word is made here, from the tables
below, so the collection is the project's own (MIT).

How it is made, and why the recipes differ on it:

- 50 topics (a task a package does: "rate limiting of HTTP requests"), each
  with two phrasings in a query's words, two synonyms that share none of
  them ("throttling calls to web APIs"), topical details and a distractor
  (a package about something else that reuses the query's words:
  "currency exchange rate lookups served over HTTP").
- Each topic has 4 packages about it (grade 2): two phrased with the query's
  words, two with synonyms only (lexical search misses those unless a detail
  matches; a real embedding model finds them).  Two packages of other topics
  mention the topic as a side feature (grade 1).  Its distractor package is
  not judged (a lexical trap).  50 packages of general utilities are noise.
- 40 of the topics have a query; the other 10 are documents only.

Deterministic: one fixed seed, and only ``random.Random.random()`` (the one
method Python promises to repeat across versions for a seed), so running
this again writes the same bytes (``tests/test_sample_dataset.py`` checks it).

    python tools/make_sample.py            # rewrite irflow/evaluation/sample/
    python tools/make_sample.py --check    # exit 1 if the shipped files differ from a fresh generation
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import NamedTuple, Sequence, TypeVar

SEED = 20240611
OUT = Path(__file__).resolve().parents[1] / "irflow" / "evaluation" / "sample"
FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
T = TypeVar("T")


class Topic(NamedTuple):
    query: str | None  # None: the topic has documents but no query
    terms: tuple[str, str]  # the task in the query's own words
    synonyms: tuple[str, str]  # the task in other words (no word of the query)
    details: tuple[str, str, str]  # topical vocabulary
    distractor: str  # another task, reusing the query's words


TOPICS: tuple[Topic, ...] = (
    Topic("rate limiting for outgoing HTTP requests", ("rate limiting of HTTP requests", "HTTP request rate limits"),
          ("throttling calls to web APIs", "token-bucket quotas for API clients"),
          ("per-host quotas", "retry-after headers", "burst allowances"),
          "currency exchange rate lookups served over HTTP"),
    Topic("parse large CSV files", ("parsing large CSV files", "a fast CSV parser"),
          ("reading comma-separated spreadsheets in chunks", "streaming tabular text import"),
          ("quoted fields", "custom delimiters", "header detection"),
          "uploading large files to cloud storage buckets"),
    Topic("resize images into thumbnails", ("resizing images into thumbnails", "image thumbnail generation"),
          ("shrinking photos to preview sizes", "downscaling pictures for galleries"),
          ("JPEG and PNG output", "aspect-ratio cropping", "EXIF orientation"),
          "resizing terminal windows and split panes"),
    Topic("hash user passwords securely", ("secure password hashing", "hashing user passwords"),
          ("key derivation with bcrypt and argon2", "salted credential storage"),
          ("tunable work factors", "constant-time comparison", "pepper support"),
          "consistent hashing of cache keys across servers"),
    Topic("schedule recurring jobs with cron expressions", ("scheduling recurring jobs", "cron expressions for jobs"),
          ("periodic task timers", "calendar-based background work"),
          ("time zones", "missed-run catch-up", "random jitter"),
          "job board listings for recruiters"),
    Topic("extract text from PDF documents", ("extracting text from PDF documents", "PDF text extraction"),
          ("pulling words out of portable document files", "reading scanned pages with OCR"),
          ("page layout analysis", "embedded fonts", "table detection"),
          "PDF invoice documents generated from templates"),
    Topic("real-time chat over websockets", ("real-time chat over websockets", "websocket chat servers"),
          ("live messaging with persistent connections", "instant conversations in the browser"),
          ("presence indicators", "room broadcasting", "reconnects with backoff"),
          "real-time stock quotes in spreadsheets"),
    Topic("dependency injection container", ("a dependency injection container", "injecting dependencies"),
          ("wiring services by constructor", "an inversion of control registry"),
          ("scoped lifetimes", "lazy providers", "cycle detection"),
          "shipping container tracking for ports"),
    Topic("rotate log files by size", ("rotating log files by size", "log file rotation"),
          ("archiving and compressing old journals", "capping disk usage of application output"),
          ("gzip archives", "daily rollover", "retention counts"),
          "rotating proxies for web crawlers"),
    Topic("feature flags for gradual rollout", ("feature flags", "gradual rollout of features"),
          ("toggling functionality per user", "percentage-based releases"),
          ("kill switches", "A/B cohorts", "audit history"),
          "country flags as an emoji pack"),
    Topic("parse command-line arguments and subcommands", ("parsing command-line arguments", "subcommands and arguments"),
          ("building terminal interfaces with options", "declarative argv handling"),
          ("shell completion", "help text generation", "environment variable fallbacks"),
          "mapping arguments and counterarguments in debates"),
    Topic("full-text search index", ("a full-text search index", "full-text search"),
          ("an inverted index with BM25 ranking", "keyword lookup over documents"),
          ("stemming", "phrase queries", "incremental updates"),
          "tracking index funds in a portfolio"),
    Topic("nearest neighbour search over embeddings", ("nearest neighbour search over embeddings", "embedding search"),
          ("approximate vector similarity lookup", "semantic retrieval with dense vectors"),
          ("HNSW graphs", "product quantization", "cosine distance"),
          "finding the nearest bus stop from GPS coordinates"),
    Topic("retry failed calls with exponential backoff", ("retrying failed calls", "exponential backoff"),
          ("resilient re-attempts with jitter", "circuit breaking for flaky dependencies"),
          ("max attempts", "idempotency keys", "timeout budgets"),
          "alerting administrators about failed logins"),
    Topic("load configuration from YAML and environment variables",
          ("loading configuration from YAML", "configuration from environment variables"),
          ("layered settings with overrides", "typed app settings from files"),
          ("schema validation", "secrets masking", "hot reload"),
          "YAML syntax colors for text editors"),
    Topic("parse human-readable dates and times", ("parsing human-readable dates", "dates and times from text"),
          ("natural-language timestamp recognition", "turning phrases like next Friday into calendar values"),
          ("time zone offsets", "locale formats", "relative expressions"),
          "a dating app's matchmaking backend"),
    Topic("translate user interface strings", ("translating user interface strings", "UI string translation"),
          ("localization catalogs", "multilingual message bundles"),
          ("plural rules", "right-to-left scripts", "gettext files"),
          "interface definitions for hardware drivers"),
    Topic("mock objects in unit tests", ("mock objects for unit tests", "mocking in tests"),
          ("test doubles and stubs", "faking collaborators during checks"),
          ("call assertions", "spies", "patching modules"),
          "mock interview practice for job seekers"),
    Topic("database schema migrations", ("database schema migrations", "migrating database schemas"),
          ("versioned table changes", "evolving SQL structure safely"),
          ("rollback scripts", "online index builds", "migration locks"),
          "bird migration tracking maps"),
    Topic("render Markdown to HTML", ("rendering Markdown to HTML", "a Markdown renderer"),
          ("converting lightweight markup into web pages", "a CommonMark formatting engine"),
          ("syntax highlighting", "footnotes", "sanitized output"),
          "markdown pricing rules for retail clearance sales"),
    Topic("send transactional email", ("sending transactional email", "transactional email delivery"),
          ("delivering receipts and password-reset messages", "an SMTP relay client"),
          ("bounce handling", "DKIM signing", "templated bodies"),
          "transactional memory for concurrent data structures"),
    Topic("transcribe speech to text", ("transcribing speech to text", "speech-to-text transcription"),
          ("automatic voice recognition", "turning recorded audio into transcripts"),
          ("speaker diarization", "punctuation restoration", "streaming microphone input"),
          "text-to-speech voices for screen readers"),
    Topic("convert addresses to coordinates", ("converting addresses to coordinates", "address geocoding"),
          ("finding latitude and longitude of street locations", "mapping postal places onto a globe"),
          ("reverse lookup", "fuzzy street names", "offline gazetteers"),
          "currency conversion for invoices"),
    Topic("in-memory cache with expiry", ("an in-memory cache with expiry", "cache expiry"),
          ("memoizing results with time-to-live", "an LRU eviction store"),
          ("size limits", "stampede protection", "hit-rate statistics"),
          "clearing the browser cache with one click"),
    Topic("compute differences between text files", ("computing differences between text files", "text file diffs"),
          ("line-by-line comparison of documents", "patch generation and merging"),
          ("unified format", "word-level changes", "three-way merge"),
          "detecting the encoding of text files"),
    Topic("fuzzy matching of misspelled names", ("fuzzy matching of names", "matching misspelled names"),
          ("approximate string similarity", "typo-tolerant lookup with edit distance"),
          ("Levenshtein distance", "phonetic keys", "n-gram scoring"),
          "a name generator for fantasy characters"),
    Topic("generate QR codes", ("generating QR codes", "a QR code generator"),
          ("two-dimensional barcode creation", "scannable matrix symbols for links"),
          ("error correction levels", "SVG output", "logo overlays"),
          "code generation from OpenAPI specs"),
    Topic("plot interactive charts", ("plotting interactive charts", "interactive chart plots"),
          ("data visualization with zoomable graphs", "drawing dashboards from time series"),
          ("tooltips", "log axes", "export to PNG"),
          "plot summaries of classic novels"),
    Topic("watch a directory for file changes", ("watching a directory for file changes", "file change watchers"),
          ("filesystem event notifications", "reacting when paths are created or modified"),
          ("inotify", "debouncing", "recursive folders"),
          "watch face designs for smartwatches"),
    Topic("compress data with zstd", ("compressing data with zstd", "zstd data compression"),
          ("shrinking archives with fast codecs", "streaming byte squeezing"),
          ("dictionary training", "compression levels", "frame checksums"),
          "monitoring data center cooling"),
    Topic("verify JSON web tokens for authentication", ("verifying JSON web tokens", "token authentication"),
          ("signed bearer credentials for APIs", "stateless login sessions"),
          ("key rotation", "audience claims", "expiry checks"),
          "counting tokens of language model prompts"),
    Topic("accept credit card payments", ("accepting credit card payments", "card payments"),
          ("checkout and billing integration", "charging customers online"),
          ("refunds", "webhooks", "fraud checks"),
          "a credit score simulator for loans"),
    Topic("spell checking for documents", ("spell checking documents", "a spell checker"),
          ("catching typos as you write", "proofreading suggestions"),
          ("custom dictionaries", "grammar hints", "language detection"),
          "a magic spell database for tabletop games"),
    Topic("scrape product prices from websites", ("scraping product prices from websites", "website scraping"),
          ("crawling pages and extracting fields", "harvesting structured data from HTML"),
          ("CSS selectors", "polite crawl delays", "headless browsers"),
          "price elasticity models for retailers"),
    Topic("run tasks in parallel across CPU cores", ("running tasks in parallel", "parallel tasks on CPU cores"),
          ("multiprocessing worker pools", "concurrent execution on all processors"),
          ("work stealing", "shared memory", "progress reporting"),
          "a parallel parking assistant for cars"),
    Topic("shortest path in a graph", ("shortest paths in graphs", "graph shortest path"),
          ("route finding with Dijkstra", "network traversal algorithms"),
          ("weighted edges", "A* heuristics", "connected components"),
          "graph paper templates for printing"),
    Topic("global keyboard shortcuts for desktop apps", ("global keyboard shortcuts", "keyboard shortcuts for desktop apps"),
          ("system-wide hotkeys", "a key binding manager"),
          ("modifier keys", "conflict detection", "per-app profiles"),
          "desktop wallpaper slideshows"),
    Topic("encrypt files with a password", ("encrypting files with a password", "password file encryption"),
          ("a symmetric cipher for stored data", "protecting documents with AES"),
          ("authenticated encryption", "key stretching", "streaming large inputs"),
          "a password manager browser extension"),
    Topic("syntax highlighting for source code", ("syntax highlighting for source code", "source code highlighting"),
          ("colorizing program text by token", "lexer-based coloring"),
          ("themes", "language grammars", "terminal output"),
          "a license scanner for source code"),
    Topic("message queue for background workers", ("a message queue for workers", "background worker queues"),
          ("a task broker with at-least-once delivery", "publish-subscribe job distribution"),
          ("dead-letter queues", "acknowledgements", "priority levels"),
          "queue management for hospital waiting rooms"),
    # documents only: no query
    Topic(None, ("generating color palettes", "palette generation"), ("harmonious hues for designers", "theme swatches"),
          ("contrast checks", "HSL sliders", "export to CSS"), "color blindness simulation in photos"),
    Topic(None, ("converting measurement units", "unit conversion"), ("metric and imperial arithmetic", "quantities with dimensions"),
          ("temperature scales", "currency-free math", "precision control"), "unit tests for embedded firmware"),
    Topic(None, ("fetching weather forecasts", "weather data"), ("meteorological observations", "hourly precipitation outlooks"),
          ("station lookup", "wind speed", "severe alerts"), "weathering tests for paint coatings"),
    Topic(None, ("playing chess", "a chess engine"), ("board game move search", "alpha-beta game trees"),
          ("opening books", "endgame tables", "UCI protocol"), "chess club tournament sign-ups"),
    Topic(None, ("editing MP3 tags", "audio metadata tags"), ("music library labels", "ID3 field editing"),
          ("album art", "batch renaming", "genre lists"), "price tags for market stalls"),
    Topic(None, ("generating XML sitemaps", "sitemap generation"), ("search engine crawl hints", "URL inventories for websites"),
          ("change frequency", "priority hints", "gzip output"), "XML parsing benchmarks"),
    Topic(None, ("scaling cooking recipes", "recipe scaling"), ("adjusting ingredient amounts", "kitchen portion math"),
          ("servings", "fraction display", "shopping lists"), "recipes for deploying servers"),
    Topic(None, ("uptime monitoring of websites", "website uptime checks"), ("availability probes", "status pages"),
          ("SSL expiry warnings", "response time graphs", "on-call paging"), "screen time monitoring for kids"),
    Topic(None, ("an emoji picker", "emoji search"), ("pictograph selection", "smiley keyboards"),
          ("skin tones", "recent picks", "shortcodes"), "emoji statistics of chat logs"),
    Topic(None, ("evaluating spreadsheet formulas", "a formula engine"), ("cell expression calculation", "workbook recalculation"),
          ("circular references", "named ranges", "array functions"), "baby formula price comparisons"),
)

#: General utilities: noise sharing only generic words with the topics.
UTILITIES = ("small helpers for string formatting", "assorted list and dictionary utilities",
             "a collection of decorators", "pretty printing of nested structures", "colored terminal messages",
             "temporary directories for scripts", "human-friendly file sizes", "progress bars for loops",
             "checksums of folders", "random test fixtures", "slug generation for titles", "timing code blocks",
             "a tiny event emitter", "immutable records", "path globbing helpers", "semantic version comparison")

LANGUAGES = ("Python", "Rust", "Go", "Java", "TypeScript", "C++", "Ruby", "Kotlin")
KINDS = ("library", "command-line tool", "service", "plugin", "framework", "toolkit")
LICENSES = ("MIT", "Apache-2.0", "BSD-3-Clause", "MPL-2.0", "GPL-3.0")
#: What a utility package's details are (no topic's words).
PLAIN_DETAILS = ("zero configuration", "unicode input", "thread safety", "sensible defaults", "small memory use",
                 "readable errors", "a fluent interface", "Windows support")
EXTRAS = ("type annotations", "a plugin API", "benchmarks", "a small test suite", "examples for beginners",
          "no runtime dependencies", "a changelog", "prebuilt binaries")
SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "to", "zu", "pel", "dor", "qui", "sa", "nex", "ob", "fi", "tra", "gli",
             "mo", "rek", "sul", "va", "bri", "hal", "jun", "wex")
DETAIL_SENTENCES = ("It handles {0} and {1}.", "Features include {0}, {1} and {2}.",
                    "Out of the box it supports {0}; {1} is optional.", "The design centres on {0}, with {1} planned.")
SIDE_SENTENCES = ("It also offers {0} as a side feature.", "A bundled extra offers {0}.",
                  "Recent releases added basic {0}.")


class Draw:
    """Choices from one seeded stream, using ``random()`` alone (stable across Python versions)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def below(self, n: int) -> int:
        return min(int(self.rng.random() * n), n - 1)

    def pick(self, items: Sequence[T]) -> T:
        return items[self.below(len(items))]

    def shuffled(self, items: Sequence[T]) -> list[T]:
        out = list(items)
        for i in range(len(out) - 1, 0, -1):  # Fisher-Yates
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out


def _name(draw: Draw, taken: set[str]) -> str:
    while True:
        name = "".join(draw.pick(SYLLABLES) for _ in range(2 + draw.below(2))).capitalize()
        if name not in taken:
            taken.add(name)
            return name


def _package(draw: Draw, name: str, purpose: str, details: Sequence[str]) -> dict[str, object]:
    """One package's document: its name as the title, what it is for, its details and a generic line."""
    language, kind = draw.pick(LANGUAGES), draw.pick(KINDS)
    order = draw.shuffled(details)
    sentences = [f"{name} is a {language} {kind} for {purpose}.", draw.pick(DETAIL_SENTENCES).format(*order)]
    sentences.append(draw.pick((f"Licensed under {draw.pick(LICENSES)}.", f"Ships with {draw.pick(EXTRAS)}.",
                                f"Maintained since {2012 + draw.below(12)}.")))
    return {"title": name, "text": " ".join(sentences), "metadata": {"language": language, "kind": kind}}


def generate(seed: int = SEED) -> dict[str, bytes]:
    """The collection's files (path under the sample folder -> bytes): the same bytes for the same seed."""
    draw, taken = Draw(seed), set()
    docs: list[dict[str, object]] = []
    main_of: list[int | None] = []  # the topic a document is about (None: a distractor or a utility)
    for index, topic in enumerate(TOPICS):
        for purpose in (topic.terms[0], topic.synonyms[0], topic.terms[1], topic.synonyms[1]):
            docs.append(_package(draw, _name(draw, taken), purpose, topic.details))
            main_of.append(index)
        docs.append(_package(draw, _name(draw, taken), topic.distractor, [draw.pick(PLAIN_DETAILS) for _ in range(3)]))
        main_of.append(None)
    for purpose in UTILITIES * 3 + UTILITIES[:2]:
        docs.append(_package(draw, _name(draw, taken), purpose, [draw.pick(PLAIN_DETAILS) for _ in range(3)]))
        main_of.append(None)
    side: dict[int, list[int]] = {}  # topic -> documents of other topics that mention it (grade 1)
    mentioned: set[int] = set()  # one side mention per document at most
    for index, topic in enumerate(TOPICS):
        candidates = [d for d, m in enumerate(main_of) if m is not None and m != index and d not in mentioned]
        for d in draw.shuffled(candidates)[:2]:
            text = str(docs[d]["text"])
            docs[d]["text"] = f"{text} {draw.pick(SIDE_SENTENCES).format(draw.pick(topic.terms + topic.synonyms))}"
            side.setdefault(index, []).append(d)
            mentioned.add(d)
    order = draw.shuffled(range(len(docs)))
    doc_id = {d: f"d{rank + 1:03d}" for rank, d in enumerate(order)}
    corpus = "".join(json.dumps({"_id": doc_id[d], **docs[d]}, ensure_ascii=False) + "\n" for d in order)
    queries, qrels = [], ["query-id\tcorpus-id\tscore\n"]
    for index, topic in enumerate(TOPICS):
        if topic.query is None:
            continue
        qid = f"q{len(queries) + 1:02d}"
        queries.append(json.dumps({"_id": qid, "text": topic.query}, ensure_ascii=False) + "\n")
        grades = {doc_id[d]: 2 for d, m in enumerate(main_of) if m == index}
        grades.update({doc_id[d]: 1 for d in side.get(index, [])})
        qrels.extend(f"{qid}\t{d}\t{grade}\n" for d, grade in sorted(grades.items()))
    return {"corpus.jsonl": corpus.encode("utf-8"), "queries.jsonl": "".join(queries).encode("utf-8"),
            "qrels/test.tsv": "".join(qrels).encode("utf-8")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped files; write nothing")
    parser.add_argument("--out", type=Path, default=OUT, help="the sample folder [default: %(default)s]")
    args = parser.parse_args(argv)
    files = generate()
    if args.check:
        stale = [name for name, data in files.items()
                 if not (args.out / name).is_file() or (args.out / name).read_bytes() != data]
        sys.stderr.write("".join(f"{args.out / name} differs from a fresh generation\n" for name in stale))
        return 1 if stale else 0
    for name, data in files.items():
        (args.out / name).parent.mkdir(parents=True, exist_ok=True)
        (args.out / name).write_bytes(data)
    sys.stderr.write(f"wrote {', '.join(files)} into {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
