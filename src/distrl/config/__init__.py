"""Typed run configuration. ``sections``: the component sections (envs, model, training, ...);
``run``: the whole run's config, assembled from them and each algorithm's own section, read from
YAML with dotted overrides; ``base``: what every section shares. Nothing is imported here, so a
module can take the sections without the algorithms."""
