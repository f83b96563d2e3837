"""The flat ``key: value`` front-matter path gives exactly what PyYAML's safe loader gives, whenever it
accepts; it declines everything else, which the safe loader then reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from chunkline.front_matter import _load_yaml_safely, flat_yaml, load_front_matter

WORDS = [
    *("yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE"),
    *("on", "On", "ON", "off", "Off", "OFF", "y", "n", "Y", "N", "yEs", "tRUE", "oN"),
    *("null", "Null", "NULL", "nULL", "nulls", "~", "", "None", "none"),
    *("0", "-0", "+1", "007", "08", "0x1F", "0b101", "0o17", "1_000", "1.5", "1e3", "-1.0e+3", ".inf", ".NaN"),
    *("2024-01-02", "2024-01-02 10:00:00", "12:30", "190:20:30", "<<", "=", "-", "- x", "? x", "!x", "&a x", "*a"),
    *("Yes please", "on the road", "Null pointer", "True story", "a #b", "a#b", "a: b", "a:b", "x ", " x"),
    *("Rust's book", "C++ & C", "50% off", "email@example.com", "a=b", "a;b", "what?", "[a]", "{a: 1}", "|", ">"),
]
KEYS = ["title", "on", "yes", "null", "2024", "<<", "-a", "_private", "a-b", "a b", "'q'", '"q"', "Title", "x"]


def values() -> st.SearchStrategy[str]:
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
    tricky = st.text(alphabet="ab #:'\"-,[]{}&*!|>%@`?\\\t ~=.0123456789\u00a0\u0085\u2028\ufeffé", max_size=10)
    return st.one_of(
        st.sampled_from(WORDS),
        st.integers(-(10**20), 10**20).map(str),
        tricky,
        text,
        st.one_of(text, tricky).map(lambda value: f'"{value}"'),
        st.one_of(text, tricky).map(lambda value: f"'{value}'"),
    )


def lines() -> st.SearchStrategy[str]:
    keys = st.one_of(st.sampled_from(KEYS), st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,6}", fullmatch=True))
    separators = st.sampled_from([": ", ":  ", ":", ":\t", " : ", ": \t", ":   "])
    entry = st.builds(lambda key, separator, value: key + separator + value, keys, separators, values())
    other = st.sampled_from(["", "# a comment", "  nested: x", "- item", "---", "...", "title: a\r", "\ttab: x"])
    return st.one_of(entry, entry, entry, other)


@settings(max_examples=400, deadline=None)
@given(
    body=st.builds(
        lambda rows, end: "\n".join(rows) + end, st.lists(lines(), min_size=1, max_size=6), st.sampled_from(["", "\n"])
    )
)
@example(body="title: Getting started\nweight: 3\ndraft: false\n")
@example(body='title: "Install: step one"\nnav_order: -2\npublished: yes\nauthor: null\n')
@example(body="a: 1\na: 2\nb: x\n")
@pytest.mark.slow
def test_the_flat_path_gives_the_safe_loaders_mapping_whenever_it_accepts(body):
    flat = flat_yaml(body)
    if flat is None:
        return
    safe = _load_yaml_safely(body)  # raises (failing the test) if the flat path accepted what YAML refuses
    assert json.dumps(flat, sort_keys=False) == json.dumps(safe, sort_keys=False)  # types and order too


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "title: Getting started\nweight: 3\ndraft: false\n",
            {"title": "Getting started", "weight": 3, "draft": False},
        ),
        ('title: "Install: step one"\n', {"title": "Install: step one"}),
        ('title: \'Rust"s "book"\'\n', None),  # a quote of the other kind inside: declined
        ("on: push\nkey: Off\n", {"on": "push", "key": False}),
        ("a: 1\na: 2\n", {"a": 2}),
    ],
)
def test_common_front_matter_takes_the_flat_path(body, expected):
    assert flat_yaml(body) == expected
    if expected is not None:
        assert load_front_matter("yaml", body) == _load_yaml_safely(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "",
        "title: x\n  continued\n",
        "title: x # note\n",
        "date: 2024-01-02\n",
        "ratio: 1.5\n",
        "mode: 0755\n",
        "tags: [a, b]\n",
        "title: x\n- item\n",
        "title: |\n  text\n",
        'title: "a\\tb"\n',
        "title: x\r\n",
        "<<: {a: 1}\n",
        "anchor: &a x\nalias: *a\n",
    ],
)
def test_anything_else_is_left_to_the_safe_loader(body):
    assert flat_yaml(body) is None
