"""The app's shell: its pages in order, and the guard that keeps Streamlit's legacy discovery of
a ``pages/`` folder from running a page without the shell.

Streamlit turns its old multipage mode (every file in ``pages/`` a page, named by file) off
for the process only once ``st.navigation`` is called. A fresh server whose first request is a
deep link (``/wide_networks``) runs that page file alone, never ``app.py``, and stays in the old
mode for every later run that does not start at ``app.py``. ``legacy_guard`` at the top of
each page calls ``st.navigation`` with the shell's pages and reruns: the rerun is the shell's.
"""

from __future__ import annotations

import ipaddress
import os
import sys

import streamlit as st

from .widgets import plain

# (file, title, icon): the first is the default page.
PAGES = (
    ("pages/playground.py", "Playground", ":material/scatter_plot:"),
    ("pages/compare.py", "Compare", ":material/compare:"),
    ("pages/funnel.py", "Funnel", ":material/filter_alt:"),
    ("pages/integrators.py", "Integrators", ":material/show_chart:"),
    ("pages/networks.py", "Networks & LLC", ":material/hub:"),
    ("pages/wide_networks.py", "Wide networks", ":material/width_wide:"),
    ("pages/dln_benchmark.py", "DLN benchmark", ":material/leaderboard:"),
    ("pages/landscape.py", "Landscape", ":material/terrain:"),
    ("pages/runs.py", "Runs", ":material/list:"),
)


def navigation():
    """``st.navigation`` over the shell's pages; returns the page to run."""
    pages = [
        st.Page(path, title=title, icon=icon, default=i == 0)
        for i, (path, title, icon) in enumerate(PAGES)
    ]
    return st.navigation(pages)


def legacy_guard() -> None:
    """Hand the run to the shell when Streamlit's legacy ``pages/`` mode ran this page alone."""
    from streamlit.runtime.pages_manager import PagesManager  # read only: the mode's own flag

    if getattr(PagesManager, "uses_pages_directory", None):
        navigation()  # turns the legacy mode off for this process, as app.py's call does
        st.rerun()


def exposure() -> str | None:
    """What a server bound beyond this machine exposes, or None on a loopback address. Basin has
    no accounts: a shared server shows every session every run of its store, to cancel or delete.
    """
    address = st.get_option("server.address") or "0.0.0.0"  # unset: every interface
    if address == "localhost" or _loopback(address):
        return None
    hosts = ", ".join(st.get_option("server.allowedHosts") or []) or "any name"
    home = os.environ.get("BASIN_HOME") or ".basin"
    return (
        f"Shared server: listening on {address}. Basin has no accounts: everyone who opens "
        f"this app sees, cancels and deletes every run in its store ({home}). Browsers may "
        f"reach it by the names {hosts} (server.allowedHosts)."
    )


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:  # a host name: only "localhost" is known to stay on this machine
        return False


@st.cache_resource
def _logged(text: str) -> None:
    print(f"Basin: {text}", file=sys.stderr, flush=True)  # once per server, in its log


def shared_notice() -> None:
    """Where the server is shared, say so in the sidebar and, once, in the server's log."""
    text = exposure()
    if text:
        _logged(text)
        st.sidebar.warning(plain(text), icon=":material/group:")  # the path is the user's
