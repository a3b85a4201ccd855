"""Tests of Basin's own C++ (``landscapes.native``): skipped only where no compiler exists."""

import os
import shutil

import pytest


def built_or_skip(lib, fallback: str):
    """``lib`` (a library ``native.load`` returned): on a machine with a C++ compiler it must
    have built; without one the test is skipped, ``fallback`` saying what runs instead
    (tests/test_no_compiler.py checks that path)."""
    if lib is None:
        assert not shutil.which(os.environ.get("CXX", "c++")), "a native library failed to build"
        pytest.skip(f"no C++ compiler: {fallback}")
    return lib
