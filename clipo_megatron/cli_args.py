# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The command-line parsers (`train`, `compare`, `eval`): a user error is one line, exit 2.

argparse's default prints the usage block before its error; a config mistake
should read as one line naming the key and the fix, the same from argparse and
from the config checks that follow it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import NoReturn


def user_error(prog: str, message: str) -> NoReturn:
    """`<prog>: error: <message>` on stderr, exit status 2 (no usage block, no traceback).

    Under torchrun only rank 0 prints it, and every rank also hands it to torchrun's error
    file, so the failure summary torchrun prints last shows it as the root cause (it was
    buried above 40 lines of torchrun's own traceback, once per rank)."""
    line = f"{prog}: error: {message}"
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(line, file=sys.stderr)
    _tell_torchrun(line)
    if rank != 0:  # let rank 0 print first: torchrun stops every rank once one exits, and on a
        time.sleep(RANK0_GRACE_S)  # loaded box rank 0 may reach this line last (no line at all)
    sys.exit(2)


RANK0_GRACE_S = 20.0  # torchrun ends this rank as soon as rank 0 has exited


def _tell_torchrun(line: str) -> None:
    """The error file torchrun reads for its summary (TORCHELASTIC_ERROR_FILE; torch's own
    format, `torch.distributed.elastic.multiprocessing.errors.ErrorHandler`)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    info = {"py_callstack": line, "timestamp": str(int(time.time()))}
    data = {"message": {"message": line, "extraInfo": info}}
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass  # the line is on stderr anyway


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        user_error(self.prog, message)


def make_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A parser whose errors go through `user_error`; `description` keeps its line breaks."""
    return _OneLineParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
