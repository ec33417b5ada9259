"""The loading pass reads only some record columns (DOCUMENT_COLUMNS and the views'): the index documents
it builds must equal those built from the full records, on real rows of every import format's fixture."""

from __future__ import annotations

import pytest
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

from evalctl.corpus.importer import import_corpus
from evalctl.corpus.views import load_views
from evalctl.indexers.index_loader import DOCUMENT_COLUMNS, document

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)


@pytest.mark.parametrize("fmt, source", [("uspto", "uspto_grants_sample.csv"), ("lens", "lens_pizza_sample.csv"),
                                         ("espacenet", "espacenet_pizza_sample.csv")])
def test_documents_from_the_loading_columns_equal_full_ones(fmt, source):
    corpus = import_corpus(fmt, [FIXTURES / source], name=f"cols-{fmt}").corpus
    views = list(load_views().values())
    columns = {c for v in views for c in v.columns}.union(DOCUMENT_COLUMNS)
    full, partial = list(corpus.records()), list(corpus.records(columns))
    assert len(full) == len(partial) > 0
    for a, b in zip(full, partial):
        texts = {v.name: v.render(a) for v in views if v.render(a)}
        assert {v.name: v.render(b) for v in views if v.render(b)} == texts
        assert document(b, texts, {}, ["T"]) == document(a, texts, {}, ["T"]), a.id


def test_records_with_ids_reads_exactly_those_records():
    """A query set reads only its records (retrieve at 113k must not scan the corpus): the same records, in
    file order, as a full pass filtered by id; an id the corpus lacks is simply absent."""
    corpus = import_corpus("lens", [FIXTURES / "lens_pizza_sample.csv"], name="cols-ids").corpus
    columns = load_views()["TA"].columns
    every = list(corpus.records(columns))
    wanted = {r.id for r in every[::7]} | {"XX-NOT-THERE"}
    got = list(corpus.records_with_ids(wanted, columns))
    assert [r.id for r in got] == [r.id for r in every if r.id in wanted]
    assert got == [r for r in every if r.id in wanted]
    assert list(corpus.records_with_ids([], columns)) == []


def test_spread_records_spans_the_file(tmp_path):
    """A cost plan measures a large corpus on evenly spaced row groups: every record when the file is small,
    else whole row groups from the start to the end of the file, about the asked number of records."""
    import dataclasses

    from evalctl.corpus.store import RecordWriter, spread_records

    base = list(import_corpus("lens", [FIXTURES / "lens_pizza_sample.csv"], name="cols-spread").corpus.records())
    every = [dataclasses.replace(r, id=f"{k}-{r.id}") for k in range(8) for r in base]
    path = tmp_path / "c.parquet"
    w = RecordWriter(path, batch_size=10)  # one row group per 10 records
    for r in every:
        w.add(r)
    w.close()
    order = [r.id for r in every]
    assert [r.id for r in spread_records(path, len(every))] == order
    got = [r.id for r in spread_records(path, len(every) // 4)]
    assert abs(len(got) - len(every) // 4) <= 10 and len(set(got)) == len(got)
    pos = [order.index(i) for i in got]
    assert pos == sorted(pos)  # file order
    groups = {p // 10 for p in pos}
    assert all(sum(p // 10 == g for p in pos) == min(10, len(every) - 10 * g) for g in groups)  # whole groups
    assert 0 in groups and max(groups) >= 0.7 * (len(every) // 10)  # from the start to near the end
