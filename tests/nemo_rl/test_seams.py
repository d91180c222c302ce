# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""The seam check (`clipo_megatron.nemo_rl.port.seams`): every seam in place at NeMo-RL 7ea279a and
v0.7.0, and each seam moved on purpose in a copy gives exactly one line naming it.

Two kinds of tree: the fake one (`fake_nemo_rl.py`, written to tmp_path; runs in CI) and real
checkouts named by `CLIPO_NEMO_RL_CHECKOUTS=<dir>[:<dir>]` or `NEMO_RL_SRC=<dir>`, copied to
tmp_path before they are mutated (nothing of NeMo-RL is committed here).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from clipo_megatron.nemo_rl.port import grpo_loop, rebinding, seam_checks, seams
from clipo_megatron.nemo_rl.port.seam_checks import GRPO, POLICY, WORKER
from tests.nemo_rl.fake_nemo_rl import write_tree

ROOT = Path(__file__).resolve().parents[2]
CHECKOUTS_ENV = "CLIPO_NEMO_RL_CHECKOUTS"


def _checkouts() -> list[Path]:
    dirs = os.environ.get(CHECKOUTS_ENV, "").split(os.pathsep) + [os.environ.get("NEMO_RL_SRC", "")]
    return list(dict.fromkeys(Path(d).resolve() for d in dirs if d))


TREES = ["fake"] + [str(d) for d in _checkouts()] or ["fake"]
if len(TREES) == 1:
    TREES.append("real")  # skipped with the message below


@pytest.fixture(params=TREES)
def tree(request, tmp_path) -> Path:
    """A writable nemo_rl/ package: the fake one, or a copy of a real checkout's."""
    pkg = tmp_path / "nemo_rl"
    if request.param == "fake":
        return write_tree(pkg)
    if request.param == "real":
        pytest.skip(f"no NeMo-RL checkout: set {CHECKOUTS_ENV}=<dir>[:<dir>] or NEMO_RL_SRC=<dir>")
    shutil.copytree(Path(request.param) / "nemo_rl", pkg, ignore=_not_python)
    return pkg


def _not_python(d: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir()]


# ----------------------------------------------------------------------------- mutations


def _node(path: Path, qualname: str) -> ast.AST:
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    *outer, name = qualname.split(".")
    for cls in outer:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in reversed(scope) if name in _bound(n))


def _bound(n: ast.AST) -> set[str]:
    if isinstance(n, ast.FunctionDef | ast.ClassDef):
        return {n.name}
    if isinstance(n, ast.Assign):
        return {t.id for t in n.targets if isinstance(t, ast.Name)}
    return set()


def _edit_line(path: Path, lineno: int, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[lineno - 1] = edit(lines[lineno - 1])
    path.write_text("".join(lines))


def rename(rel: str, qualname: str, new: str):
    """Rename a def / class / assignment in place (its uses are left alone, as in a refactor
    that missed this integration)."""
    old = qualname.rsplit(".", 1)[-1]

    def apply(pkg: Path) -> None:
        node = _node(pkg / rel, qualname)
        _edit_line(pkg / rel, node.lineno, lambda s: s.replace(old, new, 1))

    return apply


def drop_param(rel: str, qualname: str, param: str):
    def apply(pkg: Path) -> None:
        fn = _node(pkg / rel, qualname)
        assert isinstance(fn, ast.FunctionDef)
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        arg = next(a for a in args if a.arg == param)
        assert arg.lineno != fn.lineno, "expects one parameter per line"
        _edit_line(pkg / rel, arg.lineno, lambda s: "")

    return apply


def replace_everywhere(rel: str, old: str, new: str):
    def apply(pkg: Path) -> None:
        (pkg / rel).write_text((pkg / rel).read_text().replace(old, new))

    return apply


def move_estimator(*, keep_name: bool):
    """Move `_create_advantage_estimator` out of grpo.py into advantage_estimator.py; grpo.py
    imports it back (`keep_name`: under the same name, which keeps the seam; else renamed)."""
    new = rebinding.ESTIMATOR if keep_name else "create_advantage_estimator"

    def apply(pkg: Path) -> None:
        grpo = pkg / GRPO
        fn = _node(grpo, rebinding.ESTIMATOR)
        lines = grpo.read_text().splitlines(keepends=True)
        body = "".join(lines[fn.lineno - 1 : fn.end_lineno]).replace(rebinding.ESTIMATOR, new, 1)
        rest = "".join(lines[: fn.lineno - 1] + lines[fn.end_lineno :])
        target = pkg / "algorithms" / "advantage_estimator.py"
        target.write_text(target.read_text() + "\n\n" + body)
        rest = rest.replace(f"{rebinding.ESTIMATOR}(", f"{new}(")
        grpo.write_text(f"{rest}\nfrom nemo_rl.algorithms.advantage_estimator import {new}\n")

    return apply


MUTATIONS = {
    "rename get_microbatch_iterator": (
        replace_everywhere(WORKER, "get_microbatch_iterator", "get_microbatch_iter"),
        "microbatch iterator",
        "found no module-level get_microbatch_iterator and get_logprobs does not call "
        "get_microbatch_iterator; get_logprobs calls get_microbatch_iter;",
    ),
    "drop get_logprobs' micro_batch_size": (
        drop_param(WORKER, "MegatronPolicyWorkerImpl.get_logprobs", "micro_batch_size"),
        "worker get_logprobs",
        ": no keyword parameter micro_batch_size;",
    ),
    "rename the worker's get_logprobs": (
        rename(WORKER, "MegatronPolicyWorkerImpl.get_logprobs", "compute_logprobs"),
        "worker get_logprobs",
        "found no MegatronPolicyWorkerImpl.get_logprobs",
    ),
    "rename Policy.train": (
        rename(POLICY, "Policy.train", "train_step"),
        "Policy.train",
        "found no Policy.train (similar: train_step);",
    ),
    "move the estimator": (
        move_estimator(keep_name=False),
        "advantage estimator",
        "found no module-level _create_advantage_estimator and grpo_train does not call "
        "_create_advantage_estimator; grpo_train calls create_advantage_estimator",
    ),
    "drop an imported name": (
        rename("algorithms/utils.py", "get_tokenizer", "load_tokenizer"),
        "import nemo_rl.algorithms.utils.get_tokenizer",
        "expected get_tokenizer in nemo_rl/algorithms/utils.py; found no get_tokenizer",
    ),
    "swap setup's loggers": (
        replace_everywhere(
            GRPO,
            "        logger,\n        checkpointer,\n",
            "        checkpointer,\n        logger,\n",
        ),
        "setup's return",
        "found setup returns (policy, policy_generation, nemo_gym_actor, (train_cluster, "
        "inference_cluster), dataloader, val_dataloader, loss_fn, checkpointer, logger, "
        "grpo_save_state, master_config",
    ),
    "drop the worker's self.megatron_cfg": (
        replace_everywhere(WORKER, "self.megatron_cfg", "self.mcfg"),
        "worker attributes",
        "found __init__ sets no self.megatron_cfg;",
    ),
}


def test_every_seam_in_place(tree):
    assert seams.check(tree) == []


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_moved_seam_is_one_line_naming_it(tree, mutation):
    mutate, name, found = MUTATIONS[mutation]
    mutate(tree)
    lines = seams.check(tree)
    print(f"\n[seams] {tree} / {mutation}:\n{lines}")
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"seam '{name}' moved: expected ") and "\n" not in line
    assert found in line and "fix (in clipo_megatron/nemo_rl/): " in line
    assert line.endswith("or install a supported NeMo-RL (v0.7.0, main@7ea279a; docs/nemo_rl.md)")


def test_estimator_moved_under_its_name_keeps_the_seam(tree):
    """grpo_train still calls grpo's module-level name: rebinding it still reaches the call."""
    move_estimator(keep_name=True)(tree)
    assert seams.check(tree) == []


# ----------------------------------------------------------------------------- fake tree only


def test_the_estimator_wrapper_signature(tmp_path):
    pkg = write_tree(tmp_path / "nemo_rl")
    replace_everywhere(GRPO, "_create_advantage_estimator(master_config)",
                       "_create_advantage_estimator(master_config, policy)")(pkg)  # fmt: skip
    (line,) = seams.check(pkg)
    assert (
        line.startswith("seam 'advantage estimator' moved")
        and (
            "found grpo_train calls _create_advantage_estimator(master_config, policy); the wrapper "
            "takes master_config alone;"
        )
        in line
    )


def test_a_missing_file_and_a_clash_with_the_mixin(tmp_path):
    pkg = write_tree(tmp_path / "nemo_rl")
    (pkg / "models" / "megatron" / "data.py").unlink()
    replace_everywhere(WORKER, "    def train(", "    def clipo_setup(self):\n        pass\n\n    def train(")(pkg)  # fmt: skip
    assert [ln.split(";")[0] for ln in seams.check(pkg)] == [
        "seam 'microbatch fields' moved: expected the file in nemo_rl/models/megatron/data.py",
        "seam 'mixin names' moved: expected no member named like ClipoWorkerMixin's own in "
        "nemo_rl/models/policy/workers/megatron_policy_worker.py (MegatronPolicyWorkerImpl)",
    ]


def test_the_live_signature_is_checked_where_the_module_is_imported(tmp_path, monkeypatch):
    """The driver has lm_policy imported: a Policy patched at run time is read as it runs."""
    pkg = write_tree(tmp_path / "nemo_rl")
    live = types.ModuleType("nemo_rl.models.policy.lm_policy")

    class Policy:
        def __init__(self, cluster, config, weights_path=None, worker_extension_cls_fqn=None):
            pass

        def get_logprobs(self, data, timer=None):
            pass

        def train(self, batch, loss_fn):  # `data` renamed by a patch
            pass

    live.Policy = Policy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, live.__name__, live)
    (line,) = seams.check(pkg)
    assert (
        line.startswith("seam 'Policy.train' moved")
        and (
            "found train(batch, loss_fn): the imported Policy.train differs from its source: "
            "positional parameters ['batch', 'loss_fn'] where the call passes ['data', 'loss_fn'];"
        )
        in line
    )


def test_the_seam_table_covers_what_the_project_overrides():
    """A new override in ClipoWorkerMixin / ClipoPolicyMixin / ClipoTQPolicyMixin needs a seam
    (else nothing checks it); the TransferQueue loop's are its own (`transfer_queue.TQ_SEAMS`)."""
    from clipo_megatron.nemo_rl.port.transfer_queue import TQ_SEAMS

    overrides = {
        f"{cls}.{n.name}"
        for path, cls, ours in ((ROOT / "clipo_megatron/nemo_rl/worker.py", "worker", "ClipoWorkerMixin"),
                                (ROOT / "clipo_megatron/nemo_rl/policy.py", "Policy", "ClipoPolicyMixin"),
                                (ROOT / "clipo_megatron/nemo_rl/policy.py", "TQPolicy", "ClipoTQPolicyMixin"))
        for c in ast.walk(ast.parse(path.read_text()))
        if isinstance(c, ast.ClassDef) and c.name == ours
        for n in c.body
        if isinstance(n, ast.FunctionDef) and "clipo" not in n.name
    }  # fmt: skip
    named = {
        s.name.replace("worker ", "worker.").replace("TQPolicy ", "TQPolicy.")
        for s in (*seam_checks.SEAMS, *TQ_SEAMS)
    }
    assert overrides == {"worker.get_logprobs", "worker.get_logprobs_presharded",
                         "Policy.__init__", "Policy.get_logprobs", "Policy.train",
                         "Policy.save_checkpoint", "TQPolicy.__init__",
                         "TQPolicy.get_logprobs_from_meta", "TQPolicy.train_from_meta"}  # fmt: skip
    assert overrides <= named


def test_cli(tmp_path):
    pkg = write_tree(tmp_path / "nemo_rl")
    run = [sys.executable, "-m", "clipo_megatron.nemo_rl.port.seams", str(tmp_path)]
    out = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("all ") and "seams in place" in out.stdout
    drop_param(WORKER, "MegatronPolicyWorkerImpl.get_logprobs", "micro_batch_size")(pkg)
    out = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stdout.startswith("seam 'worker get_logprobs' moved")


# ----------------------------------------------------------------------------- the preflight


@pytest.mark.parametrize(
    "version, moved, want",
    [
        ("0.7.0", False, []),  # v0.7.0 by version and probes, every seam in place: passes
        ("0.8.0", False, ["is not supported by this clipo_megatron; supported: v0.7.0, "
                          f"main@7ea279a; its {len(seams.seams_of())} seams this integration uses all match, so it may "
                          "work: run `NEMO_RL_SRC=<checkout> bash scripts/test_nemo_rl.sh` and, if "
                          "it passes, set CLIPO_ALLOW_UNSUPPORTED_NEMO_RL=1"]),
        ("0.8.0", True, ["seam 'microbatch iterator' moved: expected get_logprobs calling"]),
        ("0.7.0", True, ["seam 'microbatch iterator' moved: expected get_logprobs calling"]),
    ],
)  # fmt: skip
def test_validate_only_names_the_moved_seam_and_exits_2(tmp_path, version, moved, want):
    """`run_grpo_clipo.py --validate-only` with a NeMo-RL on the path: the NeMo-RL problems are
    the refusal (seams match) or exactly one line naming the moved seam; exit 2, no traceback."""
    pkg = write_tree(tmp_path / "site" / "nemo_rl")
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    if moved:
        replace_everywhere(WORKER, "get_microbatch_iterator", "make_microbatches")(pkg)
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_grpo_clipo.py"), "--validate-only",
         "--no-cluster-env", "--config", str(ROOT / "examples/configs/track1_qwen3b.yaml")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CLIPO_DATA_DIR": str(tmp_path),
             "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}", "GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    nemo = [ln for ln in out.stderr.splitlines() if ln.startswith("  - NeMo-RL: ")]
    print(f"\n[preflight] NeMo-RL {version}, seam moved: {moved}, exit {out.returncode}:\n{nemo}")
    assert len(nemo) == len(want) and all(w in ln for w, ln in zip(want, nemo))
    if want:
        assert out.returncode == 2 and nemo[0].startswith(f"  - NeMo-RL: NeMo-RL {version} (")


import functools  # noqa: E402


def _ray_like(fn):
    """What `@ray.remote` does to every method of an actor class (ray/util/tracing/
    tracing_helper.py, `_inject_tracing_into_class`): a `__signature__` pasted on the function."""
    import inspect

    fn.__signature__ = inspect.Signature(
        [
            inspect.Parameter("_ray_trace_ctx", inspect.Parameter.KEYWORD_ONLY, default=None),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
        ]
    )
    return fn


def test_the_live_check_reads_the_code_not_a_signature_ray_pasted_on_it():
    """In a process that made NeMo-RL's actor class, the base worker's get_logprobs reports Ray's
    `(*, _ray_trace_ctx=None, **kwargs)`; the seam is the code's signature (a false 'moved' seam
    stopped NeMo-RL's real grpo_train over the real worker after its last step)."""
    from clipo_megatron.source_match.source import live_params

    def get_logprobs(self, *, data, micro_batch_size=None, timer=None):
        return data

    names = [p.name for p in live_params(_ray_like(get_logprobs))]
    assert names == ["self", "data", "micro_batch_size", "timer"]
    assert get_logprobs(None, data=3) == 3  # the function itself untouched

    @functools.wraps(get_logprobs)  # as NeMo-RL's wrap_with_nvtx_name decorates it
    def wrapped(self, **kwargs):
        return get_logprobs(self, **kwargs)

    assert [p.name for p in live_params(wrapped)] == names  # Ray pasted on the inner function


def test_the_live_check_still_reads_a_real_change_under_ray():
    from clipo_megatron.source_match.source import live_params

    def get_logprobs(self, *, batch, timer=None):  # `data` renamed: a real move
        return batch

    assert "data" not in [p.name for p in live_params(_ray_like(get_logprobs))]


def test_an_opaque_decorator_under_ray_is_left_to_the_source_check(tmp_path, monkeypatch):
    """NeMo-RL's `wrap_with_nvtx_name` returns `wrapper(*args, **kwargs)` without `__wrapped__`,
    and Ray pastes `_ray_trace_ctx` onto it: NeMo-RL's real grpo_train over the real worker
    stopped on a false "worker get_logprobs moved" at its resume. Such a wrapper says nothing of
    the method: the source (ast) decides, and the tree's source is intact."""
    pkg = write_tree(tmp_path / "nemo_rl")
    live = types.ModuleType("nemo_rl.models.policy.lm_policy")

    def nvtx(func):
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)

        return wrapper

    class Policy:
        def __init__(self, cluster, config, weights_path=None, worker_extension_cls_fqn=None):
            pass

        def get_logprobs(self, data, timer=None):
            pass

        train = _ray_like(nvtx(lambda self, data, loss_fn: None))

    live.Policy = Policy  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, live.__name__, live)
    assert seams.check(pkg) == []


def test_train_args_from_setup_reads_setups_order():
    """Each of grpo_train's arguments comes from the position `setup` returns it at (here a
    tuple built in NeMo-RL's order, names as values), the rest from the driver."""
    returned = ("policy", "policy_generation", "nemo_gym_actor", ("train", "inference"),
                "dataloader", "val_dataloader", "loss_fn", "logger", "checkpointer",
                "grpo_save_state", "master_config", {}, {})  # fmt: skip
    policy, args = grpo_loop.train_args_from_setup(
        returned, tokenizer="tokenizer", task_to_env="task_to_env", val_task_to_env="val_envs"
    )
    assert policy == "policy"
    assert [getattr(args, f) for f in (
        "policy_generation", "dataloader", "val_dataloader", "tokenizer", "loss_fn",
        "task_to_env", "val_task_to_env", "logger", "checkpointer", "grpo_save_state",
        "master_config",
    )] == ["policy_generation", "dataloader", "val_dataloader", "tokenizer", "loss_fn",
           "task_to_env", "val_envs", "logger", "checkpointer", "grpo_save_state",
           "master_config"]  # fmt: skip


def _defined(path: Path, dotted: str) -> bool:
    """`dotted` (`Class`, `Class.method` or `function`) is defined at module level in `path`."""
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for part in dotted.split("."):
        found = [
            n
            for n in scope
            if (
                isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == part
            )
            or (
                isinstance(n, ast.Assign) and any(getattr(t, "id", None) == part for t in n.targets)
            )
        ]
        if not found:
            return False
        scope = getattr(found[0], "body", [])
    return True


def test_every_fix_names_files_and_symbols_that_exist():
    """A fix message sends the reader to a file and a symbol in it (`Sym (file.py)` or
    `file.py (Sym)`): both must exist, so a moved module turns this red, not a user's search."""
    import re

    from clipo_megatron.nemo_rl.port import transfer_queue

    here = (
        ROOT / "clipo_megatron" / "nemo_rl"
    )  # seams.check prints "fix (in clipo_megatron/nemo_rl/)"
    named = re.compile(r"([\w.]+) \(([\w./]+\.py)\)|([\w./]+\.py) \(([\w.]+)\)|([\w./]+\.py)")
    tables = (*seams.seams_of(), *grpo_loop.ASYNC_SEAMS, *transfer_queue.TQ_SEAMS)  # imports' too
    wrong, checked = [], 0
    for seam in tables:
        for m in named.finditer(seam.fix):
            symbol, rel = (m[1], m[2]) if m[2] else (m[4], m[3]) if m[3] else (None, m[5])
            path = (here / rel).resolve()
            checked += 1
            if not path.is_file():
                wrong.append(f"{seam.name}: {rel} does not exist")
            elif symbol and not _defined(path, symbol):
                wrong.append(f"{seam.name}: {symbol} is not defined in {rel}")
    assert checked >= len(tables), "the fix messages name fewer files than there are seams"
    assert not wrong, wrong
