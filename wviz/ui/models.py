"""The sidebar's Model selector of the pages that open a real transformer (Real transformer, Heads solve the dual):
the bundled all-MiniLM-L6-v2, every model folder of WVIZ_MODELS, or an uploaded .zip. A model is loaded once per
server process and shared by both pages and every session (st.cache_resource)."""
from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from wviz.models import catalogue, families as model_families, hub
from wviz.ui.runs import guarded
from wviz.ui.style import plain

FAMILIES = tuple(dict.fromkeys(model_families.FAMILIES.values()))   # every family wviz opens


@st.cache_data(ttl=60, max_entries=4, show_spinner=False)
def _found(setting: str) -> hub.Catalogue:
    """The models of WVIZ_MODELS (``setting``), looked for again after a minute: a folder copied in appears."""
    return hub.find_models(hub.model_dirs(setting))


@st.cache_resource(max_entries=3, show_spinner="Loading the model (offline)...")
def _folder_model(key, device_name, _info):
    return hub.load(_info, device_name)


@st.cache_resource(max_entries=2, show_spinner="Checking and loading the uploaded model...")
def _uploaded_model(file_id, device_name, _raw, _name):
    return hub.load_upload(_raw, device_name, name=_name.removesuffix(".zip") or "upload")


def choose_model(key: str, zip_key: str, device, families: Sequence[str] = FAMILIES) -> hub.Lens:
    """The model the sidebar's selector (keyed ``key``; a folder's key or the bundled one travels in the URL) and
    uploader (keyed ``zip_key``) choose among the models of ``families``, loaded on ``device``: an upload once it
    passes every check and is of those families (else its reasons are shown and the model chosen before it stays)."""
    found = catalogue.of_families(_found(hub.models_setting()), families)
    options = catalogue.options(found)
    url_model, url_note = catalogue.from_url(st.query_params.get(key), found)
    kinds = " or ".join(families) if set(families) != set(FAMILIES) else "encoder, decoder or image classifier"
    keys = list(options)
    chosen = st.sidebar.selectbox(
        "Model", keys, index=keys.index(url_model), format_func=lambda k: options[k], key=key,
        help=f"The bundled all-MiniLM-L6-v2, every {kinds} folder in the folders that WVIZ_MODELS lists on this "
             "server (its name, family and size), or a .zip of a model folder you upload. wviz never downloads a "
             "model.")
    model_key = chosen if chosen is not None else hub.BUNDLED_KEY   # None only without options; there is MiniLM
    if model_key in (hub.BUNDLED_KEY, catalogue.UPLOAD):   # an upload is not part of a link
        st.query_params.pop(key, None)
    elif st.query_params.get(key) != model_key:
        st.query_params[key] = model_key
    if url_note:
        st.warning(plain(url_note))   # it quotes the link: shown as text
    if found.skipped:
        with st.sidebar.expander(f"Folders skipped ({len(found.skipped)})", icon=":material/folder_off:"):
            for line in found.skipped:
                st.caption(plain(line))
    before = f"_before_upload_{key}"
    if model_key != catalogue.UPLOAD:
        st.session_state[before] = model_key

    def by_key(chosen: str) -> hub.Lens:
        info = catalogue.info(found, chosen)
        return _folder_model(info.key, str(device), info)

    if model_key != catalogue.UPLOAD:
        return guarded(f"model/{key}", lambda: by_key(model_key)) or by_key(hub.BUNDLED_KEY)
    upload = st.sidebar.file_uploader(
        f"Model folder as a .zip (at most {catalogue.upload_cap_mb()} MB)", type=["zip"], key=zip_key,
        help="What save_pretrained writes (config.json, *.safetensors, the tokenizer's or image processor's files), "
             "zipped. Checked before use: weights in .safetensors only (a pickle .bin is refused), no model code "
             "(auto_map), no paths out of the zip, no links, no zip bombs, a supported family.")
    if upload is None:
        last = by_key(st.session_state.get(before, hub.BUNDLED_KEY))
        st.info(f"Upload a .zip of a model folder in the sidebar; meanwhile the page shows {plain(last.info.name)}.")
        return last

    def uploaded() -> hub.Lens:
        lens = _uploaded_model(upload.file_id, str(device), upload.getvalue(), upload.name)
        return catalogue.of_family(lens, families)

    return guarded(f"model/{key}", uploaded) or by_key(st.session_state.get(before, hub.BUNDLED_KEY))
