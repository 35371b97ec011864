"""Run FlagScale's own runner in dry-run mode on hetplan's FlagScale exports, on a CPU.

    python benchmarks/check_flagscale_runner.py --flagscale-src DIR [--python PY] [--time-limit S]

DIR is a FlagScale tree at the pinned commit (planner/engines/sources.py FLAGSCALE), or only the part the
runner needs: `git --git-dir=<snapshot> archive 16a2dd5b5 run.py flagscale/__init__.py flagscale/logger.py
flagscale/utils.py flagscale/runner | tar -x -C DIR`. PY is a Python with hydra-core and omegaconf (the
runner's own dependencies; also pandas, psutil, aiohttp, which its imports pull in); default: this one.

For the best FlagScale plan on each example cluster, and a full fine-tuning and a LoRA plan on 2 x 8 H100,
the export is written with `hetplan export --to flagscale --out`, and FlagScale's runner is started as its
README says, `python run.py --config-path OUT --config-name flagscale_train action=dryrun`, in a scratch
folder. Nothing is stubbed: the runner reads the YAML through Hydra, the hostfile through its own
`parse_hostfile`, builds every host's torchrun command and writes each host's run script, but (dry run)
starts nothing. The script then holds each host's command to the export's own launch.sh: the same node
rank, GPUs, process count, node count, device type, static rendezvous on hostfile's first host, the same
entry point, and the same Megatron arguments as flagscale_args.sh (which launch.sh passes), plus only the
runner's own folders (`--save`, `--load`, `--tensorboard-dir`, `--wandb-save-dir`); a fine-tuning plan gets
exactly one `--load`, the checkpoint. Prints one line per case and exits 1 if any differs.

What it does not check: FlagScale's patched Megatron-LM parsing those arguments (its submodule
third_party/Megatron-LM with FlagScale's patches applied; not rebuilt by this script), or anything that
needs GPUs.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNNER_FOLDERS = ("--save", "--load", "--tensorboard-dir", "--wandb-save-dir")
START = re.compile(r"^\s+(\S+)\) start (\d+) (\S+) (\d+)(.*?) ;;$")


def options(words: list[str]) -> dict[str, list[tuple[str, ...]]]:
    """Megatron-style words as option -> the values of each time it is given."""
    out: dict[str, list[tuple[str, ...]]] = {}
    key = None
    for w in words:
        if w.startswith("--") and not re.fullmatch(r"--?\d.*", w):
            key = w
            out.setdefault(key, []).append(())
        elif key is not None:
            out[key][-1] = out[key][-1] + (w,)
    return out


def exported_args(folder: Path, env: dict[str, str]) -> list[str]:
    """MEGATRON_ARGS as bash expands it (launch.sh sources the file)."""
    text = subprocess.run(["bash", "-c", 'source ./flagscale_args.sh; printf "%s\\0" "${MEGATRON_ARGS[@]}"'],
                          cwd=folder, env={**os.environ, **env}, check=True, capture_output=True, text=True).stdout
    return text.split("\0")[:-1]


def launch_agents(folder: Path) -> tuple[int, dict[str, tuple[int, str, int, list[str]]]]:
    """launch.sh's NNODES and, per host, (node rank, GPUs, processes, the words for that agent only)."""
    text = (folder / "launch.sh").read_text()
    nnodes = int(re.search(r"^NNODES=(\d+)$", text, re.M).group(1))
    agents = {}
    for line in text.splitlines():
        m = START.match(line)
        if m:
            agents[m.group(1)] = (int(m.group(2)), m.group(3), int(m.group(4)), shlex.split(m.group(5)))
    return nnodes, agents


def runner_commands(scripts: Path) -> dict[str, list[str]]:
    """host -> the words of the command FlagScale's run script for that host runs."""
    out = {}
    for script in sorted(scripts.glob("host_*_run.sh")):
        host = re.fullmatch(r"host_\d+_(.+)_run\.sh", script.name).group(1)
        line = next(l for l in script.read_text().splitlines() if l.startswith('cmd="'))
        out[host] = shlex.split(line[len('cmd="'):-1])
    return out


def compare(folder: Path, scripts: Path, env: dict[str, str], fine_tune: bool) -> list[str]:
    """Each way the runner's commands differ from launch.sh's agents."""
    wrong = []
    nnodes, agents = launch_agents(folder)
    commands = runner_commands(scripts)
    first_host = next(l.split()[0] for l in (folder / "hostfile").read_text().splitlines() if l.strip())
    if set(commands) != set(agents):
        return [f"hosts {sorted(commands)} by the runner, {sorted(agents)} in launch.sh"]
    expected = exported_args(folder, env)
    for host, words in commands.items():
        rank, gpus, procs, extra = agents[host]
        envs = dict(w.split("=", 1) for w in words[:words.index("torchrun")])
        at = words.index("torchrun")
        entry = next(i for i in range(at, len(words)) if words[i].endswith(".py"))
        torchrun = {k: v[0] for k, v in options(words[at + 1:entry]).items()}
        got = {"CUDA_VISIBLE_DEVICES": envs.get("CUDA_VISIBLE_DEVICES"), "--node_rank": torchrun["--node_rank"],
               "--nproc_per_node": torchrun["--nproc_per_node"], "--nnodes": torchrun["--nnodes"],
               "--rdzv_backend": torchrun["--rdzv_backend"],
               "rendezvous host": torchrun["--rdzv_endpoint"][0].rsplit(":", 1)[0], "entry point": words[entry]}
        want = {"CUDA_VISIBLE_DEVICES": gpus, "--node_rank": (str(rank),), "--nproc_per_node": (str(procs),),
                "--nnodes": (str(nnodes),), "--rdzv_backend": ("static",), "rendezvous host": first_host,
                "entry point": "flagscale/train/train_gpt.py"}
        wrong += [f"{host}: {k} {got[k]!r}, launch.sh {want[k]!r}" for k in want if got[k] != want[k]]
        runner_args, launch_args = options(words[entry + 1:]), options(expected + extra)
        for key in sorted(set(runner_args) | set(launch_args)):
            if key in RUNNER_FOLDERS and key not in launch_args:
                continue
            if runner_args.get(key) != launch_args.get(key):
                wrong.append(f"{host}: {key} {runner_args.get(key)}, launch.sh {launch_args.get(key)}")
        loads = runner_args.get("--load", [])
        if len(loads) != 1 or (fine_tune and loads[0] != (env["CHECKPOINT"],)):
            wrong.append(f"{host}: --load given {loads}")
    return wrong


def run_case(label: str, plan_path: Path, cluster_path: Path, work: Path, flagscale_src: Path, python: str,
             fine_tune: bool) -> bool:
    out = work / "export"
    env = {"CHECKPOINT": str(work / "base-checkpoint")} if fine_tune else {}
    subprocess.run([sys.executable, "-m", "planner", "export", "--plan", str(plan_path), "--cluster",
                    str(cluster_path), "--to", "flagscale", "--out", str(out)], cwd=ROOT, check=True,
                   capture_output=True)
    scratch = work / "runner"
    scratch.mkdir()
    run = subprocess.run([python, str(flagscale_src / "run.py"), "--config-path", str(out), "--config-name",
                          "flagscale_train", "action=dryrun"], cwd=scratch, capture_output=True, text=True,
                         env={**os.environ, **env, "PYTHONPATH": str(flagscale_src)})
    if run.returncode != 0:
        print(f"{label}: the runner failed (exit {run.returncode}): {run.stderr.strip().splitlines()[-1:]}")
        return False
    wrong = compare(out, scratch / "outputs_hetplan" / "logs" / "scripts", env, fine_tune)
    nnodes, agents = launch_agents(out)
    if wrong:
        print(f"{label}: {len(wrong)} differences: " + "; ".join(wrong[:8]))
        return False
    print(f"{label}: FlagScale's runner (dry run) writes {len(agents)} host scripts whose commands match launch.sh: "
          f"node ranks, GPUs, {sum(a[2] for a in agents.values())} processes, device types, static rendezvous, "
          f"every Megatron argument" + (", one --load: the checkpoint" if fine_tune else ""))
    return True


def cases(time_limit_s: float):
    """(label, cluster YAML, plan JSON, fine-tuning?) for the best FlagScale plan of each example cluster and
    the two fine-tuning kinds FlagScale runs."""
    from catalog import cluster_from_dict, load_catalog, load_cluster_file
    from catalog.formats import cluster_to_yaml, plan_to_json
    from planner.search import SearchOptions, search
    from planner.types import Job, JobKind, Training
    catalog = load_catalog()
    h100 = cluster_from_dict({"name": "h100-16", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                            "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    runs = [(load_cluster_file(p, catalog), None) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    runs += [(h100, JobKind.FULL_FINETUNE), (h100, JobKind.LORA)]
    for cluster, kind in runs:
        model = catalog.models["llama-3-70b" if cluster.num_gpus > 256 else "llama-3-8b"]
        job = Job(model, 256 if kind is None else 64, 4096, engine="flagscale",
                  training=Training(kind or JobKind.PRETRAIN))
        plan = search(cluster, job, baselines=False, options=SearchOptions(time_limit_s=time_limit_s)).plans[0].plan
        label = cluster.name + ("" if kind is None else f" ({kind.value})")
        yield label, cluster_to_yaml(cluster), plan_to_json(plan), kind is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flagscale-src", required=True, type=Path, metavar="DIR",
                        help="FlagScale at the pinned commit (run.py and flagscale/ at least)")
    parser.add_argument("--python", default=sys.executable, help="a Python with hydra-core (default: this one)")
    parser.add_argument("--time-limit", type=float, default=3.0, help="search time per case (s)")
    args = parser.parse_args()
    failures = 0
    for label, cluster_yaml, plan_json, fine_tune in cases(args.time_limit):
        with tempfile.TemporaryDirectory() as tmp:
            plan_path, cluster_path = Path(tmp) / "plan.json", Path(tmp) / "cluster.yaml"
            plan_path.write_text(plan_json)
            cluster_path.write_text(cluster_yaml)
            failures += not run_case(label, plan_path, cluster_path, Path(tmp), args.flagscale_src.resolve(),
                                     args.python, fine_tune)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
