"""`python -m servelab.service`: serve with settings from SERVELAB_* environment variables."""

import logging

from servelab.service import run

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
run()
