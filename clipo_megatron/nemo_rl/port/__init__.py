# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The port: everything CLIPO assumes about NeMo-RL, in one folder.

The driver, the policy, the worker and the preflight reach NeMo-RL's internals only through
these operations (NeMo-RL's public classes they subclass are named here too):

| operation | where |
|---|---|
| pick the loop a recipe asks for, and the settings that loop stops on | `loops.py` |
| read a recipe by dotted key; read `setup`'s master config (dict or pydantic) | `master_config.py` |
| read `grpo_train`'s arguments from `setup`'s return; call `grpo_train` / `async_grpo_train` | `grpo_loop.py` |
| the policy class (`Policy` under a mixin) and its worker's Python in the actor registry | `grpo_loop.py` |
| the TransferQueue loop: `grpo_train_sync`, `TQPolicy` | `transfer_queue.py` |
| install the estimator in every loop's namespace; tee the logprob pass's microbatches | `rebinding.py` |
| run the picked loop with the estimator installed | `train_loop.py` |
| the seam table the preflight reads in NeMo-RL's source, `--seams`'s list | `seams.py`, `seam_checks.py`, `seam_imports.py` |
| which NeMo-RL is installed, and whether it is supported | `compat.py`, `version.py` |
| the supported versions: each one's commit, probes, rebindings and seam table | `versions/` |
| NeMo-RL missing: one line saying how to install it | `install.py` |

Adding a NeMo-RL version: copy the newest module in `versions/`, set its commit, package
version, date and probes, point `rebindings` / `seams` at what moved (a new seam or binding goes
in the module of its operation above), then run the contract suite against that checkout
(CONTRIBUTING.md, "Supporting another NeMo-RL").
"""
