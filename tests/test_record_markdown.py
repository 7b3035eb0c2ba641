"""The record's Markdown (the model's answer as HTML): hostile text never becomes live markup, normal Markdown reads
well. Every output is parsed and checked against the allow-list, not searched for a few bad strings."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from examples import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbagent.ui.record import markdown_html, render_html

ALLOWED = {"p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "code", "pre", "blockquote", "ul",
           "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "a"}


class Tags(HTMLParser):
    """Every start tag with its attributes, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def tags_of(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html)
    parser.close()
    return parser.tags


def assert_inert(html: str) -> None:
    """Only allowed tags; no event handler, style or source attribute; links only to http(s)/mailto, with rel."""
    for tag, attrs in tags_of(html):
        assert tag in ALLOWED, (tag, html)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, html)
            assert name in {"href", "rel", "class", "style", "start"}, (tag, name, html)
            if name == "style":
                assert tag in ("th", "td") and value in ("text-align:left", "text-align:right",
                                                         "text-align:center"), html
            if name == "class":
                assert tag == "code" and (value or "").startswith("language-"), html
        if tag == "a":
            href = attrs.get("href") or ""
            assert href.split(":", 1)[0] in ("http", "https", "mailto") or "href" not in attrs, html
            assert attrs.get("rel") == "noopener noreferrer", html


HOSTILE = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<img src=x onerror=alert(1)>",
    "<svg/onload=alert(1)>",
    "<iframe src=//evil.example></iframe>",
    '<a href="javascript:alert(1)">x</a>',
    "<div onclick=\"alert(1)\">raw block</div>\n\nafter",
    "<details open ontoggle=alert(1)>",
    "<style>*{display:none}</style>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x]( javascript:alert(1) )",
    "[x](<javascript:alert(1)>)",
    "[x](&#106;avascript:alert(1))",
    "[x](&#x6A;avascript&#58;alert(1))",
    "[x](java%73cript:alert(1))",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](DATA:text/html,<script>alert(1)</script>)",
    "![x](data:image/svg+xml,<svg onload=alert(1)>)",
    "![x](javascript:alert(1))",
    "[x](https://ok.example \"title\" onmouseover=alert(1))",
    '[x](https://ok.example"onmouseover="alert(1))',
    "[ref]\n\n[ref]: javascript:alert(1)",
    "<javascript:alert(1)>",
    "<https://ok.example/\"onmouseover=\"alert(1)>",
    "&#60;script&#62;alert(1)&#60;/script&#62;",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "&#x3C;img src=x onerror=alert(1)&#x3E;",
    "```\n</code></pre><script>alert(1)</script>\n```",
    "```js\" onmouseover=\"alert(1)\nx\n```",
    "`</code><script>alert(1)</script>`",
    "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
    "<!-- comment --><script>x</script>",
    "<![CDATA[<script>alert(1)</script>]]>",
    "**<b onmouseover=alert(1)>bold</b>**",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markdown_stays_text(text: str) -> None:
    out = markdown_html(text)
    assert_inert(out)
    lowered = out.lower()  # (an attribute that is only text, as in `&lt;a href="javascript:..."&gt;`, is harmless)
    for bad in ("<script", "<img", "<svg", "<iframe", "<style", "<div", "<details", "<![cdata", "<!--"):
        assert bad not in lowered, (bad, out)
    assert all(not (attrs.get("href") or "").lower().startswith(("javascript", "data", "vbscript"))
               for _, attrs in tags_of(out))


def test_refused_links_keep_their_text_and_lose_their_target() -> None:
    out = markdown_html("see [the docs](javascript:alert(1)) and [the file](report.md) and "
                        "![chart](https://x.example/c.png)")
    assert "see the docs and the file and" in out and "<a" in out
    assert tags_of(out) == [("p", {}), ("a", {"href": "https://x.example/c.png", "rel": "noopener noreferrer"})]
    assert "image: chart" in out  # an image is a link to it: no external asset is loaded by the record


def test_hostile_text_shows_as_text() -> None:
    out = markdown_html("<script>alert(1)</script> and <img src=x onerror=alert(1)>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out and "&lt;img src=x onerror=alert(1)&gt;" in out


def test_the_whole_record_with_a_hostile_answer() -> None:
    answer = "\n\n".join(HOSTILE)
    view = {"run_id": "r1", "status": "completed", "model": "m", "answer": answer, "steps": [], "totals": {}}
    out = render_html(view)
    answer_html = out.split('<div class="nbr-answer">', 1)[1]
    assert_inert(answer_html.split("</div>", 1)[0].replace('<h4 class="nbr-section">Answer</h4>', ""))
    assert "<script" not in out.lower() and "<img" not in out.lower() and "<iframe" not in out.lower()


PIECES = st.sampled_from(["<", ">", "&", "#", ";", ":", "(", ")", "[", "]", "!", "`", "*", "_", "|", "-", "\n", " ",
                          '"', "'", "=", "/", "\\", "javascript", "JaVaScRiPt", "data", "script", "img", "onerror",
                          "onload", "src", "href", "x", "alert(1)", "&#106;", "&#x3C;", "&lt;", "http://a.example",
                          "mailto:a@b.example", "svg", "style", "```", "    ", "1.", "> ", "\t", "\x00", "\u2028"])


@settings(max_examples=examples(300), derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=40).map("".join))
def test_any_mix_of_hostile_pieces_is_inert(text: str) -> None:
    assert_inert(markdown_html(text))
