"""Scale benchmark: many small documents, side by side in one run.

A corpus of ``--pages`` pages is generated from any folder of markdown (``generate_corpus``): the source
files are cut at their headings into sections, and the sections are laid end to end into pages of
``--min-bytes`` to ``--max-bytes`` bytes (a section longer than a page's room is cut at a line, or when
that would leave the page under its minimum, at a character), each page opening with a ``title`` front
matter (its first heading's text), spread over ``--fanout`` x ``--fanout`` folders. The same arguments
always give the same bytes; the corpus is written outside the repository (``--work``) and kept for the
next run of the benchmark.

Then, ``--runs`` rounds (medians reported; the order of the two full runs alternates):

* ``loop``: a Python loop reading each page and calling ``chunk_markdown`` (no output written);
* ``in-process``: ``chunkline run --workers 0`` as a whole process;
* ``default``: ``chunkline run`` as a user runs it (``run.workers: auto``); or with ``--runner dask``
  Beam's DaskRunner on a 2-process ``dask.distributed`` LocalCluster, whose dataset is checked to hold
  exactly the in-process run's rows and part files (byte for byte);
* ``rerun``: ``chunkline run`` again on the default run's output, unchanged, then with 1% of the pages
  edited (restored afterwards).
* ``driver``: only what ``chunkline run``'s driver does before the pipeline starts, in a fresh process with
  the command's imports and process tuning: list the pages, plan a full run, choose the workers and stage
  the listing; its peak (``VmHWM``), its steps' CPU seconds and the staged listing's SHA-256, which a
  change to how the driver holds its listing must leave as it was.

For each: wall seconds, documents per second, CPU seconds (user + system of the run's process and of every
worker it waited for; of the cluster's processes for Dask), CPU milliseconds per document, minor page
faults per document (of the same processes; not the cluster's), the peak resident set (``VmHWM``) of the driver and of its largest worker process (sampled from ``/proc`` every
0.2 s while the run lasts), the stage times the run logs (listing, planning, chunking, merge, publish;
with worker processes, chunking and merge share the pipeline's time) and the documents the run read
(each read of the file reader counted, in the run's own process: blank for a run on worker processes).

Usage::

    python benchmarks/bench_scale.py CORPUS [--pages 20000] [--fanout 32] [--min-bytes 1000]
        [--max-bytes 4000] [--runs 3] [--only loop,in-process,default,rerun,driver] [--runner default|dask]
        [--work DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KINDS = ("loop", "in-process", "default", "rerun", "driver")

# --------------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_PLAIN_TITLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ().,/_+-]*")


def source_sections(source: Path) -> list[str]:
    """The markdown files under ``source`` (sorted), cut before each ATX heading outside a fenced block."""
    sections: list[str] = []
    for path in sorted(p for p in source.rglob("*") if p.suffix in (".md", ".markdown") and p.is_file()):
        text = path.read_bytes().decode("utf-8", "replace").replace("\r\n", "\n")
        if text.startswith("---\n"):  # the source's own front matter: each page gets its own
            end = text.find("\n---\n", 4)
            text = text[end + 5 :] if end >= 0 else text
        current: list[str] = []
        fence = None
        for line in text.splitlines(keepends=True):
            opening = _FENCE.match(line)
            if fence is None and opening:
                fence = opening.group(1)[0]
            elif fence is not None and opening and opening.group(1)[0] == fence:
                fence = None
            elif fence is None and _HEADING.match(line) and current:
                sections.append("".join(current))
                current = []
            current.append(line)
        if current:
            sections.append("".join(current))
    sections = [section for section in sections if section.strip()]
    if not sections:
        raise SystemExit(f"no markdown under {source}")
    return sections


def _title(section: str, number: int) -> str:
    """The text of the section's first heading outside a fenced block, else ``Page <number>``."""
    fence = None
    for line in section.splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)[0]
        elif fence is not None and opening and opening.group(1)[0] == fence:
            fence = None
        elif fence is None and _HEADING.match(line):
            text = line.strip().lstrip("#").strip()
            if text:
                return text[:120]
    return f"Page {number}"


def _front_matter(title: str) -> str:
    # Most titles are plain YAML scalars; the others are written as JSON strings (valid YAML).
    plain = _PLAIN_TITLE.fullmatch(title) and not title.endswith(" ")
    value = title if plain else json.dumps(title, ensure_ascii=False)
    return f"---\ntitle: {value}\n---\n\n"


def _cut(text: str, room: int, at_line: bool) -> tuple[str, str]:
    """``text`` cut into (at most ``room`` UTF-8 bytes, the rest): after a line if ``at_line``, else at a
    character."""
    encoded = text.encode("utf-8")
    head = encoded[:room].decode("utf-8", "ignore")
    if at_line:
        newline = head.rfind("\n")
        if newline >= 0:
            head = head[: newline + 1]
    return head, text[len(head) :]


def page_folder(number: int, fanout: int) -> str:
    return f"d{number % fanout:03d}/e{(number // fanout) % fanout:03d}"


def generate_corpus(
    source: Path, into: Path, pages: int, fanout: int = 32, min_bytes: int = 1000, max_bytes: int = 4000, seed: int = 0
) -> list[Path]:
    """Write ``pages`` pages made of ``source``'s sections into ``into`` (see the module's docstring);
    returns their paths in order. Deterministic in its arguments."""
    if not 64 <= min_bytes <= max_bytes:
        raise ValueError("need 64 <= min_bytes <= max_bytes")
    sections = source_sections(source)
    rng = random.Random(seed)
    paths: list[Path] = []
    next_section = 0
    pending = ""
    pending_title = ""  # the title of the section ``pending`` is the rest of
    for number in range(pages):
        body = ""
        title = None
        target = rng.randint(min_bytes, max_bytes)
        front = ""
        while True:
            if title is None:
                # The title is that of the first piece on the page.
                title = pending_title if pending else _title(sections[next_section % len(sections)], number)
                front = _front_matter(title)
            size = len(front.encode("utf-8")) + len(body.encode("utf-8"))
            if size >= target - 3:
                break
            if not pending:
                pending = sections[next_section % len(sections)]
                pending_title = _title(pending, number)
                next_section += 1
            room = target - size
            if len(pending.encode("utf-8")) <= room:
                body, pending = body + pending, ""
                continue
            head, rest = _cut(pending, room, at_line=True)
            if size + len(head.encode("utf-8")) < min_bytes or not head:
                head, rest = _cut(pending, room, at_line=False)
            body, pending = body + head, rest
            if not head:  # no character fits the room left
                break
        path = into / page_folder(number, fanout) / f"page-{number:07d}.md"
        paths.append(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (front + body).encode("utf-8")
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
    return paths


def add_corpus_arguments(parser: argparse.ArgumentParser, pages: int) -> None:
    """The options that say which corpus :func:`prepare_corpus` generates (``pages`` by default)."""
    parser.add_argument("corpus", type=Path, help="a folder of markdown to cut into pages")
    parser.add_argument("--pages", type=int, default=pages)
    parser.add_argument("--fanout", type=int, default=32, help="folders per level (two levels)")
    parser.add_argument("--min-bytes", type=int, default=1000)
    parser.add_argument("--max-bytes", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)


def prepare_corpus(arguments: argparse.Namespace) -> tuple[Path, list[Path]]:
    key = f"p{arguments.pages}-f{arguments.fanout}-b{arguments.min_bytes}-{arguments.max_bytes}-s{arguments.seed}"
    into = arguments.work / f"corpus-{key}"
    marker = into / ".generated"
    if marker.exists() and marker.read_text() == str(arguments.corpus.resolve()):
        paths = [into / page_folder(n, arguments.fanout) / f"page-{n:07d}.md" for n in range(arguments.pages)]
        return into, paths
    started = time.perf_counter()
    paths = generate_corpus(
        arguments.corpus,
        into,
        arguments.pages,
        arguments.fanout,
        arguments.min_bytes,
        arguments.max_bytes,
        arguments.seed,
    )
    marker.write_text(str(arguments.corpus.resolve()))
    print(f"generated {len(paths):,} pages in {into} ({time.perf_counter() - started:.0f} s)", flush=True)
    return into, paths


# --------------------------------------------------------------------------------------------------
# Measuring one process
# --------------------------------------------------------------------------------------------------

_RUN_SNIPPET = """
import json, os, sys
counter = os.environ.get("BENCH_SCALE_READS")
if counter:
    import chunkline.dataset.file_reader as file_reader
    counted = file_reader.read_source
    def read_source(*args, **kwargs):
        descriptor = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(descriptor, b".")
        os.close(descriptor)
        return counted(*args, **kwargs)
    file_reader.read_source = read_source
import chunkline.pipelines.cli as cli
cli._fork_workers = True  # as the chunkline program runs: forked workers, its process tuning
status = cli.main(sys.argv[1:])
with open("/proc/self/status") as handle:
    peak = [line.split()[1] for line in handle if line.startswith("VmHWM")][0]
print(json.dumps({"status": status, "driver_hwm_kb": int(peak)}), flush=True)
sys.stderr.flush()
os._exit(status)  # as the chunkline program exits: without the interpreter's teardown
"""

_DRIVER_SNIPPET = """
import hashlib, json, sys, time
import chunkline.pipelines.cli  # the command's imports
from chunkline.dataset.listing import write_listing
from chunkline.dataset.parallelism import choose_workers
from chunkline.dataset.rebuild import list_inputs, plan_rebuild
from chunkline.dataset.settings import RunConfig
from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING, map_large_allocations
map_large_allocations()
corpus, output = sys.argv[1], sys.argv[2]
config = RunConfig.from_dict({"input": {"paths": [corpus]}, "output": {"url": output}})
started = time.process_time()
with RUN_PROCESS_TUNING.listing():
    listing = list_inputs(config)
listed = time.process_time()
plan = plan_rebuild(config, None, None, listing)
del listing
choose_workers(config.run.workers, plan.to_chunk, output_url=output, max_file_bytes=config.input.max_file_bytes)
planned = time.process_time()
url = write_listing(output + "/staging", plan.to_chunk)
plan = plan.read_list_staged()
staged = time.process_time()
with open("/proc/self/status") as handle:
    peak = [line.split()[1] for line in handle if line.startswith("VmHWM")][0]
digest = hashlib.sha256()
with open(url, "rb") as handle:
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
stages = f"listing {listed - started:.2f}, planning {planned - listed:.2f}, staging {staged - planned:.2f}"
print(f"chunkline: stage seconds: {stages}", file=sys.stderr)
print(json.dumps({"driver_hwm_kb": int(peak), "listing_sha256": digest.hexdigest()}))
"""

_LOOP_SNIPPET = """
import json, sys, time
from pathlib import Path
import chunkline
files = sorted(p for p in Path(sys.argv[1]).rglob("*.md"))
started = time.perf_counter()
chunks = 0
for path in files:
    chunks += len(chunkline.chunk_markdown(path.read_bytes().decode("utf-8"), doc_id=str(path)))
seconds = time.perf_counter() - started
with open("/proc/self/status") as handle:
    peak = [line.split()[1] for line in handle if line.startswith("VmHWM")][0]
print(json.dumps({"seconds": seconds, "documents": len(files), "chunks": chunks, "driver_hwm_kb": int(peak)}))
"""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakSampler:
    """Samples the VmHWM of a process and of each of its descendants every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            tree = _children()
            pending = [self.pid]
            while pending:
                pid = pending.pop()
                peak = _hwm_kb(pid)
                if peak:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), peak)
                pending.extend(tree.get(pid, []))

    def stop(self) -> tuple[int, int]:
        """(the process's peak, the largest descendant's peak), in KB."""
        self._stop.set()
        self._thread.join()
        driver = self.peaks.get(self.pid, 0)
        workers = max((peak for pid, peak in self.peaks.items() if pid != self.pid), default=0)
        return driver, workers


_STAGE_ORDER = ("listing", "planning", "chunking", "merge", "pipeline", "publish")
_STAGES = re.compile(r"chunkline: stage seconds: (.*)")


def stage_seconds(log: str) -> dict[str, float]:
    """The stage times a run logs (``chunkline: stage seconds: listing 1.2, planning 0.3, ...``)."""
    stages: dict[str, float] = {}
    for match in _STAGES.finditer(log):
        for part in match.group(1).split(","):
            name, _, value = part.strip().rpartition(" ")
            try:
                stages[name] = stages.get(name, 0.0) + float(value)
            except ValueError:
                continue
    return stages


def measure(command: list[str], reads_file: Path | None = None, cpu_of: list | None = None) -> dict:
    """Run ``command``; its wall and CPU seconds, peaks, stage times and reads."""
    environment = dict(os.environ)
    if reads_file is not None:
        reads_file.unlink(missing_ok=True)
        environment["BENCH_SCALE_READS"] = str(reads_file)
    cluster_before = _cluster_cpu(cpu_of)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    sampler = PeakSampler(process.pid)
    output, log = process.communicate()
    seconds = time.perf_counter() - started
    driver_peak, worker_peak = sampler.stop()
    status = process.returncode
    if status != 0:
        raise RuntimeError(f"failed ({status}): {' '.join(command)}\n{log[-3000:]}")
    report = json.loads(output.strip().splitlines()[-1])
    return {
        "seconds": report.get("seconds", seconds),
        "cpu_seconds": _children_cpu_since() + _cluster_cpu(cpu_of) - cluster_before,
        "page_faults": _children_faults_since(),
        "driver_mb": max(driver_peak, report.get("driver_hwm_kb", 0)) / 1024,
        "workers_mb": worker_peak / 1024,
        "stages": stage_seconds(log),
        "documents_read": None if reads_file is None else reads_file.stat().st_size if reads_file.exists() else 0,
        **({"listing_sha256": report["listing_sha256"]} if "listing_sha256" in report else {}),
    }


_last_children_cpu = [0.0]


def _children_cpu_since() -> float:
    """CPU seconds of the children this process waited for since the last call (user + system)."""
    times = os.times()
    total = times.children_user + times.children_system
    since = total - _last_children_cpu[0]
    _last_children_cpu[0] = total
    return since


_last_children_faults = [0]


def _children_faults_since() -> int:
    """Minor page faults of the children this process waited for since the last call (not a Dask cluster's)."""
    total = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    since = total - _last_children_faults[0]
    _last_children_faults[0] = total
    return since


def _cluster_cpu(processes: list | None) -> float:
    if not processes:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            cpu = process.cpu_times()
            total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
        except Exception:
            continue
    return total


# --------------------------------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------------------------------


def run_command(corpus: Path, output: Path, *arguments: str) -> list[str]:
    return [sys.executable, "-c", _RUN_SNIPPET, "run", str(corpus), "--output", str(output), *arguments]


def edit_pages(paths: list[Path], fraction: float = 0.01) -> dict[Path, bytes]:
    """Append a line to every ``1/fraction``-th page; returns the pages' original bytes."""
    step = max(1, round(1 / fraction))
    originals = {}
    for path in paths[::step]:
        originals[path] = path.read_bytes()
        path.write_bytes(originals[path] + b"\n\nThis page was edited for the rerun.\n")
    return originals


def _ran_elsewhere(output: Path) -> bool:
    """Whether the run on ``output`` read its files outside its own process (worker processes, Dask)."""
    manifest = json.loads((output / "_manifest.json").read_text())
    runner = manifest["rebuild"].get("runner")
    return manifest["config"]["run"]["workers"] != 0 or runner not in ("none", "FnApiRunner")


def same_rows(first: Path, second: Path) -> bool:
    """Whether two outputs hold the same rows in the same part files, byte for byte (``compare_datasets``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compare_datasets import differences

    found = differences(str(first), str(second))
    for line in found:
        print(f"   differs: {line}", file=sys.stderr)
    return not found


def one_round(
    arguments: argparse.Namespace, corpus: Path, paths: list[Path], work: Path, round_number: int, cluster
) -> dict[str, dict]:
    figures: dict[str, dict] = {}
    reads = work / "reads"
    only = arguments.only
    if "loop" in only:
        report = measure([sys.executable, "-c", _LOOP_SNIPPET, str(corpus)])
        figures["loop"] = report
    if "driver" in only:  # the driver's steps before the pipeline: list, plan, stage the listing
        staged = work / f"driver-{round_number}"
        figures["driver"] = measure([sys.executable, "-c", _DRIVER_SNIPPET, str(corpus), str(staged)])
        shutil.rmtree(staged, ignore_errors=True)
    outputs = {"in-process": work / f"in-process-{round_number}", "default": work / f"default-{round_number}"}
    full_runs = [name for name in ("in-process", "default") if name in only or (name == "default" and "rerun" in only)]
    if round_number % 2:
        full_runs.reverse()
    default_arguments: list[str] = []
    cpu_of = None
    if arguments.runner == "dask":
        default_arguments = [
            "--runner",
            "apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={cluster.scheduler_address}",
        ]
        import psutil

        cpu_of = [psutil.Process(worker.process.pid) for worker in cluster.workers.values()]
    for name in full_runs:
        extra = ["--workers", "0"] if name == "in-process" else default_arguments
        figures[name] = measure(
            run_command(corpus, outputs[name], *extra), reads, cpu_of if name == "default" else None
        )
        if _ran_elsewhere(outputs[name]):  # its reads were in processes the counter does not see
            figures[name]["documents_read"] = None
    if arguments.runner == "dask" and "in-process" in figures and "default" in figures:
        figures["default"]["same_rows_as_in_process"] = same_rows(outputs["in-process"], outputs["default"])
    if "rerun" in only:
        figures["rerun unchanged"] = measure(run_command(corpus, outputs["default"]), reads)
        originals = edit_pages(paths)
        try:
            figures["rerun 1% changed"] = measure(run_command(corpus, outputs["default"]), reads)
        finally:
            for path, data in originals.items():
                path.write_bytes(data)
    for output in outputs.values():
        shutil.rmtree(output, ignore_errors=True)
    return figures


def summarize(rounds: list[dict[str, dict]], pages: int) -> dict[str, dict]:
    summary: dict[str, dict] = {}
    names = [
        name
        for name in ("loop", "driver", "in-process", "default", "rerun unchanged", "rerun 1% changed")
        if name in rounds[0]
    ]
    for name in names:
        measured = [figures[name] for figures in rounds]
        seconds = statistics.median(run["seconds"] for run in measured)
        cpu = statistics.median(run["cpu_seconds"] for run in measured)
        stages: dict[str, float] = {}
        names_seen = {stage for run in measured for stage in run.get("stages", {})}
        for stage in [stage for stage in _STAGE_ORDER if stage in names_seen] + sorted(names_seen - set(_STAGE_ORDER)):
            stages[stage] = round(statistics.median(run["stages"].get(stage, 0.0) for run in measured), 2)
        reads = [run.get("documents_read") for run in measured]
        summary[name] = {
            "seconds": round(seconds, 2),
            "documents_per_second": round(pages / seconds, 1) if not name.startswith("rerun") else None,
            "cpu_seconds": round(cpu, 2),
            "cpu_ms_per_document": round(cpu / pages * 1000, 3),
            "page_faults_per_document": round(statistics.median(run["page_faults"] for run in measured) / pages, 1),
            "driver_peak_mb": round(statistics.median(run["driver_mb"] for run in measured), 1),
            "workers_peak_mb": round(statistics.median(run["workers_mb"] for run in measured), 1),
            "stages": stages,
            "documents_read": None if None in reads else int(statistics.median(reads)),
            "runs": [
                {"seconds": round(run["seconds"], 2), "cpu_seconds": round(run["cpu_seconds"], 2)} for run in measured
            ],
        }
        if "listing_sha256" in measured[0]:  # the staged listing, which the code must not change
            summary[name]["listing_sha256"] = sorted({run["listing_sha256"] for run in measured})
        if "same_rows_as_in_process" in measured[0]:
            summary[name]["same_rows_as_in_process"] = all(run["same_rows_as_in_process"] for run in measured)
    if "in-process" in summary and "default" in summary:
        summary["default"]["speedup_vs_in_process"] = round(
            summary["in-process"]["seconds"] / summary["default"]["seconds"], 2
        )
    return summary


def print_summary(summary: dict[str, dict], pages: int, runs: int) -> None:
    print(f"\n{pages:,} pages, medians of {runs} round{'s' if runs != 1 else ''} (load now {os.getloadavg()[0]:.1f})")
    header = (
        f"{'run':<18}{'wall s':>8}{'docs/s':>9}{'CPU s':>8}{'CPU ms/doc':>11}{'faults/doc':>11}{'driver MB':>10}"
        f"{'worker MB':>10}{'read':>8}  stages (s)"
    )
    print(header)
    for name, figures in summary.items():
        rate = figures["documents_per_second"]
        read = figures["documents_read"]
        stages = ", ".join(f"{stage} {value:g}" for stage, value in figures["stages"].items())
        print(
            f"{name:<18}{figures['seconds']:>8.1f}{rate if rate is not None else '':>9}{figures['cpu_seconds']:>8.1f}"
            f"{figures['cpu_ms_per_document']:>11.3f}{figures['page_faults_per_document']:>11.1f}"
            f"{figures['driver_peak_mb']:>10.0f}{figures['workers_peak_mb']:>10.0f}"
            f"{read if read is not None else '':>8}  {stages}"
        )
        extras = {
            key: figures[key]
            for key in ("speedup_vs_in_process", "same_rows_as_in_process", "listing_sha256")
            if key in figures
        }
        if extras:
            print(f"{'':<18}{extras}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser, pages=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--runner", choices=("default", "dask"), default="default")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "chunkline-bench-scale")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    arguments = parser.parse_args(argv)
    arguments.only = {kind.strip() for kind in arguments.only.split(",") if kind.strip()}
    if unknown := arguments.only - set(KINDS):
        parser.error(f"--only takes {', '.join(KINDS)}; not {', '.join(sorted(unknown))}")
    work = arguments.work.resolve()
    if work == REPO or REPO in work.parents:
        parser.error("--work must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    corpus, paths = prepare_corpus(arguments)
    scratch = Path(tempfile.mkdtemp(prefix="runs-", dir=work))
    cluster = None
    try:
        if arguments.runner == "dask":
            from dask.distributed import LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        _children_cpu_since()
        _children_faults_since()
        rounds = []
        for round_number in range(arguments.runs):
            rounds.append(one_round(arguments, corpus, paths, scratch, round_number, cluster))
            print(f"round {round_number + 1}/{arguments.runs} done", flush=True)
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(rounds, len(paths))
    print_summary(summary, len(paths), arguments.runs)
    if arguments.json:
        arguments.json.write_text(json.dumps({"pages": len(paths), "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
