"""Started by Python in a rehearsal's actor process (this folder first on PYTHONPATH): every boto3
call the actor makes is recorded and answered by `hyperpod_kit.rehearsal.botofake`."""

import os

if os.environ.get("FAKE_STATE"):
    from hyperpod_kit.rehearsal import botofake

    botofake.install()
