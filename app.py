"""Basin in the browser: ``streamlit run app.py``.

The shell only: navigation over pages/, the sidebar badge, and the worker pool, which is started
(or found) here so that every run goes to a worker process, never to this one.
"""

import streamlit as st

import ui

st.set_page_config(page_title="Basin", page_icon="assets/basin.png", layout="wide")

PAGES = [
    st.Page(
        "pages/playground.py", title="Playground", icon=":material/scatter_plot:", default=True
    ),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/networks.py", title="Networks & LLC", icon=":material/hub:"),
    st.Page("pages/dln_benchmark.py", title="DLN benchmark", icon=":material/leaderboard:"),
    st.Page("pages/landscape.py", title="Landscape", icon=":material/terrain:"),
    st.Page("pages/runs.py", title="Runs", icon=":material/list:"),
]

ui.ensure_pool()
ui.sidebar()
st.navigation(PAGES).run()
