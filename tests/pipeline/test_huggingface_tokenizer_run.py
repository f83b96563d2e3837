"""A pipeline run that counts with a Hugging Face tokenizer.json: the workers load it from the config, the
rows carry its counts, and changing the tokenizer rebuilds the dataset."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from .conftest import CORPUS, assert_document_chunks, manifest, rows_by_doc, run

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def wordpiece_file(tmp_path: Path) -> Path:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=800, special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tokenizer.train_from_iterator((data.decode("utf-8") for data in CORPUS.values()), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))],
    )
    path = tmp_path / "model" / "tokenizer.json"
    path.parent.mkdir()
    tokenizer.save(str(path))
    return path


@pytest.mark.slow
def test_a_run_counts_with_the_tokenizer_json_and_a_tokenizer_change_rebuilds(corpus, tmp_path, wordpiece_file):
    output = tmp_path / "out"
    digest = hashlib.sha256(wordpiece_file.read_bytes()).hexdigest()
    settings = ("tokenizer=huggingface", f"tokenizer_file={wordpiece_file}", "max_tokens=64", "overlap_tokens=8")
    run([corpus], output, *settings, f"tokenizer_sha256={digest}", "count_special_tokens=true")

    fresh = Tokenizer.from_file(str(wordpiece_file))
    chunks = rows_by_doc(output, "chunks")
    assert sorted(chunks) == sorted(CORPUS)
    for doc_id, chunk_rows in chunks.items():
        assert_document_chunks(chunk_rows, CORPUS[doc_id])
        for row in chunk_rows:
            if row["text"]:
                assert row["token_count"] == len(fresh.encode(row["text"]).ids), row["chunk_id"]  # [CLS] ... [SEP]
            assert row["token_count"] <= 64, row["chunk_id"]
    published = manifest(output)
    assert published["config"]["chunking"]["tokenizer"] == "huggingface"
    assert published["config"]["chunking"]["count_special_tokens"] is True

    summary = run([corpus], output, *settings)  # the same file, special tokens no longer counted
    assert summary.rebuild["mode"] == "full"
    assert "settings differ" in summary.rebuild["reason"]
    for chunk_rows in rows_by_doc(output, "chunks").values():
        for row in chunk_rows:
            if row["text"]:
                assert row["token_count"] == len(fresh.encode(row["text"], add_special_tokens=False).ids)


@pytest.mark.slow
def test_worker_processes_load_the_tokenizer_json_and_write_the_same_chunks(corpus, tmp_path, wordpiece_file):
    settings = (
        "tokenizer=huggingface",
        f"tokenizer_file={wordpiece_file}",
        "max_tokens=64",
        "count_special_tokens=true",
    )
    run([corpus], tmp_path / "in-process", *settings)
    summary = run([corpus], tmp_path / "workers", *settings, "run.workers=2")
    assert summary.documents_ok == len(CORPUS)
    in_process = rows_by_doc(tmp_path / "in-process", "chunks")
    workers = rows_by_doc(tmp_path / "workers", "chunks")
    assert {doc: [(r["text"], r["token_count"]) for r in chunk_rows] for doc, chunk_rows in workers.items()} == {
        doc: [(r["text"], r["token_count"]) for r in chunk_rows] for doc, chunk_rows in in_process.items()
    }
