"""Values that arrive as text (``--set``, environment variables) keep the declared type of their setting,
config files fail with one message naming the file, and YAML errors never quote the text they are about."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkline import ChunkConfig, ConfigError, load_chunk_config
from chunkline.dataset.settings import load_run_config
from chunkline.settings import read_yaml_mapping

SECRET = "hunter2-Secret-83b1"


def run_config(*overrides: str, environ: dict[str, str] | None = None, config_file=None):
    return load_run_config(config_file, list(overrides), environ or {}, inputs=["docs"], output="memory://out")


# --------------------------------------------------------------------------------------------------
# storage options stay text
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "0123",
        "12:30:45",
        "0x1F",
        "1e3",
        "true",
        "null",
        "~",
        "[a, b]",
        "{a: 1}",
        "-.inf",
        "0o17",
        "2024-05-01",
        "  spaced ",
    ],
)
def test_a_storage_option_from_set_is_the_text_as_given(raw):
    config = run_config(f"output.storage_options.password={raw}", f"input.storage_options.client_kwargs.region={raw}")
    assert config.output.storage_options == {"password": raw}
    assert config.input.storage_options == {"client_kwargs": {"region": raw}}
    assert type(config.output.storage_options["password"]) is str


def test_a_storage_option_from_the_environment_is_the_text_as_given():
    config = run_config(
        environ={"CHUNKLINE_OUTPUT_STORAGE_OPTIONS__TOKEN": "12:30:45", "CHUNKLINE_INPUT_STORAGE_OPTIONS__KEY": "0123"}
    )
    assert config.output.storage_options == {"token": "12:30:45"}
    assert config.input.storage_options == {"key": "0123"}


def test_an_explicit_mapping_for_the_whole_option_set_is_typed_as_yaml():
    config = run_config("input.storage_options={anon: true, max_concurrency: 4, key: '0123'}")
    assert config.input.storage_options == {"anon": True, "max_concurrency": 4, "key": "0123"}


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60))
def test_any_text_set_as_a_storage_option_round_trips_unchanged(value):
    config = run_config(f"output.storage_options.secret={value}", "input.storage_options.a.b=" + value)
    assert config.output.storage_options["secret"] == value
    assert config.input.storage_options["a"]["b"] == value


# --------------------------------------------------------------------------------------------------
# typed settings are converted by their type
# --------------------------------------------------------------------------------------------------


def test_text_is_converted_by_the_type_of_each_setting():
    config = run_config(
        "max_tokens=0300",  # an int setting: decimal, not YAML's octal 192
        "tokenizer_file=none",
        "section_pattern=^(SECTION \\d+): (.+)$",
        "input.extensions=[.md, .txt]",
        "input.exclude=[*.tmp, drafts/*]",
        "input.include=guide/*",
        "input.encoding_errors=replace",
        "output.compression=ZSTD",
        "run.fail_on_error=yes",
        "run.reindex=off",
        "chunking.strategy=regex",
        "chunking.regex.pattern=^12:30",
        "chunking.regex.timeout_seconds=2",
    )
    assert config.chunking.max_tokens == 300
    assert config.chunking.tokenizer_file is None
    assert config.chunking.section_pattern == "^(SECTION \\d+): (.+)$"
    assert config.input.extensions == (".md", ".txt")
    assert config.input.exclude == ("*.tmp", "drafts/*")
    assert config.input.include == ("guide/*",)
    assert config.input.encoding_errors == "replace"
    assert (config.run.fail_on_error, config.run.reindex) == (True, False)
    assert config.chunking.params.pattern == "^12:30"  # YAML would read 12:30 as the number 750
    assert config.chunking.params.timeout_seconds == 2.0 and type(config.chunking.params.timeout_seconds) is float


@given(st.integers(min_value=51, max_value=2**31 - 1), st.sampled_from(["{}", "+{}", " {} ", "0{}"]))
def test_a_whole_number_given_as_text_is_that_number(number, spelling):
    assert run_config("max_tokens=" + spelling.format(number)).chunking.max_tokens == number


@given(st.sampled_from(["true", "True", "YES", "on", "1"]), st.sampled_from(["false", "No", "OFF", "0"]))
def test_every_spelling_of_a_flag_is_read_by_its_type(true_word, false_word):
    config = run_config(f"run.fail_on_error={true_word}", f"run.reindex={false_word}")
    assert config.run.fail_on_error is True and config.run.reindex is False


def test_list_items_given_as_text_stay_text():
    config = run_config("input.include=[0123, 12:30, 'a,b']")
    assert config.input.include == ("0123", "12:30", "a,b")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("max_tokens=1e3", "chunking.max_tokens: expected a whole number, got '1e3'"),
        ("max_tokens=", "chunking.max_tokens: expected a whole number"),
        ("run.fail_on_error=maybe", "run.fail_on_error: expected true or false, got 'maybe'"),
        ("chunking.regex.timeout_seconds=soon", "chunking.regex.timeout_seconds: expected a number, got 'soon'"),
        ("input.encoding_errors=ignore", "input.encoding_errors: 'ignore' is not one of 'strict', 'replace'"),
        ("headings=3", "chunking.headings is a group of settings: set one of them with chunking.headings.NAME=VALUE"),
    ],
)
def test_text_that_does_not_fit_the_setting_is_refused_naming_it(override, message):
    with pytest.raises(ConfigError) as raised:
        run_config("chunking.regex.pattern=^#", override)  # the regex section's required pattern, checked first
    assert message in str(raised.value)


def test_environment_values_are_converted_by_type_too():
    config = run_config(environ={"CHUNKLINE_RUN_FAIL_ON_ERROR": "true", "CHUNKLINE_OUTPUT_SHARDS": "016"})
    assert config.run.fail_on_error is True and config.output.shards == 16


def test_a_yaml_string_in_a_file_is_still_not_a_number(tmp_path):
    path = tmp_path / "chunkline.yaml"
    path.write_text('chunking:\n  max_tokens: "512"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="chunking.max_tokens: expected a whole number"):
        load_chunk_config(path, environ={})


# --------------------------------------------------------------------------------------------------
# secrets stay out of messages
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        f"{{password: {SECRET}: x}}",
        f"{{password: '{SECRET}}}",
        f"{{password: *{SECRET}}}",
        f'{{password: "{SECRET}\\q"}}',
        SECRET,
        f"[{SECRET}]",
    ],
)
def test_a_malformed_storage_option_set_names_the_key_only(value):
    with pytest.raises(ConfigError) as raised:
        run_config(f"output.storage_options={value}")
    message = str(raised.value)
    assert message.startswith("output.storage_options")
    assert SECRET not in message and "hunter2" not in message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f"output:\n  storage_options:\n    password: {SECRET}: x\n", "line 3, column"),
        (f"output:\n  storage_options:\n    password: *{SECRET}\n", "line 3, column 15"),
        (f'output:\n  storage_options: {{password: "{SECRET}\n', "line 3, column 1"),
        (f'output:\n  storage_options:\n    password: "{SECRET}\\q"\n', "line 3, column"),
        (f"output:\n  storage_options:\n    password: !{SECRET} x\n", "line 3, column 15"),
        (f"output:\n  storage_options:\n    password: {SECRET}\t: x\n\tkey: 1\n", "line"),
    ],
)
def test_a_yaml_error_in_a_config_file_names_the_place_but_not_the_text(tmp_path, text, where):
    path = tmp_path / "chunkline.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        read_yaml_mapping(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: not valid YAML (") and where in message
    assert "hunter2" not in message and "\n" not in message


def test_a_set_without_an_equals_sign_is_not_echoed():
    with pytest.raises(ConfigError) as raised:
        run_config(f"output.storage_options.password:{SECRET}")
    assert "key=value" in str(raised.value) and SECRET not in str(raised.value)


# --------------------------------------------------------------------------------------------------
# config files
# --------------------------------------------------------------------------------------------------


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"config file .*nowhere.yaml does not exist"):
        load_chunk_config(tmp_path / "nowhere.yaml", environ={})


def test_a_folder_as_config_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a folder; --config takes a YAML file"):
        load_chunk_config(tmp_path, environ={})


def test_a_config_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("chunking:\n  strategy: t\xeate\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml is not UTF-8 text \(byte 23\); save it as UTF-8"):
        load_chunk_config(path, environ={})


def test_an_endless_config_file_is_refused_without_reading_it_all():
    with pytest.raises(ConfigError, match="/dev/zero is over 1,000,000 bytes"):
        read_yaml_mapping("/dev/zero")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_a_config_file_that_is_not_a_mapping_is_refused(tmp_path, text):
    path = tmp_path / "chunkline.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load_run_config(path, [], {}, inputs=["docs"], output="memory://out")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("chunking: 5\n", "chunkline.yaml: chunking: expected a mapping, got int"),
        ("output: [a]\n", "chunkline.yaml: output: expected a mapping, got list"),
        ("output:\n  1: x\n  shards: 2\n  z: 3\n", "unknown setting output.1"),
        ("1: x\nchunking: {}\n", "unknown section 1"),
    ],
)
def test_sections_that_are_not_mappings_or_have_odd_keys_are_refused(tmp_path, text, message):
    path = tmp_path / "chunkline.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_run_config(path, [], {}, inputs=["docs"], output="memory://out")
    assert message in str(raised.value)


def test_chunk_config_from_a_non_mapping_is_a_config_error():
    with pytest.raises(ConfigError, match="chunking: expected a mapping"):
        ChunkConfig.from_dict(["max_tokens"])  # type: ignore[arg-type]


def test_every_printable_character_is_a_valid_storage_option_character():
    # A control beside the property test: characters YAML treats specially, one by one.
    for character in string.printable:
        value = f"a{character}b"
        assert run_config(f"output.storage_options.secret={value}").output.storage_options["secret"] == value


# --------------------------------------------------------------------------------------------------
# numeric settings are bounded to what works
# --------------------------------------------------------------------------------------------------

HUGE = 10**21

BOUNDED_SETTINGS = {
    "input.max_file_bytes": (f"input.max_file_bytes={HUGE}", "max_file_bytes must be a whole number from 1 to 2,147,"),
    "output.row_group_rows": (f"output.row_group_rows={HUGE}", "row_group_rows must be a whole number from 1 to"),
    "output.row_group_bytes": (f"output.row_group_bytes={HUGE}", "row_group_bytes must be a whole number from 1 to"),
    "output.row_group_bytes=0": ("output.row_group_bytes=0", "row_group_bytes must be a whole number from 1 to"),
    "output.keep": (f"output.keep={HUGE}", "keep must be a whole number from 1 to"),
    "output.lock_expiry_seconds": (f"output.lock_expiry_seconds={HUGE}", "lock_expiry_seconds must be a whole number"),
    "output.shards": ("output.shards=10001", "shards must be a whole number from 1 to 10,000"),
    "run.workers": ("run.workers=100000", "workers must be a whole number from 0 to 256"),
    "run.in_process_max_documents": (f"run.in_process_max_documents={HUGE}", "in_process_max_documents must be"),
    "chunking.max_tokens": (f"max_tokens={HUGE}", "chunking.max_tokens must be at most 2,147,483,647"),
    "chunking.regex.timeout_seconds=inf": ("chunking.regex.timeout_seconds=inf", "timeout_seconds must be"),
    "chunking.regex.timeout_seconds=nan": ("chunking.regex.timeout_seconds=nan", "timeout_seconds must be"),
    "chunking.regex.timeout_seconds=1e15": ("chunking.regex.timeout_seconds=1e15", "at most 86400"),
    "chunking.sections.timeout_seconds": ("chunking.sections.timeout_seconds=inf", "timeout_seconds must be"),
    "chunking.scored.max_chars": (f"chunking.scored.max_chars={HUGE}", "max_chars must be a whole number from 1"),
    "chunking.scored.window_chars": (f"chunking.scored.window_chars={HUGE}", "window_chars must be"),
    "chunking.scored.decay": ("chunking.scored.decay=nan", "decay must be a number from 0 to 1"),
    "chunking.blocks.max_bytes": (f"chunking.blocks.max_bytes={HUGE}", "max_bytes must be a whole number from 1"),
    "chunking.sentences.overlap": (f"chunking.sentences.overlap={HUGE}", "overlap must be a whole number of sentences"),
    "chunking.code.overlap": (f"chunking.code.overlap={HUGE}", "overlap must be a whole number of lines"),
    "chunking.sections.overlap": (f"chunking.sections.overlap={HUGE}", "overlap must be a whole number of sections"),
}


@pytest.mark.parametrize(("override", "message"), BOUNDED_SETTINGS.values(), ids=BOUNDED_SETTINGS.keys())
def test_numeric_settings_out_of_their_working_range_are_refused_when_loaded(override, message):
    with pytest.raises(ConfigError) as raised:
        run_config("chunking.regex.pattern=^#", override)
    assert message in str(raised.value)


def test_numeric_settings_at_their_bounds_are_accepted():
    config = run_config(
        "input.max_file_bytes=2147483647",
        "output.row_group_rows=2147483647",
        "output.row_group_bytes=2147483647",
        "output.shards=10000",
        "run.workers=256",
        "max_tokens=2147483647",
        "chunking.strategy=regex",
        "chunking.regex.pattern=^#",
        "chunking.regex.timeout_seconds=86400",
    )
    assert (config.input.max_file_bytes, config.output.row_group_rows) == (2**31 - 1, 2**31 - 1)
    assert config.output.row_group_bytes == 2**31 - 1
    assert (config.output.shards, config.run.workers, config.chunking.max_tokens) == (10_000, 256, 2**31 - 1)
    assert config.chunking.params.timeout_seconds == 86_400.0


@pytest.mark.parametrize("codec", ["bogus", "lzo", "bz2", "lz4_frame", "uncompressed"])
def test_a_compression_parquet_cannot_write_is_refused_when_loaded(codec):
    with pytest.raises(ConfigError, match=f"compression must be one of none, snappy, .*got '{codec}'"):
        run_config(f"output.compression={codec}")


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "brotli", "lz4", "lz4_raw", "zstd", "ZSTD"])
def test_every_parquet_codec_pyarrow_has_is_accepted(codec, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert run_config(f"output.compression={codec}").output.compression == codec
    pq.write_table(pa.table({"a": [1]}), tmp_path / "a.parquet", compression=codec)  # and pyarrow writes it


# --------------------------------------------------------------------------------------------------
# a key given twice
# --------------------------------------------------------------------------------------------------

#: Config files that give one key twice in one mapping, at each depth, with (key, first line, second line).
DUPLICATE_KEYS = {
    "section": (
        "chunking:\n  max_tokens: 256\noutput:\n  shards: 2\nchunking:\n  strategy: sections\n",
        "chunking",
        1,
        5,
    ),
    "chunking-setting": (
        "chunking:\n  max_tokens: 256\n  strategy: headings\n  max_tokens: 1024\n",
        "max_tokens",
        2,
        4,
    ),
    "strategy-parameter": (
        "chunking:\n  headings:\n    max_heading_level: 2\n    min_heading_level: 1\n    max_heading_level: 3\n",
        "max_heading_level",
        3,
        5,
    ),
    "storage-option": (
        f"output:\n  storage_options:\n    key: {SECRET}\n    anon: false\n    key: other\n",
        "key",
        3,
        5,
    ),
    "quoted-and-plain": ("chunking:\n  'max_tokens': 256\n  \"max_tokens\": 512\n", "max_tokens", 2, 3),
    "flow-mapping": ("chunking: {max_tokens: 256, overlap_tokens: 0, max_tokens: 512}\n", "max_tokens", 1, 1),
    "mapping-in-a-list": ("input:\n  paths:\n    - {url: a, url: b}\n", "url", 3, 3),
}


@pytest.mark.parametrize(("text", "key", "first", "second"), DUPLICATE_KEYS.values(), ids=DUPLICATE_KEYS.keys())
def test_a_key_given_twice_in_a_config_file_is_refused_naming_it_and_both_lines(tmp_path, text, key, first, second):
    path = tmp_path / "chunkline.yaml"
    path.write_text(text, encoding="utf-8")
    expected = f"{path}: the key {key!r} is given twice in one mapping (lines {first} and {second}); keep one"
    for load in (
        lambda: read_yaml_mapping(path),
        lambda: load_chunk_config(path, environ={}),
        lambda: run_config(config_file=path),
    ):
        with pytest.raises(ConfigError) as raised:
            load()
        assert str(raised.value) == expected
        assert SECRET not in str(raised.value)


def test_a_key_a_merge_brings_in_may_be_overridden(tmp_path):
    path = tmp_path / "chunkline.yaml"
    path.write_text("chunking:\n  <<: {max_tokens: 128, overlap_tokens: 8}\n  max_tokens: 256\n", encoding="utf-8")
    assert load_chunk_config(path, environ={}) == ChunkConfig(max_tokens=256, overlap_tokens=8)


def test_a_key_given_twice_in_a_storage_options_set_is_refused_without_its_value():
    with pytest.raises(ConfigError) as raised:
        run_config(f"output.storage_options={{key: {SECRET}, key: other}}")
    assert str(raised.value) == "output.storage_options: the key 'key' is given twice; keep one"
