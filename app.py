"""CDK entry point: read the environment file, build the stacks; nothing else.

The work is in `hyperpod_kit.app`, shared with the CLI and the tests.
"""

import sys

from hyperpod_kit.app import main

if __name__ == "__main__":
    sys.exit(main())
