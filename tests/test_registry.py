"""Strategy names are unique, and a clash is refused where it is made: at the decorator."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def printed_by(script: str) -> list[str]:
    """The lines ``script`` prints, run in a fresh Python process (whose registry holds nothing yet)."""
    finished = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    return finished.stdout.splitlines()


def test_a_built_in_name_is_refused_at_the_decorator_in_a_fresh_process():
    """In a process where no strategy has run yet (the built-ins not loaded), registering ``tokens`` is
    refused by the decorator, naming the built-in; the built-ins keep working after it."""
    script = """
        from chunkline import ChunkConfig, StrategyError, chunk_markdown, register_strategy

        try:
            @register_strategy("tokens")
            def my_tokens(context):
                return []
        except StrategyError as error:
            print("refused:", error)
        else:
            print("accepted")
        chunks = chunk_markdown("# Tides\\n\\nHigh water at six.\\n", ChunkConfig(strategy="headings"))
        print("headings:", len(chunks))
        chunks = chunk_markdown("# Tides\\n\\nHigh water at six.\\n", ChunkConfig(strategy="tokens"))
        print("tokens:", len(chunks))
        """
    lines = printed_by(script)
    assert lines[0].startswith("refused: a strategy named 'tokens' is already registered")
    assert "chunkline.strategies.tokens" in lines[0]
    assert lines[1:] == ["headings: 1", "tokens: 1"]


def test_a_new_name_registers_once_and_a_second_function_under_it_is_refused():
    """In a process of its own: a strategy registered here would be held to every registered strategy's
    contract by the tests that run after it."""
    script = """
        from chunkline import ChunkConfig, StrategyError, available_strategies, chunk_markdown, register_strategy
        from chunkline.record import ChunkSpan

        @register_strategy("one-per-file")
        def one_per_file(context):
            return [ChunkSpan(0, len(context.text), (), False, context.counter.count(context.text))]

        print("listed:", "one-per-file" in available_strategies())
        text = "# Release notes\\n\\n## 2.1\\n\\nThe tide tables now include the neap range.\\n"
        print("whole:", [chunk.text for chunk in chunk_markdown(text, ChunkConfig(strategy="one-per-file"))] == [text])
        register_strategy("one-per-file")(one_per_file)  # the same function again: the same registration
        try:
            @register_strategy("one-per-file")
            def another(context):
                return []
        except StrategyError as error:
            print("refused:", error)
        """
    lines = printed_by(script)
    assert lines[:2] == ["listed: True", "whole: True"]
    assert lines[2].startswith("refused: a strategy named 'one-per-file' is already registered (__main__.one_per_file)")
