# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Graders for the pool tests; a module of their own so worker processes can import them."""

import os
import signal
import time

from clipo_megatron.verify.graders import grade_one


def sleepy(response: str, ground_truth: str, kind: str) -> float:
    """'sleep' answers hang in Python (the alarm interrupts them); others grade normally."""
    if response == "sleep":
        time.sleep(60)
    return grade_one(response, ground_truth, kind)


def deaf(response: str, ground_truth: str, kind: str) -> float:
    """'deaf' answers ignore SIGALRM and hang, like C code that never returns to the interpreter."""
    if response == "deaf":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # in every thread: the alarm is lost
        time.sleep(60)
    return grade_one(response, ground_truth, kind)


def boom(response: str, ground_truth: str, kind: str) -> float:
    raise RuntimeError("grader bug")


def hog(response: str, ground_truth: str, kind: str) -> float:
    """'hog' answers spin in one C call holding the GIL (as sympy's big-integer powers do):
    neither the alarm nor a watchdog thread runs until it returns (hours)."""
    if response == "hog":
        sum(range(10**15))
    return grade_one(response, ground_truth, kind)


def crash(response: str, ground_truth: str, kind: str) -> float:
    """'crash' answers kill the worker process (a segfault, the OOM killer)."""
    if response == "crash":
        os._exit(3)
    return grade_one(response, ground_truth, kind)


def hog_or_deaf(response: str, ground_truth: str, kind: str) -> float:
    return (hog if response == "hog" else deaf)(response, ground_truth, kind)
