"""The LitServe app of the peer baseline (run by LitServeProcess; see servelab/bench/servers/litserve_server.py).

LitServe pickles the API object into its worker process, so the class lives at module level.
"""

from __future__ import annotations

import argparse
import base64

import litserve as ls
import numpy as np


class EmbedAPI(ls.LitAPI):
    def setup(self, device):
        from servelab.config import Settings
        from servelab.model.engines import make_embedder

        self.embedder = make_embedder(Settings.from_env())
        self.embedder.embed(np.zeros((2, 3, 224, 224), np.float32))  # warm

    def decode_request(self, request):
        from servelab.model.preprocess import preprocess_bytes

        if "tensor" in request:
            arr = np.frombuffer(base64.b64decode(request["tensor"]), dtype="<f4")
            return arr.reshape(request.get("shape", [1, 3, 224, 224]))[0]
        return preprocess_bytes(base64.b64decode(request["image"]))

    def batch(self, inputs):
        return np.stack(inputs)

    def predict(self, x):
        if x.ndim == 3:
            x = x[None]
        return self.embedder.embed(x)

    def unbatch(self, output):
        return list(output)

    def encode_response(self, output):
        return {"embedding": np.asarray(output).reshape(-1).tolist()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="servelab's engine served by LitServe (peer baseline)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--batch-timeout", type=float, default=0.002)
    args = ap.parse_args(argv)
    api = EmbedAPI(max_batch_size=args.max_batch, batch_timeout=args.batch_timeout)
    server = ls.LitServer(api, accelerator="cpu", devices=1, workers_per_device=1, timeout=120)
    server.run(host=args.host, port=args.port, generate_client_file=False, num_api_servers=1, log_level="warning")


if __name__ == "__main__":
    main()
