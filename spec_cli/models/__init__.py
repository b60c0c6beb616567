"""Models: the registry (models.toml), downloads from the hub, the package-index mirror."""
