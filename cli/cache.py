"""``python -m jobs cache [--clear] [--json]``: the compiled chunks kept on disk.

A kernel compiled for a target once (``samplers.compiled``) is filed in ``samplers.cache``, so
that any later process starts compiled. This command says where the cache is, what it holds and
how big it is; ``--clear`` empties it (the next run of each kernel compiles again).
"""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("cache", help="the compiled chunks on disk: list them, or --clear them")
    p.add_argument("--clear", action="store_true", help="remove every compiled chunk")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(handler=cmd_cache)


def cmd_cache(args, store) -> int:
    from samplers import cache  # torch: only for this command

    removed = cache.clear() if args.clear else None
    listed = cache.entries()
    report = {
        "folder": str(cache.folder()),
        "entries": len(listed),
        "bytes": sum(m.get("bytes", 0) for m in listed),
        "cap_bytes": cache.CAP_BYTES,
        "kernels": sorted({m.get("kernel", "?") for m in listed}),
    }
    if removed is not None:
        report["removed"] = {"entries": removed[0], "bytes": removed[1]}
    if args.json:
        print(json.dumps(report))
        return 0
    if removed is not None:
        print(f"removed {removed[0]} compiled chunks ({removed[1] / 1e6:.1f} MB)")
    print(
        f"{report['folder']}: {len(listed)} compiled chunk{'' if len(listed) == 1 else 's'}, "
        f"{report['bytes'] / 1e6:.1f} MB of {cache.CAP_BYTES / 2**30:.0f} GiB"
        + (f" ({', '.join(report['kernels'])})" if listed else "")
    )
    return 0
