"""Task models from the papers, each built around any encoder by name."""
