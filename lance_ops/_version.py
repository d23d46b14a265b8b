"""The lance-ops release: written into manifests and legacy file footers as the writer version."""
__version__ = "0.1.0"
