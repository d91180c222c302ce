# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""A TransformerEngine import stub for Megatron-Bridge on a CPU machine (test code only).

Bridge's `peft/lora_layers.py:20` imports `transformer_engine.pytorch` unguarded (reached from
`import megatron.bridge` through `conversion/model_bridge.py`). TransformerEngine cannot be
installed without CUDA. The stub is handed to that one import statement only, never put in
`sys.modules`: a TE module visible to Megatron-Core would make it believe TE exists
(`extensions/transformer_engine.py`) and build TE layers; and modelopt's registry breaks on it.
Its names resolve (Bridge evaluates `te.ops.Sequential` in annotations at import) but constructing,
calling or `isinstance` against any of them raises, so the moment a TE layer or kernel is used the
test fails with the name that was asked for.
"""

from __future__ import annotations

import builtins
import contextlib
import types

IMPORTER = "megatron.bridge.peft.lora_layers"


class TransformerEngineStubUsed(RuntimeError):
    pass


def _used(name: str) -> TransformerEngineStubUsed:
    return TransformerEngineStubUsed(
        f"{name} used on CPU: TransformerEngine is a stub here "
        "(clipo_testkit/nemo_rl/real_worker/te_stub.py); the real worker must not reach a TE layer"
    )


class _StubMeta(type):
    """Names (`te.ops.Sequential`) resolve, so annotations and `except`-free imports evaluate;
    constructing, calling or `isinstance` against one raises."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *_a, **_k):
        raise _used(cls.__qualname__)

    def __instancecheck__(cls, _obj) -> bool:
        raise _used(cls.__qualname__)

    def __subclasscheck__(cls, _sub) -> bool:
        raise _used(cls.__qualname__)


def _stub_class(qualname: str) -> type:
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


class _Stub(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{self.__name__}.{name}")


def _stub_package() -> types.ModuleType:
    top = _Stub("transformer_engine")
    object.__setattr__(top, "pytorch", _Stub("transformer_engine.pytorch"))
    return top


@contextlib.contextmanager
def te_stub_for_bridge():
    """While active, `import transformer_engine[.pytorch]` executed *by* Bridge's lora_layers
    module gets the stub; every other importer gets the real import system (ImportError)."""
    original = builtins.__import__

    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if (
            level == 0
            and name.split(".")[0] == "transformer_engine"
            and (globals or {}).get("__name__") == IMPORTER
        ):
            top = _stub_package()
            return top.pytorch if fromlist and name.endswith("pytorch") else top
        return original(name, globals, locals, fromlist, level)

    builtins.__import__ = _import
    try:
        yield
    finally:
        builtins.__import__ = original


def import_bridge() -> None:
    """Import Megatron-Bridge (and with it lora_layers) with the stub visible to lora_layers only."""
    with te_stub_for_bridge():
        import megatron.bridge  # noqa: F401
        import megatron.bridge.peft.lora_layers  # noqa: F401
