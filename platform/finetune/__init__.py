"""Fine-tuning room: recipes, training pairs from a corpus and the sentence-transformers training run."""
