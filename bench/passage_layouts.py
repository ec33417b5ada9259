"""What a passage field costs in the index: each layout loaded alone into an index of its own (a private index
prefix, deleted after), so its store is its own and not shared with other views or settings. Prints, per layout,
the patents, vectors, store bytes per patent and the vectors' part of them, and the share of the view's documents
the model truncates.

    python bench/passage_layouts.py [--corpus qs-ops-pizza] [--model all-minilm-l6-v2] [--view TA]
                                    [--passages 32:24 64:48 128:96]

The corpus must be imported (`evalctl run quickstart` does it); vectors come from the embedding cache where an
earlier load encoded them, so a run after the study's is mostly loading.
"""

from __future__ import annotations

import argparse
import os
import uuid

from benchlib import load  # bench/ is on sys.path


def measure(corpus_name: str, model_id: str, view: str, setting: str | None) -> dict:
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import index_corpus, read_manifest
    from evalctl.indexers.passages import PassageSpec
    from evalctl.models import get_model
    from evalctl.opensearch.connection import make_client

    client, corpus, model = make_client(), load_corpus(corpus_name), get_model(model_id)
    passages = {view: (PassageSpec.parse(setting),)} if setting else {}
    index_corpus(client, corpus, [load_views()[view]], model, label_tasks={}, passages=passages, progress=False)
    name = index_name(corpus.name, model.id)
    cost = read_manifest(client, name)["cost"]
    client.indices.delete(index=name)
    return cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="qs-ops-pizza")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--view", default="TA")
    ap.add_argument("--passages", nargs="+", default=["32:24", "64:48", "128:96"])
    args = ap.parse_args()
    os.environ["EVALCTL_INDEX_PREFIX"] = f"bench-psg-{uuid.uuid4().hex[:6]}"  # never the study's indexes

    from evalctl.indexers import view_tokens
    from evalctl.corpus.store import load_corpus
    from evalctl.models import get_model

    print(f"machine load {load()}; corpus {args.corpus}, model {args.model}, view {args.view}")
    print(f"{'layout':<18} {'patents':>8} {'vectors':>8} {'B/patent':>10} {'vector B/patent':>16}")
    for setting in (None, *args.passages):
        cost = measure(args.corpus, args.model, args.view, setting)
        layout = f"{args.view} + {setting}" if setting else f"{args.view} document"
        print(f"{layout:<18} {cost['documents']:>8,} {sum(cost['vector_counts'].values()):>8,} "
              f"{cost['store_bytes_per_patent']:>10,.0f} {cost['vector_bytes'] / cost['documents']:>16,.0f}")
    model, corpus = get_model(args.model), load_corpus(args.corpus)
    prompt = model.prompt_for("document", task_type="retrieval")
    t = view_tokens.find(corpus.name, view_tokens.identity(corpus.content_hash, model.id, model.revision, prompt,
                                                            args.view))
    if t:
        print(f"truncated by the model: {t.truncated:,} of {t.documents:,} ({t.share:.0%}) over {t.limit} tokens; "
              f"median {t.median:.0f}, p90 {t.p90:.0f}, max {t.max:,}")


if __name__ == "__main__":
    main()
