# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Graders for the pool tests; a module of their own so worker processes can import them."""

import signal
import time

from clipo_megatron.verify.pool import grade_one


def sleepy(response: str, ground_truth: str, kind: str) -> float:
    """'sleep' answers hang in Python (the alarm interrupts them); others grade normally."""
    if response == "sleep":
        time.sleep(60)
    return grade_one(response, ground_truth, kind)


def deaf(response: str, ground_truth: str, kind: str) -> float:
    """'deaf' answers block SIGALRM and hang, like C code that never returns to the interpreter."""
    if response == "deaf":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return grade_one(response, ground_truth, kind)


def boom(response: str, ground_truth: str, kind: str) -> float:
    raise RuntimeError("grader bug")
