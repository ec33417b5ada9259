"""Child process of the Pyserini referee (referee.py): index a JsonCollection with Anserini and search it.

Runs apart from the caller so the JVM (started by pyjnius, which reads JAVA_HOME at import) never lives
in the evalctl process. It uses Pyserini's Java bridge (`pyserini.pyclass`) and Anserini's own classes:
`pyserini.search.lucene` cannot be imported with openai>=2 installed (pyserini 1.6.0 builds an OpenAI
client with an empty key at import time, which openai rejects).

usage: python -m evalctl.evaluators.referee.lucene_process WORKDIR K1 B DEPTH
  reads WORKDIR/docs/*.jsonl ({id, contents}) and WORKDIR/queries.json ({qid: text});
  writes WORKDIR/hits.json ({qid: [[doc, score], ...]}) and WORKDIR/stats.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(workdir: str, k1: str, b: str, depth: str) -> None:
    from pyserini.pyclass import autoclass  # optional: referee

    root = Path(workdir)
    index = root / "index"
    autoclass("io.anserini.index.IndexCollection").main([
        "-collection", "JsonCollection", "-input", str(root / "docs"), "-index", str(index),
        "-generator", "DefaultLuceneDocumentGenerator", "-threads", "1", "-stemmer", "porter",
    ])
    searcher = autoclass("io.anserini.search.SimpleSearcher")(str(index))
    searcher.set_bm25(float(k1), float(b))
    queries = json.loads((root / "queries.json").read_text())
    hits = {q: [[h.docid, float(h.score)] for h in searcher.search(text, int(depth))] for q, text in queries.items()}
    (root / "hits.json").write_text(json.dumps(hits))
    jars = sorted(p.name for p in (Path(sys.modules["pyserini"].__file__).parent / "resources" / "jars").glob("*.jar"))
    (root / "stats.json").write_text(json.dumps({"documents": int(searcher.get_total_num_docs()), "jar": jars}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
