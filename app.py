"""Basin in the browser: ``streamlit run app.py``.

The shell only: navigation over pages/, the sidebar badge, and the worker pool, which is started
(or found) here so that every run goes to a worker process, never to this one.
"""

import streamlit as st

import ui
from runs.store import StoreError
from ui import shell

st.set_page_config(page_title="Basin", page_icon="assets/basin.png", layout="wide")


try:
    ui.ensure_pool()
except StoreError as exc:  # every page needs the store: say why there is none, and stop
    st.error(ui.plain(str(exc)), icon=ui.WARNING)  # the path comes from the environment
    st.stop()
ui.sidebar()
shell.shared_notice()  # bound beyond 127.0.0.1: every session sees and changes every run
page = shell.navigation()
ui.keep_values()  # before the page: its setup outlives a visit to another page
page.run()
