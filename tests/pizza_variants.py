"""The quickstart's corpus (the OPS pizza dataset, with the quickstart's citation qrels) indexed with
MiniLM on titles once per variant of the index settings, each under an index prefix of its own and from one
embedding cache (the session's shared one: encoded once for every module of tests that compare index settings on
the same data)."""

from __future__ import annotations

import uuid
from typing import Iterator

from conftest import private_cache, share_embeddings
from real_data import OPS

MODEL = "all-minilm-l6-v2"


def indexed_variants(root, os_client, variants: dict) -> Iterator[dict]:
    """`variants`: {key: configs/index.yaml fields to replace}; yields {"corpus", "prefixes" (key -> index
    prefix), "mp"} and deletes the indexes after."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import QrelsSpec, build_qrels
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.models import get_model

    mp = private_cache(root)
    share_embeddings(root / "cache")
    tag = uuid.uuid4().hex[:6]
    corpus = import_corpus("ops", [OPS], name=f"pizza-{tag}").corpus
    build_qrels(corpus, QrelsSpec(dev_fraction=0.15, train_fraction=0.15))
    prefixes = {key: f"variant{key}-{tag}".lower() for key in variants}
    for key, given in variants.items():
        mp.setenv("EVALCTL_INDEX_PREFIX", prefixes[key])
        index_corpus(os_client, corpus, [load_views()["T"]], get_model(MODEL),
                     settings=load_index_settings(**given), progress=False)
    yield {"corpus": corpus, "prefixes": prefixes, "mp": mp}
    for prefix in prefixes.values():
        os_client.indices.delete(index=f"{prefix}-*", ignore_unavailable=True)
    mp.undo()


def on_variant(state: dict, key) -> str:
    """Make variant `key`'s index prefix the one evalctl uses; its index name."""
    from evalctl.indexers.index_layout import index_name

    state["mp"].setenv("EVALCTL_INDEX_PREFIX", state["prefixes"][key])
    return index_name(state["corpus"].name, MODEL)
