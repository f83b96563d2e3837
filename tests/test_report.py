"""``chunkline inspect URL --html FILE``: the one-file HTML report of a dataset.

The pipeline runs once on the repository's ``sample_corpus/`` and once on a copy of it with bad files added
(invalid UTF-8 under a file name holding ``<script>``, a binary file named ``.md``, and a large document
whose name matplotlib would read as TeX); the reports are checked against the datasets read back with
pandas.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.report import (
    build_html_report,
    chunks_per_document,
    heading_depth_counts,
    token_histogram_bins,
)
from chunkline.pipelines.run import run_pipeline

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = REPO / "sample_corpus"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A folder named "<script>alert(1)<" holding "script>.md" gives the doc_id "<script>alert(1)</script>.md":
# markup in a doc_id, including the "</script>" that would end the report's JSON block.
SCRIPT_DOC_ID = "<script>alert(1)</script>.md"
LATIN1 = "# Café notes\n\nReadings exported by a tool that wrote Latin-1.\n".encode("latin-1")
BINARY = PNG_SIGNATURE + bytes(range(256)) * 8
# Drawn as a chart label: matplotlib would parse "$\LaTeX$" as TeX and fail on the unknown command.
TEX_DOC_ID = "notes/$\\LaTeX$ tips.md"


def run(corpus: Path, output: Path) -> str:
    config = load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(output))
    run_pipeline(config)
    return str(output)


@pytest.fixture(scope="module")
def sample_dataset(tmp_path_factory) -> str:
    """The dataset of the repository's sample corpus, with default settings."""
    return run(SAMPLE_CORPUS, tmp_path_factory.mktemp("sample") / "out")


@pytest.fixture(scope="module")
def dataset_with_bad_files(tmp_path_factory) -> str:
    """The sample corpus plus two files that become error rows and the largest document, named in TeX."""
    base = tmp_path_factory.mktemp("bad-files")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    (corpus / "<script>alert(1)<").mkdir()
    (corpus / SCRIPT_DOC_ID).write_bytes(LATIN1)
    (corpus / "assets").mkdir()
    (corpus / "assets" / "logo.md").write_bytes(BINARY)
    (corpus / "notes").mkdir()
    largest = (SAMPLE_CORPUS / "reference" / "http-api.md").read_text(encoding="utf-8")
    (corpus / TEX_DOC_ID).write_text(largest + "\n## More\n\n" + largest, encoding="utf-8")
    return run(corpus, base / "out")


@pytest.fixture(scope="module")
def cli_report(dataset_with_bad_files, tmp_path_factory) -> tuple[subprocess.CompletedProcess, str]:
    """``chunkline inspect URL --html FILE`` run as its own process; its result and the page written."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    completed = subprocess.run(
        [sys.executable, "-m", "chunkline.pipelines.cli", "inspect", dataset_with_bad_files, "--html", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed, path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sample_report(sample_dataset) -> str:
    return build_html_report(sample_dataset)


@pytest.fixture(params=["sample", "bad-files"])
def report(request) -> tuple[str, str]:
    """(dataset URL, its report page) for the sample corpus, and for the corpus with bad files through the
    command line."""
    if request.param == "sample":
        return request.getfixturevalue("sample_dataset"), request.getfixturevalue("sample_report")
    return request.getfixturevalue("dataset_with_bad_files"), request.getfixturevalue("cli_report")[1]


def report_data(page: str) -> dict:
    found = re.findall(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.DOTALL)
    assert len(found) == 1
    return json.loads(found[0])


def embedded_images(page: str) -> list[tuple[bytes, int, int]]:
    """(PNG bytes, width, height) of every <img> of the page."""
    images = []
    for tag in re.findall(r"<img\b[^>]*>", page):
        source = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', tag)
        assert source, f"an image that is not an embedded PNG: {tag[:120]}"
        width, height = (int(re.search(rf'{side}="(\d+)"', tag).group(1)) for side in ("width", "height"))
        images.append((base64.b64decode(source.group(1), validate=True), width, height))
    return images


def png_chunk_types(data: bytes) -> list[bytes]:
    types, offset = [], len(PNG_SIGNATURE)
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        types.append(kind)
        offset += 12 + length
    return types


def table_rows(page: str, table_id: str) -> list[list[str]]:
    """The cells of every body row of ``<table id=table_id>``, unescaped."""
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.DOTALL).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.DOTALL)[1:]
    return [[html.unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)] for row in rows]


# --------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_inspect_html_prints_the_summary_and_writes_the_report_another_process_rebuilds_byte_for_byte(
    cli_report, dataset_with_bad_files
):
    completed, page = cli_report
    assert "documents: 13 ok, 2 error, 0 skipped" in completed.stdout
    assert completed.stdout.rstrip().endswith("report.html")
    # Same dataset, same page: the PNGs carry no time or software stamp and the style is fixed.
    assert build_html_report(dataset_with_bad_files) == page


# --------------------------------------------------------------------------------------------------
# One self-contained file
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_page_needs_nothing_from_outside(report):
    _, page = report
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    lowered = page.lower()
    for reference in ('src="http', "src='http", "<link", "url(", "@import", "<iframe"):
        assert reference not in lowered, reference
    assert re.findall(r"\ssrc=", page) and all(
        source.startswith("data:image/png;base64,") for source in re.findall(r'\ssrc="([^"]*)"', page)
    )
    # The only script is the inert JSON block of the report's numbers.
    assert re.findall(r"<script\b[^>]*>", lowered) == ['<script type="application/json" id="report-data">']


def test_every_image_is_a_png_that_decodes_to_its_stated_size(report):
    _, page = report
    images = embedded_images(page)
    assert len(images) == 4  # tokens per chunk, chunks per document, heading depth, largest documents
    for data, width, height in images:
        assert data.startswith(PNG_SIGNATURE)
        pixels = matplotlib.image.imread(io.BytesIO(data), format="png")
        assert pixels.shape[:2] == (height, width)
        assert pixels.std() > 0, "a blank image"
        # No text or time chunks: nothing in the file changes from one run to the next.
        assert not {b"tEXt", b"iTXt", b"zTXt", b"tIME"} & set(png_chunk_types(data))


# --------------------------------------------------------------------------------------------------
# The numbers match the dataset
# --------------------------------------------------------------------------------------------------


def test_token_histogram_counts_every_chunk_in_its_bin(report):
    url, page = report
    histogram = report_data(page)["token_histogram"]
    token_counts = read_dataset(url, "chunks", as_pandas=True)["token_count"]
    chunk_rows = read_manifest(url)["tables"]["chunks"]["rows"]
    assert sum(histogram["counts"]) == chunk_rows == len(token_counts) > 0
    edges = histogram["edges"]
    assert len(edges) == len(histogram["counts"]) + 1
    assert edges == sorted(set(edges))
    for low, high, count in zip(edges, edges[1:], histogram["counts"]):
        assert count == int(((token_counts >= low) & (token_counts < high)).sum())


def test_chunks_per_document_add_up_to_the_chunks(report):
    url, page = report
    distribution = report_data(page)["chunks_per_document"]
    chunks = read_dataset(url, "chunks", as_pandas=True)
    documents = read_dataset(url, "documents", as_pandas=True)
    expected = chunks["doc_id"].value_counts().value_counts().sort_index()
    assert distribution == {"chunks": expected.index.tolist(), "documents": expected.tolist()}
    assert sum(k * n for k, n in zip(distribution["chunks"], distribution["documents"])) == len(chunks)
    assert sum(distribution["documents"]) == int((documents["status"] == "ok").sum())


def test_heading_depth_counts_every_chunk_by_its_heading_path(report):
    url, page = report
    depth = report_data(page)["heading_depth"]
    depths = read_dataset(url, "chunks", as_pandas=True)["heading_path"].map(len)
    assert depth["depths"] == list(range(depths.max() + 1))
    assert depth["counts"] == [int((depths == level).sum()) for level in depth["depths"]]
    assert sum(depth["counts"]) == len(depths)


def test_largest_documents_are_the_documents_with_most_tokens(report):
    url, page = report
    documents = read_dataset(url, "documents", as_pandas=True)
    expected = documents.sort_values(["token_count", "size_bytes", "doc_id"], ascending=[False, False, True]).head(10)
    listed = table_rows(page, "largest-documents-table")
    assert [row[1] for row in listed] == expected["doc_id"].tolist()
    assert [int(row[4].replace(",", "")) for row in listed] == expected["token_count"].tolist()
    assert [int(row[6].replace(",", "")) for row in listed] == expected["size_bytes"].tolist()
    assert [row["doc_id"] for row in report_data(page)["largest_documents"]] == expected["doc_id"].tolist()


def test_summary_shows_the_counts_chunkline_inspect_prints(report):
    url, page = report
    summary = report_data(page)["summary"]
    manifest = read_manifest(url)
    chunks = read_dataset(url, "chunks", as_pandas=True)
    statuses = read_dataset(url, "documents", as_pandas=True)["status"].value_counts()
    assert summary["run_id"] == manifest["run_id"]
    assert summary["documents"] == {status: int(statuses.get(status, 0)) for status in ("ok", "error", "skipped")}
    assert summary["chunks"] == len(chunks) and summary["tokens"] == int(chunks["token_count"].sum())
    assert summary["tables"] == {
        table: {"rows": entry["rows"], "files": len(entry["files"])} for table, entry in manifest["tables"].items()
    }
    assert f"<b>{len(chunks):,}</b><span>chunks</span>" in page
    assert f"<b>{int(chunks['token_count'].sum()):,}</b><span>tokens</span>" in page
    assert html.escape(manifest["run_id"]) in page


# --------------------------------------------------------------------------------------------------
# Errors, escaped
# --------------------------------------------------------------------------------------------------


def test_error_table_lists_every_error_row_of_the_dataset(cli_report, dataset_with_bad_files):
    _, page = cli_report
    errors = read_dataset(dataset_with_bad_files, "errors", as_pandas=True)
    assert sorted(errors["doc_id"]) == ["<script>alert(1)</script>.md", "assets/logo.md"]
    expected = errors[["doc_id", "stage", "error_type", "message"]].values.tolist()
    assert table_rows(page, "errors-table") == expected
    assert report_data(page)["error_count"] == len(errors)
    assert "<h2>Errors (2)</h2>" in page


def test_markup_in_a_file_name_is_shown_as_text_never_run(cli_report):
    _, page = cli_report
    assert SCRIPT_DOC_ID not in page
    assert "<script>alert" not in page
    assert html.escape(SCRIPT_DOC_ID) in page
    # The JSON block reads back the doc_id exactly, though "</script>" could not appear in it as written.
    assert SCRIPT_DOC_ID in {row["doc_id"] for row in report_data(page)["errors"]}


def test_a_doc_id_with_tex_markup_is_charted_and_listed_as_written(cli_report):
    _, page = cli_report
    assert table_rows(page, "largest-documents-table")[0][1] == TEX_DOC_ID


def test_a_dataset_where_every_file_failed_still_gets_a_report(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "logo.md").write_bytes(BINARY)
    page = build_html_report(run(corpus, tmp_path / "out"))
    data = report_data(page)
    assert data["summary"]["chunks"] == 0 and data["summary"]["documents"]["error"] == 1
    assert data["token_histogram"] == {"edges": [], "counts": []}
    assert len(embedded_images(page)) == 4
    assert [row[0] for row in table_rows(page, "errors-table")] == ["logo.md"]


def test_a_dataset_without_errors_says_so(sample_report):
    assert "<h2>Errors (0)</h2>" in sample_report
    assert 'id="errors-table"' not in sample_report
    assert report_data(sample_report)["errors"] == []


# --------------------------------------------------------------------------------------------------
# The plain functions behind the charts
# --------------------------------------------------------------------------------------------------


def test_histogram_bins_are_half_open_and_cover_every_value():
    values = [3, 3, 4, 10, 12, 512]
    histogram = token_histogram_bins(values, bins=5)
    assert histogram["edges"][0] == 3 and histogram["edges"][-1] > 512
    assert sum(histogram["counts"]) == len(values)
    assert histogram["counts"][0] == 5 and histogram["counts"][-1] == 1
    assert token_histogram_bins([]) == {"edges": [], "counts": []}


def test_chunks_per_document_and_heading_depth_keep_missing_values_as_zero():
    assert chunks_per_document(["a", "a", "a", "b", "c", "c", "c"]) == {"chunks": [1, 3], "documents": [1, 2]}
    assert heading_depth_counts([0, 2, 2, 3]) == {"depths": [0, 1, 2, 3], "counts": [1, 0, 2, 1]}
    assert heading_depth_counts([]) == {"depths": [], "counts": []}
