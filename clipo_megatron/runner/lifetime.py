# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Child processes of a run die with their parent.

A `compare` arm runs in a spawned child and a torchrun rank is a child of torchrun's agent:
when the parent is killed (kill -9 included, which no handler sees) the child would train on
for as long as its run lasts, holding the run directory's lock. Linux's
`PR_SET_PDEATHSIG` has the kernel send the child SIGTERM when its parent dies; the runner's
SIGTERM handler then stops after the current step, as a Ctrl-C would. Elsewhere: a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel for `sig` when this process's parent dies; True if that is now armed.

    If the parent died before the request (this process is already an orphan), `sig` is
    raised here at once, as the kernel would have sent it.
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent or parent == 1:  # orphaned before the request took effect
        os.kill(os.getpid(), sig)
    return True
