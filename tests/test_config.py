"""``ChunkConfig``: defaults, validation with dotted paths, and layered loading (file < env < --set)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from chunkline import ChunkConfig, ConfigError, available_strategies, load_chunk_config

DEFAULT_YAML = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chunkline.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_equal_configs_default_yaml():
    from_file = load_chunk_config(DEFAULT_YAML, environ={})

    assert from_file == ChunkConfig()
    assert ChunkConfig.from_dict(yaml.safe_load(DEFAULT_YAML.read_text())["chunking"]) == ChunkConfig()
    assert (from_file.strategy, from_file.max_tokens, from_file.overlap_tokens) == ("headings", 512, 50)
    assert (from_file.tokenizer, from_file.tokenizer_file) == ("cl100k_base", None)
    assert (from_file.params.min_heading_level, from_file.params.max_heading_level) == (1, 6)
    assert from_file.params.sub_split == "boundaries"


def test_no_file_no_environment_gives_the_defaults():
    assert load_chunk_config(environ={}) == ChunkConfig()


def test_config_is_frozen():
    config = ChunkConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_tokens = 10  # type: ignore[misc]


def test_to_dict_round_trips():
    config = ChunkConfig.from_dict({"max_tokens": 300, "headings": {"max_heading_level": 2, "sub_split": "window"}})
    assert ChunkConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["headings"] == {"min_heading_level": 1, "max_heading_level": 2, "sub_split": "window"}


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"max_tokens": 100, "overlap_tokens": 100}, "chunking.overlap_tokens"),
        ({"max_tokens": 100, "overlap_tokens": 250}, "chunking.overlap_tokens"),
        ({"overlap_tokens": -1}, "chunking.overlap_tokens"),
        ({"max_tokens": 0, "overlap_tokens": 0}, "chunking.max_tokens"),
        ({"max_tokens": "many"}, "chunking.max_tokens"),
        ({"max_tokens": True}, "chunking.max_tokens"),
        ({"max_tokens": 12.5}, "chunking.max_tokens"),
        ({"headings": {"max_heading_level": 7}}, "max_heading_level"),
        ({"headings": {"min_heading_level": 0}}, "min_heading_level"),
        ({"headings": {"min_heading_level": 4, "max_heading_level": 2}}, "greater than"),
        ({"headings": {"sub_split": "sliding"}}, "chunking.headings.sub_split"),
        ({"headings": {"max_heading_lvl": 3}}, "chunking.headings.max_heading_lvl"),
        ({"max_tokns": 3}, "chunking.max_tokns"),
        ({"tokenizer": ""}, "chunking.tokenizer"),
    ],
)
def test_invalid_settings_are_refused_with_their_dotted_path(data, fragment):
    with pytest.raises(ConfigError) as raised:
        ChunkConfig.from_dict(data)
    assert fragment in str(raised.value)


def test_heading_level_errors_name_the_strategy_section():
    with pytest.raises(ConfigError, match=r"chunking\.headings"):
        ChunkConfig.from_dict({"headings": {"max_heading_level": 9}})


def test_unknown_key_names_the_known_ones():
    with pytest.raises(ConfigError) as raised:
        ChunkConfig.from_dict({"headings": {"max_heading_lvl": 3}})
    assert "max_heading_level" in str(raised.value) and "min_heading_level" in str(raised.value)


def test_unknown_strategy_lists_the_available_ones():
    with pytest.raises(ConfigError) as raised:
        ChunkConfig(strategy="paragraphz")
    message = str(raised.value)
    assert "'paragraphz'" in message
    assert "headings" in message
    assert all(name in message for name in available_strategies())


def test_direct_construction_validates_too():
    with pytest.raises(ConfigError, match="overlap_tokens"):
        ChunkConfig(max_tokens=50, overlap_tokens=50)
    with pytest.raises(ConfigError, match="max_tokens"):
        ChunkConfig(max_tokens=0, overlap_tokens=0)
    # One character can take 4 tokens, so a smaller budget could not be kept.
    with pytest.raises(ConfigError, match="max_tokens must be a whole number >= 4"):
        ChunkConfig(max_tokens=3, overlap_tokens=0)
    assert ChunkConfig(max_tokens=4, overlap_tokens=0).max_tokens == 4


# --------------------------------------------------------------------------------------------------
# layers: file < environment < --set
# --------------------------------------------------------------------------------------------------


def test_environment_overrides_like_mdvdb():
    config = load_chunk_config(
        environ={"CHUNKLINE_CHUNK_MAX_TOKENS": "1024", "CHUNKLINE_CHUNK_OVERLAP_TOKENS": "100", "PATH": "/bin"}
    )
    assert (config.max_tokens, config.overlap_tokens) == (1024, 100)


def test_nested_environment_override_with_double_underscore():
    config = load_chunk_config(environ={"CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LEVEL": "3"})
    assert config.params.max_heading_level == 3
    assert config.max_tokens == 512


def test_environment_values_are_validated():
    with pytest.raises(ConfigError, match="max_tokens"):
        load_chunk_config(environ={"CHUNKLINE_CHUNK_MAX_TOKENS": "lots"})
    with pytest.raises(ConfigError, match="chunking.headings.max_heading_lvl"):
        load_chunk_config(environ={"CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LVL": "3"})


def test_config_file_then_environment_then_overrides(tmp_path):
    path = write_config(
        tmp_path,
        "chunking:\n  max_tokens: 256\n  overlap_tokens: 20\n  headings:\n    max_heading_level: 4\n",
    )
    environ = {"CHUNKLINE_CHUNK_MAX_TOKENS": "1024", "CHUNKLINE_CHUNK_HEADINGS__MAX_HEADING_LEVEL": "3"}

    from_file = load_chunk_config(path, environ={})
    assert (from_file.max_tokens, from_file.overlap_tokens, from_file.params.max_heading_level) == (256, 20, 4)

    with_environment = load_chunk_config(path, environ=environ)
    assert (with_environment.max_tokens, with_environment.overlap_tokens) == (1024, 20)
    assert with_environment.params.max_heading_level == 3

    with_overrides = load_chunk_config(
        path,
        ["chunking.max_tokens=2048", "chunking.headings.max_heading_level=2", "overlap_tokens=64"],
        environ=environ,
    )
    assert (with_overrides.max_tokens, with_overrides.overlap_tokens) == (2048, 64)
    assert with_overrides.params.max_heading_level == 2
    assert with_overrides.params.min_heading_level == 1


def test_set_overrides_are_converted_by_their_settings_types():
    config = load_chunk_config(
        overrides=["max_tokens=300", "tokenizer_file=null", "chunking.headings.sub_split=window"], environ={}
    )
    assert config.max_tokens == 300 and config.tokenizer_file is None and config.params.sub_split == "window"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["max_tokens"], "key=value"),
        (["pipeline.workers=3"], "unknown section 'pipeline'"),
        (["chunking.headings.max_heading_lvl=2"], "chunking.headings.max_heading_lvl"),
    ],
)
def test_bad_overrides_are_refused(overrides, fragment):
    with pytest.raises(ConfigError) as raised:
        load_chunk_config(overrides=overrides, environ={})
    assert fragment in str(raised.value)


def test_config_file_with_unknown_section_is_refused(tmp_path):
    path = write_config(tmp_path, "chunkng:\n  max_tokens: 100\n")
    with pytest.raises(ConfigError, match="chunkng"):
        load_chunk_config(path, environ={})


def test_config_file_sections_for_the_pipeline_are_allowed(tmp_path):
    path = write_config(tmp_path, "chunking:\n  max_tokens: 100\n  overlap_tokens: 10\noutput:\n  url: memory://out\n")
    assert load_chunk_config(path, environ={}).max_tokens == 100


def test_config_file_that_is_not_a_mapping_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        load_chunk_config(write_config(tmp_path, "- max_tokens\n- 100\n"), environ={})


def test_yaml_python_tags_in_a_config_file_are_refused_and_not_run(tmp_path):
    marker = tmp_path / "executed"
    path = write_config(tmp_path, f'chunking:\n  max_tokens: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(ConfigError):
        load_chunk_config(path, environ={})
    assert not marker.exists()


def test_run_defaults_equal_configs_default_yaml():
    from chunkline.dataset.settings import InputConfig, OutputConfig, RunSettings, load_run_config

    config = load_run_config(DEFAULT_YAML, environ={}, inputs=["docs"], output="out")
    assert dataclasses.replace(config.input, paths=()) == InputConfig()
    assert dataclasses.replace(config.output, url=None) == OutputConfig()
    assert config.run == RunSettings()
    assert (config.output.row_group_rows, config.output.row_group_bytes) == (65_536, 16_000_000)


def test_the_row_group_byte_cap_decides_the_part_files_and_so_the_rebuild_fingerprint():
    from chunkline.dataset.rebuild import rebuild_fingerprint
    from chunkline.dataset.settings import load_run_config

    def fingerprint(*overrides: str) -> str:
        return rebuild_fingerprint(load_run_config(None, list(overrides), {}, inputs=["docs"], output="out"))

    assert fingerprint() == fingerprint("output.row_group_bytes=16000000")
    assert fingerprint() != fingerprint("output.row_group_bytes=8000000")
    manifest = load_run_config(None, ["output.row_group_bytes=8000000"], {}, inputs=["docs"], output="out")
    assert manifest.to_public_dict()["output"]["row_group_bytes"] == 8_000_000


def test_how_parts_are_encoded_is_in_the_rebuild_fingerprint(monkeypatch):
    """Parts of other writer settings hold the same rows in other bytes: a snapshot written with them is
    rebuilt, not carried over from, so that every part is what a full rebuild writes."""
    from chunkline.dataset import rebuild
    from chunkline.dataset.settings import load_run_config

    config = load_run_config(None, [], {}, inputs=["docs"], output="out")
    now = rebuild.rebuild_fingerprint(config)
    monkeypatch.setattr(rebuild, "PART_ENCODING", "dictionary-everywhere")
    assert rebuild.rebuild_fingerprint(config) != now
