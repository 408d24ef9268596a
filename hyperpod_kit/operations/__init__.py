"""What happens after `deploy`: `status`, `logs` and the diagnosis, through the one AWS facade
(`hyperpod_kit.config.aws`). Nothing here imports CDK or the CLI."""
