"""What a run imports before its first step (issue 58 goal 6): torch, numpy and pydantic, not the
heavy libraries that only some commands use. scipy, sklearn, plotly, ArviZ (with xarray and
pandas), streamlit and torch's compiler are imported inside the functions that use them, so
``python -m jobs run --help`` and a banana run do not pay for them. No timings here: a loaded
machine would make them flaky; bench/RESULTS.md and the issue's note hold the numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "scipy",
    "sklearn",
    "plotly",
    "arviz_stats",
    "arviz_base",
    "xarray",
    "pandas",
    "streamlit",
    "torch._dynamo",
    "torch._inductor",
)

# In a fresh interpreter: the modules of HEAVY loaded (1) once ``python -m jobs`` has imported
# its commands and built its parser (``run --help``), (2) once a banana run's spec is validated
# and its loop imported, and (3) at the run's last progress report, after its last step and
# before its summary (whose ESS and R-hat need arviz-stats): the report raises to end it there.
PROBE = """
import json, os, sys
HEAVY = %r

def loaded():
    return [name for name in HEAVY if name in sys.modules]  # a submodule loads its package

import jobs.__main__
from cli.main import build_parser
parser = build_parser()
seen = {"help": loaded()}

from cli.runs import validated
from runs.loop import execute
from runs.store import Store
args = parser.parse_args(
    ["run", "--target", "banana", "--sampler", "sgld", "--param", "step_size=1e-2",
     "--chains", "64", "--steps", "200", "--compile", "never", "--json"]
)
spec = validated(args)
store = Store()
run_id = store.create(spec.model_dump(mode="json"))
store.claim(os.getpid(), run_id)
seen["spec"] = loaded()

class Done(Exception):
    pass

def report(p):
    if p.steps_done == p.steps_total:
        seen["sampled"] = loaded()
        raise Done

try:
    execute(spec, store, run_id, lambda: False, report)
except Done:
    pass
print(json.dumps(seen))
"""


def test_a_run_imports_no_heavy_library_before_its_summary(tmp_path):
    env = {**os.environ, "BASIN_HOME": str(tmp_path / "store")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"help": [], "spec": [], "sampled": []}


# The entry pauses the cyclic collector only while it imports the commands, and freezes what
# they made, in its own process: importing ``jobs.__main__`` (as the console script's wrapper
# does before it calls ``main``) leaves the collector as it was.
ENTRY = """
import gc, json, sys
before = (gc.isenabled(), gc.get_freeze_count())
import jobs.__main__
after_import = (gc.isenabled(), gc.get_freeze_count())
sys.argv = ["basin", "run", "--help"]
seen = {}
import cli.main
def probe():
    seen["in_run"] = (gc.isenabled(), gc.get_freeze_count() > 0)
cli.main.run = probe
jobs.__main__.main()
print(json.dumps({"before": before, "after_import": after_import, **seen}))
"""


def test_the_entry_pauses_the_collector_only_while_it_imports(tmp_path):
    env = {**os.environ, "BASIN_HOME": str(tmp_path / "store")}
    out = subprocess.run(
        [sys.executable, "-c", ENTRY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after_import"] == seen["before"] == [True, 0]
    assert seen["in_run"] == [True, True]  # collecting again, with the imports frozen
