"""From corpus to index: model loading, encoding, the embedding cache, mappings, bulk loading, verification."""
