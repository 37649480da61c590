"""One module per normalization layer (the catalog of norms)."""
