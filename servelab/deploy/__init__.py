"""The deployment files at work: servelab's images built and run on a real Docker engine (servelab.deploy.containers)."""
