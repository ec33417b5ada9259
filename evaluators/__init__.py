"""From index to numbers: native retrieval, fusion, ranx scoring, vector read-back, classification, clustering."""
