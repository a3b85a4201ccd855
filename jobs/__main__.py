"""``python -m jobs ...``: the command users type; the same as the ``basin`` console script."""

import gc


def main() -> None:
    """Import the commands with the cyclic collector paused, then run one. Importing torch and
    Basin makes ~165,000 objects that live as long as the process: the collections that imports
    trigger walk them all for nothing (0.15-0.2 s of every command; bench/RESULTS.md), and
    ``gc.freeze`` keeps the run's own collections from walking them again. The process is ours;
    importing this module alone changes nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from cli.main import run
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    run()


if __name__ == "__main__":
    main()
