"""What a rerun asks S3 for: an unchanged corpus of thousands of objects is listed, never downloaded.

The S3 listing gives each object's size, ETag and LastModified; a rerun compares them with what the
previous snapshot's ``documents`` table recorded and downloads (GetObject) only the objects whose listing
moved. Every request chunkline makes through s3fs is counted by wrapping ``S3FileSystem._call_s3``. The
corpus is :data:`OBJECTS` small documents; ``CHUNKLINE_RERUN_OBJECTS=10000`` sets another count (the time
limit grows with it).
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import s3fs

from chunkline.dataset.publish import read_dataset

from .conftest import run

OBJECTS = int(os.environ.get("CHUNKLINE_RERUN_OBJECTS", "1000"))

pytestmark = pytest.mark.timeout(max(900, OBJECTS // 2))
EDITED = "topic-07/note-00007.md"


def synthetic_corpus(count: int) -> dict[str, bytes]:
    """``count`` short markdown notes in 50 folders."""
    return {
        f"topic-{index % 50:02d}/note-{index:05d}.md": (
            f"# Note {index}\n\n## Reading\n\nThe gauge at berth {index % 7} read {400 + index % 90} cm.\n"
            f"\n## Action\n\nLog it in the harbour book, page {index // 50}.\n"
        ).encode()
        for index in range(count)
    }


class S3Calls:
    """Every s3fs call of this process: (method, key)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def gets(self, prefix: str = "") -> list[str]:
        return [key for method, key in self.calls if method == "get_object" and key.startswith(prefix)]

    def methods(self) -> Counter:
        return Counter(method for method, _ in self.calls)


@pytest.fixture
def s3_calls(monkeypatch) -> S3Calls:
    calls = S3Calls()
    real_call = s3fs.S3FileSystem._call_s3

    async def counting_call(self, method, *args, **kwargs):
        calls.calls.append((method, kwargs.get("Key", "")))
        return await real_call(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counting_call)
    return calls


def kind_of(key: str) -> str:
    """What a dataset object is: a manifest, a part, the run's own staged plan, or another named file."""
    name = key.rsplit("/", 1)[-1]
    if name == "_manifest.json":
        return "manifest"
    if name.startswith("part-") and name.endswith(".parquet"):
        return "part"
    if name.startswith("keep-") and "/_staging/" in f"/{key}":
        return "run plan"
    return name


def upload(store, files: dict[str, bytes], prefix: str) -> None:
    client = store.client()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(
                lambda item: client.put_object(Bucket=store.container, Key=f"{prefix}/{item[0]}", Body=item[1]),
                files.items(),
            )
        )


@pytest.mark.slow
def test_an_unchanged_rerun_of_thousands_of_objects_gets_the_manifest_and_parts_only(s3_bucket, s3_calls):
    files = synthetic_corpus(OBJECTS)
    upload(s3_bucket, files, "docs")
    options = s3_bucket.storage_options

    def rerun():
        return run(
            [s3_bucket.url("docs")],
            s3_bucket.url("dataset"),
            input_options=options,
            output_options=options,
        )

    first = rerun()
    assert first.documents_ok == OBJECTS
    assert len(s3_calls.gets("docs/")) == OBJECTS
    s3_calls.calls.clear()

    second = rerun()
    assert second.rebuild["mode"] == "incremental"
    assert second.rebuild["documents_read_to_compare"] == 0 and second.rebuild["documents_carried_over"] == OBJECTS
    assert s3_calls.gets("docs/") == [], "an unchanged rerun downloaded a document"
    gets = s3_calls.gets()
    assert gets and all(key.startswith("dataset/") for key in gets)
    kinds = Counter(kind_of(key) for key in gets)
    assert set(kinds) <= {"manifest", "part", "run plan", "_SUCCESS", "_lock.json"}, gets
    parts = {key for key in gets if kind_of(key) == "part"}
    print(
        f"\n{OBJECTS} objects, unchanged rerun: {len(gets)} GETs {dict(kinds)} of {len(parts)} part files; "
        f"s3 calls {dict(s3_calls.methods())}"
    )
    s3_calls.calls.clear()

    upload(s3_bucket, {EDITED: files[EDITED] + b"\n## Follow-up\n\nChecked again at noon.\n"}, "docs")
    third = rerun()
    assert set(s3_calls.gets("docs/")) == {f"docs/{EDITED}"}
    assert third.rebuild["documents_read_to_compare"] == 1 and third.rebuild["documents_chunked"] == 1
    etags = {
        row["doc_id"]: row["source_etag"]
        for row in read_dataset(s3_bucket.url("dataset"), "documents", storage_options=options).to_pylist()
    }
    assert len(etags) == OBJECTS and all(etags.values())
