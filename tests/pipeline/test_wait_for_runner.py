"""Waiting for a runner's job: a runner whose timed wait raises (DaskRunner) is waited on to the end."""

from __future__ import annotations

import pytest

from chunkline.pipelines import run as run_module


class _Future:
    def __init__(self, polls_until_done: int):
        self._polls_left = polls_until_done

    def done(self) -> bool:
        self._polls_left -= 1
        return self._polls_left < 0


class _DaskLikeResult:
    """As DaskRunner's result behaves: a timed wait with work left raises TimeoutError and marks the job
    FAILED until a later wait sees every future finish."""

    def __init__(self, futures, error: BaseException | None = None):
        self.futures = futures
        self._state = "RUNNING"
        self._error = error
        self.final_waits = 0

    @property
    def state(self) -> str:
        return self._state

    def wait_until_finish(self, duration=None):
        if duration is not None and (self._error is not None or any(not f.done() for f in self.futures)):
            self._state = "FAILED"
            raise self._error or TimeoutError()
        if duration is None:
            self.final_waits += 1
            if self._error is not None:
                raise self._error
        self._state = "DONE"
        return self._state


def test_a_timed_wait_that_raises_with_work_left_waits_for_the_job(monkeypatch):
    monkeypatch.setattr(run_module, "run_counts", lambda result: None)
    result = _DaskLikeResult([_Future(polls_until_done=3), _Future(polls_until_done=5)])
    run_module._wait_with_progress(result)
    assert result.state == "DONE"
    assert result.final_waits == 1


def test_a_timeout_raised_by_the_job_itself_is_raised(monkeypatch):
    monkeypatch.setattr(run_module, "run_counts", lambda result: None)
    result = _DaskLikeResult([_Future(polls_until_done=0)], error=TimeoutError("a step of the job timed out"))
    with pytest.raises(TimeoutError, match="a step of the job timed out"):
        run_module._wait_with_progress(result)
