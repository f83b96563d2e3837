"""``python -m chunkline``: the ``chunkline`` command line, for an environment whose scripts folder is not
on ``PATH`` (a notebook kernel, a Beam worker, ``python -m venv`` without activating it)."""

from chunkline.pipelines.cli import console_main

if __name__ == "__main__":
    console_main()
