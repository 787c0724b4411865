# examples/client.py  (run: .venv/bin/python examples/client.py)
import numpy as np

from payloadstore import Client

client = Client.from_devstack()
queue = client.queue("demo")
small = queue.add(np.arange(4.0), factor=10)  # 78 bytes encoded: inline in Redis
large = queue.add(np.ones((2048, 2048), dtype=np.float32))  # 16 MiB: straight to S3
print(small.tier, small.result(timeout=60))
print(large.tier, float(large.result(timeout=60).sum()))
