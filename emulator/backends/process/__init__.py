"""The process backend: hosts as namespaced process trees on this machine."""
