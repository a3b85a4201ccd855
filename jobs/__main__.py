"""``python -m jobs ...``: the command users type; the same as the ``basin`` console script."""

import gc


def commands():
    """The commands' entry (``cli.main.run``), imported with the cyclic collector paused, and
    what the imports made frozen. Importing torch and Basin makes ~165,000 objects that live as
    long as the process: collections during the imports walk them all for nothing (0.15-0.2 s
    of every command; bench/RESULTS.md), and once frozen the run's own collections skip them.
    Only ``main`` (the process's entry) calls it: importing this module changes nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from cli.main import run
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return run


def main() -> None:
    commands()()


if __name__ == "__main__":
    main()
