"""Summaries never build a representation much larger than what they show (nbagent/tools/kernel.py `summarize`,
shared by `inspect_variable`, `{var}` and `{Out[n]}`; nbagent/ipython/outputs.py for what cells displayed).

`inspect_variable` runs without asking (READ_ONLY): on `bytes(25_000_000)` it used to build a 100 MB repr to show
2,000 characters of it. Memory is measured with tracemalloc (a bound on allocations, not on time)."""

from __future__ import annotations

import array
import base64
import collections
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from nbagent.ipython.outputs import MAX_TEXT, capture
from nbagent.ipython.references import Notebook, Ref, context_message, expand_all, notebook_message
from nbagent.tools.kernel import KernelTools, summarize

FEW_MB = 4_000_000
BIG = "x" * 25_000_000


def peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """fn()'s result, and the most memory it held at once beyond what existed before."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HUGE: dict[str, Callable[[], Any]] = {
    "bytes": lambda: bytes(25_000_000),
    "str": lambda: BIG,
    "bytearray": lambda: bytearray(25_000_000),
    "memoryview": lambda: memoryview(bytes(25_000_000)),
    "list": lambda: [BIG] * 20,
    "tuple": lambda: (BIG,) * 20,
    "long list": lambda: [BIG] * 1000,
    "dict": lambda: {f"k{i}": BIG for i in range(20)},
    "dict with a huge key": lambda: {BIG: 1},
    "set": lambda: {BIG, BIG + "y"},
    "nested": lambda: [[[["y" * 1000] * 20] * 20] * 20] * 20,  # 160,000 strings of 1,000 (160 MB of repr)
    "OrderedDict": lambda: collections.OrderedDict(a=BIG, b=bytes(25_000_000)),
    "deque": lambda: collections.deque([BIG] * 20),
    "array": lambda: array.array("i", bytes(40_000_000)),
    "named tuple": lambda: collections.namedtuple("Pair", "key value")("k", BIG),
}


@pytest.mark.parametrize("kind", sorted(HUGE))
def test_inspect_variable_of_a_huge_value_stays_within_a_few_mb(kind: str) -> None:
    value = HUGE[kind]()
    summary, used = peak(lambda: KernelTools({"v": value}).inspect_variable("v"))
    assert used < FEW_MB, f"{kind}: {used:,} bytes"
    shown = summary.get("repr") or str(summary.get("items"))
    assert 0 < len(shown) <= 3_000  # 2,000 characters, or 20 items of 120
    assert any(k.endswith(("_truncated", "_shortened")) for k in summary)  # and it says it is not all of it


@pytest.mark.parametrize("kind", ["bytes", "str", "list", "dict"])
def test_a_variable_referenced_in_a_request_stays_within_a_few_mb(kind: str) -> None:
    ns = {"v": HUGE[kind]()}
    message, used = peak(lambda: context_message(expand_all("look at {v}", ns)[1], ns))
    assert used < FEW_MB, f"{kind}: {used:,} bytes"
    assert message is not None and len(message["content"]) < 8_000


def test_out_n_of_a_huge_result_and_a_huge_print_stays_within_a_few_mb() -> None:
    class Printed:
        output_type = "out_stream"
        bundle = {"stream": ["p" * 1_000_000] * 30}

    nb = Notebook(current=3, inputs=["", "b", "p"], results={1: bytes(25_000_000)}, printed={2: [Printed()]})
    message, used = peak(lambda: notebook_message([Ref("Out", 1), Ref("Out", 2)], nb))
    assert used < FEW_MB, f"{used:,} bytes"
    text = "\n".join(p for p in message["content"] if isinstance(p, str))
    assert "100,000,003 characters" in text and f"30,000,000 characters, the first {MAX_TEXT:,} shown" in text


def test_what_a_truncated_summary_says() -> None:
    b = summarize(bytes(25_000_000))
    assert b["len"] == 25_000_000 and b["repr"].startswith("b'\\x00\\x00") and b["repr"].endswith("\\x00'")
    assert b["repr_truncated"] == "100,000,003 characters; 2,000 shown (its start and its end)"
    quoted = "say \"hi\", it's " * 1000  # both quotes: the repr escapes each '
    assert summarize(quoted)["repr_truncated"].startswith(f"{len(repr(quoted)):,} characters")
    xs = summarize([BIG] * 20)
    assert xs["len"] == 20 and xs["repr"].startswith("['xxx") and xs["repr_truncated"].startswith("cut where long")
    d = summarize({"a": BIG, "b": 2})
    assert len(d["items"]["'a'"]) <= 120 and d["items"]["'a'"].startswith("'xxx") and d["items"]["'b'"] == "2"
    assert d["items_shortened"] == "long keys or values are cut ('…')" and "…" in d["items"]["'a'"]
    assert "items_shortened" not in summarize({"a": "short"})
    assert summarize([1, "two", b"three", {"k": (4,)}])["repr"] == "[1, 'two', b'three', {'k': (4,)}]"
    assert "repr_truncated" not in summarize([1, "two"]) and summarize("ab")["repr"] == "'ab'"
    assert summarize(collections.OrderedDict(a=1))["items"] == {"'a'": "1"}


def test_numpy_and_pandas_keep_their_own_bounded_reprs() -> None:
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    zeros = np.zeros(10_000_000)
    summary, used = peak(lambda: summarize(zeros))
    assert used < FEW_MB and summary["repr"].startswith("array([0., 0., 0., ...")
    wide = summarize(pd.DataFrame(np.zeros((3, 100))))
    assert "..." in wide["head"] and wide["head"].count("\n") == 3  # pandas' own column bound, every row


def test_displays_of_huge_images_and_texts_are_never_copied_whole() -> None:
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x00\x80" + bytes(30_000_000)
    for data in ({"image/png": memoryview(png)}, {"image/png": bytearray(png)},
                 {"image/png": base64.b64encode(png).decode() + "\n"}):
        out, used = peak(lambda data=data: capture("display_data", data))
        assert used < FEW_MB, f"{type(data['image/png']).__name__}: {used:,} bytes"
        assert out.image is not None and out.image.data is None and (out.image.width, out.image.height) == (256, 128)
        assert out.image.size == len(png)
    out, used = peak(lambda: capture("display_data", {"text/plain": ["t" * 1_000_000] * 30}))
    assert used < FEW_MB and out.text == "t" * MAX_TEXT
    assert out.text_truncated == f"30,000,000 characters; the first {MAX_TEXT:,} shown"
