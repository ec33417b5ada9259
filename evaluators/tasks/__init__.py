"""Tasks beyond one retrieval run: classification and clustering probes on exported vectors, cross-landscape
transfer of a fine-tuned model."""
