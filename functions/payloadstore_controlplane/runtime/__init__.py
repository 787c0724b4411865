"""Process-level helpers the Lambda functions run on, below every layer (handlers, logic, store
and models may all import them; they import nothing of the control plane):

- `lazyimport`: deferred imports for cold start (installed by `payloadstore_controlplane/__init__.py` and
  `handlers/__init__.py`, before anything heavy is imported);
- `gcpause`: no garbage collection while a handler module imports (Lambda only);
- `once`: `built_once`, a per-process cache that builds each value once under a lock;
- `clock`: the one `now()`, so tests can move time.

Importing this package imports none of them: each costs only when used.
"""
