"""Azure Blob Storage end to end, against Azurite: markdown in a container is chunked into a dataset in the
same container through ``az://`` URLs, rebuilt through ``abfs://`` URLs (adlfs's other name for the same
objects), and read back with ``read_dataset`` and ``chunkline inspect`` with the rows a local run of the
same files gives."""

from __future__ import annotations

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
def test_a_corpus_in_azure_is_chunked_rebuilt_and_read_back_as_a_local_run_gives_it(
    azure_container, local_rows, tmp_path
):
    files = corpus_files()
    azure_container.upload_corpus(files)
    options = azure_container.storage_options
    output = azure_container.url("out/")

    summary = run([azure_container.url("docs/**/*.md")], output, input_options=options, output_options=options)
    assert (summary.documents_ok, summary.documents_error) == (len(files) - 1, 1)
    first = published_manifest(azure_container, "out")
    assert comparable_rows(output, options) == local_rows(files)

    # doc_ids are paths relative to the glob's folder; source_uri opens the very blob that was chunked.
    documents = read_dataset(output, "documents", storage_options=options).to_pylist()
    assert sorted(row["doc_id"] for row in documents) == sorted(files)
    for row in documents:
        assert row["source_uri"].split("://", 1)[1] == f"{azure_container.container}/docs/{row['doc_id']}"
        with fsspec.open(row["source_uri"], "rb", **options) as handle:
            assert handle.read() == files[row["doc_id"]]

    # The rebuild goes through abfs:// URLs: the same blobs, so the same dataset is rebuilt in place.
    edited = edited_corpus(files)
    azure_container.upload_corpus(edited)
    abfs_output = azure_container.url("out/", protocol="abfs")
    run(
        [azure_container.url("docs/**/*.md", protocol="abfs")],
        abfs_output,
        input_options=options,
        output_options=options,
    )
    second = published_manifest(azure_container, "out")
    assert second["run_id"] != first["run_id"]
    assert comparable_rows(output, options) == local_rows(edited)
    assert comparable_rows(abfs_output, options) == local_rows(edited)
    assert_only_published_objects(azure_container, "out", [first, second])

    # `chunkline inspect` in another process, with the connection string in the standard variable.
    inspected = chunkline_cli(["inspect", output], clean_environment(**azure_container.environment), cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr.decode()
    report = inspected.stdout.decode()
    chunks = read_dataset(output, "chunks", storage_options=options)
    assert f"documents: {len(edited) - 1} ok, 1 error, 0 skipped" in report
    assert f"chunks: {chunks.num_rows:,}, tokens {sum(chunks.column('token_count').to_pylist()):,}" in report
    assert NOT_UTF8 in report
