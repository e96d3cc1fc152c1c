"""What a dataset holds: identity, labels, targets, views, embeddings and raw inputs."""
