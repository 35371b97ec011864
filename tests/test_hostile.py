"""Hostile input found by the attack in issue 12, one regression test per defect.

Output paths: `calibrate --out`, `run-local --measure` and `export --out` write only regular files
in place of regular files or of nothing; anything else at the path is refused with exit 2 and one
line naming the option, and a set of files is written completely or not at all.
"""
from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis.strategies import text as st_text

from planner.cli import files as output_files
from planner.cli import main
from planner.types import InputError
from tests.conftest import EXAMPLES, examples
from tests.test_browser import server  # noqa: F401  (the app on a loopback port)
from ui.markup import WORD_JOINER, md, plain
from ui.state import AppState, encode

CLUSTER = str(EXAMPLES / "single-node-8.yaml")
PLAN = str(EXAMPLES / "plans" / "single-node-8-small.json")
TORCHRUN_FILES = ["hostfile", "launch.sh", "rank_map.json"]

pytestmark = pytest.mark.timeout(120)


def refused(argv, expect, capsys) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert rc == 2, (argv, rc, err[:500])
    assert len(lines) == 1 and lines[0].startswith("hetplan: error: "), err[:500]
    assert "Traceback" not in err
    assert expect in lines[0], (expect, lines[0])
    return lines[0]


def measurements_file(catalog, tmp_path) -> str:
    from tests.test_calibrate import _document
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_document(catalog, 0.5)))
    return str(path)


# ----------------------------------------------------------------------------- special files at output paths

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def _device(path: Path) -> None:                # a copy of /dev/null; only root may make one
    if os.geteuid() != 0:
        pytest.skip("making a device file needs root")
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*divmod(os.stat("/dev/null").st_rdev, 256)))


def _link_to_fifo(path: Path) -> None:
    os.mkfifo(path.with_name("fifo"))
    path.symlink_to(path.with_name("fifo"))


def _folder(path: Path) -> None:
    path.mkdir()


SPECIAL = {"FIFO": (_fifo, "FIFO"), "socket": (_socket, "socket"), "device": (_device, "character device"),
           "link to a FIFO": (_link_to_fifo, "FIFO"), "folder": (_folder, "folder")}


def _writers(catalog, tmp_path, target: str) -> dict[str, list[str]]:
    return {"calibrate --out": ["calibrate", "--measurements", measurements_file(catalog, tmp_path), "--out", target],
            "run-local --measure": ["run-local", "--cluster", CLUSTER, "--plan", PLAN, "--measure", target],
            "export --out DIR/file": ["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "torchrun",
                                      "--out", str(Path(target).parent)]}


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("writer", ["calibrate --out", "run-local --measure", "export --out DIR/file"])
def test_output_writers_refuse_what_is_not_a_regular_file(kind, writer, catalog, tmp_path, capsys):
    make, expect = SPECIAL[kind]
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / ("hostfile" if writer.startswith("export") else "target")
    make(target)
    before = os.lstat(target)
    line = refused(_writers(catalog, tmp_path, str(target))[writer], expect, capsys)
    assert writer.split()[1].split("/")[0] in line            # names the option
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), "the path must be left alone"
    assert sorted(p.name for p in folder.iterdir()) == sorted({target.name, *(["fifo"] if "link" in kind else [])})


def test_export_out_that_is_a_file_or_a_fifo_is_refused(tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.write_text("keep")
    refused(["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "torchrun", "--out", str(plain)],
            "--out", capsys)
    assert plain.read_text() == "keep"
    os.mkfifo(tmp_path / "fifo")
    refused(["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "torchrun", "--out", str(tmp_path / "fifo")],
            "FIFO", capsys)


def test_output_at_a_link_to_a_regular_file_writes_the_file_and_keeps_the_link(catalog, tmp_path, capsys):
    real = tmp_path / "real.yaml"
    real.write_text("old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert main(["calibrate", "--measurements", measurements_file(catalog, tmp_path), "--out", str(link)]) == 0
    assert link.is_symlink() and "gpus:" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640, "a replaced file keeps its permissions"


def test_an_output_equal_to_an_input_is_refused(catalog, tmp_path, capsys):
    path = measurements_file(catalog, tmp_path)
    before = Path(path).read_text()
    refused(["calibrate", "--measurements", path, "--out", path], "is also an input", capsys)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    refused(["calibrate", "--measurements", path, "--out", str(link)], "is also an input", capsys)
    assert Path(path).read_text() == before
    refused(["run-local", "--cluster", CLUSTER, "--plan", PLAN, "--measure", PLAN], "--measure", capsys)


# ----------------------------------------------------------------------------- file system failures

def test_too_long_name_and_missing_parent_that_is_a_file(catalog, tmp_path, capsys):
    m = measurements_file(catalog, tmp_path)
    refused(["calibrate", "--measurements", m, "--out", str(tmp_path / ("x" * 300))], "too long", capsys)
    (tmp_path / "afile").write_text("")
    refused(["calibrate", "--measurements", m, "--out", str(tmp_path / "afile" / "o.yaml")], "not a folder", capsys)
    refused(["calibrate", "--measurements", m, "--out", str(tmp_path / "a\0b")], "not a usable file name", capsys)


@pytest.mark.parametrize("code, expect", [(errno.ENOSPC, "disk is full"), (errno.EACCES, "permission denied"),
                                          (errno.EROFS, "read-only"), (errno.EIO, "cannot write")])
def test_file_system_errors_are_one_line(code, expect, catalog, tmp_path, capsys, monkeypatch):
    def fail(*a, **k):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(output_files.tempfile, "mkstemp", fail)
    out = tmp_path / "o.yaml"
    refused(["calibrate", "--measurements", measurements_file(catalog, tmp_path), "--out", str(out)], expect, capsys)
    assert not out.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_is_one_line(catalog, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        refused(["calibrate", "--measurements", measurements_file(catalog, tmp_path), "--out",
                 str(folder / "o.yaml")], "permission denied", capsys)
    finally:
        folder.chmod(0o755)


def test_text_that_is_not_unicode_is_refused_before_any_file_is_written(tmp_path):
    files = {tmp_path / "a.txt": "fine", tmp_path / "b.txt": "x\ud800y"}
    with pytest.raises(InputError, match="not Unicode"):
        output_files.write_files(files, "--out")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- a set of files: all or none

def _export(out: Path) -> list[str]:
    return ["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "torchrun", "--out", str(out)]


def _fail_on_call(monkeypatch, name: str, n: int, action) -> None:
    original = getattr(output_files, name) if name != "replace" else os.replace
    calls = []

    def wrapper(*args, **kw):
        calls.append(args)
        if len(calls) == n:
            action()
        return original(*args, **kw)
    if name == "replace":
        monkeypatch.setattr(output_files.os, "replace", wrapper)
    else:
        monkeypatch.setattr(output_files, name, wrapper)


def _full_disk():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_export_writes_the_whole_set(tmp_path, capsys):
    out = tmp_path / "new" / "deeper"
    assert main(_export(out)) == 0
    assert sorted(p.name for p in out.iterdir()) == TORCHRUN_FILES


@pytest.mark.parametrize("where", ["_write_temporary", "replace"])
def test_export_failing_on_its_second_file_writes_none(where, tmp_path, capsys, monkeypatch):
    out = tmp_path / "new" / "deeper"
    _fail_on_call(monkeypatch, where, 2, _full_disk)
    refused(_export(out), "disk is full", capsys)
    assert not (tmp_path / "new").exists(), "folders made for the set are removed again"


@pytest.mark.parametrize("where", ["_write_temporary", "replace"])
def test_export_failing_midway_keeps_the_previous_set(where, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    for name in TORCHRUN_FILES:
        (out / name).write_text(f"old {name}")
    _fail_on_call(monkeypatch, where, 3, _full_disk)
    refused(_export(out), "disk is full", capsys)
    assert {p.name: p.read_text() for p in out.iterdir()} == {n: f"old {n}" for n in TORCHRUN_FILES}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_export_interrupted_midway_writes_none(sig, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    _fail_on_call(monkeypatch, "_write_temporary", 2, lambda: os.kill(os.getpid(), sig))
    previous = signal.getsignal(signal.SIGTERM)
    assert main(_export(out)) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) == previous, "the handler is put back"


def test_export_interrupted_during_the_renames_finishes_the_set(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    _fail_on_call(monkeypatch, "replace", 1, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert main(_export(out)) == 130
    assert sorted(p.name for p in out.iterdir()) == TORCHRUN_FILES


def test_export_killed_in_a_real_process_leaves_no_temporaries(tmp_path):
    """SIGTERM from outside while `hetplan export` writes: complete set or nothing, never a temporary."""
    import subprocess
    import time
    out = tmp_path / "out"
    code = ("import os, signal, sys, time\n"
            "from planner.cli import files, main\n"
            "original = files._write_temporary\n"
            "def slow(*a):\n"
            "    print('writing', flush=True); time.sleep(0.5); return original(*a)\n"
            "files._write_temporary = slow\n"
            f"sys.exit(main({_export(out)!r}))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(Path(__file__).resolve().parent.parent))
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == TORCHRUN_FILES


# ----------------------------------------------------------------------------- Markdown injection

HOSTILE_NAMES = ["[x](http://evil)", "![i](http://evil/i.png)", "<img src=x onerror=alert(1)>", "*bold* _it_",
                 "`code`", "$math$ $$x$$", "line\nbreak\n# heading", "www.evil.com", "http://evil.com/x",
                 "a@evil.com", ":red[x] :material/home: :smile:", "~~s~~ | a | b |", "1. list", "- item",
                 "> quote", "<https://evil>", "&#91;x&#93;(http://e)", "x\ud800y", "a\\", "\u202eevil", "---"]


def _unescaped(text: str) -> str:
    """What Markdown shows for `md`'s output: backslash escapes resolved, word joiners dropped."""
    return re.sub(r"\\(.)", r"\1", text).replace(WORD_JOINER, "")


def _structure_free(text: str) -> bool:
    """No character outside a backslash escape that Markdown or Streamlit could read as structure."""
    plain_text = re.sub(r"\\.", "", text)
    return (not set(plain_text) & set("[]()!<>*_`$~|:&{}#+\\\n\r")
            and not re.search(r"(?i)www\.|://|@", plain_text)
            and not re.match(r"\s*\d*[-.,/%'\";?=]", text))


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_md_shows_the_text_as_it_is(name):
    out = md(name)
    assert _structure_free(out), out
    assert _unescaped(out) == plain(name)
    assert "\n" not in out and "\ud800" not in out and "\u202e" not in out


@settings(max_examples=examples(300))
@given(st_text())
def test_md_shows_any_text_as_it_is(text):
    out = md(text)
    assert _structure_free(out), out
    assert _unescaped(out) == plain(text).replace(WORD_JOINER, "")     # (the text's own joiners stay, unseen)


def _hostile_state(name: str):
    from ui.state import AppState, presets
    cluster = presets()["single-node-8"]
    cluster = dict(cluster, name=name, pools=[dict(p, name=f"p{k}_x_") for k, p in enumerate(cluster["pools"])])
    model = {"id": "custom", "name": name, "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 1024,
             "vocab": 1000}
    return AppState(cluster=cluster, model=model, global_batch=16, seq_len=256)


@pytest.mark.parametrize("name", ["[x](http://evil) ![i](http://evil/i.png)", "<img src=x> *b* `c` $m$ :red[r]"])
def test_sidebar_shows_names_from_a_link_as_text(name):
    from tests.app_helpers import new_app, ok
    from ui.state import encode
    at = ok(new_app(encode(_hostile_state(name))).run())
    sidebar = "\n".join(m.value for m in at.sidebar.markdown)
    assert f"**Cluster** {md(name)}:" in sidebar and f"**Model** {md(name)}" in sidebar, sidebar
    assert name not in sidebar


def test_link_warnings_quote_values_as_text():
    from tests.app_helpers import new_app, ok
    at = ok(new_app({"preset": "[x](http://evil)", "batch": "![i](http://evil/i.png)"}).run())
    warnings = " ".join(w.value for w in at.warning)
    assert "unknown preset" in warnings and "](http" not in warnings.replace("\\]\\(http", "")


def test_markdown_report_shows_names_as_text(catalog):
    from catalog import cluster_from_dict, plan_from_dict
    from planner.cost import evaluate
    from ui.report import to_markdown
    name = "[x](http://evil) ![i](http://evil/i.png) | <b>"
    state = _hostile_state(name)
    cluster = cluster_from_dict(state.cluster, catalog)
    plan_dict = {"format": "hetplan.plan/1", "model": state.model, "global_batch": 16, "seq_len": 256,
                 "micro_batch": 1, "precision": "bf16", "zero_stage": 0, "recompute": "none",
                 "sequence_parallel": False, "schedule": "1f1b", "interleave": 1,
                 "stages": [{"layers": [0, 4], "replicas": [{"pool": "p0_x_", "tp": 1}]}]}
    plan = plan_from_dict(plan_dict, catalog)
    text = to_markdown(cluster, plan, evaluate(cluster, plan))
    assert "](" not in text.replace("\\]\\(", "") and "<b>" not in text
    assert md(name) in text and "p0\\_x\\_" in text
    assert all(line.count(" | ") + 2 == line.count("|") - line.count("\\|") for line in text.splitlines()
               if line.startswith("| ")), "no cell splits into two"


@pytest.mark.browser
@pytest.mark.flaky(reruns=2, reruns_delay=2)       # a real browser on a loaded machine (tests/test_browser.py)
def test_names_from_a_link_render_as_text_in_a_real_browser(server):
    """What Streamlit's Markdown renderer makes of escaped names: text, no link, image or formula."""
    from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, STEP_TIMEOUT_MS, _playwright
    from ui.state import encode
    sync_playwright = _playwright()
    name = "[x](http://evil) ![i](http://evil/i.png) <img src=x> $m$ :material/home: www.evil.com a@evil.com"
    params = encode(_hostile_state(name))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(STEP_TIMEOUT_MS)
            page.goto(f"{server}/?v={params['v']}&s={params['s']}")
            sidebar = page.get_by_test_id("stSidebarUserContent")
            sidebar.get_by_text("Model", exact=False).first.wait_for()
            page.get_by_text("8 GPUs", exact=False).first.wait_for()
            text = sidebar.inner_text().replace(WORD_JOINER, "")
            assert f"Cluster {name}: 8 GPUs" in text and f"Model {name}" in text, text
            assert page.locator("a[href*=evil], img[src*=evil], img[src=x], .katex").count() == 0
            assert sidebar.locator("a, img").count() == 0
        finally:
            browser.close()


# ----------------------------------------------------------------------------- app crashes

SURROGATE = "x\ud800y"


@pytest.mark.parametrize("where", ["cluster name", "model name", "key"])
def test_a_link_with_a_lone_surrogate_opens_the_defaults_with_a_warning(where):
    from tests.app_helpers import new_app, ok, shown
    from ui.state import AppState, decode, encode
    state = _hostile_state("fine")
    if where == "cluster name":
        state = replace(state, cluster=dict(state.cluster, name=SURROGATE))
    elif where == "model name":
        state = replace(state, model=dict(state.model, name=SURROGATE))
    else:
        state = replace(state, cluster=dict(state.cluster, **{SURROGATE: 1}))
    params = encode(state)
    decoded, warnings = decode(params)
    assert decoded == AppState() and "lone surrogate" in warnings[0]
    at = ok(new_app(params).run())
    assert "lone surrogate" in shown(at.warning[0].value)


@pytest.mark.parametrize("text", ['name: "x\\ud800y"\npools: []\n', '"x\\udc00": 1\n'])
def test_an_upload_with_a_lone_surrogate_is_refused(text):
    from ui.views.compose import parse_cluster_upload
    with pytest.raises(InputError, match="lone surrogate"):
        parse_cluster_upload("c.yaml", text.encode())


def test_a_plan_upload_with_a_lone_surrogate_is_refused():
    from ui.state import presets
    from ui.views.whatif import parse_plan_upload
    plan = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    text = json.dumps(dict(plan, name=SURROGATE))          # json.dumps writes it as the escape \ud800
    with pytest.raises(InputError, match="lone surrogate"):
        parse_plan_upload("p.json", text.encode(), presets()["single-node-8"])


def test_cli_files_with_a_lone_surrogate_are_refused(tmp_path, capsys):
    cluster = tmp_path / "c.yaml"
    cluster.write_text((EXAMPLES / "single-node-8.yaml").read_text().replace("name: single-node-8",
                                                                              'name: "x\\ud800y"'))
    refused(["export", "--cluster", str(cluster), "--plan", PLAN, "--to", "torchrun"], "lone surrogate", capsys)


def _incompressible(n: int) -> str:
    import random
    rng = random.Random(12)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(n))


def test_states_too_large_for_a_link_leave_out_the_plan_then_everything():
    from ui.state import MAX_PARAM_CHARS, encode_for_link
    state = _hostile_state("fine")
    assert encode_for_link(state)[1] == ""
    plan = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    big_plan = replace(state, plan=dict(plan, notes=_incompressible(MAX_PARAM_CHARS)))
    params, left_out = encode_for_link(big_plan)
    assert left_out == "plan" and params == encode(state)
    huge = replace(state, cluster=dict(state.cluster, name=_incompressible(MAX_PARAM_CHARS)))
    assert encode_for_link(huge) == ({}, "everything")


def test_a_name_too_long_for_the_link_does_not_break_the_app():
    """A link near the limit whose state grows past it (here: a longer cluster name typed in),
    or a large upload: every rerun still works, and the sidebar says what the link leaves out."""
    from tests.app_helpers import new_app, ok, shown
    from ui.state import MAX_PARAM_CHARS, encode_for_link
    state = _hostile_state("fine")

    def named(n: int):
        return replace(state, cluster=dict(state.cluster, name=_incompressible(n)))
    n = int(MAX_PARAM_CHARS * 0.9)
    while encode_for_link(named(n + 100))[1] == "":
        n += 100
    params = encode(named(n))
    assert MAX_PARAM_CHARS - 400 < len(params["s"]) <= MAX_PARAM_CHARS
    at = ok(new_app(params).run())
    at.text_input(key="w.cluster_name").set_value(_incompressible(n + 1000)).run()
    ok(at)
    assert "too large for a link" in shown(" ".join(c.value for c in at.sidebar.caption))
    at.run()
    ok(at)
    ok(at.switch_page("ui/pages/export.py").run())


def test_timeline_of_many_one_replica_stages():
    """More than 24 workers but one replica a stage: the rows slider has nothing to choose (min = max)."""
    from tests.app_helpers import new_app, ok
    from ui.state import AppState
    cluster = {"name": "wide", "pools": [{"name": "a100", "gpu": "a100-80gb-sxm", "nodes": 4, "gpus_per_node": 8,
                                          "inter_node_gbps": 200}]}
    plan = {"format": "hetplan.plan/1", "model": "gpt3-2.7b", "global_batch": 32, "seq_len": 256, "micro_batch": 1,
            "precision": "bf16", "zero_stage": 0, "recompute": "none", "sequence_parallel": False,
            "schedule": "1f1b", "interleave": 1,
            "stages": [{"layers": [k, k + 1], "replicas": [{"pool": "a100", "tp": 1}]} for k in range(32)]}
    state = AppState(cluster=cluster, model="gpt3-2.7b", global_batch=32, seq_len=256, precision="bf16", plan=plan)
    at = ok(new_app(encode(state)).run())
    at.switch_page("ui/pages/timeline.py").run()
    ok(at)
    assert at.title[0].value == "Timeline" and not at.slider
    assert at.get("plotly_chart")


def test_download_names_are_safe_file_names():
    from ui.markup import MAX_FILE_STEM_CHARS, file_stem
    assert file_stem("../../etc/passwd") == "etc_passwd"
    assert file_stem("a/b\\c d\ud800") == "a_b_c_d"
    assert file_stem("...") == "cluster" and file_stem("") == "cluster"
    assert len(file_stem("x" * 10_000)) == MAX_FILE_STEM_CHARS


# ----------------------------------------------------------------------------- exit 2, not an internal error

BIG = "9" * 4300                                   # as many digits as Python will read


def _cluster_file(tmp_path, old: str, new: str) -> str:
    text = (EXAMPLES / "single-node-8.yaml").read_text()
    assert old in text
    path = tmp_path / "c.yaml"
    path.write_text(text.replace(old, new, 1))
    return str(path)


@pytest.mark.parametrize("old, new, expect", [
    ("nodes: 1", f"nodes: {BIG}", "pools[0].nodes: must be at most 100000"),
    ("nodes: 1", "nodes: 010", "leading zero, which YAML 1.1 reads as octal (8)"),
    ("inter_node_gbps: 100", "inter_node_gbps: 1:00", "base-60 number in YAML 1.1 (read as 60)"),
    ("inter_node_gbps: 100", "inter_node_gbps: 1:30.5", "base-60"),
    ("gpus_per_node: 4", f"gpus_per_node: {BIG}", "gpus_per_node"),
])
def test_cluster_numbers(old, new, expect, tmp_path, capsys):
    line = refused(["evaluate", "--cluster", _cluster_file(tmp_path, old, new), "--plan", PLAN], expect, capsys)
    assert len(line) < 400


def _plan_file(tmp_path, **changes) -> str:
    plan = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    plan.update(changes)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    return str(path)


@pytest.mark.parametrize("changes, expect", [
    ({"zero_stage": True}, "zero_stage: must be a whole number, not true or false"),
    ({"micro_batch": int(BIG)}, "micro_batch: must be at most 10000000"),
    ({"interleave": int(BIG)}, "interleave"),
    ({"global_batch": "64"}, "global_batch: must be a whole number"),
    ({"sequence_parallel": "no"}, "sequence_parallel"),
])
@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_plan_values(changes, expect, command, tmp_path, capsys):
    argv = [command, "--cluster", CLUSTER, "--plan", _plan_file(tmp_path, **changes)]
    line = refused(argv + (["--to", "deepspeed"] if command == "export" else []), expect, capsys)
    assert len(line) < 400


def test_stage_values_of_4300_digits(tmp_path, capsys):
    plan = json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())
    plan["stages"][0]["replicas"][0]["samples"] = int(BIG)
    plan["stages"][1]["layers"] = [9, int(BIG)]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(plan))
    assert len(refused(["evaluate", "--cluster", CLUSTER, "--plan", str(path)], "stages[", capsys)) < 400


GPU_ENTRY = {"name": "tiny", "vendor": "x", "bf16_fp16_tflops": 100.0, "fp32_tflops": 10.0, "bf16": True,
             "memory_gib": 80.0, "memory_bw_gb_s": 1000.0, "link": "nvlink3", "link_gb_s_per_direction": 100.0,
             "pcie_gen": 4, "power_w": 400.0, "price_per_gpu_hour": 1.0, "efficiency": 0.5}


@pytest.mark.parametrize("field", ["bf16_fp16_tflops", "fp32_tflops", "memory_bw_gb_s", "link_gb_s_per_direction",
                                   "memory_gib"])
def test_catalog_floors(field, tmp_path, capsys):
    import yaml
    catalog = tmp_path / "cat.yaml"
    catalog.write_text(yaml.safe_dump({"gpus": {"tiny": {**GPU_ENTRY, field: 1e-300}}}))
    cluster = _cluster_file(tmp_path, "gpu: a100-80gb-sxm", "gpu: tiny")
    refused(["--catalog", str(catalog), "evaluate", "--cluster", cluster, "--plan", PLAN],
            f"gpus.tiny.{field}: must be", capsys)


def test_plan_command_does_not_advise_an_option_it_lacks(capsys):
    """9,999,999 sequences (odd: micro-batches of 1 only) make every plan's schedule too long to simulate:
    refused under Megatron-LM and under the best engine alike, saying what `plan` takes (--global-batch),
    not a plan file's micro_batch. 10^7 sequences leave micro-batches up to 128, and the search answers
    with a plan of few enough passes (settings past the limit are outside its space, space.allows)."""
    args = ["plan", "--cluster", CLUSTER, "--model", "gpt3-1.3b", "--seq-len", "128", "--time-limit", "30"]
    for engine in (["--engine", "megatron"], []):
        line = refused(args + ["--global-batch", "9999999"] + engine, "--global-batch", capsys)
        assert "micro_batch" not in line and "smaller --global-batch" in line, line
    assert main(args + ["--global-batch", "10000000", "--engine", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "micro_batch" not in out and "tokens/s" in out, out[:2000]


@pytest.mark.parametrize("args, expect", [
    (["--hidden", "0"], "--hidden: must be from 1"), (["--seq-len", "-1"], "--seq-len: must be from 1"),
    (["--seq-len", "0"], "--seq-len"), (["--timeout", "nan"], "--timeout"), (["--timeout", "-1"], "--timeout"),
    (["--timeout", "inf"], "--timeout"), (["--iterations", "1000000000"], "--iterations: must be from 1 to 10,000"),
    (["--iterations", "0"], "--iterations"), (["--vocab", "0"], "--vocab"), (["--hidden", BIG], "--hidden"),
])
def test_run_local_arguments(args, expect, capsys):
    refused(["run-local", "--cluster", CLUSTER, "--plan", PLAN] + args, expect, capsys)


@pytest.mark.torch
def test_a_failing_worker_is_one_line_without_its_traceback():
    pytest.importorskip("torch")
    from catalog import load_catalog
    from catalog.formats import load_cluster_file, load_plan_file
    from planner.runtime.launch import WorkerFailed, run_local
    catalog = load_catalog()
    cluster, plan = load_cluster_file(CLUSTER, catalog), load_plan_file(PLAN, catalog)
    with pytest.raises(WorkerFailed) as e:
        run_local(cluster, plan, iterations=1, dtype="no-such-dtype", timeout_s=60)
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value) and len(str(e.value)) < 400
    assert "no-such-dtype" in str(e.value)


def _measurements(catalog, tmp_path, **record) -> str:
    from tests.test_calibrate import _document
    doc = _document(catalog, 0.5)
    doc["records"][0].update(record)
    doc["records"][0] = {k: v for k, v in doc["records"][0].items() if v is not None}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("record, expect", [
    ({"tp": 0}, "records[0].tp: must be from 1"), ({"tp": -2}, "records[0].tp"),
    ({"layers": 0}, "records[0].layers: must be from 1"), ({"layers": -8}, "records[0].layers"),
    ({"layers": 10**6}, "records[0].layers: must be from 1 to 32"),
    ({"seq_len": 0}, "records[0].seq_len"), ({"micro_batch": 0}, "records[0].micro_batch"),
    ({"forward_s": 1e308, "backward_s": 1e308}, "records[0].forward_s: must be from 0 to"),
    ({"forward_s": -1.0}, "records[0].forward_s"), ({"backward_s": "0.1"}, "records[0].backward_s: must be a number"),
    ({"tp": "2"}, "records[0].tp: must be a whole number, got '2'"), ({"tp": True}, "records[0].tp"),
    ({"layers": 8.0}, "records[0].layers"),
    ({"flash_attention": "no"}, "records[0].flash_attention: must be true or false"),
    ({"has_head": 1}, "records[0].has_head"), ({"recompute": "some"}, "records[0].recompute: must be one of"),
    ({"gpu": "no-such-gpu"}, "records[0].gpu: 'no-such-gpu' is not in the catalog"), ({"gpu": 7}, "records[0].gpu"),
    ({"layers": None}, "records[0]: is missing 'layers'"), ({"tp": int(BIG)}, "records[0].tp"),
    ({"forward_s": 0.0, "backward_s": 0.0},
     "records[0].forward_s: forward_s + backward_s - tp_comm_s must be positive"),
    ({"model": {"layers": -1}}, "records[0].model"), ({"model": "no-such-model"}, "model"),
])
def test_calibrate_records(record, expect, catalog, tmp_path, capsys):
    line = refused(["calibrate", "--measurements", _measurements(catalog, tmp_path, **record)], expect, capsys)
    assert "m.json: records[0]" in line or "m.json: model" in line
    assert len(line) < 600


def test_a_link_with_a_huge_batch_opens_the_defaults_with_a_warning():
    from ui.state import AppState, decode
    state, warnings = decode(encode(AppState(global_batch=int(BIG[:-1]))))
    assert state == AppState() and "global_batch must be a whole number from 1 to 10,000,000" in warnings[0]
    assert len(warnings[0]) < 300


@pytest.mark.parametrize("bad, expect", [({"layers": -1}, "custom model: layers: must be a positive number"),
                                         ({"layers": "abc"}, "custom model: layers: must be a whole number"),
                                         ({"layers": 1.5}, "custom model: layers"),
                                         ({"mlp": "weird"}, "custom model: mlp")])
def test_a_link_with_a_bad_custom_model_says_so_instead_of_clamping_it(bad, expect):
    """The Compose page's number fields would turn layers -1 into 1 (and crash on "abc") without a word."""
    from tests.app_helpers import new_app, ok, shown
    model = {"id": "c", "name": "c", "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 1024,
             "vocab": 1000, **bad}
    at = ok(new_app(encode(AppState(model=model))).run())
    assert expect in shown(at.warning[0].value)
    assert at.session_state["app_state"].model == AppState().model


def test_a_large_yaml_document_is_refused_before_it_is_parsed(tmp_path, capsys):
    """Pure-Python YAML costs about 10 s of CPU per MB: a 10 MiB file under the file limit took minutes."""
    import time
    from catalog.files import MAX_YAML_CHARS, parse_yaml
    text = "\n".join(f"k{i}: {{a: 1, b: [1, 2]}}" for i in range(MAX_YAML_CHARS // 20))
    start = time.process_time()
    with pytest.raises(InputError, match="characters of YAML, over the limit"):
        parse_yaml(text, "upload.yaml")
    assert time.process_time() - start < 1
    path = tmp_path / "c.yaml"
    path.write_text("name: x\npools: []\n" + text)
    refused(["evaluate", "--cluster", str(path), "--plan", PLAN], "characters of YAML", capsys)


@pytest.mark.parametrize("args, expect", [
    (["--time-limit", "inf"], "--time-limit: must be more than 0 and at most 86400 seconds"),
    (["--time-limit", "nan"], "--time-limit"), (["--time-limit", "0"], "--time-limit"),
    (["--objective", "deadline", "--tokens", "1e9", "--deadline-hours", "inf"], "--deadline-hours"),
    (["--deadline-hours", "nan"], "--deadline-hours"), (["--top", "1000000000"], "--top: must be from 1 to 1,000"),
    (["--top", "0"], "--top"),
])
def test_plan_arguments_are_bounded(args, expect, capsys):
    """An unbounded search (--time-limit inf) or answer (--top 10^9) is a typo, refused at once."""
    refused(["plan", "--cluster", CLUSTER, "--model", "gpt3-1.3b", "--global-batch", "64", "--seq-len", "2048"]
            + args, expect, capsys)


# ----------------------------------------------------------------------------- issue 20: outputs and inputs

@pytest.mark.parametrize("input_name, option", [("closest-plan.json", "--plan"), ("hostfile", "--cluster")])
def test_export_out_never_overwrites_its_own_inputs(input_name, option, tmp_path, capsys):
    """A plan or cluster file inside --out under the name of a file the export writes is refused, before the
    search, as plan, calibrate and run-local refuse an output that is an input."""
    out = tmp_path / "out"
    out.mkdir()
    source = PLAN if option == "--plan" else CLUSTER
    kept = out / input_name
    kept.write_text(Path(source).read_text())
    argv = ["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "megatron", "--out", str(out)]
    argv[argv.index(option) + 1] = str(kept)
    refused(argv, "is also an input", capsys)
    assert kept.read_text() == Path(source).read_text() and sorted(p.name for p in out.iterdir()) == [input_name]


def test_a_fifo_in_the_export_folder_is_refused_before_the_search(tmp_path, capsys, monkeypatch):
    """Refused before anything runs (the docs say so), and stderr never says a file "is written" when none was."""
    import planner.export as export_module
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "closest-plan.json")

    def no_search(*a, **k):
        raise AssertionError("the export ran before its output paths were checked")
    monkeypatch.setattr(export_module, "export_result", no_search)
    line = refused(["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "megatron", "--out", str(out)], "FIFO",
                   capsys)
    assert "closest-plan.json" in line


def test_a_closest_plan_is_said_to_be_written_only_when_it_is(tmp_path, capsys):
    hetplan_plan = ["export", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--plan",
                    str(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json"), "--to", "deepspeed", "--time-limit", "2"]
    assert main(hetplan_plan) == 0
    out, err = capsys.readouterr()
    if "closest-plan.json" not in out:
        pytest.skip("DeepSpeed runs this plan as it is")
    assert "written beside" not in err and "printed with them as closest-plan.json" in err


@pytest.mark.parametrize("command", ["plan", "calibrate", "export"])
def test_a_dangling_link_at_an_output_path_is_refused_and_nothing_is_created(command, catalog, tmp_path, capsys):
    target = tmp_path / "missing" / "deeper" / "file"
    link = tmp_path / "link"
    if command == "export":
        (tmp_path / "out").mkdir()
        link = tmp_path / "out" / "hostfile"
    link.symlink_to(target)
    argv = {"plan": ["plan", "--cluster", CLUSTER, "--model", "llama-2-7b", "--global-batch", "8",
                     "--seq-len", "1024", "--out", str(link)],
            "calibrate": ["calibrate", "--measurements", measurements_file(catalog, tmp_path), "--out", str(link)],
            "export": ["export", "--cluster", CLUSTER, "--plan", PLAN, "--to", "torchrun", "--out",
                       str(tmp_path / "out")]}[command]
    line = refused(argv, "symbolic link", capsys)
    assert "does not exist" in line and not (tmp_path / "missing").exists()
    if command == "export":
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hostfile"]


def test_export_out_through_a_missing_folder_and_back_says_so(tmp_path, capsys):
    line = refused(_export(tmp_path / "o" / ".." / "x"), "does not exist", capsys)
    assert "a part of the path is a file" not in line and "`..`" in line
    assert "not a usable" not in line and "PosixPath" not in line      # said once, not wrapped as a bad name
    assert not (tmp_path / "o").exists() and not (tmp_path / "x").exists()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    line = refused(_export(tmp_path / "dangling"), "symbolic link", capsys)
    assert not (tmp_path / "nowhere").exists()


def test_export_hung_up_midway_writes_none(tmp_path, capsys, monkeypatch):
    """SIGHUP (a closed terminal) is handled as SIGTERM: no temporaries, no mixed set."""
    out = tmp_path / "out"
    out.mkdir()
    for name in TORCHRUN_FILES:
        (out / name).write_text(f"old {name}")
    _fail_on_call(monkeypatch, "_write_temporary", 2, lambda: os.kill(os.getpid(), signal.SIGHUP))
    previous = signal.getsignal(signal.SIGHUP)
    assert main(_export(out)) == 130
    assert {p.name: p.read_text() for p in out.iterdir()} == {n: f"old {n}" for n in TORCHRUN_FILES}
    assert signal.getsignal(signal.SIGHUP) == previous


def test_export_hung_up_during_the_renames_finishes_the_set(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    _fail_on_call(monkeypatch, "replace", 1, lambda: os.kill(os.getpid(), signal.SIGHUP))
    assert main(_export(out)) == 130
    assert sorted(p.name for p in out.iterdir()) == TORCHRUN_FILES


# ----------------------------------------------------------------------------- issue 20: numbers out of range

@pytest.mark.parametrize("argv", [
    ["evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--tokens", "1e308", "--json"],
    ["plan", "--cluster", CLUSTER, "--model", "llama-2-7b", "--global-batch", "8", "--seq-len", "1024",
     "--tokens", "1e308", "--json"],
    ["replan", "--cluster", CLUSTER, "--plan", PLAN, "--tokens-remaining", "1e308", "--json"]])
def test_a_token_count_beyond_the_limit_is_refused_up_front(argv, capsys):
    """1e308 tokens made every duration inf: half a JSON object, then an internal error."""
    line = refused(argv, "up to 1e+18", capsys)
    assert argv[-3] in line
    assert capsys.readouterr().out == ""


def test_the_token_limit_gives_finite_json(capsys):
    assert main(["evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--tokens", "1e18", "--json"]) == 0
    json.loads(capsys.readouterr().out)          # allow_nan=False in print_json: no inf, no NaN


@pytest.mark.parametrize("availabilities", [(1e-200, 1e-200), (5e-324,)])
def test_spot_pools_whose_joint_availability_underflows_are_refused(availabilities, tmp_path, capsys):
    """Each valid alone; together (or at 4.9e-324) the product underflows and $/token divides by 0."""
    import yaml
    pools = [{"name": f"p{k}", "gpu": "a100-80gb-sxm", "nodes": 1, "gpus_per_node": 4, "inter_node_gbps": 100,
              "spot": True, "availability": a} for k, a in enumerate(availabilities)]
    cluster = tmp_path / "spot.yaml"
    cluster.write_text(yaml.safe_dump({"name": "spot", "pools": pools}))
    refused(["plan", "--cluster", str(cluster), "--model", "llama-2-7b", "--global-batch", "8", "--seq-len", "1024",
             "--time-limit", "5", "--json"], "would in effect never run", capsys)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("tp", [3, 5, 6, 7])
@pytest.mark.parametrize("command", ["evaluate", "export", "run-local"])
def test_a_tp_that_does_not_divide_the_heads_is_refused(tp, command, tmp_path, capsys):
    """A 32-head model with tp 3: Megatron refuses it at start-up and run-local shrank the model to 3 heads."""
    plan = {"format": "hetplan.plan/1", "model": "llama-2-7b", "global_batch": 8, "seq_len": 1024, "micro_batch": 1,
            "precision": "bf16", "stages": [{"layers": [0, 32], "replicas": [{"pool": "a100", "tp": tp}]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    argv = {"evaluate": ["evaluate"], "export": ["export", "--to", "megatron"], "run-local": ["run-local"]}[command]
    line = refused(argv + ["--cluster", CLUSTER, "--plan", str(path)], "stages[0].replicas[0].tp", capsys)
    assert f"tp {tp} does not divide" in line and "heads (32)" in line


def test_an_exact_export_that_does_not_fit_is_refused_with_its_figures_unless_forced(tmp_path, capsys):
    """A hand-edited plan the engine runs but whose GPUs it overflows was written without a word."""
    plan = {"format": "hetplan.plan/1", "model": "llama-2-13b", "global_batch": 8, "seq_len": 1024, "micro_batch": 1,
            "precision": "bf16", "stages": [{"layers": [0, 40], "replicas": [{"pool": "a100", "tp": 1}]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    argv = ["export", "--cluster", CLUSTER, "--plan", str(path), "--to", "megatron", "--out", str(tmp_path / "out")]
    line = refused(argv, "does not fit", capsys)
    assert "GiB" in line and "--force" in line and not (tmp_path / "out").exists()
    assert main(argv + ["--force"]) == 0
    err = capsys.readouterr().err
    assert "does not fit" in err and "(--force)" in err and (tmp_path / "out" / "megatron_args.sh").exists()
