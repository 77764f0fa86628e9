"""The safe HTML builder every report and notebook view goes through (irflow/util/html.py).

Checked against Python's own HTML parser and JSON reader, for every string
(hypothesis): text and attribute values come back as the text shown (lone
surrogates as U+FFFD, invisible controls as their escapes) and never as
markup; JSON for a script never holds what could end the element; what an
attacker would want (an event handler, a script URL, a script tag) cannot be
written at all.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.util.html import CSP, Markup, el, escape, join, json_for_script, number, page, script_json
from irflow.util.unicode import escape_controls, visible

HOSTILE = ["<script>alert(1)</script>", "</script><script>alert(2)</script>", '"><img src=x onerror=alert(3)>',
           "javascript:alert(4)", "</textarea><b>x</b>", "<!-- comment -->", "<![CDATA[x]]>", "a\u202eb\u2066c",
           "caf\udce9", "\ud800", "x\x00y\x1b[2Jz", "&amp; &lt;", "'single' \"double\"", "\u2028\u2029"]

texts = st.one_of(st.sampled_from(HOSTILE), st.text(), st.text(alphabet="<>&\"'/=!-` \u202e\ud800\x00abc"))


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):
        raise AssertionError(f"a comment was opened: {data!r}")


def _parse(markup: str) -> _Collect:
    parser = _Collect()
    parser.feed(markup)
    parser.close()
    return parser


@settings(max_examples=300)
@given(texts, texts)
def test_text_and_attributes_come_back_as_text(value, title):
    parsed = _parse(el("td", {"title": title, "data-x": value}, value))
    assert parsed.tags == [("td", {"title": visible(title), "data-x": visible(value)})]
    assert "".join(parsed.text) == visible(value)


@settings(max_examples=300)
@given(texts)
def test_escaped_text_holds_no_markup(value):
    out = escape(value)
    assert not re.search(r"[<>\"']", out)
    assert "&" not in re.sub(r"&(?:amp|lt|gt|quot|#x27);", "", out)
    out.encode("utf-8")  # a lone surrogate never reaches the page


@settings(max_examples=300)
@given(st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), texts),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
                    max_leaves=12))
def test_json_for_a_script_reads_back_and_cannot_end_the_element(data):
    text = json_for_script(data)
    assert not re.search("[<>&\u2028\u2029]", text)
    text.encode("utf-8")
    assert json.loads(text) == data
    block = script_json(data, "irflow-data")
    assert block.count("</script") == 1 and block.lower().count("<script") == 1 and block.endswith("</script>")


def test_visible_names_what_would_act_on_the_reader():
    assert visible("exe\u202etxt.") == "exe\\u202etxt."
    assert visible("\x1b[31mred") == "\\x1b[31mred"
    assert visible("caf\udce9 \ud800") == "caf\ufffd \ufffd"
    assert visible("tab\tnew\nline ok é") == "tab\tnew\nline ok é"
    # a terminal's form: the controls shown, a path's undecodable byte left for the output to print as given
    assert escape_controls("caf\udce9\x1b[2J\u202e") == "caf\udce9\\x1b[2J\\u202e"


@pytest.mark.parametrize("name", ["onclick", "onerror", "ONLOAD", "srcdoc", "bad name", "x\"y", ""])
def test_event_handlers_and_odd_attribute_names_are_refused(name):
    with pytest.raises(ValueError, match="not one a report writes"):
        el("div", {name: "alert(1)"})


@pytest.mark.parametrize("url", ["javascript:alert(1)", "http://example.com/x", "//example.com", "data:text/html,x",
                                 " javascript:alert(1)", "#ok\"onmouseover=x"])
def test_urls_other_than_fragments_and_inline_images_are_refused(url):
    with pytest.raises(ValueError, match="links only within the page"):
        el("a", {"href": url}, "x")
    assert el("a", {"href": "#stage-1"}, "x") == '<a href="#stage-1">x</a>'


@pytest.mark.parametrize("tag", ["script", "style", "iframe", "object", "base", "meta", "link", "form",
                                 "foreignObject", "template", "img src=x", "a>"])
def test_elements_that_run_or_load_are_not_made(tag):
    with pytest.raises(ValueError, match="not one a report writes"):
        el(tag, {})


def test_children_flatten_and_markup_is_kept():
    assert el("p", {}, "a<", [el("b", {}, "x"), None, False, ["c"]], 3) == "<p>a&lt;<b>x</b>c3</p>"
    assert join("<", Markup("<i>")) == "&lt;<i>"
    assert el("details", {"open": True, "hidden": False}) == "<details open></details>"


def test_numbers_for_svg_are_finite():
    assert [number(v) for v in (1, 2.25, float("nan"), float("inf"), True, "x")] == ["1.0", "2.2", "0", "0", "0", "0"]


def test_a_page_has_its_policy_first_and_one_nonced_script():
    html = page("t <x>", el("p", {}, "body"), style="p{color:red}", script="var x = 1;")
    head = html[: html.index("</head>")]
    assert head.index('http-equiv="Content-Security-Policy"') < head.index("<title>") < head.index("<style>")
    nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'", head).group(1)
    assert html.count("<script") == 1 and f'<script nonce="{nonce}">' in html
    assert "default-src 'none'" in head and "img-src data:" in head and CSP.startswith("default-src 'none'")
    assert "<title>t &lt;x&gt;</title>" in head and 'class="nojs"' in html
    assert page("t", el("p", {}), style="", script="x") != page("t", el("p", {}), style="", script="x")  # new nonce
    with pytest.raises(ValueError):
        page("t", el("p", {}), style="</style><script>", script="")
