"""Stopword lists the "english" analyzer removes before stemming.

Kept as plain data apart from the analyzer code so the list can be read,
diffed and cited.  Changing a list changes the tokens of every corpus built
with it, so the analyzer records the list's *name* and a version in the
corpus manifest (see ``irflow.kernels.text.ANALYZER_VERSION``): edit a list only
together with that version.

>>> "the" in STOPWORDS["english"]
True
"""

from __future__ import annotations

__all__ = ["ENGLISH_STOPWORDS", "STOPWORDS"]

# Provenance: the classic English list of the NLTK stopwords corpus (179
# words, itself derived from the Snowball project's English list), as shipped
# by NLTK 3.x before its 2023 additions.  The entries spelled with an
# apostrophe ("don't", "you're", ...) are left out: irflow's tokens are
# ``\w+`` runs, which never contain one, and the list already holds the pieces
# such a word splits into ("don", "t", "re", "ll", "ve", ...).
ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves
    he him his himself she her hers herself it its itself they them their
    theirs themselves what which who whom this that these those am is are was
    were be been being have has had having do does did doing a an the and but
    if or because as until while of at by for with about against between into
    through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both
    each few more most other some such no nor not only own same so than too
    very s t can will just don should now d ll m o re ve y ain aren couldn
    didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn
    weren won wouldn
    """.split()
)

#: Stopword lists by name; an analyzer's ``stopwords`` setting names one.
STOPWORDS: dict[str, frozenset[str]] = {"english": ENGLISH_STOPWORDS}
