# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""Device tags through custom autograd Functions (testing/emulated_autograd.py), both ways:
tags survive every place autograd re-wraps a tensor in C++, and a host tensor still raises."""

from __future__ import annotations

import pytest
import torch

from clipo_testkit.emulated_cuda import EmulatedDeviceError, emulated_cuda, is_on_device

pytestmark = pytest.mark.device_rules


class Scaled(torch.autograd.Function):
    """out = (x * w) * 3; returns (out, x) with x as-is; saves an input, a parameter and its own
    output, stashes a tensor on ctx; backward builds buffers with device="cuda" /
    current_device(), as Megatron-Core's backwards do."""

    seen: dict = {}
    device = "cuda"  # "cpu" for the host reference run

    @staticmethod
    def forward(ctx, x, w):
        out = x * w * 3.0
        ctx.save_for_backward(x, w, out)
        ctx.stashed = x + 1.0
        return out, x

    @staticmethod
    def backward(ctx, g_out, g_x):
        x, w, out = ctx.saved_tensors
        buf = torch.zeros(g_out.shape, device=Scaled.device)  # on a GPU: a device buffer
        one = torch.ones(g_out.shape, device=torch.cuda.current_device() if buf.is_cuda else None)
        Scaled.seen = {
            "saved": [is_on_device(t) for t in (x, w, out)],
            "stashed": is_on_device(ctx.stashed),
            "grads": [is_on_device(g_out), is_on_device(g_x)],
            "buffers": [is_on_device(buf), is_on_device(one)],
            "computed": is_on_device(g_out * w),
        }
        gx = g_out * w * 3.0 * one + buf + g_x + 0.0 * out * ctx.stashed
        return gx, (g_out * x * 3.0).sum(0)


def _run(x, w):
    out, x_again = Scaled.apply(x, w)
    (out.sum() + 2.0 * x_again.sum()).backward()
    return out.detach(), x.grad, w.grad


def _inputs(on_device: bool):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 3, generator=gen), torch.randn(3, generator=gen)
    if on_device:
        x, w = x.cuda(), w.cuda()
    return x.requires_grad_(True), w.requires_grad_(True)


def test_custom_function_forward_backward_carry_tags_and_equal_the_host_run():
    Scaled.device = "cpu"
    ref = _run(*_inputs(False))
    Scaled.device = "cuda"
    with emulated_cuda():
        x, w = _inputs(True)
        got = _run(x, w)
        assert all(is_on_device(t) for t in got)
        assert Scaled.seen == {
            "saved": [True, True, True],  # the saved output came back tagged too
            "stashed": True,
            "grads": [True, True],
            "buffers": [True, True],
            "computed": True,
        }
    for r, g in zip(ref, got, strict=True):
        assert torch.equal(r, g.cpu())  # same CPU kernels: bit-equal


def test_autograd_grad_runs_custom_backwards_under_the_rules():
    """torch.autograd.grad reaches the engine from inside the mode's handler (mode popped,
    subclass torch function off): the custom backward must get both back."""
    Scaled.device = "cpu"
    x, w = _inputs(False)
    ref = torch.autograd.grad(Scaled.apply(x, w)[0].sum(), (x, w))
    Scaled.device = "cuda"
    with emulated_cuda():
        x, w = _inputs(True)
        got = torch.autograd.grad(Scaled.apply(x, w)[0].sum(), (x, w))
        assert Scaled.seen["buffers"] == [True, True] and Scaled.seen["computed"]
        assert all(is_on_device(g) for g in got)
    for r, g in zip(ref, got, strict=True):
        assert torch.equal(r, g.cpu())


def test_input_returned_as_is_keeps_its_tag_where_autograd_detaches_it():
    """Megatron-Core's output layer under no_grad: make_viewless_tensor leaves a leaf that
    requires grad, copy_to_tensor_model_parallel_region returns it as-is, autograd detaches it
    in C++ (a plain tensor) and the output layer's matmul met a host input."""

    class Ident(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t

        @staticmethod
        def backward(ctx, g):
            return g

    class Pair(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.mark_non_differentiable(t)
            return t, t * 2

        @staticmethod
        def backward(ctx, g_t, g_2):
            return g_2 * 2

    with emulated_cuda():
        leaf = torch.randn(3, 4).cuda().requires_grad_(True)
        weight = torch.randn(2, 4).cuda()
        with torch.no_grad():
            y = Ident.apply(leaf)
            assert is_on_device(y) and torch.equal(y.cpu(), leaf.detach().cpu())
            assert is_on_device(y @ weight.t())  # the call that raised
        t, t2 = Pair.apply(leaf)  # grad mode on, non-differentiable: detached in C++ as well
        assert is_on_device(t) and is_on_device(t2)
        with pytest.raises(EmulatedDeviceError):  # not tagged by accident: host stays host
            with torch.no_grad():
                Ident.apply(torch.randn(3, 4).requires_grad_(True)) @ weight.t()


def test_host_tensors_in_a_custom_function_still_raise():
    class HostInForward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * torch.ones(t.shape)  # a host buffer

        @staticmethod
        def backward(ctx, g):
            return g

    class HostInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(torch.ones(t.shape))  # saved on the host
            return t * 2

        @staticmethod
        def backward(ctx, g):
            (host,) = ctx.saved_tensors
            return g * host

    class HostGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return torch.full(g.shape, 2.0)  # a host grad for a device input

    with emulated_cuda():
        x = torch.randn(5).cuda().requires_grad_(True)
        with pytest.raises(EmulatedDeviceError, match="same device"):
            HostInForward.apply(x)
        with pytest.raises(EmulatedDeviceError, match="same device"):
            HostInBackward.apply(x).sum().backward()
        with pytest.raises(EmulatedDeviceError, match="invalid gradient at index 0"):
            HostGrad.apply(x).sum().backward()


def test_backward_hooks_run_under_the_rules():
    seen = []
    with emulated_cuda():
        w = torch.ones(3).cuda().requires_grad_(True)
        w.register_hook(lambda g: seen.append((is_on_device(g), is_on_device(g * 2))))
        w.register_post_accumulate_grad_hook(
            lambda p: seen.append(is_on_device(torch.zeros(1, device="cuda")))
        )
        (w * 3).sum().backward()
        torch.autograd.backward([(w * 3).sum()])
        assert w.grad.tolist() == [6.0, 6.0, 6.0]  # 3 + 3, accumulated
        with pytest.raises(RuntimeError, match="scalar outputs"):
            (w * 3).backward()
    assert seen == [(True, True), True, (True, True), True]
