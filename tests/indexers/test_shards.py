"""Shards and replicas: settings (configs/index.yaml, `evalctl index --shards/--replicas`), part of the index
identity and manifest, refused when they disagree with an existing index, shown by `index status` with the node
of every shard copy; and the same numbers on 1 and on 3 shards for the quickstart's own corpus (the bundled
OPS pizza sample, 2,973 publications, citation qrels, title queries against titles, MiniLM), on the shared node.

What may differ between a 1-shard and a 3-shard index, and how far (each bounded below):
- bm25 (sent with dfs_query_then_fetch: corpus-wide term statistics) and exact (brute force, per shard, merged):
  the same scores rank by rank and the same documents above the k-th score; only which of several documents
  tied at the k-th score make the cut may differ (each shard keeps its own top k, ties broken by shard and
  Lucene doc id, which the shard count changes).
- dense (HNSW): each shard searches its own graph; recall of exact@10 is printed for both.
- hybrid and rrf (native, neural-search 3.5): each shard returns `pagination_depth` hits per sub-query, so
  3 shards hand the coordinator up to 3 x k candidates per sub-query where 1 shard hands k (min-max bounds and
  RRF ranks are taken over that larger pool), the BM25 sub-query scores with per-shard statistics (dfs would
  skip the plugin's normalisation: neural-search #1490) and the knn sub-query is HNSW per shard. Bounded by:
  nDCG@10 within 0.01 (half the quickstart's bootstrap CI) and the top 10 mostly the same documents.
"""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from pizza_variants import MODEL, indexed_variants, on_variant

K = 100


# --------------------------------------------------------------------------- settings (no node)


def test_shard_settings_are_checked_where_they_are_given():
    from evalctl.indexers.index_layout import load_index_settings
    from evalctl.config_files import SpecError

    s = load_index_settings(shards=3, replicas=1)
    assert (s.shards, s.replicas, s.dfs) == (3, 1, True)
    assert load_index_settings(shards=None).shards == load_index_settings().shards  # None: the config's
    with pytest.raises(SpecError, match=r"configs/index.yaml.*shards 0: must be between 1 and 1024"):
        load_index_settings(shards=0)
    with pytest.raises(SpecError, match=r"replicas -1: must be 0 or more"):
        load_index_settings(replicas=-1)


def test_bm25_alone_asks_for_global_statistics_and_only_on_several_shards():
    from evalctl.evaluators.retrieval.methods import METHODS
    from evalctl.indexers.index_layout import load_index_settings

    s = load_index_settings()
    assert s.search_type(1) is None and s.search_type(3) == "dfs_query_then_fetch"
    assert dataclasses.replace(s, dfs=False).search_type(3) is None
    # BM25 on the view's text or on its passages; hybrid: see neural-search #1490
    assert [n for n, m in METHODS.items() if m.global_stats] == ["bm25", "bm25-maxp"]


def test_cli_refuses_a_bad_shard_count():
    from evalctl.cli.main import cli

    out = CliRunner().invoke(cli, ["index", "--shards", "0"])
    assert out.exit_code == 2 and "--shards" in out.output and "0 is not in the range 1<=x<=1024" in out.output


# --------------------------------------------------------------------------- on the node


@pytest.fixture(scope="module")
def pizza(tmp_path_factory, os_client):
    """The OPS pizza sample with the quickstart's citation qrels, indexed with MiniLM (view T) twice under two
    index prefixes: 1 shard and 3 shards (one embedding cache: encoded once)."""
    yield from indexed_variants(tmp_path_factory.mktemp("shards"), os_client, {1: {"shards": 1}, 3: {"shards": 3}})


def _on(pizza, shards: int) -> str:
    """Make `shards`' index prefix the one evalctl uses; its index name."""
    return on_variant(pizza, shards)


def test_manifest_identity_and_status_show_the_shards(os_client, pizza):
    from evalctl.cli.main import cli
    from evalctl.indexers.index_loader import IDENTITY, read_manifest

    assert "shards" in IDENTITY and "replicas" not in IDENTITY
    nodes = {n["name"] for n in os_client.cat.nodes(format="json", h="name")}
    for shards in (1, 3):
        name = _on(pizza, shards)
        meta = read_manifest(os_client, name)
        assert (meta["shards"], meta["replicas"]) == (shards, 0)
        out = CliRunner().invoke(cli, ["index", "status"])
        assert out.exit_code == 0, out.output
        line = out.output.splitlines()[out.output.splitlines().index(next(
            x for x in out.output.splitlines() if x.startswith(name))) + 1]
        assert line.startswith(f"  shards={shards} replicas=0 health=green: ")
        copies = line.split(": ", 1)[1].split(", ")
        assert [c.split()[0] for c in copies] == [f"{i}p" for i in range(shards)]
        assert {c.split()[1] for c in copies} <= nodes


def test_another_shard_count_is_refused_naming_both(os_client, pizza):
    from evalctl.cli.main import cli

    name = _on(pizza, 3)
    out = CliRunner().invoke(cli, ["index", "--corpus", pizza["corpus"].name, "--model", MODEL, "--view", "T",
                                   "--shards", "2"])
    assert out.exit_code == 2, out.output
    assert f"index {name} was built from different data or settings" in out.output
    assert "shards: index has 3, this load has 2" in out.output and "--shards 3" in out.output
    assert os_client.count(index=name)["count"] == len(pizza["corpus"])  # nothing lost


def test_replicas_change_in_place(os_client, pizza):
    """A replica cannot be placed on a one-node cluster (yellow): the manifest and status say so; back to 0."""
    from evalctl.cli.main import cli
    from evalctl.indexers.index_loader import read_manifest

    name = _on(pizza, 1)
    args = ["index", "--corpus", pizza["corpus"].name, "--model", MODEL, "--view", "T"]
    if len(os_client.cat.nodes(format="json")) > 1:
        pytest.skip("a replica is placed on a cluster: this checks the one-node case")
    try:
        out = CliRunner().invoke(cli, [*args, "--replicas", "1"])
        assert out.exit_code == 0, out.output
        assert "loaded 0 documents" in out.output
        assert read_manifest(os_client, name)["replicas"] == 1
        status = CliRunner().invoke(cli, ["index", "status"]).output
        assert f"  shards=1 replicas=1 health=yellow: 0p " in status and "0r UNASSIGNED" in status
    finally:
        assert CliRunner().invoke(cli, [*args, "--replicas", "0"]).exit_code == 0
    assert read_manifest(os_client, name)["replicas"] == 0


def test_a_manifest_from_before_shards_reads_the_live_count(os_client, index_name):
    from evalctl.indexers.index_loader import read_manifest

    os_client.indices.create(index=index_name, body={"settings": {"index": {"number_of_shards": 2}},
                                                     "mappings": {"_meta": {"evalctl_index": 1, "views": ["T"]}}})
    assert read_manifest(os_client, index_name)["shards"] == 2


def _run(os_client, pizza, shards, method, **kw):
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve
    from evalctl.evaluators.fusion.settings import FusionSpec

    _on(pizza, shards)
    spec = RetrievalSpec(corpus=pizza["corpus"].name, view="T", method=method, model=MODEL, k=kw.pop("k", K),
                         fusion=FusionSpec(technique="rrf" if method == "rrf" else "linear"), **kw)
    return retrieve(os_client, spec, RetrievalOptions(progress=False))


def _same_up_to_ties_at_the_cut(one: list, three: list) -> bool:
    """The same score at every rank, the same documents above the last (the k-th) score."""
    if [s for _, s in one] != [s for _, s in three]:
        return False
    last = one[-1][1] if one else None
    return [d for d, s in one if s != last] == [d for d, s in three if s != last]


@pytest.mark.models
def test_bm25_and_exact_runs_equal_on_1_and_3_shards(os_client, pizza, capsys):
    for method in ("bm25", "exact"):
        one, three = (_run(os_client, pizza, n, method) for n in (1, 3))
        assert one.manifest["index_identity"]["shards"] == 1 and three.manifest["index_identity"]["shards"] == 3
        assert one.id != three.id  # a reshard is another run, never the stored one
        assert set(one.ranking) == set(three.ranking) and len(one.ranking) > 400
        differ = [q for q in one.ranking if not _same_up_to_ties_at_the_cut(one.ranking[q], three.ranking[q])]
        assert not differ, (method, differ[:3])
        exact = sum(one.ranking[q] == three.ranking[q] for q in one.ranking)
        with capsys.disabled():
            print(f"\n{method}: 1 vs 3 shards, {len(one.ranking)} queries at k={K}: {exact} identical, "
                  f"{len(one.ranking) - exact} differ only in ties at the k-th score")
    assert three.manifest.get("search_type") is None  # exact: no text, no dfs
    assert _run(os_client, pizza, 3, "bm25").manifest["search_type"] == "dfs_query_then_fetch"


@pytest.mark.models
def test_bm25_on_3_shards_needs_dfs(os_client, pizza):
    """Without dfs (per-shard statistics) the 3-shard BM25 scores move: what dfs is there for."""
    from evalctl.evaluators.retrieval.retrieve import search_all
    from evalctl.evaluators.retrieval.query_bodies import bm25_body

    one = _run(os_client, pizza, 1, "bm25")
    name = _on(pizza, 3)
    queries = [q for q, docs in one.ranking.items() if docs][:50]
    titles = {h["_id"]: h["_source"]["title"] for h in os_client.mget(index=name, body={"ids": queries})["docs"]}
    bodies = [bm25_body("text_T", titles[q], 10) for q in queries]
    per_shard, _, _ = search_all(os_client, name, bodies)
    dfs, _, _ = search_all(os_client, name, bodies, search_type="dfs_query_then_fetch")
    assert sum(a != b for a, b in zip(per_shard, dfs)) > len(queries) // 2


@pytest.mark.neural_search
@pytest.mark.models
def test_dense_recall_and_fusion_on_1_and_3_shards(os_client, pizza, capsys):
    from evalctl.evaluators.scoring.metrics import ann_loss, evaluate_run

    recall = {n: ann_loss(_run(os_client, pizza, n, "dense", k=10), _run(os_client, pizza, n, "exact", k=10))
              ["ann_recall_of_exact@10"] for n in (1, 3)}
    lines = [f"HNSW recall of exact@10: 1 shard {recall[1]:.4f}, 3 shards {recall[3]:.4f}"]
    assert min(recall.values()) > 0.95
    for method in ("hybrid", "rrf"):
        one, three = (_run(os_client, pizza, n, method) for n in (1, 3))
        ndcg = [evaluate_run(run).mean["ndcg@10"] for run in (one, three)]
        top = [len({d for d, _ in one.ranking[q][:10]} & {d for d, _ in three.ranking[q][:10]})
               / max(1, min(10, len(one.ranking[q]))) for q in one.ranking]
        overlap = sum(top) / len(top)
        lines.append(f"{method}: nDCG@10 1 shard {ndcg[0]:.4f}, 3 shards {ndcg[1]:.4f}; "
                     f"top-10 overlap {overlap:.3f}")
        assert abs(ndcg[0] - ndcg[1]) < 0.01 and overlap > 0.8, lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
