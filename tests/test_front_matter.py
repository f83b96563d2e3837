"""Front matter as JSON-safe data: keys as written, values as JSON types, bounded alias expansion.

YAML reads many ordinary keys as something other than text (``on: push`` in a CI document is ``{True:
"push"}``), and its aliases let a few hundred bytes stand for gigabytes. ``FrontMatter.data`` must always
serialise with ``json.dumps(data, sort_keys=True)``, loading it must cost work bounded by its size, and
front matter that is refused is an ``error`` while the document still chunks and rebuilds.
"""

from __future__ import annotations

import json
import math
import time
import tracemalloc

import pytest
import yaml
from hostile_corpus import front_matter_billion_laughs, front_matter_odd_keys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chunkline
from chunkline import chunk_markdown, parse_markdown
from chunkline.front_matter import MAX_ALIAS_VALUES, MAX_FRONT_MATTER_DEPTH


def front_matter_of(body: str, fence: str = "---"):
    text = f"{fence}\n{body}{fence}\n# Heading\n\nBody text.\n"
    return parse_markdown(text).front_matter


def assert_json_safe(data) -> None:
    encoded = json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False)
    encoded.encode("utf-8")  # no lone surrogates either: the tables are UTF-8
    assert json.loads(encoded) == data


# --------------------------------------------------------------------------------------------------
# Keys keep their text
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, expected",
    [
        ("on: push\n", {"on": "push"}),
        ("yes: agreed\nno: refused\noff: quiet\n", {"yes": "agreed", "no": "refused", "off": "quiet"}),
        ("2024: a good year\n", {"2024": "a good year"}),
        ("2024-01-01: new year\n", {"2024-01-01": "new year"}),
        ("null: nothing\n~: tilde\n", {"null": "nothing", "~": "tilde"}),
        (
            "1.5: one and a half\n0x1F: hex\n.inf: infinity\n",
            {"1.5": "one and a half", "0x1F": "hex", ".inf": "infinity"},
        ),
        ("\"quoted key\": 1\n'single': 2\n", {"quoted key": 1, "single": 2}),
    ],
    ids=["on", "yes-no-off", "year", "date", "null", "numbers", "quoted"],
)
def test_mapping_keys_keep_the_text_they_were_written_with(body, expected):
    front_matter = front_matter_of(body)
    assert front_matter.error is None
    assert front_matter.data == expected
    assert_json_safe(front_matter.data)


def test_a_github_actions_workflow_as_front_matter_keeps_on_as_a_key():
    body = (
        "name: CI\non:\n  push:\n    branches: [main]\n  pull_request: {}\njobs:\n  test:\n    runs-on: ubuntu-latest\n"
    )
    data = front_matter_of(body).data
    assert data == {
        "name": "CI",
        "on": {"push": {"branches": ["main"]}, "pull_request": {}},
        "jobs": {"test": {"runs-on": "ubuntu-latest"}},
    }


@pytest.mark.parametrize("body", ["? [a, b]\n: pair\n", "? {a: 1}\n: map\n", "outer:\n  ? [x]\n  : inner\n"])
def test_a_key_that_is_a_sequence_or_mapping_is_refused_with_its_line(body):
    front_matter = front_matter_of(body)
    assert front_matter.data is None
    assert "write each key as plain text" in front_matter.error
    assert "at line" in front_matter.error


# --------------------------------------------------------------------------------------------------
# Values become JSON types
# --------------------------------------------------------------------------------------------------


def test_values_become_json_types():
    body = (
        "updated: 2024-05-01\n"
        "published: 2024-05-01 10:30:00+02:00\n"
        "logo: !!binary aGFyYm91cg==\n"
        "labels: !!set {wind, tide}\n"
        "steps: !!omap [{build: 1}, {test: 2}]\n"
        "pairs: !!pairs [{a: 1}, {a: 2}]\n"
        "odd: [.nan, .inf, -.inf, 1.5, 7, true, null]\n"
    )
    data = front_matter_of(body).data
    assert data == {
        "updated": "2024-05-01",
        "published": "2024-05-01T10:30:00+02:00",
        "logo": "aGFyYm91cg==",
        "labels": ["tide", "wind"],
        "steps": {"build": 1, "test": 2},
        "pairs": [["a", 1], ["a", 2]],
        "odd": ["nan", "inf", "-inf", 1.5, 7, True, None],
    }
    assert_json_safe(data)


def test_toml_dates_times_and_non_finite_numbers_become_json_types():
    body = 'when = 2024-05-01T10:30:00Z\nday = 2024-05-01\nclock = 07:32:00\nlimit = inf\nratio = nan\n[owner]\nname = "ops"\n'
    data = front_matter_of(body, "+++").data
    assert data == {
        "when": "2024-05-01T10:30:00+00:00",
        "day": "2024-05-01",
        "clock": "07:32:00",
        "limit": "inf",
        "ratio": "nan",
        "owner": {"name": "ops"},
    }
    assert_json_safe(data)


def test_merge_keys_are_applied_as_yaml_defines_them():
    body = "base: &base {region: north, level: 1}\nother: &other {level: 2, owner: ops}\nquay: {<<: [*base, *other], level: 3}\n"
    data = front_matter_of(body).data
    assert data["quay"] == {"region": "north", "owner": "ops", "level": 3}
    assert data["quay"] == yaml.safe_load(body)["quay"]


def test_surrogate_escapes_become_valid_text_with_the_pure_python_loader(monkeypatch):
    """libyaml refuses a ``\\ud800`` escape; PyYAML's own scanner reads it into a lone surrogate, which no
    UTF-8 table can hold."""
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    data = front_matter_of('title: "\\ud83d\\ude00 harbour \\ud800"\n').data
    assert data == {"title": "\U0001f600 harbour \ufffd"}
    assert_json_safe(data)


# --------------------------------------------------------------------------------------------------
# Bounded work: aliases, recursion, nesting
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loader", ["libyaml", "pure-python"])
def test_a_billion_laughs_is_refused_quickly_in_bounded_memory(monkeypatch, loader):
    if loader == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    text = front_matter_billion_laughs().decode("utf-8")
    assert len(text.split("---\n")[1]) < 500  # a few hundred bytes that expand to 9**9 strings
    tracemalloc.start()
    try:
        document = parse_markdown(text)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert document.front_matter.data is None
    assert "aliases expand it past" in document.front_matter.error
    assert peak_bytes < 20_000_000
    assert chunkline.reconstruct(chunk_markdown(text)) == text


def test_merges_of_merges_are_charged_for_every_pair_they_repeat():
    keys = ", ".join(f"key{number}: {number}" for number in range(100))
    lines = [f"level0: &level0 {{{keys}}}"]
    for level in range(1, 6):
        lines.append(f"level{level}: &level{level} {{<<: [{', '.join([f'*level{level - 1}'] * 10)}]}}")
    front_matter = front_matter_of("\n".join(lines) + "\n")
    assert front_matter.data is None and "aliases expand it past" in front_matter.error


def test_aliases_within_the_budget_are_expanded():
    body = "tide: &tide {unit: cm, every: 60}\ngauges: [" + ", ".join(["*tide"] * 50) + "]\n"
    data = front_matter_of(body).data
    assert data["gauges"] == [{"unit": "cm", "every": 60}] * 50
    assert 50 * 5 < MAX_ALIAS_VALUES


@pytest.mark.parametrize(
    "body",
    [
        "loop: &loop [*loop]\n",
        "loop: &loop {self: *loop}\n",
        "outer: &outer {inner: [1, {back: *outer}]}\n",
        "loop: &loop {<<: *loop}\n",
    ],
    ids=["sequence", "mapping", "indirect", "merge"],
)
def test_a_recursive_alias_is_refused_with_its_line(body):
    front_matter = front_matter_of(body)
    assert front_matter.data is None
    assert "recursive alias" in front_matter.error and "at line 2" in front_matter.error


def test_nesting_deeper_than_the_limit_is_refused_and_within_it_is_kept():
    def nested(depth: int) -> str:
        return "deep: " + "[" * depth + "1" + "]" * depth + "\n"

    assert front_matter_of(nested(MAX_FRONT_MATTER_DEPTH - 2)).error is None
    refused = front_matter_of(nested(MAX_FRONT_MATTER_DEPTH + 1))
    assert refused.data is None and f"deeper than {MAX_FRONT_MATTER_DEPTH} levels" in refused.error


# --------------------------------------------------------------------------------------------------
# Refusals keep safe loading and the document
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, words",
    [
        ("run: !!python/object/apply:os.system ['true']\n", "python/object/apply:os.system"),
        ("thing: !custom {a: 1}\n", "!custom"),
        ("day: 2024-13-45\n", "2024-13-45"),
        ("big: " + "9" * 5000 + "\n", "(5,000 characters)"),
        ("a: 1\n---\nb: 2\n", None),
    ],
    ids=["python-tag", "custom-tag-on-mapping", "impossible-date", "int-too-long", "closes-early"],
)
def test_refused_front_matter_is_one_line_with_the_reason_and_the_document_still_rebuilds(body, words):
    text = f"---\n{body}---\n# Heading\n\nBody text.\n"
    front_matter = parse_markdown(text).front_matter
    if words is None:  # the second "---" closes the front matter: the rest is markdown
        assert front_matter.data == {"a": 1}
    else:
        assert front_matter.data is None
        assert words in front_matter.error and "\n" not in front_matter.error and len(front_matter.error) < 400
        assert front_matter.error.startswith("yaml front matter could not be parsed: ")
    assert chunkline.reconstruct(chunk_markdown(text)) == text


@pytest.mark.parametrize("loader", ["libyaml", "pure-python"])
def test_front_matter_holding_a_surrogate_code_point_is_refused_and_the_text_still_chunks(monkeypatch, loader):
    if loader == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    text = "---\ntitle: Quay \ud800 report\n---\n# Quay report\n\nText.\n"
    front_matter = parse_markdown(text).front_matter
    assert front_matter.data is None and "surrogate code point (U+D800)" in front_matter.error
    assert chunkline.reconstruct(chunk_markdown(text)) == text


def test_the_odd_keys_corpus_file_loads_to_json_safe_data():
    data = parse_markdown(front_matter_odd_keys().decode("utf-8")).front_matter.data
    assert {"on", "2024", "yes", "2024-01-01", "null"} <= set(data)
    assert_json_safe(data)


# --------------------------------------------------------------------------------------------------
# Property: any generated YAML front matter
# --------------------------------------------------------------------------------------------------

_PLAIN_SCALARS = [
    "on",
    "off",
    "yes",
    "no",
    "y",
    "n",
    "true",
    "False",
    "null",
    "~",
    "2024",
    "-7",
    "0x1F",
    "0o17",
    "1_000",
    "1.5",
    "6.02e23",
    ".nan",
    ".inf",
    "-.inf",
    "2024-01-01",
    "2024-02-30",
    "2024-05-01 10:30:00",
    "12:30:45",
    "harbour",
    "tide gauge",
    "=",
    "café",
    "💡",
    "",
]
_TAGS = [
    "!!str ",
    "!!int ",
    "!!float ",
    "!!binary ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "!!pairs ",
    "!!map ",
    "!!seq ",
    "!custom ",
    "!!python/object:os.system ",
]


def yaml_double_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar, every character outside printable ASCII escaped."""
    escaped = []
    for character in text:
        if character in '"\\':
            escaped.append("\\" + character)
        elif " " <= character <= "~":
            escaped.append(character)
        elif ord(character) <= 0xFFFF:
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(f"\\U{ord(character):08x}")
    return '"' + "".join(escaped) + '"'


@st.composite
def yaml_values(draw, anchors: list[str], depth: int = 0) -> str:
    """A YAML flow value: a scalar (plain, quoted or escaped), a sequence or a mapping, with tags, anchors
    and aliases (to any anchor defined before, including one still open, or to none). ``anchors`` lists
    the anchors defined so far in the front matter (YAML loaders refuse a name defined twice)."""
    choice = draw(st.integers(0, 9 if depth < 4 else 4))
    if choice == 4 and anchors and draw(st.booleans()):
        return "*" + draw(st.sampled_from(anchors))
    prefix = draw(st.sampled_from(_TAGS)) if draw(st.integers(0, 5)) == 0 else ""
    if draw(st.integers(0, 4)) == 0:
        anchors.append(f"a{len(anchors)}")
        prefix = f"&{anchors[-1]} {prefix}"
    if choice <= 2:
        return prefix + (draw(st.sampled_from(_PLAIN_SCALARS)) or "''")
    if choice == 3:
        text = draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8))
        return prefix + yaml_double_quoted(text)
    if choice == 4:
        return prefix + '"\\u00e9\\x41\\t"'
    if choice <= 6:
        items = draw(st.lists(yaml_values(anchors, depth + 1), max_size=9))
        return prefix + "[" + ", ".join(items) + "]"
    pairs = draw(st.lists(st.tuples(yaml_keys(anchors, depth + 1), yaml_values(anchors, depth + 1)), max_size=4))
    return prefix + "{" + ", ".join(f"{key}: {value}" for key, value in pairs) + "}"


@st.composite
def yaml_keys(draw, anchors: list[str], depth: int) -> str:
    """A mapping key: mostly plain scalars YAML reads as other types, sometimes a merge key or a complex key."""
    kind = draw(st.integers(0, 40))
    if kind == 0:
        return "? " + draw(yaml_values(anchors, depth + 1))
    if kind == 1:
        return "<<"
    return draw(st.sampled_from(_PLAIN_SCALARS[:-1]))


@st.composite
def yaml_front_matter(draw) -> str:
    """A YAML front matter body: top-level keys each with a generated flow value."""
    anchors: list[str] = []
    lines = []
    for number in range(draw(st.integers(1, 6))):
        key = draw(yaml_keys(anchors, 0))
        if key.startswith("?"):
            key = f"key{number}"
        lines.append(f"{key}: {draw(yaml_values(anchors))}")
    return "\n".join(lines) + "\n"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(body=yaml_front_matter())
@pytest.mark.slow
def test_generated_yaml_front_matter_never_raises_and_is_json_safe_or_refused(body):
    text = f"---\n{body}---\n# Heading\n\nBody text.\n"
    document = parse_markdown(text)
    front_matter = document.front_matter
    if front_matter is not None:
        assert (front_matter.data is None) != (front_matter.error is None)
        if front_matter.data is not None:
            assert_json_safe(front_matter.data)
            assert all(isinstance(key, str) for key in front_matter.data)
        else:
            assert "\n" not in front_matter.error
    assert document.title is None or isinstance(document.title, str)
    assert chunkline.reconstruct(chunk_markdown(text)) == text


@settings(max_examples=200)
@given(number=st.floats(allow_nan=True, allow_infinity=True))
def test_every_float_is_json_safe(number):
    # YAML 1.1 floats have a dot and a signed exponent; its NaN and infinities are .nan and .inf.
    data = front_matter_of(f"value: {number:.17e}\n".replace("nan", ".nan").replace("inf", ".inf")).data
    assert_json_safe(data)
    if math.isfinite(number):
        assert data == {"value": number}


# --------------------------------------------------------------------------------------------------
# Front matter over the budget is chunked in time linear in its size
# --------------------------------------------------------------------------------------------------


def one_line_flow_list_front_matter(size_bytes: int) -> str:
    """A document whose YAML front matter is one flow list on one line, ``size_bytes`` long, then a body."""
    items = [f"sensor-{number:07d}" for number in range(size_bytes // 16)]
    return "---\ntags: [" + ", ".join(items) + "]\n---\n# Harbour sensors\n\nEvery sensor on the quay.\n"


def one_line_heading(size_bytes: int) -> str:
    """A document whose first heading is one line of ``size_bytes`` of words, then a paragraph."""
    words = [f"berth{number:06d}" for number in range(size_bytes // 12)]
    return "# " + " ".join(words) + "\n\nThe berths of the north quay.\n"


def best_seconds(function, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of ``function``: the machine's other work only ever adds time."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        timings.append(time.perf_counter() - started)
    return min(timings)


@pytest.mark.parametrize("document_of", [one_line_flow_list_front_matter, one_line_heading])
@pytest.mark.slow
def test_a_one_line_block_over_the_budget_is_chunked_in_linear_time(document_of):
    chunk_markdown("# Warm\n\nThe tokenizer and the parser are loaded.\n")
    small, large = document_of(150_000), document_of(600_000)
    for text in (small, large):
        chunks = chunk_markdown(text)
        assert chunkline.reconstruct(chunks) == text
        assert len(chunks) > 50
    ratio = best_seconds(lambda: chunk_markdown(large)) / best_seconds(lambda: chunk_markdown(small))
    # Four times the text: linear work takes about four times as long, quadratic work sixteen.
    assert ratio < 8, f"4x the text took {ratio:.1f}x the time"
