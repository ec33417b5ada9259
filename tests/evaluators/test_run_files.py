"""A run's run.json is exactly what json.dumps(..., indent=0) wrote before (stored runs stay byte-identical)."""

from __future__ import annotations

import json
import random

from evalctl.evaluators.scoring.runs import from_json, ranked, to_json


def test_run_json_matches_json_dumps_byte_for_byte():
    rng = random.Random(7)
    ranking = {f"Q{i}": ranked([(f"D{rng.randint(0, 500)}", rng.uniform(-5, 50)) for _ in range(rng.randint(0, 120))])
               for i in range(60)}
    ranking.update({
        "Qempty": [],
        'Q"quoted\\\\': [('doc "a"\\n', 1.0), ("dé-ü", 0.5), ("\u4e2d", 1e-300), ("x", -0.0)],
        "Qodd": [("a", float("nan")), ("b", float("inf")), ("c", float("-inf")), ("d", 3), ("e", 1e22)],
        "Qdup": [("a", 2.0), ("a", 1.0)],  # a duplicate id: the last score wins, as with dict()
    })
    expected = json.dumps({q: dict(docs) for q, docs in ranking.items()}, indent=0)
    assert to_json(ranking) == expected
    assert to_json({}) == json.dumps({}, indent=0)
    assert from_json(to_json({"q": [("a", 2.0), ("b", 1.0)]})) == {"q": [("a", 2.0), ("b", 1.0)]}


def test_ranked_orders_by_score_then_id_with_many_ties():
    rng = random.Random(1)
    for _ in range(500):
        pairs = [(f"d{rng.randint(0, 30)}", rng.choice([1, 2.5, 2.5, -0.0, 0.0, 7])) for _ in range(rng.randint(0, 40))]
        expected = sorted(((d, float(s)) for d, s in pairs), key=lambda p: (-p[1], p[0]))
        assert ranked(pairs) == expected and ranked(pairs, 5) == expected[:5]
