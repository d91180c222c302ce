# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The graders a config may name: name -> "module:function", the function taking
(response, ground_truth, kind) -> float. The config key `clipo.grader` names one:
math_verify (recommended) | paper (the authors' checker).

Plain strings, no imports: the config check (core/config.py) and the verifier (verify/graders.py,
whose worker processes import it) both read this one table without loading each other.
"""

GRADERS: dict[str, str] = {
    "math_verify": "clipo_megatron.verify.graders:grade_one",  # math-verify + option letters
    "paper": "clipo_megatron.verify.paper:grade_paper",  # the authors' checker (verify/paper.py)
}
