"""Beam pipeline options on ``chunkline run``'s command line: recognised by Beam's own option classes, or
refused before anything runs.

``chunkline run`` hands the arguments it does not know itself to Beam as pipeline options
(``--runner DataflowRunner --project p --region r``, ``--direct_num_workers 4``, ``--save_main_session``).
Beam's ``PipelineOptions`` drops an argument that none of its option classes recognises, with at most a log
line, so a misspelt ``--fail-on-eror`` or a ``--max-tokens 128`` meant as a setting would run and have no
effect. Here the arguments are parsed with the table ``PipelineOptions.get_all_options`` builds (every
``PipelineOptions`` subclass's ``_add_argparse_args``), after importing the chosen runner's module so that
the options it defines (``DaskOptions``' ``--dask_client_address``, ...) are in it, and what no option class
recognises is an error.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, _BeamArgumentParser

__all__ = ["BeamOptionError", "BeamOptions"]


class BeamOptionError(ValueError):
    """A Beam option has a malformed value, or the chosen runner cannot be loaded."""


class _RefusingParser(_BeamArgumentParser):
    """Beam's option parser, raising instead of printing its usage and exiting."""

    def error(self, message: str):
        raise BeamOptionError(message)


class BeamOptions:
    """The pipeline options Beam recognises, for the runner that ``arguments`` choose."""

    def __init__(self, arguments: Sequence[str]):
        runner = _runner_name(arguments)
        if runner is not None:
            _load_runner(runner)
        self._parser = _RefusingParser(allow_abbrev=False, add_help=False)
        # As PipelineOptions.get_all_options does: each direct subclass once, the last definition winning.
        option_classes = {str(cls): cls for cls in PipelineOptions.__subclasses__()}
        for cls in option_classes.values():
            cls._add_argparse_args(self._parser)  # pylint: disable=protected-access
        self.flags: list[str] = sorted(
            flag for action in self._parser._actions for flag in action.option_strings if flag.startswith("--")
        )

    def bind_values(self, arguments: Sequence[str], own_flags: Iterable[str]) -> list[str]:
        """``arguments`` with each Beam option that takes a value joined to it (``--runner X`` becomes
        ``--runner=X``), so that chunkline's own parser does not take ``X`` for an INPUT."""
        own = set(own_flags)
        actions = self._parser._option_string_actions
        bound: list[str] = []
        index = 0
        while index < len(arguments):
            argument = arguments[index]
            action = actions.get(argument) if argument not in own else None
            takes_value = action is not None and action.nargs in (None, 1)
            if takes_value and index + 1 < len(arguments) and not arguments[index + 1].startswith("-"):
                bound.append(f"{argument}={arguments[index + 1]}")
                index += 2
                continue
            bound.append(argument)
            index += 1
        return bound

    def unrecognised(self, arguments: Sequence[str]) -> list[str]:
        """The arguments no Beam option class recognises, in order; :class:`BeamOptionError` if a Beam
        option's value is malformed (``--direct_num_workers=many``)."""
        _, unknown = self._parser.parse_known_args(list(arguments))
        return unknown


def _runner_name(arguments: Sequence[str]) -> str | None:
    """The value of the last ``--runner`` among ``arguments`` (as argparse would keep it)."""
    runner = None
    for index, argument in enumerate(arguments):
        if argument == "--runner" and index + 1 < len(arguments):
            runner = arguments[index + 1]
        elif argument.startswith("--runner="):
            runner = argument.partition("=")[2]
    return runner


def _load_runner(name: str) -> None:
    """Import the runner's module (as Beam's ``create_runner`` resolves its name), which defines the
    runner's own option classes; a runner that cannot be loaded fails here, before the output is locked."""
    known = {path.rsplit(".", 1)[-1].lower(): path for path in StandardOptions.ALL_KNOWN_RUNNERS}
    path = known.get(name.lower(), known.get(name.lower() + "runner", name))
    if "." not in path:
        raise BeamOptionError(
            f"unknown Beam runner {name!r}; known runners: {', '.join(StandardOptions.KNOWN_RUNNER_NAMES)}, "
            "or the full name of a PipelineRunner class (package.module.Class)"
        )
    module_name, class_name = path.rsplit(".", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise BeamOptionError(
            f"Beam runner {name} cannot be loaded ({error}); install the package it needs "
            "(apache-beam[gcp] for Dataflow, apache-beam[dask] for Dask)"
        ) from None
    if not isinstance(getattr(module, class_name, None), type):
        raise BeamOptionError(f"Beam runner {name}: module {module_name} has no class {class_name}")
