"""wviz: attention as optimal transport. Entry point: `streamlit run app.py` (or `make run`)."""
import streamlit as st

from wviz.registry import sections
from wviz.ui import style
from wviz.ui.style import sidebar_state

st.set_page_config(page_title="wviz: attention as transport", page_icon=":material/blur_on:", layout="wide",
                   initial_sidebar_state=sidebar_state())

# The math pages by section, from the one registry of pages (wviz.registry); the References page comes last.
SECTIONS = {section: [st.Page(f"pages/{page.stem}.py", title=page.title, icon=page.icon, url_path=page.stem)
                      for page in pages]
            for section, pages in sections().items()}


def references():
    """The full citation of every work wviz implements or cites; pages link here with ui.cite."""
    from wviz.references import REFERENCES

    ui.page_setup("References", "The works behind wviz's pages, in full. The numbered ones are wviz's five source "
                                "documents, whose equation numbers the pages cite.")
    for ref in REFERENCES.values():
        st.subheader(ref.short, anchor=ref.anchor)
        st.markdown(ref.citation + (f" <{ref.url}>" if ref.url else ""))
        if ref.used_on:
            st.caption(f"In wviz: {ref.used_on}.")


SECTIONS["About"] = [st.Page(references, title="References", icon=":material/menu_book:", url_path="references")]


def home():
    style.apply("Home")   # presentation mode stays on here too, as on every page
    st.title("wviz: see attention as optimal transport")
    st.markdown(
        "Attention weights are the answer to an optimisation problem. A query has one unit of mass to send to "
        "its keys, and sending mass to key $j$ costs $-\\langle q, k_j \\rangle$: the cheapest plan sends "
        "everything to the best key. Add an entropy term and the optimal plan is exactly **softmax**; change "
        "the regulariser and you get **sparsemax**, **entmax** or a **prior-softmax**. Let both marginals "
        "count and you get a **transport plan** between two distributions.\n\n"
        "Each page turns one paper's equations into figures you can move: change tau, alpha or gamma, edit "
        "points, costs or covariances, and watch the weights and plans recompute."
    )
    for section, pages in SECTIONS.items():
        st.subheader(section)
        for page in pages:
            st.page_link(page, label=page.title, icon=page.icon)


from wviz import ui  # noqa: E402  (after set_page_config)

ui.freeze_imports()  # before the first page runs: Streamlit's collection after each run skips these objects
nav = st.navigation({"wviz": [st.Page(home, title="Home", icon=":material/home:", default=True)], **SECTIONS})
if nav.title == "Home":  # the pages draw this badge in their own set-up (ui.page_setup)
    ui.device_badge()
nav.run()
