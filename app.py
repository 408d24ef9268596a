"""CDK entry point (`npx cdk synth|diff|deploy`, through cdk.json): read the environment file,
validate it, build the stacks, and run both gates (cdk-nag, cfn-lint) on what was synthesized.

The work is in `hyperpod_kit.app`, shared with the CLI and the tests. Exit codes as the CLI's:
0 ok, 1 a gate found an error, 2 the file is bad; the CDK CLI stops on anything but 0.
"""

import sys

from hyperpod_kit.process import quick_exit, silence_jsii

silence_jsii()  # before aws_cdk is imported (by hyperpod_kit.app)

from hyperpod_kit.app import main  # noqa: E402

if __name__ == "__main__":
    code = main()
    quick_exit()
    sys.exit(code)
