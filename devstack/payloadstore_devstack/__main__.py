"""`python -m payloadstore.devstack`: the local stack of `make dev`."""

import sys

from payloadstore.devstack.stack import main

sys.exit(main())
