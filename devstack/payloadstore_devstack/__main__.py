"""`python -m payloadstore_devstack`: the local stack of `make dev`."""

import sys

from payloadstore_devstack.stack import main

sys.exit(main())
