# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""`train` and `compare` share one parser factory: argparse's own errors are one line, exit 2."""

from __future__ import annotations

import pytest

pytest.importorskip("omegaconf")

from clipo_megatron.runner import compare, train  # noqa: E402


@pytest.mark.parametrize("cli", [train, compare], ids=["train", "compare"])
@pytest.mark.parametrize(
    "argv, said",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--config"], "argument --config: expected one argument"),
    ],
)
def test_argparse_errors_are_one_line_exit_2(cli, capsys, argv, said):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err == f"{cli.PROG}: error: {said}\n"  # no usage block


@pytest.mark.parametrize("cli", [train, compare], ids=["train", "compare"])
def test_help_keeps_the_module_docstring_layout(cli, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {cli.PROG} ")
    assert cli.__doc__.splitlines()[2] in out.splitlines()  # the usage example, line breaks kept
