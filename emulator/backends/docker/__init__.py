"""The docker backend: hosts as containers, and the images, wheelhouse and helper containers it needs."""
