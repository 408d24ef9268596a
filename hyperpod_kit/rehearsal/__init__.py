"""The deploy rehearsal: play a deploy in CloudFormation's order, offline, and check every AWS call
each actor makes (node hooks, timers, the rendered job, Studio scripts, Lambda handlers) against
the IAM policies that exist at that moment for the role it runs as.

`assembly` reads a synthesized cloud assembly (order, values); `actors` runs the actors in
sandboxes and records their calls; `policies` and `iam` say whether a call is allowed."""
