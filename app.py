"""Basin in the browser: ``streamlit run app.py``.

The shell only: navigation over views/, the sidebar badge, and the worker pool, which is started
(or found) here so that every run goes to a worker process, never to this one.
"""

import streamlit as st

import ui
from jobs.store import StoreError

st.set_page_config(page_title="Basin", page_icon="assets/basin.png", layout="wide")

PAGES = [
    st.Page(
        "views/playground.py", title="Playground", icon=":material/scatter_plot:", default=True
    ),
    st.Page("views/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("views/funnel.py", title="Funnel", icon=":material/filter_alt:"),
    st.Page("views/integrators.py", title="Integrators", icon=":material/show_chart:"),
    st.Page("views/networks.py", title="Networks & LLC", icon=":material/hub:"),
    st.Page("views/wide_networks.py", title="Wide networks", icon=":material/width_wide:"),
    st.Page("views/dln_benchmark.py", title="DLN benchmark", icon=":material/leaderboard:"),
    st.Page("views/landscape.py", title="Landscape", icon=":material/terrain:"),
    st.Page("views/runs.py", title="Runs", icon=":material/list:"),
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
