"""Text from data, shown as typed in Streamlit's Markdown: the one escaping helper (``plain``).

Streamlit renders Markdown (GitHub's flavour, with its own colour, icon and emoji directives) in
``st.markdown``, ``st.caption``, the alerts (``st.error``, ``st.warning``, ``st.info``,
``st.success``), headings, widget labels and help, radio options, tabs, expanders and metric
values. A run's error, a file name under BASIN_MODELS or a typed formula shown there would act
as Markdown: ``![x](http://host/x)`` fetches an image from any host, and ``[x](http://e)``, a bare
``http://...``, ``www....`` or an e-mail address become links. Selectbox and multiselect options,
``st.code``, ``st.json``, ``st.text`` and dataframes show text as it is: they need no escaping,
and escaping would show its backslashes there.
"""

from __future__ import annotations

import re

# What Markdown acts on anywhere in a line: emphasis, code, (Streamlit's) LaTeX, links, images
# and colour directives ([ ]), HTML and autolinks (<), entities (&), table cells (|) ...
INLINE = re.compile(r"([\\`*_~$\[\]<&|])")
# ... and at a line's start: headings, quotes, lists and the rules under setext headings.
LINE_START = re.compile(r"^([ \t]*\d*)([#>+=.)-])", re.MULTILINE)
# GitHub's autolinks (http://, https://, www., e-mail addresses) and Streamlit's directives
# (:red[...], :material/icon:, :smile:) are found in the text after backslash escapes are
# resolved, so a backslash does not stop them (checked in Chromium, Streamlit 1.67). An
# invisible word joiner breaks the words they look for: after a colon before a letter, digit
# or slash, before an "@", and between "www" and its dot.
WORD_JOINER = "\u2060"
AUTOLINK = re.compile(r"(?<=:)(?=[\w/+-])|(?=@)|(?i:(?<=www)(?=\.))")


def plain(text: object) -> str:
    """Markdown that shows ``text`` as typed, with no link, image, emphasis or directive: a
    backslash before each character Markdown acts on, and a word joiner (U+2060, invisible)
    inside the words that autolinks and directives look for. For any user- or file-derived
    string shown where Streamlit renders Markdown: a run error echoing
    '![x](http://...)' shows those characters and fetches nothing."""
    escaped = LINE_START.sub(r"\1\\\2", INLINE.sub(r"\\\1", str(text)))
    return AUTOLINK.sub(WORD_JOINER, escaped)
