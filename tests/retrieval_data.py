"""Retrieval test corpora built from real USPTO grants (the dataset uspto-grants-2019, 150 grants).

- `write_known_item_beir`: a BEIR folder where each query is a grant's title and its one relevant
  document is that grant (title + abstract): a sanity task (known-item search), not a citation task.
  One extra query of made-up words matches nothing in BM25 (an empty-result query).
- `write_citation_native`: a native JSONL corpus of real grant texts with hand-made citations,
  families, IPC codes and jurisdictions, so self/family exclusion, IN/OUT and jurisdiction
  breakdowns have known answers.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from conftest import USPTO

NONSENSE_QUERY = ("Qnonsense", "zqxjv wqpfkt blorptastic")


def grants(n: int, skip: int = 0) -> list[dict]:
    """The first n grants (after `skip`) that have both a title and an abstract."""
    csv.field_size_limit(1 << 24)
    out = []
    with open(USPTO, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["patent_title"].strip() and r["abstract"].strip():
                out.append(r)
            if len(out) == skip + n:
                break
    return out[skip:]


def write_known_item_beir(folder: Path, n: int, dev_every: int = 3) -> Path:
    """Every `dev_every`-th query goes to qrels/dev.tsv, the rest to qrels/test.tsv."""
    rows = grants(n)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({"_id": r["grant_id"], "title": r["patent_title"], "text": r["abstract"]}) + "\n")
    queries = [(f"Q{r['grant_id']}", r["patent_title"], r["grant_id"]) for r in rows]
    queries.insert(1, (*NONSENSE_QUERY, rows[0]["grant_id"]))  # index 1: a test query
    with open(folder / "queries.jsonl", "w") as f:
        for qid, text, _ in queries:
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for split in ("dev", "test"):
        with open(folder / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for i, (qid, _, doc) in enumerate(queries):
                if (i % dev_every == 0) == (split == "dev"):
                    f.write(f"{qid}\t{doc}\t1\n")
    return folder


# id, jurisdiction, family, ipc, cited ids.  IPC3 classes decide IN/OUT: P1(A61) -> P3(A61) IN,
# P5(B65) OUT; P4(G06) -> P6(G06) IN, P7(A47) OUT; P8(H04) -> P9(H04) IN; P10(C07) -> P1, P2 (A61) OUT;
# P11 (no IPC) -> P3: UNKNOWN. P2 is P1's family member (EP) with P1's exact text.
CITATION_LAYOUT = [
    ("US9000001", "US", "F1", ["A61K31/00"], ["US9000003", "US9000005"]),
    ("EP3000002", "EP", "F1", ["A61K31/00"], []),
    ("US9000003", "US", None, ["A61K9/00"], []),
    ("US9000004", "US", None, ["G06F3/01"], ["US9000006", "US9000007"]),
    ("US9000005", "US", None, ["B65D81/00"], []),
    ("US9000006", "US", None, ["G06F16/00"], []),
    ("US9000007", "US", None, ["A47J37/00"], []),
    ("EP3000008", "EP", None, ["H04L9/00"], ["EP3000009"]),
    ("EP3000009", "EP", None, ["H04W4/00"], []),
    ("EP3000010", "EP", None, ["C07D401/00"], ["US9000001", "EP3000002"]),
    ("US9000011", "US", None, [], ["US9000003"]),
]


def write_citation_native(path: Path) -> Path:
    rows = grants(len(CITATION_LAYOUT), skip=100)
    rows[1] = rows[0]  # the family member carries the same text: without exclusion it is the top hit
    with open(path, "w") as f:
        for (rid, jur, fam, ipc, cites), r in zip(CITATION_LAYOUT, rows):
            f.write(json.dumps({
                "id": rid, "jurisdiction": jur, "family_id": fam, "title": r["patent_title"],
                "abstract": r["abstract"], "ipc": ipc,
                "citations": [{"target": t, "type": "search_report", "direction": "cited"} for t in cites],
            }) + "\n")
    return path
