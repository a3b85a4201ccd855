"""``python -m jobs ...``: the command users type; the same as the ``basin`` console script."""

from cli.main import run

if __name__ == "__main__":
    run()
