"""Basin in the browser: ``streamlit run app.py``.

The shell only: navigation over pages/, the sidebar badge, and the worker pool, which is started
(or found) here so that every run goes to a worker process, never to this one.
"""

import streamlit as st

import ui
from runs.store import StoreError

st.set_page_config(page_title="Basin", page_icon="assets/basin.png", layout="wide")

PAGES = [
    st.Page(
        "pages/playground.py", title="Playground", icon=":material/scatter_plot:", default=True
    ),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/funnel.py", title="Funnel", icon=":material/filter_alt:"),
    st.Page("pages/integrators.py", title="Integrators", icon=":material/show_chart:"),
    st.Page("pages/networks.py", title="Networks & LLC", icon=":material/hub:"),
    st.Page("pages/wide_networks.py", title="Wide networks", icon=":material/width_wide:"),
    st.Page("pages/dln_benchmark.py", title="DLN benchmark", icon=":material/leaderboard:"),
    st.Page("pages/landscape.py", title="Landscape", icon=":material/terrain:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/list:"),
]

try:
    ui.ensure_pool()
except StoreError as exc:  # every page needs the store: say why there is none, and stop
    st.error(ui.plain(str(exc)), icon=ui.WARNING)  # the path comes from the environment
    st.stop()
ui.sidebar()
page = st.navigation(PAGES)
ui.keep_values()  # before the page: its setup outlives a visit to another page
page.run()
