# examples/worker.py  (run: .venv/bin/python examples/worker.py)
from payloadstore import Client, Daemon

daemon = Daemon(Client.from_devstack(role="daemon"), queues=["demo"])


@daemon.register
def scale(values, factor=2.0):
    return values * factor


if __name__ == "__main__":
    daemon.run()  # Ctrl-C: finishes the job in hand, then stops
