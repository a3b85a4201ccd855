"""The studies a sweep can be, by kind: each a module with the same small interface.

    KIND                   the sweep's kind, as the store and ``python -m jobs sweep KIND`` name it
    HELP                   its line in ``sweep --help`` (None: no line)
    SPEC_FLAGS             whether it takes a base run's flags (``cli.flags``)
    add_arguments(parser)  its own flags
    specs_from_args(args, base) -> (params, cells), ``base()`` the run flags' spec dict
    results(store, sweep)  its numbers from the store, "progress" first
    print_text(result)     its lines under the sweep's header

Adding a study: write its module (and its page), and list it in STUDIES.
"""

from __future__ import annotations

from runs.store import Store
from studies import calibrate, checkpoints, dln, order, reprior, vi_scan

# In the order ``python -m jobs sweep --help`` lists them.
STUDIES = (dln, calibrate, order, reprior, vi_scan, checkpoints)
BY_KIND = {study.KIND: study for study in STUDIES}


def results(store: Store, sweep_id: str) -> dict:
    """A stored sweep's results, whatever its kind: its id and kind, then its study's numbers."""
    sweep = store.get_sweep(sweep_id)
    study = BY_KIND[sweep["kind"]]
    return {"sweep_id": sweep_id, "kind": sweep["kind"], **study.results(store, sweep)}
