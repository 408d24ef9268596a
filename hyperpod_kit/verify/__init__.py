"""`hyperpod-kit verify`: judge a run of the cluster's verify suite (issue #28).

The suite runs on the cluster (`hyperpod-kit-verify` on the login node, docs/verify.md) and writes
its run as JSON Lines, one record a line (`records`); the report reads those lines from the
cluster's log group (`cloudwatch`) or a local file, judges each figure against its floor
(`floors`: verify_floors.json and instance_types.json; `judge`), and renders a table, a JSON
document and pictures (`render`). Nothing here imports CDK, and matplotlib only when a picture is
drawn (the optional extra `hyperpod-kit[verify]`).
"""
