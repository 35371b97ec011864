"""Fleet: several training jobs share the cluster as composed, whole nodes or part of one node each, under
a policy (planner.fleet): a jobs table in; the GPUs each job gets and where, its plan and speed, and what
stays idle out."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import streamlit as st

from catalog.files import parse_yaml
from catalog.formats import fleet_jobs_from_dict
from planner.fleet import FleetResult, Policy
from planner.search.explain import describe_plan
from planner.types import Cluster, InputError
from ui import charts, session
from ui.markup import md
from ui.numbers import counts_times, dollars, duration, percent
from ui.planning import build_cluster, catalog, fleet_on
from ui.state import EXAMPLES_DIR
from ui.views.common import caption, grouped, outcome_on_button, show_error

JOBS_KEY = "fleet_jobs"                  # the jobs table (a DataFrame); session only, not in the link
OUTCOME_KEY = "fleet_outcome"            # (inputs key, Outcome)
EDITOR_VERSION_KEY = "fleet_jobs_editor"  # a new editor (key) after each edit is kept in JOBS_KEY
COLUMNS = ["name", "model", "global_batch", "seq_len", "tokens_b", "deadline_hours", "weight"]
DEFAULT_JOBS = [
    {"name": "llama-7b", "model": "llama-2-7b", "global_batch": 64, "seq_len": 2048, "tokens_b": 10.0,
     "deadline_hours": None, "weight": 1.0},
    {"name": "gpt-1.3b", "model": "gpt3-1.3b", "global_batch": 64, "seq_len": 2048, "tokens_b": 10.0,
     "deadline_hours": None, "weight": 1.0},
    {"name": "llama-13b", "model": "llama-2-13b", "global_batch": 64, "seq_len": 2048, "tokens_b": 10.0,
     "deadline_hours": None, "weight": 1.0},
]
POLICY_HELP = {
    Policy.THROUGHPUT: "most total weighted normalised throughput (each job's tokens/s over its best)",
    Policy.MAX_MIN: "fairest normalised throughput: raise the worst-off job's share, weights dividing it (Gavel)",
    Policy.MIN_COST: "fewest dollars to finish every job, each within its deadline hours (needs tokens)",
    Policy.FINISH_TIME: "fairest finish time: the smallest worst ratio of a job's time to finish to its time "
                        "alone on its best allocation (Themis; needs tokens)",
}
DEFAULT_SEARCH_S = 0.3
FIX_CELL = "Fix that cell of the jobs table and press Allocate again."


def default_jobs() -> pd.DataFrame:
    table = pd.DataFrame(DEFAULT_JOBS, columns=COLUMNS)
    return table.astype({"tokens_b": float, "deadline_hours": float, "weight": float})


def with_edits(table: pd.DataFrame, edits: dict) -> pd.DataFrame:
    """`table` with a data editor's edits (its state: edited_rows, added_rows, deleted_rows) applied."""
    df = table.reset_index(drop=True).copy()
    for row, changes in edits.get("edited_rows", {}).items():
        for column, value in changes.items():
            df.loc[int(row), column] = value
    df = df.drop(index=[int(i) for i in edits.get("deleted_rows", [])], errors="ignore")
    added = pd.DataFrame(edits.get("added_rows", []), columns=COLUMNS)
    return pd.concat([df, added], ignore_index=True) if len(added) else df.reset_index(drop=True)


def _keep_edits(widget_key: str) -> None:
    """The editor's edits into the table in session state, then a fresh editor over it: Streamlit drops a
    widget's state when a run leaves its page, the session state's table stays."""
    st.session_state[JOBS_KEY] = with_edits(st.session_state[JOBS_KEY], st.session_state[widget_key])
    st.session_state[EDITOR_VERSION_KEY] = st.session_state.get(EDITOR_VERSION_KEY, 0) + 1


FLEET_EXAMPLES = EXAMPLES_DIR / "fleet"


def fleet_examples() -> dict[str, Path]:
    """The repository's example jobs files (examples/fleet/*.yaml), by file name."""
    return {path.name: path for path in sorted(FLEET_EXAMPLES.glob("*.yaml"))}


def table_from_jobs_file(data: object, source: str) -> pd.DataFrame:
    """A jobs file (catalog.formats.fleet_jobs_from_dict's format) as the jobs table; raises InputError naming
    the job and field where the file is not a jobs file, or holds what the table cannot show (an inline
    model: the table picks catalog models)."""
    fleet_jobs_from_dict(data, catalog(), source=source)         # the file's own checks, its own words
    rows = []
    for i, job in enumerate(data["jobs"]):
        if not isinstance(job["model"], str):
            raise InputError(f"{source}: jobs[{i}].model", "is an inline model; the jobs table takes catalog "
                                                            "models only (plan this file with `hetplan fleet`)")
        tokens = job.get("tokens")
        rows.append({"name": job["name"], "model": job["model"], "global_batch": job["global_batch"],
                     "seq_len": job["seq_len"], "tokens_b": None if tokens is None else tokens / 1e9,
                     "deadline_hours": job.get("deadline_hours"), "weight": job.get("weight", 1.0)})
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.astype({"tokens_b": float, "deadline_hours": float, "weight": float})


def _replace_table(table: pd.DataFrame) -> None:
    st.session_state[JOBS_KEY] = table
    st.session_state[EDITOR_VERSION_KEY] = st.session_state.get(EDITOR_VERSION_KEY, 0) + 1


def _load_row() -> None:
    """Start the jobs table from an example jobs file of the repository, or an uploaded one."""
    examples = fleet_examples()
    c1, c2, c3 = st.columns([3, 1, 3], vertical_alignment="bottom")
    choice = c1.selectbox("start from an example jobs file", list(examples), index=None, key="w.fleet.example",
                          placeholder="examples/fleet/…", format_func=lambda name: f"examples/fleet/{name}")
    if c2.button("Load jobs", width="stretch", disabled=choice is None, key="fleet.load"):
        path = examples[choice]
        try:
            _replace_table(table_from_jobs_file(parse_yaml(path.read_text(), path.name), path.name))
        except InputError as e:
            show_error(rows_named(str(e)))
    upload = c3.file_uploader("or upload a jobs YAML", type=["yaml", "yml"], key="fleet_upload")
    if upload is not None and st.session_state.get("fleet_upload_done") != upload.file_id:
        st.session_state["fleet_upload_done"] = upload.file_id
        try:
            text = upload.getvalue().decode("utf-8")
            _replace_table(table_from_jobs_file(parse_yaml(text, upload.name), upload.name))
        except UnicodeDecodeError:
            show_error(f"{upload.name}: not a UTF-8 text file (expected a jobs YAML)")
        except InputError as e:
            show_error(f"{rows_named(str(e))}. The upload was not loaded: the table below is unchanged.")


def _jobs_table() -> pd.DataFrame:
    table = st.session_state.setdefault(JOBS_KEY, default_jobs())
    widget_key = f"fleet.jobs.{st.session_state.get(EDITOR_VERSION_KEY, 0)}"
    cfg = st.column_config
    return st.data_editor(table, key=widget_key, num_rows="dynamic", hide_index=True,
                          on_change=_keep_edits, args=(widget_key,), column_config={
        "name": cfg.TextColumn("name", help="letters, digits and . _ + -; names must differ"),
        "model": cfg.SelectboxColumn("model", options=sorted(catalog().models), help="a model of the catalog"),
        "global_batch": cfg.NumberColumn("global batch", min_value=1, step=1, help="sequences per iteration"),
        "seq_len": cfg.NumberColumn("seq len", min_value=1, step=1, help="tokens per sequence"),
        "tokens_b": cfg.NumberColumn("tokens (billions)", min_value=0.0,
                                     help="tokens to train; empty: no time or dollars to finish"),
        "deadline_hours": cfg.NumberColumn("deadline (hours)", min_value=0.0,
                                           help="min-cost: the job must finish within this; empty: none"),
        "weight": cfg.NumberColumn("weight", min_value=0.0, help="the job's share under the fairness policies"),
    })


def _value(x):
    """A table cell as the jobs file has it: empty as None, whole floats as int."""
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA or x is pd.NaT:
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def jobs_file(table: pd.DataFrame) -> dict:
    """The table's rows in the jobs-file format (catalog.formats.fleet_jobs_from_dict); blank rows dropped."""
    jobs = []
    for i, row in enumerate(table.to_dict("records")):
        cells = {c: _value(row.get(c)) for c in COLUMNS}
        if all(v in (None, "") for v in cells.values()):
            continue
        if not str(cells["name"] or "").strip():
            raise InputError(f"row {i + 1}, name", "is empty; give the job a name")
        job = {"name": str(cells["name"]).strip(), "model": cells["model"], "global_batch": cells["global_batch"],
               "seq_len": cells["seq_len"], "weight": 1.0 if cells["weight"] is None else cells["weight"]}
        if cells["tokens_b"] is not None:
            job["tokens"] = cells["tokens_b"] * 1e9
        if cells["deadline_hours"] is not None:
            job["deadline_hours"] = cells["deadline_hours"]
        jobs.append(job)
    return {"jobs": jobs}


def rows_named(message: str) -> str:
    """The planner's `jobs[i].field` as the table's `row i+1, field`."""
    return re.sub(r"jobs\[(\d+)\]\.(\w+)", lambda m: f"row {int(m.group(1)) + 1}, {m.group(2)}", message)


def _options() -> tuple[Policy, float]:
    left, right = st.columns(2)
    policy = left.selectbox("policy", list(Policy), format_func=lambda p: p.value, key="w.fleet.policy",
                            help="; ".join(f"**{p.value}**: {h}" for p, h in POLICY_HELP.items()))
    left.caption(POLICY_HELP[policy])
    seconds = right.number_input("search seconds per candidate", min_value=0.05, max_value=60.0,
                                 value=DEFAULT_SEARCH_S, step=0.1, format="%g", key="w.fleet.search_s",
                                 help="CPU seconds of hetplan's search for each job on each candidate allocation "
                                      "(up to 16 per job); more finds better plans, slower")
    return policy, seconds


def allocation_table(result: FleetResult, cluster: Cluster) -> pd.DataFrame:
    rows = []
    for a in result.allocations:
        tokens, cand = a.job.tokens, a.candidate
        hours, bill = cand.hours_to_finish(tokens), cand.dollars_to_finish(tokens)
        rows.append({"job": a.job.name, **{f"{p.name} GPUs": a.gpus.get(p.name, 0) for p in cluster.pools},
                     "where": "; ".join(s.describe() for s in a.placement),
                     "tokens/s": round(a.estimate.tokens_per_s),
                     "share of its best": percent(a.normalised_throughput),
                     "time to finish": "-" if hours is None else duration(hours * 3600),
                     "$ to finish": "-" if bill is None else dollars(bill),
                     "plan": counts_times(describe_plan(cand.plan))})
    return pd.DataFrame(rows)


def allocation_gpus(result: FleetResult, cluster: Cluster) -> pd.DataFrame:
    """Columns job, pool, gpus for charts.fleet_allocation: each job's GPUs per pool, then the idle ones."""
    rows = [{"job": a.job.name, "pool": p.name, "gpus": a.gpus.get(p.name, 0)}
            for a in result.allocations for p in cluster.pools]
    rows += [{"job": "idle", "pool": p.name, "gpus": result.idle_gpus.get(p.name, 0)} for p in cluster.pools]
    return pd.DataFrame(rows, columns=["job", "pool", "gpus"])


def _whole_nodes(n: int) -> str:
    return f"{n} whole node{'s' * (n != 1)}"


def _result(result: FleetResult, cluster: Cluster) -> None:
    st.subheader("Allocation")
    st.caption(f"Policy {md(result.policy.value)}: {len(result.allocations)} of "
               f"{len(result.allocations) + len(result.unscheduled)} jobs run. The program solved in "
               f"{duration(result.solve_time_s)} after {duration(result.plan_time_s)} planning candidates "
               f"({result.searches} searches).")
    if result.allocations:
        # the page's width, the long columns wrapping in place of a table wider than the page
        table = allocation_table(result, cluster)
        st.dataframe(table, hide_index=True, width="stretch", column_config=grouped(table, {
            "where": st.column_config.TextColumn("where", width="medium"),
            "plan": st.column_config.TextColumn("plan", width="large")}))
        caption("One row per job that runs: the GPUs it holds in each pool, where (whole nodes, or a half, a "
                "quarter ... of one node's GPUs, which it shares with other jobs; nodes and GPUs numbered from 0 "
                "within each pool), the tokens/s its plan "
                "reaches there, that as a share of its best over its candidates, and the hours and dollars to "
                "train its tokens (empty without tokens). The plan column is its shape: stages with layers and "
                "replicas (pool, tensor parallelism), then the knobs.")
        st.plotly_chart(charts.fleet_allocation(allocation_gpus(result, cluster)), width="stretch")
        caption("One bar per job and one for idle GPUs, each stacked by pool.")
    for name, why in result.unscheduled.items():
        st.warning(f"**{md(name)} does not run.** {md(why)}", icon=":material/hourglass_empty:")
    idle = {pool: n for pool, n in result.idle_gpus.items() if n}
    if idle:
        st.markdown("**Idle GPUs**\n" + "\n".join(
            f"- {n} of {md(pool)} ({_whole_nodes(result.idle_nodes.get(pool, 0))}): "
            f"{md(result.idle_reasons.get(pool, ''))}" for pool, n in idle.items()))
    else:
        st.markdown("**Idle GPUs**: none.")


def render() -> None:
    st.title("Fleet")
    st.write("Share the cluster as composed among several training jobs: each gets whole nodes, or a half, a "
             "quarter ... of one node's GPUs (so small jobs share a node), and a plan on them, chosen by a "
             "mixed-integer program under a policy over candidate allocations that hetplan's search scores. "
             "The jobs table lives in this browser session only (it is not in the share link).")
    state = session.get()
    try:
        cluster = build_cluster(state)
    except InputError as e:
        show_error(str(e))
        return
    _load_row()
    table = _jobs_table()
    policy, seconds = _options()
    try:
        jobs = jobs_file(table)
    except InputError as e:
        show_error(str(e), hint=FIX_CELL)
        return
    key = json.dumps([state.cluster, jobs, policy.value, seconds], sort_keys=True, default=str)
    result = outcome_on_button(
        OUTCOME_KEY, key, lambda: fleet_on(state.cluster, jobs, policy.value, seconds),
        label="Allocate", button_key="fleet.run", primary=True,
        spinner="Planning each job on its candidate allocations, then solving the program…",
        waiting=f"Up to {seconds:g} CPU seconds of search for each job on each of its candidate allocations "
                f"(jobs of the same model, batch and sequence length share their searches).",
        message=rows_named, input_hint=FIX_CELL)
    if result is not None:
        _result(result, cluster)
