"""S3 end to end, against moto: markdown in a bucket is chunked into a dataset in the same bucket, the
corpus changes and the dataset is rebuilt, and both ``read_dataset`` and ``chunkline inspect`` read it back
with the rows a local run of the same files gives."""

from __future__ import annotations

import json

import fsspec
import pytest

from chunkline.dataset.publish import read_dataset

from .conftest import (
    NOT_UTF8,
    assert_only_published_objects,
    chunkline_cli,
    clean_environment,
    comparable_rows,
    corpus_files,
    edited_corpus,
    published_manifest,
    run,
)

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_a_corpus_in_s3_is_chunked_rebuilt_and_read_back_as_a_local_run_gives_it(s3_bucket, local_rows, tmp_path):
    files = corpus_files()
    s3_bucket.upload_corpus(files)
    options = s3_bucket.storage_options
    source, output = s3_bucket.url("docs/**/*.md"), s3_bucket.url("out/")

    summary = run([source], output, input_options=options, output_options=options)
    assert (summary.documents_ok, summary.documents_error) == (len(files) - 1, 1)
    first = published_manifest(s3_bucket, "out")
    assert comparable_rows(output, options) == local_rows(files)

    # doc_ids are paths relative to the glob's folder; source_uri opens the very object that was chunked.
    documents = read_dataset(output, "documents", storage_options=options).to_pylist()
    assert sorted(row["doc_id"] for row in documents) == sorted(files)
    for row in documents:
        assert row["source_uri"] == s3_bucket.url(f"docs/{row['doc_id']}")
        with fsspec.open(row["source_uri"], "rb", **options) as handle:
            assert handle.read() == files[row["doc_id"]]
    assert {row["doc_id"] for row in read_dataset(output, "chunks", storage_options=options).to_pylist()} == set(
        files
    ) - {NOT_UTF8}

    # A day of edits, then the rebuild in the same process (where s3fs still holds the first run's listing
    # of the edited objects): the new rows, and no object of the first run that nothing names.
    edited = edited_corpus(files)
    s3_bucket.upload_corpus(edited)
    run([source], output, input_options=options, output_options=options)
    second = published_manifest(s3_bucket, "out")
    assert second["run_id"] != first["run_id"]
    assert comparable_rows(output, options) == local_rows(edited)
    assert_only_published_objects(s3_bucket, "out", [first, second])

    # `chunkline inspect` in another process, with the credentials and endpoint in the standard variables.
    inspected = chunkline_cli(["inspect", output], clean_environment(**s3_bucket.environment), cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr.decode()
    report = inspected.stdout.decode()
    chunks = read_dataset(output, "chunks", storage_options=options)
    assert f"dataset {output}" in report
    assert f"documents: {len(edited) - 1} ok, 1 error, 0 skipped" in report
    assert f"chunks: {chunks.num_rows:,}, tokens {sum(chunks.column('token_count').to_pylist()):,}" in report
    assert NOT_UTF8 in report

    # ... and with them in a config file instead, as `chunkline run` takes them, and no variable set.
    config = tmp_path / "read-only.yaml"
    config.write_text(json.dumps({"output": {"storage_options": options}}))
    from_config = chunkline_cli(["inspect", output, "--config", str(config)], clean_environment(), cwd=tmp_path)
    assert from_config.returncode == 0, from_config.stderr.decode()
    assert from_config.stdout.decode().replace("\r", "") == report.replace("\r", "")
    for secret in (options["key"], options["secret"]):
        assert secret not in from_config.stdout.decode() + from_config.stderr.decode()
