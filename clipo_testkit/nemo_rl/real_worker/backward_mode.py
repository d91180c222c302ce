# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The CPU worker's device-literal mode kept on inside `torch.autograd.backward` (test code).

torch (>= 2.13) routes `torch.autograd.backward` through `__torch_function__` when a mode is on, and
`handle_torch_function` pops the mode for the duration of the call: the whole backward pass (every
autograd Function's `backward`) then runs without it. Megatron-Core's schedule calls
`torch.autograd.backward` when `deallocate_pipeline_outputs` is False (Bridge's MLAModelProvider,
`patch_lines.PATCHES` "backward_in_mode"), and a backward that places a tensor on
`torch.cuda.current_device()` (the MoE all-to-all's, tensor_parallel/mappings.py) then asks for a
CUDA device; `Tensor.backward` is routed the same way. `_CudaToCpuThroughBackward` runs such a call
as torch's own `backward` does after its override check, with the mode pushed back on: the same
engine call, the mode held inside it.
"""

from __future__ import annotations

import torch

from clipo_megatron.runner.model.cpu_shims import _CudaToCpu


class _CudaToCpuThroughBackward(_CudaToCpu):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.autograd.backward:
            return self._backward(*args, **(kwargs or {}))
        if func is torch.Tensor.backward:  # (its own override check, then autograd.backward)
            return self._tensor_backward(*args, **(kwargs or {}))
        return super().__torch_function__(func, types, args, kwargs)

    def _tensor_backward(self, tensor, gradient=None, retain_graph=None, create_graph=False,
                         inputs=None):  # fmt: skip
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        inputs = None if inputs is None else tuple(inputs)
        grads = None if gradient is None else (gradient,)
        return self._backward((tensor,), grads, retain_graph, create_graph, inputs)

    def _backward(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                  inputs=None):  # fmt: skip
        """torch.autograd.backward's body after its `has_torch_function` check (the arguments
        arrive normalised by it: `tensors` a tuple, `inputs` a tuple or None)."""
        from torch.autograd import _make_grads, _tensor_or_tensors_to_tuple
        from torch.autograd.graph import _engine_run_backward

        with self:  # handle_torch_function popped it for this call
            grads = _tensor_or_tensors_to_tuple(grad_tensors, len(tensors))
            grads = _make_grads(tensors, grads, is_grads_batched=False)
            _engine_run_backward(
                tensors,
                grads,
                create_graph if retain_graph is None else retain_graph,
                create_graph,
                inputs or (),
                allow_unreachable=True,
                accumulate_grad=True,
            )
