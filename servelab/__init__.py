"""servelab: serve an OpenCLIP ViT-B/32 image embedder and measure it honestly."""

__version__ = "0.1.0"
