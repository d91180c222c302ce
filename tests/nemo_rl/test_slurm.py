# Copyright (c) 2026 clipo_megatron authors. Licensed under the Apache License, Version 2.0.
"""sbatch scripts: `bash -n`, DRY_RUN, and full runs on a fake cluster.

The fake `srun` logs its arguments and *executes* the `bash -c` payload (container flags
ignored) with fake `ray` / `python` / `hostname` that log what ran in which srun step, so the
tests see the real control flow: preflight first and fatal, the driver inside the head step.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [
    "slurm/track1_qwen3b.sh",
    "slurm/track2_qwen7b.sh",
    "slurm/run_recipe.sh",
    "slurm/submit.sh",
    "slurm/common.sh",
    "slurm/recipe.sh",
]
BAD_RECIPE = "ValueError: clipo.method.temperature must be > 0"

FAKE_SRUN = r"""#!/bin/bash
# log the arguments (one file per step), then run the `bash -c` payload as the step would
step=$(mktemp -p "$FAKE_CALLS" step.XXXXXX)
printf '%s\0' "$@" > "$step.args"
args=("$@")
for ((i = 0; i < ${#args[@]} - 2; i++)); do
  if [[ "${args[i]}" == bash && "${args[i+1]}" == -c ]]; then
    FAKE_STEP=$(basename "$step") exec bash -c "${args[i+2]}"
  fi
done
echo "fake srun: no bash -c in $*" >&2; exit 97
"""
FAKE_LOG = 'echo "${FAKE_STEP:-none}|$(basename "$0")|${TORCH_CUDA_ARCH_LIST:-}|$*" >> "$FAKE_CALLS/events"\n'
FAKE_PYTHON = (
    "#!/bin/bash\n"
    + FAKE_LOG
    + 'printf "%s\\0" "$@" > "$(mktemp -p "$FAKE_CALLS" python.XXXXXX).argv"\n'
    + 'case "$*" in\n'
    f'  *--validate-only*) [[ -n "${{FAKE_PREFLIGHT_FAIL:-}}" ]] && {{ echo "{BAD_RECIPE}" >&2; exit 1; }}\n'
    '    prev=; for a in "$@"; do [[ "$prev" == --print-config ]] && echo \'{"config": "ok"}\' > "$a"\n'
    '      prev=$a; done; echo "preflight OK" ;;\n'
    # like the real ray_wait: return once the other nodes' `ray start --address` ran
    "  *ray_wait*) n=$(($4 - 1)); for _ in $(seq 200); do\n"
    '      (($(grep -c -- "--address=" "$FAKE_CALLS/events") >= n)) && exit 0; sleep 0.02; done\n'
    "    exit 1 ;;\n"
    '  *) echo "fake driver ran"; echo "$$" > "$FAKE_CALLS/driver.pid"; sleep "${FAKE_DRIVER_S:-0}"\n    exit "${FAKE_DRIVER_RC:-0}" ;;\n'
    "esac\n"
)


def stub_resolver(tmp_path, nodes=2, reads_data=1):
    """A CLIPO_PYTHON that answers for guard.recipe_cluster without reading the recipe (the
    shell-safety tests pass overrides no recipe accepts) and records the argv it got."""
    stub = tmp_path / "resolver"
    stub.write_text(
        '#!/bin/bash\nprintf "%s\\0" "$@" > "$0.argv"\n'
        f'printf "nodes\\t{nodes}\\ngpus_per_node\\t8\\nnodes_from\\tthe stub\\n'
        f'reads_clipo_data_dir\\t{reads_data}\\n"\n'
    )
    stub.chmod(0o755)
    return stub


def copy_scripts(root):
    """The slurm/ scripts in another checkout (CLIPO_ROOT=root)."""
    (root / "slurm").mkdir(parents=True)
    for f in (ROOT / "slurm").glob("*.sh"):
        (root / "slurm" / f.name).write_text(f.read_text())


def _fake_cluster(tmp_path, mode, *script_args, signals=(), **env):
    """Run track2 (2 nodes) on a fake 2-node cluster; return (process, {step: srun args}, events)."""
    bindir, calls, data = tmp_path / "bin", tmp_path / "calls", tmp_path / "data"
    bindir.mkdir()
    calls.mkdir()
    data.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "scontrol").write_text(
        '#!/bin/bash\nif [[ "$1" == requeue ]]; then echo "$2" >> "$FAKE_CALLS/requeue"; '
        'elif [[ "$2" == hostnames ]]; then echo n0; echo n1; '
        'else echo "NodeName=$3 Arch=x86_64 CPUTot=96 CPULoad=0.1"; fi\n'
    )
    (bindir / "squeue").write_text('#!/bin/bash\necho "${FAKE_TIME_LEFT-1:00:00}"\n')
    (bindir / "ray").write_text("#!/bin/bash\n" + FAKE_LOG)
    (bindir / "python").write_text(FAKE_PYTHON)
    (bindir / "hostname").write_text("#!/bin/bash\necho 10.0.0.1 fe80::1\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    base = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "FAKE_CALLS": str(calls),
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NODELIST": "n[0-1]",
        "CLIPO_PYTHON": sys.executable,
        "BASE_LOG_DIR": str(tmp_path / "logs"),
        "RAY_POLL_S": "0.05",
        "CLIPO_ROOT": str(ROOT),
        "CLIPO_DATA_DIR": str(data),
    }
    if mode == "venv":
        (tmp_path / "venv" / "bin").mkdir(parents=True)
        (tmp_path / "venv" / "bin" / "activate").write_text("")
        base["VENV"] = str(tmp_path / "venv")
    else:
        base["CONTAINER"] = "nemo-rl.sqsh"
    proc = subprocess.Popen(
        ["bash", str(ROOT / "slurm/track2_qwen7b.sh"), *script_args],
        env={**base, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    if signals:  # to the batch shell while the driver runs, as --signal=B:USR1 sends it
        pid = calls / "driver.pid"
        for _ in range(500):
            if pid.exists():
                break
            time.sleep(0.02)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=60)
    proc = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    steps = {
        p.name[: -len(".args")]: p.read_text().strip("\0").split("\0") for p in calls.glob("*.args")
    }
    events_file = calls / "events"
    lines = events_file.read_text().splitlines() if events_file.exists() else []
    events = [ln.split("|", 3) for ln in lines]  # step, program, TORCH_CUDA_ARCH_LIST, args
    return proc, steps, events


def _step_named(steps, flag):
    return [k for k, a in steps.items() if flag in a]


def test_container_run_driver_in_head_step_with_mounts_and_cpus(tmp_path):
    hf, ckpt = tmp_path / "hf", tmp_path / "ckpt" / "run1"
    proc, steps, events = _fake_cluster(
        tmp_path,
        "container",
        HF_HOME=str(hf),
        CHECKPOINT_DIR=str(ckpt),
        OVERRIDES="grpo.max_num_steps=1",
    )
    assert proc.returncode == 0, proc.stderr
    logs = tmp_path / "logs" / "77-logs"
    assert len(steps) == 1 + 1 + 1  # preflight, head (+ driver), 1 worker
    heads = _step_named(steps, "--container-name=ray-head")
    (head,) = [h for h in heads if "--cpus-per-task=96" in steps[h]]  # the other is the preflight
    assert len(heads) == 2
    workers = _step_named(steps, "--container-name=ray-worker")
    assert len(workers) == 1 and all("--cpus-per-task=96" in steps[w] for w in workers)
    for a in steps.values():
        mounts = next(x for x in a if x.startswith("--container-mounts="))
        assert mounts.split("=", 1)[1].split(",") == [
            f"{ROOT}:{ROOT}",
            f"{logs}:{logs}",
            f"{tmp_path / 'data'}:{tmp_path / 'data'}",
            f"{hf}:{hf}",
            f"{ckpt}:{ckpt}",
        ]
        assert "--container-image=nemo-rl.sqsh" in a and f"--container-workdir={ROOT}" in a
    by_step = [(s, prog, args.split()[:2]) for s, prog, _, args in events]
    assert (head, "ray", ["start", "--head"]) in by_step
    driver = [e for e in events if e[1] == "python" and "run_grpo_clipo.py --config" in e[3]]
    assert [d[0] for d in driver] == [head]  # the driver ran inside the head step's container
    assert (
        "grpo.max_num_steps=1" in driver[0][3]
        and f"checkpointing.checkpoint_dir={ckpt}" in driver[0][3]
    )
    starts = [e for e in events if e[1] == "ray" and "--address=10.0.0.1:6379" in e[3]]
    assert sorted(e[0] for e in starts) == sorted(workers) and all(
        "--block" in e[3] for e in starts
    )
    assert events[0][1:3] == ["python", ""] and "--validate-only" in events[0][3]  # preflight first
    assert "fake driver ran" in (logs / "driver.log").read_text()
    assert (logs / "config.json").read_text().strip() == '{"config": "ok"}'
    assert (logs / "STARTED_RAY_HEAD").read_text().strip() == "10.0.0.1:6379"
    assert (logs / "ENDED").exists() and ckpt.is_dir()


@pytest.mark.parametrize("given,expected", [(None, "9.0 10.0"), ("8.0", "8.0")])
def test_venv_mode_sets_torch_cuda_arch_list_only_if_unset(tmp_path, given, expected):
    env = {"TORCH_CUDA_ARCH_LIST": given} if given else {}
    proc, steps, events = _fake_cluster(tmp_path, "venv", **env)
    assert proc.returncode == 0, proc.stderr
    assert not any(a for a in steps.values() if any(x.startswith("--container") for x in a))
    assert {e[1] for e in events} == {"python", "ray"}
    assert {e[2] for e in events} == {expected}  # preflight, ray head/workers, ray_wait, driver


def test_preflight_failure_stops_the_job_and_shows_why(tmp_path):
    proc, steps, events = _fake_cluster(tmp_path, "container", FAKE_PREFLIGHT_FAIL="1")
    assert proc.returncode == 1
    assert BAD_RECIPE in proc.stderr and "[clipo] preflight failed (exit 1)" in proc.stderr
    assert "no Ray cluster was started" in proc.stderr
    assert len(steps) == 1 and [e[1] for e in events] == ["python"]  # no ray anywhere
    assert not (tmp_path / "logs" / "77-logs" / "STARTED_RAY_HEAD").exists()


def test_driver_status_is_the_job_status(tmp_path):
    proc, _, events = _fake_cluster(tmp_path, "venv", FAKE_DRIVER_RC="3")
    assert proc.returncode == 3 and "[clipo] driver exited with 3" in proc.stdout
    assert (tmp_path / "logs" / "77-logs" / "ENDED").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_n(script):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True, timeout=30)


def _run(script, env, cwd):
    (cwd / "data").mkdir(exist_ok=True)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "CLIPO_DATA_DIR": str(cwd / "data"),
        "CLIPO_PYTHON": sys.executable,
    }
    return subprocess.run(
        ["bash", str(ROOT / script)],
        env={**base, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "script,nodes,recipe",
    [
        ("slurm/track1_qwen3b.sh", 1, "track1_qwen3b.yaml"),
        ("slurm/track2_qwen7b.sh", 2, "track2_qwen7b.yaml"),
    ],
)
def test_dry_run_prints_commands_from_any_directory(script, nodes, recipe, tmp_path):
    out = _run(
        script,
        {
            "DRY_RUN": "1",
            "CONTAINER": "nemo-rl.sqsh",
            "BASE_LOG_DIR": str(tmp_path),
            "OVERRIDES": f"grpo.max_num_steps=3 checkpointing.checkpoint_dir={tmp_path}/ck",
            "HF_HOME": "/shared/hf",
        },
        cwd=tmp_path,
    )  # not from a NeMo-RL checkout
    assert out.returncode == 0, out.stderr
    srun = [ln[2:] for ln in out.stdout.splitlines() if ln.startswith("+ srun")]
    assert len(srun) == 1 + 1 + (nodes - 1)  # preflight, head (+ wait + driver), workers
    pre, head, workers = srun[0], srun[1], srun[2:]
    assert "--validate-only" in pre and "ray " not in pre and "--cpus-per-task" not in pre
    assert "--container-name=ray-head" in pre and "--container-name=ray-head" in head
    assert "--cpus-per-task=128" in head and head.endswith("' &")
    assert head.index("ray start --head") < head.index(f"ray_wait --nodes {nodes}")
    assert head.index("ray_wait") < head.index("run_grpo_clipo.py --config")
    assert f"examples/configs/{recipe}" in head and "grpo.max_num_steps=3" in head
    assert f"cluster.num_nodes={nodes}" in head and f"{tmp_path}/dryrun-logs/driver.log" in head
    mounts = re.search(r"--container-mounts=(\S+)", head).group(1).split(",")
    assert "/shared/hf:/shared/hf" in mounts and f"{tmp_path}/ck:{tmp_path}/ck" in mounts
    assert len(workers) == nodes - 1
    for i, w in enumerate(workers, 1):
        assert f"-w node{i} " in w and "--container-name=ray-worker" in w
        assert "--block" in w and w.endswith(f"> {tmp_path}/dryrun-logs/ray-worker-{i}.log 2>&1 &")
    assert not (tmp_path / "dryrun-logs").exists() and not (tmp_path / "ck").exists()


def test_dry_run_cpus_per_worker_and_venv_arch(tmp_path):
    out = _run(
        "slurm/track1_qwen3b.sh",
        {"DRY_RUN": "1", "VENV": "/opt/v", "CPUS_PER_WORKER": "7", "BASE_LOG_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    head = [ln for ln in out.stdout.splitlines() if "ray start --head" in ln][0]
    assert "--cpus-per-task=7" in head and "TORCH_CUDA_ARCH_LIST=9.0\\ 10.0" in head
    assert "source /opt/v/bin/activate" in head and "--container" not in head


def test_unreadable_cputot_says_how(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text("#!/bin/bash\necho n0\n")
    (bindir / "scontrol").chmod(0o755)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "n0",
    }
    out = _run("slurm/track1_qwen3b.sh", {**env, "VENV": "/v"}, cwd=tmp_path)
    assert out.returncode == 2 and "set CPUS_PER_WORKER" in out.stderr


def test_needs_container_or_venv(tmp_path):
    out = _run("slurm/track1_qwen3b.sh", {"DRY_RUN": "1"}, cwd=tmp_path)
    assert out.returncode == 2 and "set CONTAINER" in out.stderr


def test_outside_slurm_without_dry_run_says_how(tmp_path):
    out = _run("slurm/track1_qwen3b.sh", {"CONTAINER": "x"}, cwd=tmp_path)
    assert out.returncode != 0 and "DRY_RUN=1" in out.stderr


def test_sbatch_headers():
    for script, nodes in (("slurm/track1_qwen3b.sh", 1), ("slurm/track2_qwen7b.sh", 2)):
        text = (ROOT / script).read_text()
        assert re.search(rf"^#SBATCH --nodes={nodes}$", text, re.M)
        assert "#SBATCH --gpus-per-node=8" in text
        # a signal to the batch shell only (B:) before the limit; requeued on preemption;
        # a requeued run appends to the same output file
        assert re.search(r"^#SBATCH --signal=B:USR1@[1-9][0-9]*$", text, re.M)
        assert re.search(r"^#SBATCH --requeue$", text, re.M)
        assert re.search(r"^#SBATCH --open-mode=append$", text, re.M)


def _save_by(payload: str) -> int:
    return int(re.search(r"CLIPO_SAVE_BY=([0-9]+)", payload).group(1))


def test_dry_run_shows_the_deadline_the_signal_and_the_requeue(tmp_path):
    now = int(time.time())
    out = _run(
        "slurm/track2_qwen7b.sh",
        {"DRY_RUN": "1", "CONTAINER": "x", "BASE_LOG_DIR": str(tmp_path), "SAVE_MARGIN_S": "600"},
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    pre, head = [ln for ln in lines if ln.startswith("+ srun")][:2]
    # DRY_RUN's time left is 86400 s: saved 600 s before the limit
    assert now + 86400 - 600 <= _save_by(head) <= int(time.time()) + 86400 - 600
    assert _save_by(pre) == _save_by(head)  # the preflight checks the same value
    assert any("trap on_usr1 USR1" in ln and "scontrol requeue dryrun" in ln for ln in lines)
    assert any("exit 75" in ln and "scontrol requeue dryrun" in ln for ln in lines)


def test_the_deadline_comes_from_squeue_and_exit_75_requeues_once(tmp_path):
    now = int(time.time())
    proc, steps, _ = _fake_cluster(
        tmp_path, "venv", FAKE_DRIVER_RC="75", FAKE_TIME_LEFT="1-01:00:00"
    )
    assert proc.returncode == 75, proc.stderr
    (head,) = [
        a
        for a in steps.values()
        if "--cpus-per-task=96" in a and any("ray start --head" in x for x in a)
    ]
    assert now + 90000 - 900 <= _save_by(head[-1]) <= int(time.time()) + 90000 - 900  # 1 day + 1 h
    assert (tmp_path / "calls" / "requeue").read_text() == "77\n"
    assert "the driver saved at the deadline (exit 75): requeueing job 77" in proc.stdout


def test_a_finished_driver_is_not_requeued_and_no_limit_sets_no_deadline(tmp_path):
    proc, steps, _ = _fake_cluster(tmp_path, "venv", FAKE_TIME_LEFT="UNLIMITED")
    assert proc.returncode == 0
    assert not (tmp_path / "calls" / "requeue").exists()
    assert not any("CLIPO_SAVE_BY" in x for a in steps.values() for x in a)
    assert "no time limit found" in proc.stderr


def test_usr1_while_the_driver_runs_requeues_once_and_keeps_its_status(tmp_path):
    """Two USR1s (the limit is near, the driver has not stopped): one requeue; the script still
    waits for the driver and exits with its status (a trapped signal ends `wait` early)."""
    proc, _, _ = _fake_cluster(
        tmp_path, "venv", FAKE_DRIVER_S="2", FAKE_DRIVER_RC="75", signals=(signal.SIGUSR1,) * 2
    )
    assert proc.returncode == 75, proc.stderr
    assert (tmp_path / "calls" / "requeue").read_text() == "77\n"
    assert "USR1 (the time limit is near) and the driver still runs: requeueing" in proc.stdout
    assert "[clipo] driver exited with 75" in proc.stdout


def _hostile(tmp_path):
    """Overrides that a shell would run: `;`, `$( )`, backticks, a glob, quotes; each would
    create its marker file if any shell between sbatch and the driver evaluated it."""
    m = [tmp_path / f"PWNED{i}" for i in range(4)]
    in_env = [f"a.b=1;>{m[0]}", f"c=$(>{m[1]})", f"d=`>{m[2]}`", "e=*", 'f="it\'s"']
    as_args = [f"g=x && touch {m[3]}", "h=two words", "i='q'"]
    return m, in_env, as_args


def _argvs(tmp_path, flag):
    calls = sorted((tmp_path / "calls").glob("python.*.argv"))
    argvs = [p.read_bytes().decode().split("\0")[:-1] for p in calls]
    return [a for a in argvs if flag(a)]


@pytest.mark.parametrize("mode", ["container", "venv"])
def test_overrides_reach_the_driver_verbatim_and_run_nothing(tmp_path, mode):
    markers, in_env, as_args = _hostile(tmp_path)
    markers.append(tmp_path / "PWNED_OMP")
    ckpt, root = tmp_path / "ck pt", tmp_path / "checkout"
    copy_scripts(root)  # the steps `cd` here: a leak must not litter the repo
    resolver = stub_resolver(tmp_path)
    proc, _, _ = _fake_cluster(
        tmp_path,
        mode,
        *as_args,
        OVERRIDES=" ".join(in_env[:3]) + "\n\t" + " ".join(in_env[3:]),  # a newline splits too
        CHECKPOINT_DIR=str(ckpt),
        CLIPO_ROOT=str(root),
        CLIPO_PYTHON=str(resolver),
        OMP_NUM_THREADS=f"8;>{tmp_path / 'PWNED_OMP'}",
    )
    assert [m for m in markers if m.exists()] == []  # nothing ran
    assert proc.returncode == 0, proc.stderr
    recipe = str(root / "examples/configs/track2_qwen7b.yaml")
    overrides = in_env + as_args + [f"checkpointing.checkpoint_dir={ckpt}"]
    expected = ["--config", recipe, "cluster.num_nodes=2", "cluster.gpus_per_node=8", *overrides]
    read = (tmp_path / "resolver.argv").read_bytes().decode().split("\0")[:-1]
    assert read == ["-m", "clipo_megatron.nemo_rl.guard.recipe_cluster", "--job-nodes", "2"] + [
        "--",
        recipe,
        *overrides,
    ]  # the recipe was read with the overrides, verbatim
    (pre,) = _argvs(tmp_path, lambda a: "--validate-only" in a)
    (drv,) = _argvs(tmp_path, lambda a: a[:2] == ["examples/run_grpo_clipo.py", "--config"])
    assert drv[1:] == expected
    assert pre[:2] == ["examples/run_grpo_clipo.py", "--validate-only"]
    assert pre[2:4] == ["--print-config", str(tmp_path / "logs/77-logs/config.json")]
    assert pre[4:] == expected
    assert (tmp_path / "logs/77-logs/config.json").read_text().strip() == '{"config": "ok"}'


def test_dry_run_prints_overrides_quoted_and_runs_nothing(tmp_path):
    markers, in_env, as_args = _hostile(tmp_path)
    env = {"DRY_RUN": "1", "VENV": "/opt/v", "BASE_LOG_DIR": str(tmp_path)}
    env["CLIPO_PYTHON"] = str(stub_resolver(tmp_path, nodes=1))
    out = _run("slurm/track1_qwen3b.sh", {**env, "OVERRIDES": " ".join(in_env)}, tmp_path)
    assert [m for m in markers if m.exists()] == []
    assert out.returncode == 0, out.stderr
    # each printed `bash -c` payload, run with `python` = a recorder, passes the overrides verbatim
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").write_text('#!/bin/bash\nprintf "%s\\0" "$@" >> "$REC"\n')
    (bindir / "python").chmod(0o755)
    pre = [ln for ln in out.stdout.splitlines() if "--validate-only" in ln][0]
    payload = subprocess.run(
        ["bash", "-c", 'eval "set -- ${1#+ }"; printf \'%s\' "${@: -1}"', "_", pre],
        capture_output=True,
        text=True,
        check=True,
    ).stdout  # the `bash -c` argument of the printed srun line
    assert f"&& cd {ROOT} &&" in payload  # run it in tmp_path: a leak must not litter the repo
    payload = payload.replace("source /opt/v/bin/activate", "true").replace(f"cd {ROOT}", "true")
    rec = tmp_path / "rec"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "REC": str(rec)}
    subprocess.run(["bash", "-c", payload], env=env, check=True, cwd=tmp_path)
    argv = rec.read_bytes().decode().split("\0")[:-1]
    assert argv[-len(in_env) :] == in_env and [m for m in markers if m.exists()] == []


@pytest.mark.parametrize(
    "given,mounted",
    [("rel/data", None), ("../shared/data", "{tmp}/shared/data"), ("/abs/../{tmp}/x", "{tmp}/x")],
)
def test_data_dir_is_mounted_absolute(tmp_path, given, mounted):
    """A relative CLIPO_DATA_DIR is taken under CLIPO_ROOT (as CHECKPOINT_DIR): inside the checkout
    its mount covers it, elsewhere it is mounted at its absolute, `..`-free path."""
    root = tmp_path / "checkout"  # CLIPO_ROOT holding the scripts
    copy_scripts(root)
    for d in ("checkout/rel/data", "shared/data", "x"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    given, logs = given.format(tmp=str(tmp_path).lstrip("/")), tmp_path / "logs/dryrun-logs"
    env = {"DRY_RUN": "1", "CONTAINER": "img", "BASE_LOG_DIR": str(tmp_path / "logs")}
    env["CLIPO_PYTHON"] = str(stub_resolver(tmp_path, nodes=1))
    out = subprocess.run(
        ["bash", str(root / "slurm/track1_qwen3b.sh")],
        env={**os.environ, **env, "CLIPO_ROOT": str(root), "CLIPO_DATA_DIR": given},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    mounts = re.search(r"--container-mounts=(\S+)", out.stdout).group(1).split(",")
    extra = [f"{mounted}:{mounted}".format(tmp=tmp_path)] if mounted else []
    assert mounts == [f"{root}:{root}", f"{logs}:{logs}"] + extra
    data = mounted.format(tmp=tmp_path) if mounted else f"{root}/rel/data"
    assert f"CLIPO_DATA_DIR={data} " in out.stdout


def test_missing_data_dir_is_one_line_exit_2(tmp_path):
    env = {"DRY_RUN": "1", "CONTAINER": "img", "BASE_LOG_DIR": str(tmp_path)}
    out = _run("slurm/track1_qwen3b.sh", {**env, "CLIPO_DATA_DIR": "/no/such/dir"}, tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "[clipo] CLIPO_DATA_DIR=/no/such/dir: no such directory; "
        "set CLIPO_DATA_DIR to the parquet root (train/, test/)"
    ]


@pytest.mark.parametrize("var,value", [("RAY_PORT", "6379;id"), ("GPUS_PER_NODE", "8 x")])
def test_numeric_settings_are_digits_only(tmp_path, var, value):
    env = {"DRY_RUN": "1", "CONTAINER": "img", "BASE_LOG_DIR": str(tmp_path), var: value}
    out = _run("slurm/track1_qwen3b.sh", env, tmp_path)
    assert (
        out.returncode == 2
        and out.stderr.strip() == f"[clipo] {var}={value}: must be a positive integer"
    )
