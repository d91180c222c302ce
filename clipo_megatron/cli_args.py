# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The command-line parsers (`train`, `compare`, `eval`): a user error is one line, exit 2.

argparse's default prints the usage block before its error; a config mistake
should read as one line naming the key and the fix, the same from argparse and
from the config checks that follow it.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


def user_error(prog: str, message: str) -> NoReturn:
    """`<prog>: error: <message>` on stderr, exit status 2 (no usage block, no traceback)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        user_error(self.prog, message)


def make_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A parser whose errors go through `user_error`; `description` keeps its line breaks."""
    return _OneLineParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
